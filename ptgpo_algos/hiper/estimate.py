"""HiPER's credit for a batch of played episodes: the one call a critic-based trainer makes.

It takes each episode's environment rewards, parsed responses and validity, and the value heads'
outputs per turn, and returns per turn what the update needs: each level's advantage (whitened when
``normalize``), each head's value target, and which turns carry each level's tokens. Spreading a
turn's advantages over its tokens is :func:`ptgpo_algos.hiper.plan_format.block_spans` and
:func:`~ptgpo_algos.hiper.plan_format.token_span`: the low advantage on the action block (the whole
response when none parses), the high one on the subgoal block of segment starts, the switch one on
the switch block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ptgpo_algos.critic.gae import whitened
from ptgpo_algos.hiper.credit import hae, shaped_rewards
from ptgpo_algos.hiper.plan_format import PlanResponse, PlanTracker
from ptgpo_algos.hiper.settings import HiperSettings

__all__ = ["EpisodeTurns", "HiperCredit", "hiper_credit", "pad"]


@dataclass(frozen=True)
class EpisodeTurns:
    """One played episode as HiPER's credit reads it: per turn the environment reward, the parsed
    response and whether the turn was valid (format kept and action admissible); and whether the
    environment ended it (False: cut at the step limit)."""

    rewards: Sequence[float]
    responses: Sequence[PlanResponse]
    valid: Sequence[bool]
    terminated: bool

    def __post_init__(self) -> None:
        if not len(self.rewards) == len(self.responses) == len(self.valid):
            raise ValueError(f"an episode needs one reward, response and validity per turn, got "
                             f"{len(self.rewards)}, {len(self.responses)} and {len(self.valid)}")


@dataclass(frozen=True)
class HiperCredit:
    """Per turn, ``[episodes, turns]``: each level's advantage and value target, and the turns that
    carry each level (``*_turns``, also where each head's value loss is taken: the low and switch
    heads every turn, the high head at segment starts). ``switch_*`` are None without a switch head."""

    low_advantages: np.ndarray
    high_advantages: np.ndarray
    switch_advantages: np.ndarray | None
    low_returns: np.ndarray
    high_returns: np.ndarray
    switch_returns: np.ndarray | None
    lengths: np.ndarray
    starts: np.ndarray
    high_turns: np.ndarray
    switch_turns: np.ndarray


def pad(rows: Sequence[Sequence[float]], width: int | None = None, fill: float = 0.0) -> np.ndarray:
    """Rows of unequal length as one ``[rows, width]`` array (``width``: the longest row)."""
    width = max((len(row) for row in rows), default=0) if width is None else width
    out = np.full((len(rows), width), fill, dtype=np.float64)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def _per_turn(episodes: Sequence[EpisodeTurns], width: int) -> dict[str, np.ndarray]:
    flags = {name: np.zeros((len(episodes), width), dtype=bool)
             for name in ("switched", "kept", "changed", "valid", "has_subgoal", "has_switch")}
    for b, episode in enumerate(episodes):
        tracker = PlanTracker()
        for response in episode.responses:
            tracker.record(response)
        n = len(episode.responses)
        flags["switched"][b, :n] = tracker.switches
        flags["kept"][b, :n] = [not s for s in tracker.switches]
        flags["changed"][b, :n] = tracker.changed_on_keep()
        flags["valid"][b, :n] = list(episode.valid)
        flags["has_subgoal"][b, :n] = [r.subgoal is not None for r in episode.responses]
        flags["has_switch"][b, :n] = [r.switch is not None for r in episode.responses]
    return flags


def hiper_credit(episodes: Sequence[EpisodeTurns], v_low, v_high, settings: HiperSettings,
                 v_switch=None, gather: Callable[[Any], list[Any]] = lambda local: [local]) -> HiperCredit:
    """HiPER's credit for ``episodes`` from the value heads' per-turn outputs (``[episodes, turns]``,
    padded; ``v_high`` read at segment starts only, ``v_switch`` needed when ``settings.switch_head``).
    Across ranks, ``episodes`` are this rank's and ``gather`` collects every rank's in rank order (the
    batch's): each level is whitened over the whole batch's, as one process whitens it.
    """
    lengths = np.array([len(e.rewards) for e in episodes], dtype=np.int64)
    width = int(np.asarray(v_low).shape[1]) if len(episodes) else 0
    if settings.switch_head and v_switch is None:
        raise ValueError("hiper.switch_head is on: give the switch head's values (v_switch)")
    flags = _per_turn(episodes, width)
    rewards = shaped_rewards(pad([e.rewards for e in episodes], width) * settings.reward_scale, lengths,
                             valid=flags["valid"], kept=flags["kept"], changed_on_keep=flags["changed"],
                             invalid_penalty=settings.invalid_penalty, keep_penalty=settings.keep_penalty,
                             keep_penalty_mode=settings.keep_penalty_mode,
                             consistency_penalty=settings.consistency_penalty)
    credit = hae(rewards, v_low, v_high, flags["switched"], lengths, [e.terminated for e in episodes],
                 gamma=settings.gamma, lam_turn=settings.lam_turn, lam_seg=settings.lam_seg,
                 bootstrap_truncated=settings.bootstrap_truncated)
    inside = np.arange(width)[None, :] < lengths[:, None]
    high_turns = credit.starts & flags["has_subgoal"]
    switch_turns = inside & flags["has_switch"]
    low, high, switch = credit.low_advantages, credit.high_advantages, None
    if settings.switch_head:
        switch = credit.segment_returns - np.asarray(v_switch, dtype=np.float64) * inside
    if settings.normalize:
        levels = [(low, inside), (high, high_turns)] + ([(switch, switch_turns)] if switch is not None else [])
        parts = gather([values[mask] for values, mask in levels])
        pools = [np.concatenate([part[level] for part in parts]) for level in range(len(levels))]
        low, high, *rest = [whitened(values, mask, over=pool) for (values, mask), pool in zip(levels, pools)]
        switch = rest[0] if rest else None
    return HiperCredit(low, high, switch, credit.low_returns, credit.high_returns,
                       credit.segment_returns if settings.switch_head else None, lengths, credit.starts,
                       high_turns, switch_turns)
