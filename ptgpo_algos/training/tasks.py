"""An iteration's training tasks: seeds drawn from the run's generator in ``env.train_seeds``, each
redrawn while its start layout is in the ``env.held_out`` share of layouts that evaluation keeps for itself."""

from __future__ import annotations

from typing import Any

import numpy as np

from ptgpo_algos.config import EnvConfig, label
from ptgpo_algos.records import Task
from ptgpo_envs import held_out, make_env

__all__ = ["REDRAWS", "TaskDrawer"]

#: Training seeds drawn in a row into held-out layouts before a run gives up (a share near 1).
REDRAWS = 1000


class TaskDrawer:
    """Draws the tasks of the ``env`` section; with ``env.held_out``, reads start layouts from an
    environment of its own, made when the first seed is checked."""

    def __init__(self, env: EnvConfig) -> None:
        self.env = env
        self.layout_probe: Any = None

    def draw(self, rng: np.random.Generator, count: int) -> list[Task]:
        """``count`` tasks, their seeds drawn from ``rng``."""
        env = self.env
        low, high = env.train_seeds
        seeds = [int(s) for s in rng.integers(low, high, size=count)]
        if env.held_out is not None:
            seeds = [self.training_seed(seed, rng) for seed in seeds]
        return [Task(env.id, s, dict(env.kwargs), env.max_steps) for s in seeds]

    def training_seed(self, seed: int, rng: np.random.Generator) -> int:
        """``seed``, or the first redraw from ``rng`` whose start layout is outside the held-out share."""
        env = self.env
        if self.layout_probe is None:
            self.layout_probe = make_env(env.id, env.kwargs, env.max_steps)
        for _ in range(REDRAWS):
            if not held_out(self.layout_probe.reset(seed=seed)[1]["layout"], env.held_out):
                return seed
            seed = int(rng.integers(*env.train_seeds))
        raise ValueError(f"{label('env.held_out')}: {REDRAWS} training seeds in a row started in a held-out layout; "
                         f"lower the share {env.held_out} or widen env.train_seeds {env.train_seeds}")

    def close(self) -> None:
        """Close the layout probe, if one was made."""
        if self.layout_probe is not None:
            self.layout_probe.close()
