"""The optimiser every run trains with, in one process or across ranks: the one ``optim.optimizer``
names (:mod:`ptgpo_algos.updates.optimizer_registry`; the built-ins ``adamw`` and ``sgd`` are here) on the
trainable parameters, and the learning-rate schedule ``optim.lr_schedule`` names.

A schedule multiplies ``optim.lr`` by a factor of the optimiser steps taken so far (the updater steps
it after each optimiser step): a linear warm-up from 0 over ``optim.lr_warmup_steps``, then
``constant`` (1), ``linear`` (down to 0 at ``optim.lr_decay_steps``) or ``cosine`` (half a cosine down
to 0 at ``optim.lr_decay_steps``); past ``lr_decay_steps`` the factor stays 0. ``constant`` with no
warm-up has no scheduler at all: the step is the optimiser's plain step.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import torch

from ptgpo_algos.updates.optimizer_registry import OPTIMIZERS
from ptgpo_algos.updates.settings import OptimConfig

__all__ = ["adamw", "build_optimizer", "build_schedule", "lr_factor", "sgd"]


def adamw(param_groups: list[dict[str, Any]], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW (decoupled weight decay), torch's default betas and epsilon."""
    return torch.optim.AdamW(param_groups, lr=lr, weight_decay=weight_decay)


def sgd(param_groups: list[dict[str, Any]], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """Plain SGD: no momentum, so no state; ``weight_decay`` is an L2 term added to the gradient."""
    return torch.optim.SGD(param_groups, lr=lr, momentum=0.0, weight_decay=weight_decay)


def lr_factor(step: int, schedule: str, warmup_steps: int = 0, decay_steps: int | None = None) -> float:
    """The learning rate's factor after ``step`` optimiser steps (pure)."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    remaining = decay_steps - warmup_steps
    progress = min(1.0, (step - warmup_steps) / remaining) if remaining > 0 else 1.0
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(parameters: Iterable[torch.nn.Parameter], optim: OptimConfig,
                    groups: Sequence[dict[str, Any]] = ()) -> torch.optim.Optimizer:
    """The optimiser ``optim.optimizer`` names, at ``optim.lr`` with ``optim.weight_decay`` on ``parameters``;
    ``groups``: further parameter groups with settings of their own (a critic's value head,
    :mod:`ptgpo_algos.critic`). The schedule scales every group's rate alike."""
    factory = OPTIMIZERS.get(optim.optimizer)
    return factory([{"params": list(parameters)}, *groups], lr=optim.lr, weight_decay=optim.weight_decay)


def build_schedule(optimizer: torch.optim.Optimizer, optim: OptimConfig) -> Any:
    """``optim.lr_schedule`` on ``optimizer`` (a ``LambdaLR``), or None for a constant rate without warm-up."""
    if optim.lr_schedule == "constant" and optim.lr_warmup_steps == 0:
        return None
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, optim.lr_schedule, optim.lr_warmup_steps, optim.lr_decay_steps))
