"""The random baseline: a uniformly random admissible action each step."""

from __future__ import annotations

import random
from typing import Sequence

from ptgpo_algos.rollouts.evaluation import EpisodeView

__all__ = ["RandomAgent"]


class RandomAgent:
    """Picks uniformly among ``info["admissible_actions"]``, from its own seeded generator.

    The actions depend on ``seed`` and on the order the agent is asked, so an evaluation with the same
    seeds and batch size replays exactly. With no admissible action listed (an environment that lists
    none) it answers ``""``, which the environment counts as an invalid step.
    """

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._rng = random.Random(seed)

    def act(self, episodes: Sequence[EpisodeView]) -> list[str]:
        """A uniformly random admissible action in each episode (empty where there is none)."""
        actions = []
        for view in episodes:
            admissible = view.info.get("admissible_actions") or []
            actions.append(self._rng.choice(admissible) if admissible else "")
        return actions
