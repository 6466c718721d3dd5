"""Group-by primitives the estimators share: pooled moments and normalisation, leave-one-out,
discounted returns, the next step of a trajectory.

A *pool* is given by an integer id per value (compact ids ``0 .. n_pools - 1``); every statistic is a
``np.bincount`` over those ids, so each primitive is O(n) after the keys are interned.
"""

from __future__ import annotations

import numpy as np

# compact_ids is the table's (it interns the table's keys); the estimators take it from here, with
# the other group-by primitives.
from ptgpo_algos.advantages.table import StepTable, compact_ids

__all__ = [
    "NORMS",
    "STD_EPSILON",
    "compact_ids",
    "discounted_returns",
    "episode_leave_one_out",
    "episode_norm",
    "pool_moments",
    "pooled_norm",
    "snap_rounding",
    "successor",
]

NORMS = ("mean_norm", "mean_std_norm")
STD_EPSILON = 1e-6  # the guard in (x - mean) / (std + 1e-6)
_ROUNDING = 1e-9


def snap_rounding(deviation: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Set to exactly 0 the deviations ``|d| <= 1e-9 * (1 + |reference|)``.

    Equal returns summed in a different order differ in their last bits, so ``x - mean(P)`` of a pool
    of equal values is ~1e-17, not 0. Left alone, ``mean_std_norm`` would blow that up to ~1e-11 and
    HGPO's "a_k != 0" level test, the non-zero diagnostics and permutation invariance would depend
    on summation order.
    """
    return np.where(np.abs(deviation) <= _ROUNDING * (1.0 + np.abs(reference)), 0.0, deviation)


def pool_moments(
    values: np.ndarray, pool: np.ndarray, n_pools: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pool id: ``(count, mean, variance)``, the sample variance (ddof = 1; 0 for fewer than 2
    values, and mean 0 for an empty pool). Each is an (n_pools,) array."""
    count = np.bincount(pool, minlength=n_pools)
    mean = np.bincount(pool, weights=values, minlength=n_pools) / np.maximum(count, 1)
    deviation = values - mean[pool]
    squares = np.bincount(pool, weights=deviation * deviation, minlength=n_pools)
    return count, mean, squares / np.maximum(count - 1, 1)


def pooled_norm(values: np.ndarray, pool: np.ndarray, n_pools: int, norm: str) -> np.ndarray:
    """``norm(x, P)`` for each value against the pool ``P`` that shares its pool id.

    ``mean_norm``: ``x - mean(P)``; ``mean_std_norm``: ``(x - mean(P)) / (std(P) + 1e-6)`` with the
    sample standard deviation (ddof = 1). A pool of fewer than 2 values gives 0.
    """
    count, mean, variance = pool_moments(values, pool, n_pools)
    deviation = snap_rounding(values - mean[pool], mean[pool])
    if norm == "mean_std_norm":
        deviation = deviation / (np.sqrt(variance)[pool] + STD_EPSILON)
    return np.where(count[pool] >= 2, deviation, 0.0)


def successor(table: StepTable) -> np.ndarray:
    """Per step, the row of the next step of its trajectory (``s_{i,t+1}``'s step), -1 at the last."""
    following = np.full(table.n_steps, -1, dtype=np.int64)
    if table.n_steps:
        has_next = table.trajectory[1:] == table.trajectory[:-1]
        following[:-1] = np.where(has_next, np.arange(1, table.n_steps), -1)
    return following


def discounted_returns(table: StepTable, rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = sum_{k >= t} gamma^(k - t) r_k`` within each trajectory, for a per-step reward array.

    Loops over time (the longest trajectory), vectorised over trajectories, so it stays exact for any
    length (no ``gamma^-t`` rescaling).
    """
    if table.n_steps == 0:
        return np.zeros(0)
    horizon = int(table.trajectory_length.max())
    padded = np.zeros((horizon + 1, table.n_trajectories))
    padded[table.time, table.trajectory] = rewards
    for t in range(horizon - 1, -1, -1):
        padded[t] += gamma * padded[t + 1]
    return padded[table.time, table.trajectory]


def episode_norm(table: StepTable, episode_values: np.ndarray, norm: str) -> np.ndarray:
    """``norm(R_i, {R_j})`` per trajectory, pooled by group over its non-empty trajectories.

    Zero-length trajectories take no part (they have no decision to credit) and get 0.
    """
    members = table.trajectory_length > 0
    result = np.zeros(table.n_trajectories)
    result[members] = pooled_norm(
        episode_values[members], table.trajectory_group[members], table.n_groups, norm
    )
    return result


def episode_leave_one_out(table: StepTable, episode_values: np.ndarray) -> np.ndarray:
    """``R_i - mean_{j != i} R_j`` per trajectory over its group's non-empty trajectories (0 if alone)."""
    members = table.trajectory_length > 0
    values = episode_values[members]
    pool = table.trajectory_group[members]
    count = np.bincount(pool, minlength=table.n_groups)[pool]
    total = np.bincount(pool, weights=values, minlength=table.n_groups)[pool]
    others_mean = (total - values) / np.maximum(count - 1, 1)
    result = np.zeros(table.n_trajectories)
    result[members] = np.where(count >= 2, snap_rounding(values - others_mean, others_mean), 0.0)
    return result
