"""BPO's credit: a forked step against its siblings' returns, a trunk against the other trunks.

The ``bpo`` rollout strategy (:mod:`ptgpo_algos.rollouts.bpo.collection`) plays *trunks* from reset and, at their
highest-entropy decisions, *forks*: ``K`` fresh continuations restored from the snapshot there, each
recorded with ``Trajectory.meta["branch_point"]`` (the table's ``branch_point``). Forks from the same
node (the same history by content, so the same depth) are *siblings*.
"""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import compact_ids, snap_rounding
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["bpo", "leave_one_out"]


def leave_one_out(values: np.ndarray, pool: np.ndarray, n_pools: int) -> np.ndarray:
    """``x - mean`` of the other values of its pool, per value; 0 in a pool of one."""
    count = np.bincount(pool, minlength=n_pools)[pool]
    total = np.bincount(pool, weights=values, minlength=n_pools)[pool]
    others = (total - values) / np.maximum(count - 1, 1)
    return np.where(count >= 2, snap_rounding(values - others, others), 0.0)


def bpo(table: StepTable, signal: Signal) -> Estimate:
    """Branching Policy Optimization's credit (arXiv 2607.14171).

    - A fork ``k`` that branched at step ``tau`` (its ``branch_point``): every step ``t >= tau`` gets
      ``G_{k,tau} - mean_{j in S(k), j != k} G_{j,tau}``, with ``S(k)`` the forks of its group that
      branched at the same node and ``G`` the discounted return from the branch point (``signal.step``).
      Its steps before ``tau`` (the trunk's, shared) get 0 from it: the trunk credits them.
    - A trunk ``i`` (played from reset): every step gets ``R_i - mean_{j != i} R_j`` over the group's
      trunks (RLOO; ``R`` is ``signal.episode``).

    The baseline of a sibling leaves its own return out, so it is independent of the sibling's action
    and the sibling term is an unbiased estimate of the gradient of the value at the branch point,
    ``grad V(s_tau)``, whatever rule chose ``s_tau`` from the trunk (tests/test_bpo.py checks it on an
    exact tree MDP). No normalisation: dividing by the siblings' spread would bias it.
    Group counts: ``branch_points`` (nodes with >= 2 siblings) and ``fork_steps``.
    """
    lengths = table.trajectory_length
    starts = np.cumsum(lengths) - lengths
    point = table.branch_point
    trunk = point < 0
    fork = ~trunk & (point < lengths)

    trunk_ids = np.flatnonzero(trunk & (lengths > 0))
    trunk_credit = np.zeros(table.n_trajectories)
    trunk_credit[trunk_ids] = leave_one_out(signal.episode[trunk_ids], table.trajectory_group[trunk_ids],
                                            table.n_groups)

    fork_ids = np.flatnonzero(fork)
    rows = starts[fork_ids] + point[fork_ids]
    siblings, n_nodes = compact_ids(table.node[rows])
    fork_credit = np.zeros(table.n_trajectories)
    fork_credit[fork_ids] = leave_one_out(signal.step[rows], siblings, n_nodes)

    own = table.trajectory
    forked_step = fork[own] & (table.time >= point[own])
    advantages = np.where(trunk[own], trunk_credit[own], np.where(forked_step, fork_credit[own], 0.0))

    size = np.bincount(siblings, minlength=n_nodes)
    node_group = np.zeros(n_nodes, dtype=np.int64)
    node_group[siblings] = table.group[rows]
    counts = {
        "branch_points": np.bincount(node_group[size >= 2], minlength=table.n_groups),
        "fork_steps": np.bincount(table.group[forked_step], minlength=table.n_groups),
    }
    return Estimate(advantages, counts)
