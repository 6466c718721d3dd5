"""Adapter from a policy to :class:`ptgpo_algos.rollouts.evaluation.Agent`, for evaluation and baselines."""

from __future__ import annotations

import weakref
from typing import Sequence

from ptgpo_algos.rollouts.episodes import EpisodeView
from ptgpo_algos.hiper.plan_format import PlanContext, PlanTracker, parse_plan_response
from ptgpo_algos.policy.base import RolloutPolicy

__all__ = ["PolicyAgent"]


class PolicyAgent:
    """Acts with ``policy`` on a batch of episodes in one call (greedy = argmax / greedy decoding).

    ``greedy=False`` samples, at ``temperature`` when given (else the policy's own), seeded by ``seed``.

    A ``generate``-mode response without a parsable action is sent as an empty action, which the
    environment counts as invalid (the raw text could otherwise happen to name an action).
    """

    def __init__(
        self, policy: RolloutPolicy, greedy: bool = True, name: str = "policy", seed: int = 0,
        temperature: float | None = None,
    ):
        import torch

        self.policy = policy
        self.greedy = greedy
        self.temperature = temperature
        self.name = name
        self.generator = torch.Generator().manual_seed(seed)
        #: A plan/execute policy's subgoal in force, per live episode (HiPER).
        self.plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @classmethod
    def at_temperature(cls, policy: RolloutPolicy, temperature: float, name: str = "policy", seed: int = 0) -> "PolicyAgent":
        """The evaluation protocols' agent: greedy when ``temperature`` is 0, else sampled at it."""
        return cls(policy, greedy=temperature == 0.0, name=name, seed=seed, temperature=temperature or None)

    def act(self, episodes: Sequence[EpisodeView]) -> list[str]:
        """The policy's action for each episode (an empty action where it produced none)."""
        contexts = [view.context() for view in episodes]
        if getattr(self.policy, "plan_format", False):
            trackers = [self.plans.setdefault(view, PlanTracker()) for view in episodes]
            contexts = [PlanContext.of(c, tracker) for c, tracker in zip(contexts, trackers)]
        decisions = self.policy.decide(contexts, greedy=self.greedy, generator=self.generator,
                                       temperature=self.temperature)
        if getattr(self.policy, "plan_format", False):
            for tracker, decision in zip(trackers, decisions):
                tracker.record(parse_plan_response(decision.text))
        return [d.action if d.action is not None else "" for d in decisions]

    def __repr__(self) -> str:
        sampling = "greedy" if self.greedy else f"temperature={self.temperature}"
        return f"PolicyAgent(name={self.name!r}, {sampling})"


