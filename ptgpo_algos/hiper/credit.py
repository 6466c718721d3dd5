"""HiPER's hierarchical advantage estimation (HAE): credit for the executor within each subgoal
segment and for the planner across segments, from two value series.

Arrays are padded batches: one row per episode, one column per decision (turn), ``lengths[b]`` the
decisions episode ``b`` made; columns at or past a row's length are ignored and come back as 0.
``starts`` marks segment starts (:func:`ptgpo_algos.hiper.segments.segment_starts`); ``terminated[b]``
says the environment ended episode ``b`` (False: it was cut at the step limit).

``V_L[t]`` is the low value of turn t (read once the subgoal is written: the state under the
subgoal), ``V_H[s]`` the high value at a segment start s (read before the response: the state alone).
For segment k, turns ``s_k .. e_k``, ``d_k`` of them:

* segment-to-go return ``G[t] = r[t] + gamma * G[t+1]`` inside the segment and
  ``G[e_k] = r[e_k] + gamma * B_k``, where ``B_k`` is ``V_H[s_{k+1}]`` when a segment follows, 0 after a
  terminal step, and after a cut ``V_H[s_k]`` (``bootstrap_truncated``) or 0;
* low level, GAE restarted in every segment (:func:`~ptgpo_algos.critic.gae.chained_gae`): ``delta[t] = r[t] + gamma * next[t] -
  V_L[t]`` with ``next[t] = V_L[t+1]`` inside the segment, ``B_k`` at its end (after a cut with
  ``bootstrap_truncated``: ``V_L[e_k]`` itself, as HiPER's code does);
  ``A_L[t] = delta[t] + gamma * lam_turn * A_L[t+1]`` inside, ``A_L[e_k] = delta[e_k]``; value target
  ``A_L + V_L``;
* high level, GAE over the semi-Markov chain of segments: ``A_H[k] = G[s_k] - V_H[s_k] +
  gamma**d_k * lam_seg * A_H[k+1]``, written at ``s_k``; value target ``A_H + V_H`` there;
* switch (the released scripts' third head, optional): ``A_S[t] = G[t] - V_S[t]`` at every turn.

docs/algorithms/hiper.md writes these out. Every function is pure; none reads a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptgpo_algos.critic.gae import chained_gae

__all__ = ["HaeCredit", "hae", "segment_to_go", "shaped_rewards"]


@dataclass(frozen=True)
class HaeCredit:
    """The two levels' advantages and value targets, each ``[episodes, decisions]``.

    ``high_*`` are non-zero at segment starts only; ``segment_returns`` is ``G``, the target of
    a switch head when one is trained.
    """

    low_advantages: np.ndarray
    low_returns: np.ndarray
    high_advantages: np.ndarray
    high_returns: np.ndarray
    segment_returns: np.ndarray
    starts: np.ndarray


def _as_batch(name: str, values, shape: tuple[int, int] | None = None) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or (shape is not None and array.shape != shape):
        want = f"shape {shape}" if shape is not None else "2 dimensions [episodes, decisions]"
        raise ValueError(f"{name} must have {want}, got {array.shape}")
    return array


def _layout(rewards, starts, lengths, terminated):
    r = _as_batch("rewards", rewards)
    n, width = r.shape
    lengths = np.asarray(lengths, dtype=np.int64)
    terminated = np.asarray(terminated, dtype=bool)
    if lengths.shape != (n,) or terminated.shape != (n,):
        raise ValueError(f"lengths and terminated need one entry per episode ({n}), got "
                         f"{lengths.shape} and {terminated.shape}")
    if np.any(lengths < 0) or np.any(lengths > width):
        raise ValueError(f"lengths must lie in 0..{width}, got {lengths.tolist()}")
    columns = np.arange(width)
    inside = columns[None, :] < lengths[:, None]
    starts = np.asarray(starts, dtype=bool)
    if starts.shape != r.shape:
        raise ValueError(f"starts must have shape {r.shape}, got {starts.shape}")
    starts = starts & inside
    starts[:, 0] |= lengths > 0
    last = columns[None, :] == (lengths - 1)[:, None]
    following = np.zeros_like(starts)
    following[:, :-1] = starts[:, 1:]
    segment_end = inside & (last | following)
    start_column = np.maximum.accumulate(np.where(starts, columns[None, :], 0), axis=1)
    return r * inside, inside, starts, last, segment_end, start_column, terminated


def _tail_bootstrap(value_at_end, terminated, bootstrap_truncated: bool):
    """What follows an episode's last step: nothing after a terminal step, and after a cut the given
    estimate (``bootstrap_truncated``) or nothing."""
    keep = (~terminated) & bool(bootstrap_truncated)
    return np.where(keep, value_at_end, 0.0)


def segment_to_go(rewards, v_high, starts, lengths, terminated, *, gamma: float,
                  bootstrap_truncated: bool) -> np.ndarray:
    """``G``, each turn's discounted reward to the end of its segment plus the bootstrap there
    (the module docstring); 0 past each episode's length."""
    r, inside, starts, last, segment_end, start_column, terminated = _layout(rewards, starts, lengths,
                                                                             terminated)
    v_high = _as_batch("v_high", v_high, r.shape)
    rows = np.arange(r.shape[0])
    returns = np.zeros_like(r)
    carry = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        next_start = v_high[:, t + 1] if t + 1 < r.shape[1] else np.zeros(r.shape[0])
        tail = _tail_bootstrap(v_high[rows, start_column[:, t]], terminated, bootstrap_truncated)
        boot = np.where(last[:, t], tail, next_start)
        carry = r[:, t] + gamma * np.where(segment_end[:, t], boot, carry)
        returns[:, t] = np.where(inside[:, t], carry, 0.0)
    return returns


def _low_level(r, v_low, v_high, inside, last, segment_end, terminated, gamma, lam, bootstrap_truncated):
    following_low = np.zeros_like(v_low)
    following_low[:, :-1] = v_low[:, 1:]
    following_high = np.zeros_like(v_high)
    following_high[:, :-1] = v_high[:, 1:]
    tail = _tail_bootstrap(v_low, terminated[:, None], bootstrap_truncated)
    next_values = np.where(last, tail, np.where(segment_end, following_high, following_low))
    chained = inside & ~segment_end
    advantages = chained_gae(r, v_low * inside, next_values * inside, chained, gamma, lam)
    advantages = advantages * inside
    return advantages, (advantages + v_low) * inside


def _high_level(g, v_high, starts, inside, last, segment_end, gamma, lam_seg):
    """A^H at segment starts: backwards over turns, carrying the next segment's advantage and
    gamma to the power of the turns left in the current segment."""
    n, width = g.shape
    advantages = np.zeros_like(g)
    next_segment = np.zeros(n)
    power = np.ones(n)
    for t in range(width - 1, -1, -1):
        power = np.where(segment_end[:, t], gamma, gamma * power)
        next_segment = np.where(last[:, t], 0.0, next_segment)
        here = starts[:, t] & inside[:, t]
        advantage = g[:, t] - v_high[:, t] + power * lam_seg * next_segment
        advantages[:, t] = np.where(here, advantage, 0.0)
        next_segment = np.where(here, advantage, next_segment)
    return advantages, np.where(starts & inside, advantages + v_high, 0.0)


def hae(rewards, v_low, v_high, starts, lengths, terminated, *, gamma: float = 1.0, lam_turn: float = 1.0,
        lam_seg: float = 0.95, bootstrap_truncated: bool = True) -> HaeCredit:
    """Both levels' advantages and value targets (the module docstring's formulas).

    ``v_high`` is read at segment starts only (other columns are ignored). The defaults are HiPER's
    published ALFWorld settings (γ 1, λ_L 1, λ_H 0.95, a cut episode bootstrapped).
    """
    r, inside, starts_, last, segment_end, _, terminated_ = _layout(rewards, starts, lengths, terminated)
    v_low_ = _as_batch("v_low", v_low, r.shape) * inside
    v_high_ = _as_batch("v_high", v_high, r.shape) * inside
    g = segment_to_go(r, v_high_, starts_, lengths, terminated_, gamma=gamma,
                      bootstrap_truncated=bootstrap_truncated)
    low, low_returns = _low_level(r, v_low_, v_high_, inside, last, segment_end, terminated_, gamma,
                                  lam_turn, bootstrap_truncated)
    high, high_returns = _high_level(g, v_high_, starts_, inside, last, segment_end, gamma, lam_seg)
    return HaeCredit(low, low_returns, high, high_returns, g, starts_)


def shaped_rewards(rewards, lengths, *, valid, kept, changed_on_keep, invalid_penalty: float = 0.1,
                   keep_penalty: float = 0.3, keep_penalty_mode: str = "normalized",
                   consistency_penalty: float = 0.3) -> np.ndarray:
    """The per-turn rewards HAE credits: the environment's, less HiPER's penalties.

    ``valid`` (the response kept the format and named an admissible action), ``kept`` (the response
    said KEEP; a missing or empty switch counts as KEEP) and ``changed_on_keep`` (it said KEEP yet
    wrote a subgoal that differs from the previous decision's) are booleans per decision. An invalid
    turn loses ``invalid_penalty``; a kept turn loses ``keep_penalty`` (``fixed``) or
    ``keep_penalty / length`` (``normalized``: an episode loses ``keep_penalty`` times its share of
    KEEP turns); a kept-but-rewritten subgoal loses ``consistency_penalty``. Penalties are given as
    positive amounts (HiPER's scripts write them as negative rewards).
    """
    if keep_penalty_mode not in ("fixed", "normalized"):
        raise ValueError(f"keep_penalty_mode must be 'fixed' or 'normalized', got {keep_penalty_mode!r}")
    r = _as_batch("rewards", rewards)
    lengths = np.asarray(lengths, dtype=np.int64)
    inside = np.arange(r.shape[1])[None, :] < lengths[:, None]
    flags = {name: np.asarray(value, dtype=bool) for name, value in
             (("valid", valid), ("kept", kept), ("changed_on_keep", changed_on_keep))}
    for name, flag in flags.items():
        if flag.shape != r.shape:
            raise ValueError(f"{name} must have shape {r.shape}, got {flag.shape}")
    per_keep = keep_penalty / np.maximum(lengths, 1)[:, None] if keep_penalty_mode == "normalized" \
        else np.full((r.shape[0], 1), keep_penalty)
    shaped = (r - invalid_penalty * ~flags["valid"] - per_keep * flags["kept"]
              - consistency_penalty * (flags["kept"] & flags["changed_on_keep"]))
    return np.where(inside, shaped, 0.0)
