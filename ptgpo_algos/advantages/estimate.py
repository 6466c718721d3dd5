"""The driver: validate the config, build the signal (outcome, or coverage in the groups ``coverage_when``
names), run
the registered estimator, zero the groups that cannot be compared, and report per-group diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from ptgpo_algos.advantages.config import COMMON_DEFAULTS, validate_config
from ptgpo_algos.advantages.empg import EmpgSettings, empg_modulate
from ptgpo_algos.advantages.registry import get_estimator
from ptgpo_algos.advantages.signal import coverage_signal, outcome_all_equal, outcome_all_failed, outcome_signal
from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.advantages.table import StepTable
from ptgpo_algos.records import Trajectory

__all__ = [
    "AdvantageResult",
    "GroupDiagnostics",
    "compute_advantages",
    "compute_advantages_with_diagnostics",
    "estimate_advantages",
    "estimate_batch",
    "summarize_diagnostics",
]


@dataclass(frozen=True)
class GroupDiagnostics:
    """What one group's advantages looked like, for logs.

    ``outcome_all_equal``: >= 2 non-empty trajectories and equal environment returns (no outcome
    direction); ``coverage_applied``: the group took coverage credit (``coverage_beta > 0`` and the
    group is one ``coverage_when`` names: all-failed by default, or any all-equal one). ``counts``: the estimator's
    own counts by name (read-only; empty for estimators without any), e.g. ptgpo's
    ``branching_nodes`` (prefix-tree nodes with >= 2 distinct actions) and ``backoff_steps`` (steps
    credited by the HGPO back-off); each estimator's docstring lists its own.
    """

    n_trajectories: int
    n_steps: int
    nonzero_steps: int
    outcome_all_equal: bool
    coverage_applied: bool
    counts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def nonzero_fraction(self) -> float:
        """Fraction of the group's steps with a non-zero advantage (0 for a group without steps)."""
        return self.nonzero_steps / self.n_steps if self.n_steps else 0.0


#: The summary's own keys, which an estimator's counts may not shadow.
SUMMARY_KEYS = ("groups", "steps", "nonzero_fraction", "all_equal_groups", "coverage_groups")


@dataclass(frozen=True)
class AdvantageResult:
    """``advantages``: one per step in :class:`StepTable` order; ``diagnostics``: one per group."""

    advantages: np.ndarray
    diagnostics: list[GroupDiagnostics]


def estimate_advantages(name: str, table: StepTable, **config: Any) -> AdvantageResult:
    """The array form of :func:`compute_advantages`: advantages for a prebuilt :class:`StepTable`.

    Groups with fewer than two non-empty trajectories get zeros whatever the estimator (a lone
    trajectory has nothing to be compared with, even where states repeat within it). With
    ``coverage_beta > 0``, in the groups ``coverage_when`` names the estimator runs on the coverage
    signal (``C_{i,t}``, ``C_{i,0}``) and its output is scaled by ``coverage_beta``: by default
    (``all_failed``) groups whose environment returns are all 0, where outcomes give no direction and
    exploration is what is wanted; with ``all_equal`` also groups that all succeeded alike, where
    novelty returns rank a longer successful path above a shorter one. With ``empg`` set, EMPG
    (:func:`~ptgpo_algos.advantages.empg.empg_modulate`) then re-scales the whole batch's advantages
    by the steps' entropies: its bonus and centring reach the groups zeroed above too.
    """
    spec = get_estimator(name)
    own = validate_config(spec, config)
    common = {key: own.pop(key) for key in COMMON_DEFAULTS if key in own}
    gamma, penalty = common["gamma"], common["invalid_penalty"]
    # Estimators registered without coverage credit have neither key.
    beta = common.get("coverage_beta", 0.0)
    trigger = outcome_all_failed if common.get("coverage_when") == "all_failed" else outcome_all_equal

    comparable = np.bincount(
        table.trajectory_group[table.trajectory_length > 0], minlength=table.n_groups
    ) >= 2
    all_equal = outcome_all_equal(table)
    use_coverage = trigger(table) & (beta > 0)
    signal = outcome_signal(table, gamma, penalty)
    if use_coverage.any():
        signal = signal.where(use_coverage, coverage_signal(table, gamma, penalty), table)

    estimate = spec.function(table, signal, **own, **{key: common[key] for key in spec.common_parameters})
    scale = np.where(use_coverage, beta, 1.0) * comparable
    advantages = np.where(scale[table.group] != 0, estimate.advantages * scale[table.group], 0.0)
    empg = EmpgSettings.from_config(common["empg"])
    if empg is not None:
        advantages = empg_modulate(table, advantages, empg)

    steps = np.bincount(table.group, minlength=table.n_groups)
    nonzero = np.bincount(table.group[advantages != 0], minlength=table.n_groups)
    shadowed = set(estimate.group_counts) & set(SUMMARY_KEYS)
    if shadowed:
        raise RuntimeError(f"estimator {name!r} reports counts named like summary keys: {shadowed}")
    counts = {key: np.where(comparable, value, 0) for key, value in estimate.group_counts.items()}
    diagnostics = [
        GroupDiagnostics(
            n_trajectories=int(table.group_size[g]),
            n_steps=int(steps[g]),
            nonzero_steps=int(nonzero[g]),
            outcome_all_equal=bool(all_equal[g]),
            coverage_applied=bool(use_coverage[g]),
            counts=MappingProxyType({key: int(value[g]) for key, value in counts.items()}),
        )
        for g in range(table.n_groups)
    ]
    return AdvantageResult(advantages, diagnostics)


def estimate_batch(
    name: str, batch: Sequence[Sequence[Trajectory]], **config: Any
) -> tuple[StepAdvantages, list[GroupDiagnostics]]:
    """The advantages of ``batch``'s steps as one array with its step index (what the trainer carries
    to the update), and one :class:`GroupDiagnostics` per group."""
    table = StepTable.from_batch(batch)
    result = estimate_advantages(name, table, **config)
    return StepAdvantages(result.advantages, table.trajectory_length, table.group_size), result.diagnostics


def compute_advantages_with_diagnostics(
    name: str, batch: Sequence[Sequence[Trajectory]], **config: Any
) -> tuple[list[list[list[float]]], list[GroupDiagnostics]]:
    """:func:`compute_advantages` plus one :class:`GroupDiagnostics` per group."""
    advantages, diagnostics = estimate_batch(name, batch, **config)
    return advantages.nested(), diagnostics


def compute_advantages(
    name: str, batch: Sequence[Sequence[Trajectory]], **config: Any
) -> list[list[list[float]]]:
    """Per-step advantages of estimator ``name`` (one of ``ESTIMATORS``) for a batch of groups.

    Returns groups of trajectories of float lists, aligned with ``batch`` (a zero-length trajectory
    gives an empty list). ``config`` keys are the estimator's (see ``estimator_defaults(name)``).
    Raises ``ValueError`` for an unknown name, an unknown or out-of-range config key, a malformed
    batch or a non-finite reward.
    """
    return compute_advantages_with_diagnostics(name, batch, **config)[0]


def summarize_diagnostics(diagnostics: Sequence[GroupDiagnostics]) -> dict[str, float]:
    """Batch totals for a JSONL log line: groups, steps, nonzero_fraction (over steps),
    all_equal_groups, coverage_groups, and the sum of each of the estimator's own counts under its
    name (e.g. ptgpo's branching_nodes and backoff_steps); the trainer logs them as ``adv_<name>``."""
    steps = sum(d.n_steps for d in diagnostics)
    summary: dict[str, float] = {
        "groups": len(diagnostics),
        "steps": steps,
        "nonzero_fraction": sum(d.nonzero_steps for d in diagnostics) / steps if steps else 0.0,
        "all_equal_groups": sum(d.outcome_all_equal for d in diagnostics),
        "coverage_groups": sum(d.coverage_applied for d in diagnostics),
    }
    for d in diagnostics:
        for key, value in d.counts.items():
            summary[key] = summary.get(key, 0) + value
    return summary
