"""CovGPO: in groups where every rollout failed, rank trajectories (or steps) by the new states they
reached; other groups keep GRPO's outcome advantages."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import episode_norm, pooled_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal, novel_next, outcome_all_failed
from ptgpo_algos.advantages.table import StepTable

__all__ = ["covgpo"]


def covgpo(
    table: StepTable,
    signal: Signal,
    *,
    norm: str = "mean_std_norm",
    coverage_weight: float = 0.1,
    variant: str = "trajectory",
) -> Estimate:
    """Progress-conditioned Group Policy Optimization, "CovGPO" (arXiv 2607.22724; formulas from a
    third-party implementation that follows the paper, the trigger and step variant inferred).

    ``A_{i,t} = A^GRPO_i + 1[group all-failed] * coverage_weight * A^cov``, with
    ``A^GRPO_i = norm(R_i, {R_j})`` on the return after the invalid-action penalty (``signal.episode``)
    and, in a group where every environment return is 0:

    - ``variant: trajectory``: ``A^cov_i = norm(P_i, {P_j})``, ``P_i = C_i / T_i``, where ``C_i`` counts
      the actions whose next state is new within trajectory i (:func:`novel_next`: exact
      ``state_key`` match, the initial state counted as seen, so an action that leaves the state
      unchanged never counts) and ``T_i`` is its number of actions;
    - ``variant: step``: ``A^cov_{i,t} = norm(n_{i,t}, {n_{j,u}: every step of the group})`` with
      ``n_{i,t} = 1[s_{i,t+1} is new]``.

    Choices, where the sources leave our setting open:

    - Base: GRPO (the paper reports gains on top of GRPO, GiGPO and HGPO); ``norm`` [mean_std_norm]
      serves both terms, so the default is the spec's ``lambda * (P_i - mean P) / (std P + eps)``.
    - The coverage term is added to GRPO's, not substituted: in an all-failed group GRPO's advantage
      carries only the invalid-action penalty, which it keeps; the two agree when ``invalid_penalty``
      is 0. ``P`` itself has no penalty (the paper's count).
    - ``coverage_weight`` (lambda) [0.1]: the paper's default is not known; 0.1 is the weight our
      ``coverage_beta`` uses for ptgpo, so the two coverage credits compare at equal weight.
    - The last action's outcome is never counted: a trajectory records no state after it, so ``C_i``
      is at most ``T_i - 1``.
    - Trigger: every non-empty trajectory has environment return 0 (to 1e-9), read literally; a group
      of partial scores (WebShop) or all successes is left to GRPO.

    How it differs from the ``coverage_beta`` flag every other estimator takes (``signal.py``):
    ``coverage_beta`` triggers in the same all-failed groups by default (with ``coverage_when:
    all_equal``, in any group whose environment returns are all *equal*), but replaces the outcome
    signal there by discounted novelty returns ``C_{i,t} = sum_k gamma^(k-t) c_{i,k}`` whose rewards
    ``c`` include the invalid-action penalty, runs the host estimator (grpo, gigpo, ...) on them and
    scales its output by beta, replacing the outcome advantage. CovGPO credits the undiscounted novelty *rate*
    ``C_i / T_i`` (or the step's own novelty indicator, pooled over the whole group, not per anchor
    state), penalty-free, and adds it to GRPO's outcome advantage.

    Group counts: ``covgpo_groups``, 1 in each group where the coverage term applied.
    """
    advantages = episode_norm(table, signal.episode, norm)[table.trajectory]
    failed = outcome_all_failed(table)
    if failed.any():
        novel = novel_next(table)
        if variant == "trajectory":
            found = np.bincount(table.trajectory, weights=novel, minlength=table.n_trajectories)
            rate = found / np.maximum(table.trajectory_length, 1)
            coverage = episode_norm(table, rate, norm)[table.trajectory]
        else:
            coverage = pooled_norm(novel, table.group, table.n_groups, norm)
        advantages = advantages + coverage_weight * np.where(failed[table.group], coverage, 0.0)
    return Estimate(advantages, {"covgpo_groups": failed.astype(np.int64)})
