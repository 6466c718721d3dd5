"""Hindsight relabelling: a rollout that failed its task but completed another one demonstrates that one.

Group estimators contrast the rollouts of one task with each other, never with another task's, so a
policy that learns routines good for many tasks (go to a counter, take what is there) scores as well
within a group as one that reads the task; on Household the RL policies barely read it (the
task-sensitivity figures in docs/results/household-tiny-model.md). Hindsight relabelling gives the cross-task
signal directly, as hindsight experience replay (Andrychowicz et al., 2017) and goal-conditioned
supervised learning (Ghosh et al., 2019) do: when a failed rollout's step completed another task
(the environment says which, :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks`), the steps that led
there, shown with that task instead of their own, are correct decisions for it.

:class:`Hindsight` is the objective ``hindsight`` (``algorithm.objectives: [{name: hindsight}]``; an
old config's ``hindsight`` section is read as it): it trains in steps of its own after the PPO
update, ``updates`` optimiser steps of cross-entropy on ``batch_size`` relabelled decisions drawn from
a buffer of the last ``buffer_size``; the buffer is part of the checkpoint. Per failed trajectory:

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
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ptgpo_algos.records import Batch, Context, Decision, Trajectory
from ptgpo_algos.objectives.base import Objective, ObjectiveInputs, OptimizerStep

__all__ = ["Hindsight", "HindsightBuffer", "relabel_trajectory", "relabel_batch", "hindsight_loss", "hindsight_steps"]


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


def hindsight_steps(policy, buffer: HindsightBuffer, updates: int, batch_size: int, rng: np.random.Generator,
                    step: OptimizerStep) -> list[float]:
    """``updates`` optimiser steps (``step``) of :func:`hindsight_loss` on samples of ``buffer`` (none
    while it is empty); the losses."""
    losses = []
    for _ in range(updates if len(buffer) else 0):
        loss = hindsight_loss(policy, buffer.sample(batch_size, rng))
        step(loss)
        losses.append(float(loss.detach()))
    return losses


class Hindsight(Objective):
    """Hindsight relabelling as an objective that trains in steps of its own after the update: relabel
    the batch's failed rollouts into the buffer and take cross-entropy steps on it (see the module
    docstring)."""

    shares_steps = False

    def __init__(self, *, updates: int = 1, batch_size: int = 256, window: int = 4, buffer_size: int = 4096,
                 types: str = "same"):
        self.updates, self.batch_size, self.window, self.types = updates, batch_size, window, types
        self.buffer = HindsightBuffer(buffer_size)

    def after_update(self, inputs: ObjectiveInputs, step: OptimizerStep) -> dict[str, float]:
        """Relabel the batch's failed rollouts into the buffer, train on it; ``loss``, ``updates``,
        ``relabelled`` and ``buffer`` (the metrics prefix them with ``hindsight_``)."""
        relabelled = relabel_batch(inputs.batch, inputs.policy.prompts, self.window, self.types, inputs.rng)
        self.buffer.add(relabelled)
        losses = hindsight_steps(inputs.policy, self.buffer, self.updates, self.batch_size, inputs.rng, step)
        return {"loss": float(np.mean(losses)) if losses else 0.0, "updates": len(losses),
                "relabelled": len(relabelled), "buffer": len(self.buffer)}

    def state_dict(self) -> list[dict[str, Any]]:
        """The buffer, as plain data for the checkpoint."""
        return [dataclasses.asdict(decision) for decision in self.buffer.items]

    def load_state_dict(self, state: list[dict[str, Any]] | None) -> None:
        """Refill the buffer from the checkpoint."""
        self.buffer.add(Decision(**item) for item in state or [])
