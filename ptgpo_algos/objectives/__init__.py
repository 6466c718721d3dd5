"""Auxiliary objectives beside the RL loss, registered by name (:data:`OBJECTIVES`).

* ``isdpo`` (:mod:`.isdpo`) -- all-failed groups distilled from an EMA self-teacher shown the expert's plan;
* ``seed`` (:mod:`.seed`) -- hindsight skills in context, their log-probability shift distilled;
* ``mcgpo`` (:mod:`.mcgpo`) -- pairwise preferences between actions taken in matched contexts;
* ``hindsight`` (:mod:`.hindsight`) -- failed rollouts relabelled with the tasks they completed, in steps of their own.

The registry and the config check (:mod:`.registry`) import no objective and not torch; how an objective
joins an update, and how to add one: :mod:`.base`, imported when one of its names is first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from ptgpo_algos.objectives.registry import (
    OBJECTIVES,
    ObjectiveSpec,
    needs_expert,
    objective_needs,
    validate_objectives,
)

__all__ = ["OBJECTIVES", "Objective", "ObjectiveInputs", "ObjectiveSpec", "Objectives", "OptimizerStep", "needs_expert",
           "objective_needs", "validate_objectives"]

#: The update's names, from :mod:`.base` (which imports torch) on first use.
_FROM_BASE = ("Objective", "ObjectiveInputs", "Objectives", "OptimizerStep")


def __getattr__(name: str) -> Any:
    if name in _FROM_BASE:
        return getattr(importlib.import_module("ptgpo_algos.objectives.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
