"""Auxiliary objectives beside the RL loss: how they join an update.

An objective adds a second signal to the policy update where the estimator's advantages give none
(all-failed groups, task-blind policies). It is registered by name with its configuration keys and a
builder in :data:`~ptgpo_algos.objectives.registry.OBJECTIVES` (checked without this module)::

    OBJECTIVES.register("my-objective", ObjectiveSpec("my-objective", build, defaults, keys))

``build(**params)`` returns an :class:`Objective`. Per update, the trainer gives it the batch
(groups of trajectories, whose steps carry the decisions, contexts, outcomes and what the environment
reported) and the advantages; the objective

1. may ``route`` the advantages (I-SDPO takes all-failed groups away from the RL loss);
2. ``prepare``s its items without gradients (a teacher's scores, the skill-conditioned scores, the
   pairs and their weights) under the rollout weights, before the first PPO step;
3. returns, for a share of those items, a ``loss`` with gradients and its metrics: every optimiser
   step of the PPO update adds ``weight * loss`` of one share, the shares of an epoch covering every
   item once, so the RL and auxiliary gradients are summed in the same AdamW steps (a separate Adam
   step would rescale a small weight away);
4. ``after_update(inputs, step)``: work once the update is done, with the update's optimiser step
   (``step(loss)``: one step on ``weight * loss``): I-SDPO's EMA teacher moves, and an objective that
   trains in steps of its own (``shares_steps = False``: hindsight relabelling, which skips 1-3) takes
   them here.

A spec declares what the objective needs of the run (``needs``): ``expert`` (the environment's
``expert_action()``, recorded in the rollouts), ``full_weights`` (a full copy of the model, which LoRA
training does not keep), or an optional part of the environment contract (``achieved_tasks``...),
checked once before the run (:func:`ptgpo_envs.check_environment`).

The config lists them next to the estimator, ``algorithm.objectives: [{name: isdpo, weight: 1.0,
alpha: 0.5}]``, so any estimator combines with any objective. With none configured, the update is
exactly the one without this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.records import Batch, Decision, Step, Trajectory
from ptgpo_algos.metrics import MetricsRow, objective_section
# ObjectiveSpec is re-exported: plugins written before the registry moved import it from here.
from ptgpo_algos.objectives.registry import OBJECTIVES, WEIGHT_KEY, ObjectiveSpec, validate_objectives  # noqa: F401

__all__ = ["Objective", "ObjectiveInputs", "Objectives", "OptimizerStep", "candidate_logprobs", "distinct_steps",
           "split_parts", "trajectory_succeeded"]

#: One optimiser step of the update on a loss (zero the gradients, backward, clip, step); returns the
#: gradient norm.
OptimizerStep = Callable[[torch.Tensor], float]


@dataclass
class ObjectiveInputs:
    """What an objective reads once per update: the batch, the estimator's advantages (after routing),
    the policy under the rollout weights (no update has run yet), and the run's generator."""

    batch: Batch
    advantages: StepAdvantages
    policy: Any
    rng: np.random.Generator


class Objective:
    """An auxiliary loss (see the module docstring); subclasses implement ``prepare`` and ``loss``, or
    set ``shares_steps = False`` and train in :meth:`after_update`."""

    #: Whether the objective's loss joins the PPO steps (``prepare`` and ``loss``); False: it takes
    #: optimiser steps of its own in ``after_update``.
    shares_steps: bool = True

    def route(self, batch: Batch, advantages: StepAdvantages) -> StepAdvantages:
        """The advantages the RL loss uses (by default unchanged; I-SDPO zeroes the groups it distils)."""
        return advantages

    def prepare(self, inputs: ObjectiveInputs) -> tuple[list[Any], dict[str, float]]:
        """The items the loss is taken over, and metrics of the batch (no gradients)."""
        raise NotImplementedError

    def loss(self, policy: Any, items: Sequence[Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """The mean loss over ``items`` (with gradients) and its figures."""
        raise NotImplementedError

    def after_update(self, inputs: ObjectiveInputs, step: OptimizerStep) -> dict[str, float]:
        """Work after each update, with the policy as it now is and the update's optimiser step
        (I-SDPO's teacher moves towards the policy; hindsight trains); returns metrics."""
        return {}

    def state_dict(self) -> Any:
        """The objective's state for the checkpoint (None: it has none)."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Restore the state :meth:`state_dict` returned."""


# ----------------------------------------------------------------------------------------- helpers
def trajectory_succeeded(trajectory: Trajectory, threshold: float | None) -> bool:
    """The environment's ``won`` flag, or a return that reaches ``threshold`` when one is given."""
    if threshold is None:
        return bool(trajectory.meta.get("won", False))
    return trajectory.total_reward >= threshold


def distinct_steps(group: Sequence[Trajectory]) -> list[tuple[int, int, Step]]:
    """``(trajectory index, step index, step)`` of each distinct step of a group (a prefix tree's shared
    steps once, at their first trajectory), with a decision."""
    seen: set[int] = set()
    out = []
    for i, trajectory in enumerate(group):
        for t, step in enumerate(trajectory.steps):
            if id(step) not in seen and step.decision is not None:
                seen.add(id(step))
                out.append((i, t, step))
    return out


def candidate_logprobs(policy: Any, decisions: Sequence[Decision]) -> list[torch.Tensor]:
    """``choose`` mode: each decision's log-softmax over all its candidates under ``policy`` (with
    gradients when the caller allows them), through the policy's own ``score``: one scored copy per
    candidate, which the policy computes on one shared context."""
    copies = [Decision(**{**d.__dict__, "choice": k}) for d in decisions for k in range(len(d.candidate_ids))]
    scored = policy.score(copies, entropy_grad=False).logprobs[:, 0]
    out, start = [], 0
    for d in decisions:
        n = len(d.candidate_ids)
        out.append(scored[start:start + n])
        start += n
    return out


def split_parts(items: Sequence[Any], parts: int, index: int) -> list[Any]:
    """Part ``index`` of ``parts`` consecutive, near-equal parts of ``items``."""
    bounds = np.linspace(0, len(items), parts + 1).round().astype(int)
    return list(items[bounds[index]:bounds[index + 1]])


# ----------------------------------------------------------------------------------------- the set
@dataclass
class _Prepared:
    objective: Objective
    weight: float
    items: list[Any]


@dataclass
class Objectives:
    """The run's configured objectives, as one trainer component: :meth:`prepare` before the PPO
    update, :meth:`after_update` after it, and their checkpointed state."""

    objectives: list[tuple[str, float, Objective]] = field(default_factory=list)

    @classmethod
    def from_config(cls, entries: Sequence[Mapping[str, Any]]) -> Objectives:
        """Build the objectives from the config's ``objectives`` entries (validated; weights default per objective)."""
        built = []
        for entry in validate_objectives("objectives", list(entries)):
            params = {k: v for k, v in entry.items() if k not in ("name", WEIGHT_KEY)}
            spec = OBJECTIVES.get(entry["name"])
            built.append((entry["name"], float(entry.get(WEIGHT_KEY, spec.default_weight)), spec.builder(**params)))
        return cls(built)

    def __bool__(self) -> bool:
        return bool(self.objectives)

    def prepare(self, batch: Batch, advantages: StepAdvantages, policy: Any, rng: np.random.Generator,
                micro_batch_size: int | None) -> tuple[StepAdvantages, _Auxiliary | None, MetricsRow]:
        """Route the advantages, prepare every objective's items; returns ``(advantages, auxiliary,
        metrics)`` where ``auxiliary(index, parts)`` backpropagates part ``index`` of each objective's
        items and returns its figures, named ``objective/<name>/<figure>`` (None when no objective has
        items), and ``metrics`` holds each objective's figures in its section."""
        for _, _, objective in self.objectives:
            advantages = objective.route(batch, advantages)
        prepared, names, metrics = [], [], MetricsRow()
        with torch.no_grad():
            for name, weight, objective in self.objectives:
                if not objective.shares_steps:
                    continue
                items, stats = objective.prepare(ObjectiveInputs(batch, advantages, policy, rng))
                prepared.append(_Prepared(objective, weight, items))
                names.append(name)
                metrics.add(objective_section(name), {**stats, "items": len(items)},
                            f"objective {name!r}'s prepare")
        if not any(p.items and p.weight for p in prepared):
            return advantages, None, metrics
        return advantages, _Auxiliary(policy, prepared, names, micro_batch_size), metrics

    def after_update(self, inputs: ObjectiveInputs, step: OptimizerStep) -> MetricsRow:
        """Every objective's ``after_update`` (its ``step`` takes ``weight * loss``), its metrics in
        the objective's section."""
        out = MetricsRow()
        for name, weight, objective in self.objectives:
            def weighted(loss: torch.Tensor, w: float = weight) -> float:
                return step(w * loss)

            out.add(objective_section(name), objective.after_update(inputs, weighted),
                    f"objective {name!r}'s after_update")
        return out

    def state_dict(self) -> dict[str, Any]:
        """Every objective's state, by name."""
        return {name: objective.state_dict() for name, _, objective in self.objectives}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore every objective's state from :meth:`state_dict`'s mapping (None: nothing saved)."""
        for name, _, objective in self.objectives:
            objective.load_state_dict((state or {}).get(name))


@dataclass
class _Auxiliary:
    """Backpropagates ``weight * loss`` of one part of each objective's items (in micro-batches whose
    gradients add up to the part's mean loss)."""

    policy: Any
    prepared: list[_Prepared]
    names: list[str]
    micro_batch_size: int | None

    def __call__(self, index: int, parts: int) -> dict[str, float]:
        stats: dict[str, float] = {}
        for name, p in zip(self.names, self.prepared):
            part = split_parts(p.items, parts, index)
            if not part or not p.weight:
                continue
            size = self.micro_batch_size or len(part)
            total = 0.0
            for start in range(0, len(part), size):
                micro = part[start:start + size]
                loss, figures = p.objective.loss(self.policy, micro)
                (p.weight * loss * (len(micro) / len(part))).backward()
                total += float(loss.detach()) * len(micro) / len(part)
                stats.update({f"{objective_section(name)}/{k}": v for k, v in figures.items()})
            stats[f"{objective_section(name)}/loss"] = total
        return stats
