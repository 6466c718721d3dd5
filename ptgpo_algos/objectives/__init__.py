"""Auxiliary objectives beside the RL loss, registered by name (:data:`OBJECTIVES`).

* ``isdpo`` (:mod:`.isdpo`) -- all-failed groups distilled from an EMA self-teacher shown the expert's plan;
* ``seed`` (:mod:`.seed`) -- hindsight skills in context, their log-probability shift distilled;
* ``mcgpo`` (:mod:`.mcgpo`) -- pairwise preferences between actions taken in matched contexts;
* ``hindsight`` (:mod:`.hindsight`) -- failed rollouts relabelled with the tasks they completed, in steps of their own.

How an objective joins an update, and how to add one: :mod:`.base`.
"""

from ptgpo_algos.objectives import hindsight, isdpo, mcgpo, seed  # noqa: F401  (they register themselves)
from ptgpo_algos.objectives.base import (
    OBJECTIVES,
    Objective,
    ObjectiveInputs,
    Objectives,
    ObjectiveSpec,
    OptimizerStep,
    needs_expert,
    objective_needs,
    validate_objectives,
)

__all__ = ["OBJECTIVES", "Objective", "ObjectiveInputs", "ObjectiveSpec", "Objectives", "OptimizerStep", "needs_expert",
           "objective_needs", "validate_objectives"]
