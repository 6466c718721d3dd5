"""The expert baseline: each environment's own solver (``env.expert_action()``)."""

from __future__ import annotations

from typing import Sequence

from ptgpo_algos.rollouts.evaluation import EpisodeView

__all__ = ["ExpertAgent"]


class ExpertAgent:
    """Plays ``view.env.expert_action()``: the upper reference every learned agent is compared to."""

    name = "expert"

    def act(self, episodes: Sequence[EpisodeView]) -> list[str]:
        """The environment's expert action in each episode."""
        return [view.env.expert_action() for view in episodes]
