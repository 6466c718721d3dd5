"""HGPO: a weighted mix of step-level comparisons over histories of increasing length."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ptgpo_algos.advantages.ops import compact_ids, episode_norm, pooled_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["hgpo", "history_levels"]


def history_levels(table: StepTable, K: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """For k = 0..K: ``(steps, key, n_keys)``, the steps with ``t >= k`` and the compact id of their
    level-k key ``(group, s_{t-k}, ..., s_t)``. Level k is built from level k-1 by prepending
    ``s_{t-k}``, one ``np.unique`` per level."""
    steps = np.arange(table.n_steps)
    key, n_keys = table.state, table.n_states
    for k in range(K + 1):
        if k > 0:
            deep_enough = table.time[steps] >= k
            steps, key = steps[deep_enough], key[deep_enough]
            # key < n_steps and state < n_steps, so the pair fits in int64 for any real batch.
            key, n_keys = compact_ids(key * max(table.n_states, 1) + table.state[steps - k])
        if steps.size == 0:
            return
        yield steps, key, n_keys


def hgpo(
    table: StepTable,
    signal: Signal,
    *,
    norm: str = "mean_std_norm",
    K: int = 2,
    alpha: float = 1.0,
    include_episode: bool = False,
) -> Estimate:
    """Hierarchy-of-Groups Policy Optimization (arXiv 2602.22817).

    Level k = 0..K groups the steps of a group by their last k+1 states ``(s_{t-k}, ..., s_t)``; steps
    with ``t < k`` have no level-k group. ``a_k = norm(G_{i,t}, {G of the steps with the same level-k
    key})``. A level is valid for a step when its pool has >= 2 steps and ``a_k != 0`` (to 1e-9
    relative: rounding noise counts as 0). ``A_{i,t} = sum_valid w_k a_k`` with
    ``w_k = (k+1)^alpha / sum_valid (k'+1)^alpha``; 0 when no level is valid. ``include_episode``
    adds GRPO's ``norm(R_i, {R_j})`` as one more level with weight index 0. ``G``/``R`` are
    ``signal.step``/``signal.episode``.
    """
    weighted = np.zeros(table.n_steps)
    weight = np.zeros(table.n_steps)
    for k, (steps, key, n_keys) in enumerate(history_levels(table, K)):
        a_k = pooled_norm(signal.step[steps], key, n_keys, norm)
        valid = a_k != 0.0  # pools of < 2 steps give exactly 0
        weighted[steps[valid]] += (k + 1) ** alpha * a_k[valid]
        weight[steps[valid]] += (k + 1) ** alpha
    if include_episode:
        a_episode = episode_norm(table, signal.episode, norm)[table.trajectory]
        weighted += a_episode  # weight index 0: (0 + 1)^alpha = 1
        weight += a_episode != 0.0
    return Estimate(np.divide(weighted, weight, out=np.zeros(table.n_steps), where=weight > 0))
