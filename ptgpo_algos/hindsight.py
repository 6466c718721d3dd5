"""Hindsight relabelling: a rollout that failed its task but completed another one demonstrates that one.

Group estimators contrast the rollouts of one task with each other, never with another task's, so a
policy that learns routines good for many tasks (go to a counter, take what is there) scores as well
within a group as one that reads the task; on Household the RL policies barely read it (the
task-sensitivity figures in docs/results/household-tiny-model.md). Hindsight relabelling gives the cross-task
signal directly, as hindsight experience replay (Andrychowicz et al., 2017) and goal-conditioned
supervised learning (Ghosh et al., 2019) do: when a failed rollout's step completed another task
(the environment says which, :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks`), the steps that led
there, shown with that task instead of their own, are correct decisions for it.

:class:`Hindsight` is the trainer component (a callback, on with a ``hindsight`` config section): after
each PPO update it takes ``updates`` AdamW steps of cross-entropy on ``batch_size`` relabelled
decisions drawn from a buffer of the last ``buffer_size``; the buffer is part of the checkpoint. Per
failed trajectory:

* the first step whose completed tasks include one of the wanted ``types`` (``same``: the episode's
  own task type, so that the relabels keep the training mix of types -- random play completes
  pick-and-place far more often than heating; ``any``: every type);
* one of those tasks, chosen at random (both wordings of a task are candidates);
* the last ``window`` valid steps up to and including it, their prompts rebuilt with that task.

A completion in the shared prefix of several trajectories of a prefix tree is relabelled once.

Measured on Household easy (docs/results/household-tiny-model.md has the commands): added to the easy config's
10-minute GiGPO run, the policy reads the task as much as behaviour cloning does (task sensitivity
0.26-0.30 against 0.02-0.04 without it, 0.24 for cloning), but held-out success did not change
beyond the spread between seeds (three seeds, 0.21 against 0.19 sampled at 0.4): the types that
failed rollouts rarely complete (heat, cool, two objects) gain little from it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch

from ptgpo_algos.callbacks import Callback
from ptgpo_algos.config import HindsightConfig
from ptgpo_algos.data import Batch, Context, Decision, Trajectory

if TYPE_CHECKING:
    from ptgpo_algos.trainer import Trainer

__all__ = ["Hindsight", "HindsightBuffer", "relabel_trajectory", "relabel_batch", "hindsight_loss",
           "hindsight_update"]


def relabel_trajectory(
    trajectory: Trajectory, window: int, types: str, rng: np.random.Generator
) -> tuple[str, list[tuple[Any, Context]]] | None:
    """``(task, [(step, relabelled context), ...])`` for a failed trajectory that completed another
    task of the wanted ``types``, else None. Steps need their ``context`` and ``achieved`` (rollouts
    record both)."""
    if trajectory.meta.get("won"):
        return None
    own_type = trajectory.meta.get("task_type")
    for end, step in enumerate(trajectory.steps):
        achieved = step.achieved
        if not achieved:
            continue
        own_task = step.context.task
        tasks = [t for t, kind in achieved.items() if t != own_task and (types == "any" or kind == own_type)]
        if not tasks:
            continue
        task = tasks[int(rng.integers(len(tasks)))]
        valid = [s for s in trajectory.steps[: end + 1] if s.valid][-window:]
        return task, [(s, s.context.with_task(task)) for s in valid]
    return None


def relabel_batch(batch: Batch, prompts, window: int, types: str, rng: np.random.Generator) -> list[Decision]:
    """The relabelled decisions of a batch, their prompts rebuilt by ``prompts`` (a
    :class:`~ptgpo_algos.policy.prompts.PromptBuilder`)."""
    seen: set[tuple[int, int]] = set()
    out: list[Decision] = []
    for group in batch:
        for trajectory in group:
            found = relabel_trajectory(trajectory, window, types, rng)
            if found is None:
                continue
            task, steps = found
            completing = id(steps[-1][0])  # valid, since it completed something
            for step, context in steps:
                if (id(step), completing) in seen:
                    continue
                seen.add((id(step), completing))
                out.append(replace(step.decision, prompt_ids=prompts.prompt_ids(context)))
    return out


class HindsightBuffer:
    """The last ``capacity`` relabelled decisions (oldest dropped first)."""

    def __init__(self, capacity: int, items: Iterable[Decision] = ()):
        self.items: deque[Decision] = deque(items, maxlen=capacity)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, decisions: Iterable[Decision]) -> None:
        """Append relabelled decisions (the oldest fall out past the buffer's size)."""
        self.items.extend(decisions)

    def sample(self, size: int, rng: np.random.Generator) -> list[Decision]:
        """``min(size, len(self))`` distinct decisions, uniformly."""
        picks = rng.choice(len(self.items), size=min(size, len(self.items)), replace=False)
        return [self.items[int(i)] for i in picks]


def hindsight_loss(policy, decisions: Sequence[Decision]) -> torch.Tensor:
    """Cross-entropy of the decisions' actions under ``policy``: in ``choose`` mode the negative
    log-softmax of the chosen candidate, in ``generate`` mode of the response tokens (token mean)."""
    scored = policy.score(decisions)
    mask = scored.mask.float()
    return -(scored.logprobs.float() * mask).sum() / mask.sum().clamp(min=1.0)


def hindsight_update(
    policy, optimizer: torch.optim.Optimizer, buffer: HindsightBuffer, config: HindsightConfig,
    max_grad_norm: float, rng: np.random.Generator,
) -> dict[str, float]:
    """``config.updates`` AdamW steps of :func:`hindsight_loss` on samples of ``buffer``."""
    losses = []
    for _ in range(config.updates if len(buffer) else 0):
        loss = hindsight_loss(policy, buffer.sample(config.batch_size, rng))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(policy.parameters()), max_grad_norm)
        optimizer.step()
        losses.append(float(loss.detach()))
    return {"hindsight_loss": float(np.mean(losses)) if losses else 0.0, "hindsight_updates": len(losses)}


class Hindsight(Callback):
    """Hindsight relabelling in the trainer: after each PPO update, relabel the batch's failed rollouts
    into the buffer and take cross-entropy steps on it (see the module docstring)."""

    state_key = "hindsight_buffer"

    def __init__(self, config: HindsightConfig):
        self.config = config
        self.buffer = HindsightBuffer(config.buffer_size)

    def after_update(self, trainer: Trainer, batch: Batch) -> dict[str, Any]:
        """Relabel the batch's failed rollouts into the buffer, train on it; the ``hindsight_*`` metrics."""
        config, rng = self.config, trainer.state.rng
        relabelled = relabel_batch(batch, trainer.policy.prompts, config.window, config.types, rng)
        self.buffer.add(relabelled)
        stats = hindsight_update(trainer.policy, trainer.optimizer, self.buffer, config,
                                 trainer.config.optim.max_grad_norm, rng)
        return {**stats, "hindsight_relabelled": len(relabelled), "hindsight_buffer": len(self.buffer)}

    def state_dict(self) -> list[dict[str, Any]]:
        """The buffer, as plain data for the checkpoint."""
        return [dataclasses.asdict(decision) for decision in self.buffer.items]

    def load_state_dict(self, state: list[dict[str, Any]] | None) -> None:
        """Refill the buffer from the checkpoint."""
        self.buffer.add(Decision(**item) for item in state or [])
