"""PTGPO's algorithms: rollout data model, group advantage estimators, policies, rollouts, trainer.

The names below are loaded on first use, so that a light module of this package (``ptgpo_algos.files``,
which the leaderboard uses) does not import the estimators, numpy or the environments.
"""

from __future__ import annotations

import importlib
from typing import Any

from ptgpo_algos.old_paths import install

_EXPORTS = {
    "ESTIMATORS": "ptgpo_algos.advantages",
    "GroupDiagnostics": "ptgpo_algos.advantages",
    "compute_advantages": "ptgpo_algos.advantages",
    "compute_advantages_with_diagnostics": "ptgpo_algos.advantages",
    "estimator_defaults": "ptgpo_algos.advantages",
    "register_estimator": "ptgpo_algos.advantages",
    "summarize_diagnostics": "ptgpo_algos.advantages",
    "Batch": "ptgpo_algos.records",
    "Context": "ptgpo_algos.records",
    "Decision": "ptgpo_algos.records",
    "Group": "ptgpo_algos.records",
    "Step": "ptgpo_algos.records",
    "Task": "ptgpo_algos.records",
    "Trajectory": "ptgpo_algos.records",
    "TrainConfig": "ptgpo_algos.config",
    "Trainer": "ptgpo_algos.training.trainer",
}

__all__ = sorted(_EXPORTS)

# The modules moved into the stage packages still import by their older paths, for one release.
install()


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ptgpo_algos' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
