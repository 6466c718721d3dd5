"""Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438) over multi-turn episodes,
one value per turn: pure numpy, vectorised over a batch of episodes of different lengths.

The unit is the turn (one decision of the policy): ``V(s_t)`` is the critic's value of the state the
decision at turn t is taken in, ``r_t`` the reward of that turn. With ``V(s_T)`` the value after the
last turn (``bootstrap``: 0 for an episode that terminated, the critic's value of the final state for
one cut off by the horizon)::

    delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    A_t     = sum_{k >= t} (gamma lambda)^(k - t) delta_k      (within the episode)
    R_t     = A_t + V(s_t)                                      (the value target)

``lambda = 1`` gives the discounted return (bootstrapped) minus the value, ``lambda = 0`` the one-step
TD error. The advantages are then whitened over the batch (:func:`whitened`, verl's ``masked_whiten``):
PPO's over every turn, HiPER's one level at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GaeResult", "WHITEN_EPSILON", "chained_gae", "turn_gae", "whitened"]

#: The guard in (x - mean) / (std + eps) of the whitening (verl's and HiPER's value).
WHITEN_EPSILON = 1e-8


@dataclass(frozen=True)
class GaeResult:
    """``advantages`` and ``returns`` (the value targets), one per step, in the input's order."""

    advantages: np.ndarray
    returns: np.ndarray


def turn_gae(rewards: np.ndarray, values: np.ndarray, lengths: np.ndarray, bootstrap: np.ndarray,
             gamma: float, lam: float) -> GaeResult:
    """GAE of a batch of episodes laid end to end (see the module docstring).

    ``rewards`` and ``values``: (n_steps,), the episodes' turns in order, episode after episode;
    ``lengths``: (n_episodes,) turns of each (0 allowed); ``bootstrap``: (n_episodes,) the value after
    each episode's last turn. Loops over time (the longest episode), vectorised over episodes.
    """
    rewards, values = np.asarray(rewards, dtype=np.float64), np.asarray(values, dtype=np.float64)
    lengths, bootstrap = np.asarray(lengths, dtype=np.int64), np.asarray(bootstrap, dtype=np.float64)
    n_steps = int(lengths.sum())
    if rewards.shape != (n_steps,) or values.shape != (n_steps,) or bootstrap.shape != lengths.shape:
        raise ValueError(f"turn_gae: rewards and values need one entry per step ({n_steps} for lengths summing to it) "
                         f"and bootstrap one per episode ({lengths.shape[0]}); got {rewards.shape}, {values.shape}, "
                         f"{bootstrap.shape}")
    if n_steps == 0:
        return GaeResult(np.zeros(0), np.zeros(0))
    n_episodes, horizon = lengths.shape[0], int(lengths.max())
    episode = np.repeat(np.arange(n_episodes), lengths)
    time = np.arange(n_steps) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded_rewards, padded_values = np.zeros((n_episodes, horizon)), np.zeros((n_episodes, horizon))
    padded_rewards[episode, time], padded_values[episode, time] = rewards, values
    # Column t + 1 of an episode's row is V(s_{t+1}); its last turn's is the bootstrap value.
    following = np.zeros((n_episodes, horizon + 1))
    following[episode, time] = values
    following[np.arange(n_episodes), lengths] = bootstrap
    chained = np.arange(horizon)[None, :] < (lengths - 1)[:, None]
    advantages = chained_gae(padded_rewards, padded_values, following[:, 1:], chained, gamma, lam)[episode, time]
    return GaeResult(advantages, advantages + values)


def chained_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, chained: np.ndarray,
                gamma: float, lam: float) -> np.ndarray:
    """GAE with explicit successors over ``[episodes, turns]`` arrays: ``delta[t] = r[t] + gamma *
    next_values[t] - values[t]`` and ``A[t] = delta[t] + gamma * lam * A[t+1]`` where ``chained[t]``, else
    ``delta[t]``.

    ``next_values[t]`` is the value turn t bootstraps from (0 after a terminal step), so one recursion
    serves :func:`turn_gae` (chained everywhere but each episode's last turn) and GAE restarted at any
    boundary, such as HiPER's subgoal segments (:mod:`ptgpo_algos.hiper.credit`).
    """
    deltas = rewards + gamma * next_values - values
    advantages = np.zeros_like(deltas)
    carry = np.zeros(deltas.shape[0])
    for t in range(deltas.shape[1] - 1, -1, -1):
        carry = deltas[:, t] + gamma * lam * np.where(chained[:, t], carry, 0.0)
        advantages[:, t] = carry
    return advantages


def whitened(values, mask=None, over=None) -> np.ndarray:
    """``(x - mean) / (std + 1e-8)`` of ``values`` where ``mask`` selects (all of them when None), 0
    elsewhere; the mean and population standard deviation are those of the selected entries, or of
    ``over`` when given (across ranks: every rank's advantages). Nothing to pool over: all zeros."""
    x = np.asarray(values, dtype=np.float64)
    mask = np.ones(x.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if mask.shape != x.shape:
        raise ValueError(f"mask must have shape {x.shape}, got {mask.shape}")
    pool = x[mask] if over is None else np.asarray(over, dtype=np.float64)
    if pool.size == 0:
        return np.zeros_like(x)
    return np.where(mask, (x - pool.mean()) / (pool.std() + WHITEN_EPSILON), 0.0)
