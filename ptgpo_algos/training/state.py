"""What a training run carries and returns: :class:`TrainState`, everything besides the weights and the
optimiser that changes during a run and must survive a resume, and :class:`TrainSummary`, what a run
returns (:class:`~ptgpo_algos.training.trainer.Trainer`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ptgpo_algos.training.checkpoint import COUNTERS
from ptgpo_algos.cost import Cost
from ptgpo_algos.rollouts.collection import Spend

__all__ = ["TrainState", "TrainSummary"]


@dataclass
class TrainSummary:
    """What a training run returns: the final evaluation, the best held-out success, the decisions and
    tokens spent, wall time and the run folder's files."""

    final_eval: dict[str, Any]
    best_success: float
    decisions: int
    tokens: int
    tokens_saved: int
    decisions_saved: int
    wall_time_s: float
    metrics_path: Path
    curve_path: Path
    checkpoint_dir: Path
    iterations: int = 0
    recipe: str | None = None
    #: The run's :class:`~ptgpo_algos.cost.Cost` counters at the end (``cost.jsonl``'s last row).
    cost: dict[str, Any] = field(default_factory=dict)
    #: How far the spend went past ``run.budget``'s amount, in its unit, negative when the ``nearest``
    #: rule stopped short of it (None: no such budget, or something else stopped the run).
    budget_overshoot: float | None = None
    #: CPU seconds this process spent building the models (the tiny model's pretraining included when
    #: it was not cached): counted in no cost.
    setup_cpu_s: float = 0.0

    @property
    def protocol(self) -> dict[str, Any]:
        """What the final numbers were measured under: the recipe (None: PTGPO's own prompt and
        protocol) and what the evaluation environment reported of its texts and scoring."""
        return {"recipe": self.recipe, **self.final_eval.get("environment", {})}



@dataclass
class TrainState(Spend):
    """What changes during a run besides the weights and the optimiser: counters, the random
    generators every draw comes from (task seeds, branching, mini-batch order: ``rng``; token and
    action sampling: ``sampler``), and the last evaluation."""

    rng: np.random.Generator
    sampler: torch.Generator
    iteration: int = 0
    wall_time_s: float = 0.0
    best_success: float = 0.0
    last_eval_iteration: int = -1
    last_eval: dict[str, Any] = field(default_factory=dict)
    #: The ``info["layout"]`` of every training episode's start, to measure how held out the
    #: evaluation is; None when unknown (a run resumed from a checkpoint that did not keep them).
    train_layouts: set[str] | None = field(default_factory=set)
    #: What the rollout strategy keeps across iterations (3SPO's state statistics); None for one that keeps nothing.
    rollout_memory: Any = None
    #: The run's cost beyond decisions and generated tokens (:mod:`ptgpo_algos.cost`).
    cost: Cost = field(default_factory=Cost)

    @classmethod
    def seeded(cls, seed: int) -> TrainState:
        """A fresh state with every random generator seeded from ``seed``."""
        random.seed(seed)
        torch.manual_seed(seed)
        return cls(np.random.default_rng(seed), torch.Generator().manual_seed(seed))

    def counters(self) -> dict[str, Any]:
        """The counters, for the checkpoint."""
        return {name: getattr(self, name) for name in COUNTERS}

    def rng_state(self) -> dict[str, Any]:
        """The state of every random generator, for the checkpoint."""
        return {"python": random.getstate(), "numpy": self.rng.bit_generator.state,
                "torch": torch.random.get_rng_state(), "sampler": self.sampler.get_state()}

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Take back counters, last evaluation and random generators from a checkpoint."""
        for name in COUNTERS:
            setattr(self, name, checkpoint["counters"][name])
        self.last_eval = checkpoint.get("last_eval", {})
        layouts = checkpoint.get("train_layouts")
        self.train_layouts = None if layouts is None else set(layouts)
        rng = checkpoint["rng"]
        random.setstate(rng["python"])
        self.rng.bit_generator.state = rng["numpy"]
        torch.random.set_rng_state(rng["torch"])
        self.sampler.set_state(rng["sampler"])
        if self.rollout_memory is not None:
            self.rollout_memory.load_state_dict(checkpoint["rollout_memory"])
        self.cost.load_state_dict(checkpoint.get("cost"))
