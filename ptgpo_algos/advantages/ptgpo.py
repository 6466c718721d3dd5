"""PTGPO: credit from the prefix tree of a group's histories, backing off to HGPO where it has no fork."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.hgpo import hgpo
from ptgpo_algos.advantages.ops import STD_EPSILON, compact_ids, episode_norm, snap_rounding
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["ptgpo"]


def ptgpo(
    table: StepTable,
    signal: Signal,
    *,
    norm: str = "mean_std_norm",
    omega: float = 1.0,
    lam: float = 1.0,
    K: int = 2,
    alpha: float = 1.0,
) -> Estimate:
    """Prefix Tree Group Policy Optimization (this project; coverage credit from CovGPO/ProGPO).

    A node n is an exact history ``(s_0, a_0, ..., s_{t-1}, a_{t-1}, s_t)`` (by content). Over the
    trajectories j through n: ``V(n) = mean G_{j,t}``, ``Q(n, a) = mean G_{j,t}`` of those that took
    ``a``, ``sigma_n = std G_{j,t}`` (ddof 1). ``A_{i,t} = A^E_i + omega * A^T_{i,t}`` with
    ``A^E_i = norm(R_i, {R_j})`` (GRPO) and

    - at a node with >= 2 distinct actions (a fork): ``A^T = Q(n, a_{i,t}) - V(n)``, divided by
      ``sigma_n + 1e-6`` under ``mean_std_norm``;
    - at a node with one distinct action: ``A^T = lam * hgpo(K, alpha)`` of that step (back-off).

    One ``norm`` serves the episode term, the fork credit and the back-off. ``G``/``R`` are
    ``signal.step``/``signal.episode`` (``C``/``C_{i,0}`` under coverage credit, so the back-off is
    HGPO on ``C`` too). Coverage credit: in a group whose environment returns are all 0 (``coverage_when:
    all_failed``, the default), the driver passes ``C`` and scales by ``coverage_beta`` (default 0.1
    here), giving ``beta * (norm(C_{i,0}, {C_{j,0}}) + omega * A^T[C])``. A group that all succeeded
    keeps the outcome formula, whose discounted ``G`` ranks a shorter success above a longer one;
    ``coverage_when: all_equal`` credits it by coverage too, which ranks the longer success first and
    drove converged policies to wander. Group counts: ``branching_nodes`` (forks) and ``backoff_steps``.
    """
    values = signal.step
    node = table.node
    pair, n_pairs = compact_ids(node * max(table.n_actions, 1) + table.action)
    node_of_pair = np.zeros(n_pairs, dtype=np.int64)
    node_of_pair[pair] = node
    actions_at_node = np.bincount(node_of_pair, minlength=table.n_nodes)
    fork = actions_at_node[node] >= 2

    node_count = np.bincount(node, minlength=table.n_nodes)
    v = np.bincount(node, weights=values, minlength=table.n_nodes) / np.maximum(node_count, 1)
    pair_count = np.bincount(pair, minlength=n_pairs)
    q = np.bincount(pair, weights=values, minlength=n_pairs) / np.maximum(pair_count, 1)
    exact = snap_rounding(q[pair] - v[node], v[node])
    if norm == "mean_std_norm":
        deviation = values - v[node]
        squares = np.bincount(node, weights=deviation * deviation, minlength=table.n_nodes)
        sigma = np.sqrt(squares / np.maximum(node_count - 1, 1))
        exact = exact / (sigma[node] + STD_EPSILON)

    tree = np.where(fork, exact, 0.0)
    if not fork.all():
        backoff = hgpo(table, signal, norm=norm, K=K, alpha=alpha).advantages
        tree = np.where(fork, tree, lam * backoff)
    episode = episode_norm(table, signal.episode, norm)[table.trajectory]

    node_group = np.zeros(table.n_nodes, dtype=np.int64)
    node_group[node] = table.group
    counts = {
        "branching_nodes": np.bincount(node_group[actions_at_node >= 2], minlength=table.n_groups),
        "backoff_steps": np.bincount(table.group[~fork], minlength=table.n_groups),
    }
    return Estimate(episode + omega * tree, counts)
