"""ProGPO: exact-prefix comparison of step returns plus transition credit from state potentials fused
across history depths by inverse variance."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.hgpo import history_levels
from ptgpo_algos.advantages.ops import episode_norm, pool_moments, pooled_norm, successor
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["progpo"]


def progpo(
    table: StepTable,
    signal: Signal,
    *,
    gamma: float = 0.95,
    norm: str = "mean_std_norm",
    omega: float = 1.0,
    transition_weight: float = 1.0,
    K: int = 2,
    variance_prior: float = 0.25,
) -> Estimate:
    """Progress- and Reliability-oriented Group Policy Optimization (arXiv 2607.04242; abstract only,
    no code: the formulas below are an inferred reading, every weight and threshold our choice).

    ``A_{i,t} = A^E_i + omega * (A^pre_{i,t} + transition_weight * A^tr_{i,t})`` with, for ``R`` and
    ``G`` the ``signal.episode`` and ``signal.step`` values (return after the invalid-action penalty
    and discounted step return):

    - ``A^E_i = norm(R_i, {R_j})`` (GRPO);
    - exact-prefix comparison ``A^pre_{i,t} = norm(G_{i,t}, {G_{j,t}: same history (s_0, a_0, ...,
      s_t)})``: the table's prefix-tree node, states and actions equal by content (HGPO's deepest,
      full-history level, with actions);
    - potentials: at depth k = 0..K a step's pool is the steps with the same last k+1 states (HGPO's
      levels); ``Phi_k`` is the pool's mean outcome ``R_j`` over its visits (revisits count), with
      ``Var_k = (sigma_k^2 + variance_prior) / n_k`` (sample variance, 0 for one visit); the fused
      potential is ``Phi(s_{i,t}) = sum_k Phi_k / Var_k / sum_k 1 / Var_k`` over the depths k <= t;
    - transition credit ``c_{i,t} = gamma * Phi(s_{i,t+1}) - Phi(s_{i,t})``, where the state after the
      last step is terminal with the known potential ``R_i``; ``A^tr = norm(c, every step of the
      group)``.

    Choices:

    - "Semantic expansion" (widening a state's pool by semantically similar states) needs a
      similarity model, which this suite has not: pools widen by history depth only. Depth 0 pools
      every visit of the same ``state_key`` whatever came before, the widest our exact keys allow;
      deeper levels narrow to matching recent histories, and the fusion weighs them by reliability.
    - ``variance_prior`` (tau) [0.25, the variance of a 0/1 outcome at p = 1/2] keeps a pool of equal
      outcomes from taking infinite weight and shrinks single visits; raise it to fuse closer to
      visit-count weighting, lower it to trust homogeneous pools more.
    - Potentials are mean outcomes ("rollout-based"), not returns-to-go, so the terminal successor's
      potential is the trajectory's own outcome: before normalisation, ``sum_t gamma^t c_{i,t}``
      telescopes to ``gamma^T_i R_i - Phi(s_{i,0})``. A step's own visit is part of its pools (as in
      G2PO's node values).
    - ``transition_weight`` (lambda) [1.0]: local comparison and value-jump credit at equal weight, as
      G2PO adds its node- and edge-centric terms; ``omega`` [1.0] as in GiGPO; ``K`` [2] as HGPO's
      default; one ``norm`` [mean_std_norm] for all three terms; ``gamma`` [0.95] also discounts the
      potentials' jump.
    - Coverage credit (``coverage_beta`` [0]) applies as for the other signal-based estimators: in
      the groups ``coverage_when`` names (all-failed by default) the driver substitutes ``C`` for
      ``R`` and ``G``.

    Group counts: ``prefix_steps``, the steps whose exact-prefix pool has >= 2 steps.
    """
    episode = episode_norm(table, signal.episode, norm)[table.trajectory]
    prefix = pooled_norm(signal.step, table.node, table.n_nodes, norm)

    outcome = signal.episode[table.trajectory]
    weighted = np.zeros(table.n_steps)
    precision_sum = np.zeros(table.n_steps)
    for steps, key, n_keys in history_levels(table, K):
        count, mean, variance = pool_moments(outcome[steps], key, n_keys)
        precision = count / (variance + variance_prior)  # 1 / Var_k
        weighted[steps] += (precision * mean)[key]
        precision_sum[steps] += precision[key]
    potential = np.divide(weighted, precision_sum, out=np.zeros(table.n_steps), where=precision_sum > 0)

    following = successor(table)
    next_potential = np.where(following >= 0, potential[following], outcome)
    transition = pooled_norm(gamma * next_potential - potential, table.group, table.n_groups, norm)

    node_steps = np.bincount(table.node, minlength=table.n_nodes)
    counts = {"prefix_steps": np.bincount(table.group[node_steps[table.node] >= 2], minlength=table.n_groups)}
    return Estimate(episode + omega * (prefix + transition_weight * transition), counts)
