"""The credit of a recorded iteration: the advantage every decision got under the run's estimator (as
recorded) and under every other registered estimator, computed on the same groups.

The other estimators run as the trainer runs its own (:func:`~ptgpo_algos.advantages.estimate_advantages`
on the iteration's whole batch, so EMPG's batch-wide rescaling is the same), with their own defaults
and the run's common keys (``gamma``, ``invalid_penalty``, ``empg``); a ``progress`` schedule reads
the iteration's share of ``run.iterations``. The run's own estimator is computed again too, with the
run's keys, as a check that the recording holds what the estimators read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ptgpo_algos.advantages import ESTIMATORS, GroupDiagnostics, StepTable, estimate_advantages
from ptgpo_algos.advantages.registry import get_estimator
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.rollouts.recordings import groups_from_rows

__all__ = ["Credit", "RUN_KEYS", "decision_credit", "estimator_credits", "forks", "step_table"]

#: The run's keys every other estimator is computed with (each where it accepts the key).
RUN_KEYS = ("gamma", "invalid_penalty", "empg")


@dataclass(frozen=True)
class Credit:
    """One estimator's credit of the iteration: per-step advantages in the batch's shape
    (``[group][trajectory][step]``) and one :class:`GroupDiagnostics` per group, or ``error``, the
    reason it could not be computed on these groups (both None then). ``backoff``: the estimator backs
    off where a node has a single action (it reports ``backoff_steps``)."""

    name: str
    advantages: list[list[list[float]]] | None
    diagnostics: list[GroupDiagnostics] | None
    error: str | None = None
    backoff: bool = False


def step_table(rows: Sequence[dict[str, Any]]) -> tuple[StepTable, list]:
    """The :class:`StepTable` of recorded ``rows`` (one iteration) and their groups, with the two columns
    the groups cannot carry back (response lengths, entropies) taken from the rows; rows recorded
    before those fields were kept read as none (0 tokens, NaN)."""
    batch, _ = groups_from_rows(rows)
    by_node = {(row["group"], row["node"]): row for row in rows}
    ordered = sorted(by_node.values(), key=lambda row: (row["group"], row["node"]))
    # A step's row is found by its group and its position in each trajectory through it.
    position: dict[tuple[int, int, int], dict[str, Any]] = {}
    for row in ordered:
        for t in row["trajectories"]:
            position[(row["group"], t, row["step"])] = row
    table = StepTable.from_batch(batch)
    flat = [position[(g, t, s)] for g, group in enumerate(batch) for t, trajectory in enumerate(group)
            for s in range(len(trajectory.steps))]
    tokens = np.array([row.get("response_tokens", 0) for row in flat], dtype=np.int64)
    entropy = np.array([np.nan if row.get("entropy") is None else row["entropy"] for row in flat], dtype=np.float64)
    return dataclasses.replace(table, response_tokens=tokens, entropy=entropy), batch


def _settings(name: str, config: TrainConfig, iteration: int) -> dict[str, Any]:
    """The keys ``name`` is computed with: the run's own for its estimator, else :data:`RUN_KEYS`."""
    defaults = get_estimator(name).defaults
    if name == config.algorithm.name:
        settings = dict(config.algorithm.config)
    else:
        settings = {key: config.algorithm.config[key] for key in RUN_KEYS
                    if key in config.algorithm.config and key in defaults}
    if "progress" in defaults:
        settings.setdefault("progress", min(1.0, iteration / config.run.iterations))
    return settings


def estimator_credits(config: TrainConfig, iteration: int, rows: Sequence[dict[str, Any]]) -> list[Credit]:
    """Every registered estimator's :class:`Credit` of the iteration's ``rows``, the run's first."""
    table, _ = step_table(rows)
    names = [config.algorithm.name] + [name for name in ESTIMATORS.names() if name != config.algorithm.name]
    credits = []
    for name in names:
        spec = get_estimator(name)
        if spec.strategy is not None and spec.strategy != config.rollouts.strategy:
            credits.append(Credit(name, None, None, f"credits only {spec.strategy} rollouts' own records"))
            continue
        try:
            result = estimate_advantages(name, table, **_settings(name, config, iteration))
        except ValueError as error:
            credits.append(Credit(name, None, None, str(error)))
            continue
        backoff = any("backoff_steps" in d.counts for d in result.diagnostics)
        credits.append(Credit(name, table.to_nested(result.advantages), result.diagnostics, None, backoff))
    return credits


def decision_credit(row: dict[str, Any], credit: Credit) -> float | None:
    """The advantage the decision of ``row`` gets under ``credit``: the mean over the trajectories
    through it, as the loss uses a shared decision's (None where the estimator gave none)."""
    if credit.advantages is None:
        return None
    group = credit.advantages[row["group"]]
    values = [group[t][row["step"]] for t in row["trajectories"]]
    return sum(values) / len(values)


def forks(table: StepTable) -> list[list[list[bool]]]:
    """Whether each step (in the batch's shape) is at a fork: a prefix-tree node (an exact history, by
    content) where the group took two or more distinct actions. PTGPO credits a fork by its tree and
    backs off to HGPO elsewhere."""
    pair = np.unique(np.stack([table.node, table.action]), axis=1)
    actions_at_node = np.bincount(pair[0], minlength=table.n_nodes)
    return [[[bool(x) for x in t] for t in g] for g in table.to_nested(actions_at_node[table.node] >= 2)]
