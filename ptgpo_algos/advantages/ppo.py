"""PPO with a learned critic: GAE advantages from the critic's values of each turn."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal, penalised_rewards
from ptgpo_algos.advantages.table import StepTable
from ptgpo_algos.critic.gae import turn_gae, whitened

__all__ = ["ppo", "ppo_targets"]


def ppo_targets(table: StepTable, gamma: float, invalid_penalty: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """The batch's GAE advantages and value targets (:func:`~ptgpo_algos.critic.gae.turn_gae`) from the
    critic's values recorded on the table, with the invalid-action penalty in the rewards; ``ValueError``
    when a step has no value (the run has no critic)."""
    if np.isnan(table.value).any():
        raise ValueError("the ppo estimator needs the critic's value of every step (Step.extras['value']); the "
                         "trainer records them when algorithm.name is ppo")
    result = turn_gae(penalised_rewards(table, invalid_penalty), table.value, table.trajectory_length,
                      table.bootstrap_value, gamma, gae_lambda)
    return result.advantages, result.returns


def ppo(table: StepTable, signal: Signal, *, gamma: float = 0.95, invalid_penalty: float = 0.1,
        gae_lambda: float = 0.95, whiten: bool = True) -> Estimate:
    """PPO's advantage with a learned critic, one value per turn (:mod:`ptgpo_algos.critic`).

    ``delta_t = r'_t + gamma V(s_{t+1}) - V(s_t)`` and ``A_t = sum_{k >= t} (gamma lambda)^(k-t) delta_k``
    within each trajectory (``r'``: the reward after the invalid-action penalty; ``V(s_T)``: 0 after an
    episode that terminated, the critic's value of the final state after one the horizon cut off);
    with ``whiten``, ``(A - mean) / (std + 1e-8)`` over the whole batch. Not a group method, but the
    driver's rule holds as for every estimator: a group of fewer than two trajectories gets zeros.
    ``signal`` is unused: the rewards are read per turn.
    """
    advantages, _ = ppo_targets(table, gamma, invalid_penalty, gae_lambda)
    if whiten and advantages.size > 1:
        advantages = whitened(advantages)
    return Estimate(advantages)

