"""Older import paths kept for one release, each the module it names now (the same object), with a
``DeprecationWarning`` that names the new path; ``docs/architecture.md`` lists them.

Two kinds: the modules moved into the stage packages (:data:`MOVED`) have no file at their old path,
so that the move stays a rename in git's history; :class:`OldPathFinder`, which the package installs
when it is imported, answers an import of one. A module that a command runs by its old path
(``python -m``, the verl bridge's flat paths) keeps a file there holding one :func:`moved` call.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import runpy
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "OldPathFinder", "install", "moved"]

#: Older module path -> the module it is now.
MOVED: dict[str, str] = {
    "ptgpo_algos.data": "ptgpo_algos.records",
    "ptgpo_algos.rollout": "ptgpo_algos.rollouts.collection",
    "ptgpo_algos.strategies": "ptgpo_algos.rollouts.registry",
    "ptgpo_algos.patr": "ptgpo_algos.rollouts.patr.collection",
    "ptgpo_algos.patr_settings": "ptgpo_algos.rollouts.patr.settings",
    "ptgpo_algos.spo3": "ptgpo_algos.rollouts.spo3.search",
    "ptgpo_algos.spo3_rollout": "ptgpo_algos.rollouts.spo3.collection",
    "ptgpo_algos.spo3_settings": "ptgpo_algos.rollouts.spo3.settings",
    "ptgpo_algos.bpo_rollout": "ptgpo_algos.rollouts.bpo.collection",
    "ptgpo_algos.bpo_settings": "ptgpo_algos.rollouts.bpo.settings",
    "ptgpo_algos.episodes": "ptgpo_algos.rollouts.episodes",
    "ptgpo_algos.evaluation": "ptgpo_algos.rollouts.evaluation",
    "ptgpo_algos.rollout_records": "ptgpo_algos.rollouts.recordings",
    "ptgpo_algos.policy.agent": "ptgpo_algos.rollouts.agent",
    "ptgpo_algos.losses": "ptgpo_algos.updates.losses",
    "ptgpo_algos.update": "ptgpo_algos.updates.samples",
    "ptgpo_algos.updater": "ptgpo_algos.updates.updater",
    "ptgpo_algos.optimizer": "ptgpo_algos.updates.optimizer",
    "ptgpo_algos.trainer": "ptgpo_algos.training.trainer",
    "ptgpo_algos.collectors": "ptgpo_algos.training.collectors",
    "ptgpo_algos.callbacks": "ptgpo_algos.training.callbacks",
    "ptgpo_algos.checkpoint": "ptgpo_algos.training.checkpoint",
    "ptgpo_algos.run_folder": "ptgpo_algos.training.run_folder",
    "ptgpo_algos.preflight": "ptgpo_algos.training.preflight",
    "ptgpo_algos.memory": "ptgpo_algos.training.memory_plan",
    "ptgpo_algos.train_state": "ptgpo_algos.training.state",
    "ptgpo_algos.placement": "ptgpo_algos.training.placement",
    "ptgpo_algos.run_evaluation": "ptgpo_algos.training.run_evaluation",
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning, stacklevel=stacklevel)


def moved(old: str, new: str) -> None:
    """Make the module ``old`` the module ``new`` (every name, what its import registers, the same
    objects), warning once with a ``DeprecationWarning`` that names the new path; ``python -m old``
    runs ``new`` as the main module."""
    running = old == "__main__"
    name = sys.modules[old].__spec__.name if running else old
    _warn(name, new, stacklevel=4)
    if running:
        runpy.run_module(new, run_name="__main__", alter_sys=True)
        return
    sys.modules[old] = importlib.import_module(new)


class _Alias(importlib.abc.Loader):
    """Loads an older path as the module it names now: that module object itself, not a copy."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # Past _warn and this loader to the line that imports (warnings skips the import machinery's frames).
        _warn(spec.name, self.new, stacklevel=3)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its own name."""


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`MOVED` by their older paths. It is asked first: an older path names
    no file of this package, and an editable install's finder must not find a stale one elsewhere."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        """The alias's spec for an older path, None for any other module."""
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put :class:`OldPathFinder` first on ``sys.meta_path``, once."""
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())
