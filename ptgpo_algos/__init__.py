"""PTGPO's algorithms: rollout data model, group advantage estimators, policies, rollouts, trainer."""

from ptgpo_algos.advantages import (
    ESTIMATORS,
    GroupDiagnostics,
    compute_advantages,
    compute_advantages_with_diagnostics,
    estimator_defaults,
    summarize_diagnostics,
)
from ptgpo_algos.data import Batch, Group, Step, Trajectory

__all__ = [
    "ESTIMATORS",
    "Batch",
    "Group",
    "GroupDiagnostics",
    "Step",
    "Trajectory",
    "compute_advantages",
    "compute_advantages_with_diagnostics",
    "estimator_defaults",
    "summarize_diagnostics",
]
