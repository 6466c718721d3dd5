"""PlanPO: among a task's successful rollouts, credit the shorter trajectories and the shorter turns."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import compact_ids, episode_norm, pooled_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal, solved
from ptgpo_algos.advantages.table import StepTable

__all__ = ["planpo"]


def planpo(
    table: StepTable,
    signal: Signal,
    *,
    norm: str = "mean_std_norm",
    success_reward: float = 1.0,
    alpha_init: float = 0.1,
    alpha_final: float = 0.05,
    progress: float = 0.0,
    turn_group: str = "index",
) -> Estimate:
    """Group Planning-aware Policy Optimization (arXiv 2608.17289; no code published).

    With ``R_i`` the return after the invalid-action penalty (``signal.episode``), ``T_i`` the number of
    turns (steps) of trajectory i and ``L_{i,t}`` the response tokens of turn t:

    - trajectory level ``R^E_i = 1[i succeeded] * R_i / T_i``, ``A^E_i = norm(R^E_i, {R^E_j})`` over the
      group's trajectories;
    - turn level ``R^S_{i,t} = 1[i succeeded] * R_i / L_{i,t}``, ``A^S_{i,t} = norm(R^S_{i,t}, G^S)``;
    - ``A_{i,t} = A^E_i + alpha * A^S_{i,t}``, ``alpha = alpha_init + (alpha_final - alpha_init) *
      progress`` (the paper's linear decay over training steps).

    Failures get ``R^E = R^S = 0``, so there is no unconditional length penalty: a group without a
    success gets zeros, and a group whose trajectories all succeeded still contrasts their lengths.

    Choices, where the paper leaves our setting open:

    - Success (``success_reward`` [1.0]): the environment return (before the penalty) reaches
      ``success_reward``, our environments' reward for a solved task (the paper's pay 10; under
      ``mean_std_norm`` the reward scale cancels).
    - The invalid-action penalty (``invalid_penalty``, common key) lowers ``R_i`` of a successful
      trajectory; a failure's normalised reward stays 0 whatever it did, as in the paper, so unlike
      grpo an all-failed group does not rank invalid actions.
    - ``G^S`` (``turn_group`` [index]): the paper's equation pools the turns with the same index t
      (``{a_{j,t}: T_j >= t}``), its text all turns of the task's group; ``index`` follows the
      equation, ``pooled`` the text.
    - ``L_{i,t}`` is ``len(step.response_ids)`` (in ``choose`` mode the chosen candidate's tokens);
      a step without recorded tokens counts as one token. ``T_i`` counts every turn, invalid ones
      included (counting only valid turns would reward invalid actions).
    - ``progress`` [0] is the trainer's iteration / iterations, in [0, 1]; ``alpha_init`` [0.1] and
      ``alpha_final`` [0.05] are the paper's ALFWorld/WebShop values (SciWorld: 0.05 -> 0.025).
    - One ``norm`` [mean_std_norm] (the paper's default ``F = std + eps``; ``mean_norm`` is ``F = 1``)
      serves both levels. ``gamma`` is accepted, like grpo's, and unused: PlanPO credits undiscounted
      returns. No coverage credit: a group without success is the paper's zero case.

    Group counts: ``succeeded_trajectories``.
    """
    succeeded = solved(table, success_reward)
    credit = np.where(succeeded, signal.episode, 0.0)
    per_turn = credit / np.maximum(table.trajectory_length, 1)
    trajectory_term = episode_norm(table, per_turn, norm)[table.trajectory]

    per_token = credit[table.trajectory] / np.maximum(table.response_tokens, 1)
    if turn_group == "index":
        horizon = int(table.time.max(initial=0)) + 1
        pool, n_pools = compact_ids(table.group * horizon + table.time)
    else:
        pool, n_pools = table.group, table.n_groups
    turn_term = pooled_norm(per_token, pool, n_pools, norm)

    alpha = alpha_init + (alpha_final - alpha_init) * progress
    successes = np.bincount(table.trajectory_group[succeeded], minlength=table.n_groups)
    return Estimate(trajectory_term + alpha * turn_term, {"succeeded_trajectories": successes})
