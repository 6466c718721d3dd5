"""An iteration's metrics row: every source's figures under its section, and no name given twice.

The trainer builds ``metrics.jsonl``'s row from several sources: the rollouts (and the rollout
strategy's own counts), the estimator's advantages, the update, each auxiliary objective, a critic,
the weight sync and callbacks. Each writes into its section (:data:`SECTIONS`), as
``section/name``: ``rollout/success``, ``advantages/mean``, ``update/loss``,
``objective/hindsight/loss``. :class:`MetricsRow` refuses a name that is already in the row and says
which two sources gave it, where a plain dict merge would keep one figure silently.

``metrics.jsonl`` files written before the sections hold flat names (``rollout_success``,
``adv_mean``, ``loss``, ``hindsight_loss``). :func:`current_name` is the one mapping from those to
today's names and :func:`read_metrics` reads a file of either kind under today's names, so committed
runs stay readable without being rewritten. The held-out evaluations (``curve.jsonl``, the
``eval/`` section of the loggers) and the cost log (``cost.jsonl``) have one source each and keep
their names, which the leaderboard and the baselines share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ptgpo_algos.files import read_jsonl

__all__ = ["DuplicateMetricError", "INDEX", "LEGACY_NAMES", "LEGACY_PREFIXES", "MetricsRow", "SECTIONS", "TIMED",
           "current_name", "current_row", "objective_section", "read_metrics"]

#: The sections of a metrics row, what fills each (``objective/<name>`` and ``callback/<name>`` are
#: one section per objective or callback).
SECTIONS: Mapping[str, str] = MappingProxyType({
    "run": "the run's totals so far and its clocks",
    "rollout": "the iteration's rollouts: counts, success, time (a strategy's own counts under its name)",
    "advantages": "the estimator's advantages over the trained batch and its diagnostics",
    "update": "the policy update: losses, clipping, KL, gradient norm, trained tokens, time",
    "critic": "a learned critic's values and targets of the batch",
    "objective": "an auxiliary objective's figures, as objective/<name>/...",
    "sync": "the weight sync to the rollout engine",
    "callback": "a callback's after_update figures, as callback/<ClassName>/...",
})

#: The one name of a metrics row outside any section: the row's index.
INDEX = "iteration"

#: The figures that measure time (or rates over it), which no two runs share: what a comparison of
#: two runs' rows leaves out.
TIMED: frozenset[str] = frozenset({
    "run/wall_time_s", "run/iteration_time_s", "rollout/time_s", "rollout/decisions_per_s", "rollout/wait_s",
    "update/train_time_s", "update/train_tokens_per_s", "sync/time_s"})


def objective_section(name: str) -> str:
    """The section of objective ``name``'s figures."""
    return f"objective/{name}"


class DuplicateMetricError(ValueError):
    """Two sources reported a figure under the same name of one metrics row."""


@dataclass
class MetricsRow:
    """A metrics row built section by section; :meth:`add` refuses a name already in the row."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def add(self, section: str, figures: Mapping[str, Any], source: str) -> None:
        """Add ``figures`` as ``section/<key>`` (``section`` "" only for :data:`INDEX`), naming ``source``
        in the error when a name is taken already."""
        for key, value in figures.items():
            name = f"{section}/{key}" if section else key
            if not section and name != INDEX:
                raise ValueError(f"metrics row: {name!r} from {source} has no section; "
                                 f"give it one of {sorted(SECTIONS)}")
            if name in self.values:
                raise DuplicateMetricError(f"metrics row: {name!r} is reported by both {self.sources[name]} and "
                                           f"{source}; rename one of the two figures")
            self.values[name] = value
            self.sources[name] = source

    def add_named(self, figures: Mapping[str, Any], source: str) -> None:
        """Add ``figures`` already named ``section/<key>`` (the same refusal as :meth:`add`)."""
        for name, value in figures.items():
            section, _, key = name.rpartition("/")
            self.add(section, {key: value}, source)

    def merge(self, other: MetricsRow) -> None:
        """Add every figure of ``other`` with its source (the same refusal as :meth:`add`)."""
        for name, value in other.values.items():
            self.add_named({name: value}, other.sources[name])

    def section(self, section: str) -> dict[str, Any]:
        """The figures of ``section`` by their names inside it."""
        prefix = f"{section}/"
        return {name[len(prefix):]: value for name, value in self.values.items() if name.startswith(prefix)}

    def as_dict(self) -> dict[str, Any]:
        """The row as written to ``metrics.jsonl``."""
        return dict(self.values)


# ----------------------------------------------------------------------------- the names before the sections
#: Names of ``metrics.jsonl`` rows written before the sections, and the names they read as now.
LEGACY_NAMES: Mapping[str, str] = MappingProxyType({
    **{f"total_{k}": f"run/total_{k}" for k in ("decisions", "tokens", "decisions_saved", "tokens_saved")},
    "iteration_time_s": "run/iteration_time_s",
    "wall_time_s": "run/wall_time_s",
    **{k: f"rollout/{k}" for k in ("decisions", "tokens", "decisions_saved", "tokens_saved", "episodes",
                                   "episodes_cut", "leaf_success", "invalid_rate", "decisions_per_s", "policy_lag")},
    "rollout_episodes": "rollout/reset_episodes",
    "rollout_success": "rollout/success",
    "rollout_time_s": "rollout/time_s",
    "rollout_wait_s": "rollout/wait_s",
    "trained_steps": "update/trained_steps",
    **{k: f"critic/{k}" for k in ("value_mean", "value_return_mean", "value_explained_var")},
})

#: Prefixes of the flat names, each with the section its names read as now (the objectives are the
#: built-in ones, which prefixed their figures with their name).
LEGACY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("adv_", "advantages/"),
    ("sync_", "sync/"),
    ("value_explained_var_", "critic/value_explained_var_"),
    ("hiper_", "critic/hiper_"),
    ("patr_", "rollout/patr_"),
    ("spo3_", "rollout/spo3_"),
    ("bpo_", "rollout/bpo_"),
    *((f"{name}_", f"{objective_section(name)}/") for name in ("hindsight", "isdpo", "mcgpo", "seed")),
)


def current_name(name: str) -> str:
    """Today's name of a metrics row's ``name``: itself when it has a section (or is the index), else
    the flat name's (:data:`LEGACY_NAMES`, :data:`LEGACY_PREFIXES`); any other flat name was the
    update's (its losses' figures, the learning rate), which is where it reads."""
    if name == INDEX or "/" in name:
        return name
    if name in LEGACY_NAMES:
        return LEGACY_NAMES[name]
    for prefix, section in LEGACY_PREFIXES:
        if name.startswith(prefix):
            return section + name[len(prefix):]
    return f"update/{name}"


def current_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics row of either kind under today's names."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        new = current_name(name)
        if new in out:
            raise ValueError(f"metrics row: {name!r} and another name both read as {new!r}")
        out[new] = value
    return out


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, written before the sections or since, under today's names."""
    return [current_row(row) for row in read_jsonl(path)]
