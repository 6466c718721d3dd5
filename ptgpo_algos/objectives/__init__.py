"""Auxiliary objectives beside the RL loss, registered by name (:data:`OBJECTIVES`).

* ``isdpo`` (:mod:`.isdpo`) -- all-failed groups distilled from an EMA self-teacher shown the expert's plan;
* ``seed`` (:mod:`.seed`) -- hindsight skills in context, their log-probability shift distilled;
* ``mcgpo`` (:mod:`.mcgpo`) -- pairwise preferences between actions taken in matched contexts.

How an objective joins an update, and how to add one: :mod:`.base`.
"""

from ptgpo_algos.objectives import isdpo, mcgpo, seed  # noqa: F401  (they register themselves)
from ptgpo_algos.objectives.base import (
    OBJECTIVES,
    Objective,
    ObjectiveInputs,
    Objectives,
    ObjectiveSpec,
    needs_expert,
    validate_objectives,
)

__all__ = ["OBJECTIVES", "Objective", "ObjectiveInputs", "ObjectiveSpec", "Objectives", "needs_expert", "validate_objectives"]
