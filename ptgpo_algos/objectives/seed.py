"""SEED (arXiv 2607.14777): hindsight skills from completed trajectories, distilled as a gated log-prob shift.

After the group is collected, each completed trajectory gets a *skill*: a few lessons written in
hindsight. SEED's policy writes them itself (after an SFT stage that teaches it to); here, with
``skill_source: policy``, the policy under the rollout weights is asked to write them from the
trajectory's transcript (greedy, ``generate`` mode), and an answer without an action tag gives that
trajectory no signal (as OPID's code drops invalid analyzer output). The tiny model cannot write, and
a ``choose``-mode policy only picks actions, so there (``skill_source: template``, the ``auto`` choice
for them) a deterministic template states what the trajectory achieved: the actions that solved the
task, or that it failed, the tasks its steps completed on the way and the actions that were not
admissible, at most ``max_skills`` lessons. That stand-in is not SEED's analyzer: it is the same
information put in words without a model.

Every action of the trajectory is then scored twice under the rollout weights' prompts: as taken
(``l``, with gradients during the update) and with the skill added to the task line (``l_sk``,
computed once, without gradients). The gate ``g = sigmoid(beta_opd (l_sk - sg(l)))`` weighs the
NLL-style term ``g (sg(l_sk) - l)`` at every unit, so the gradient raises the log-probability of actions
the skill makes more likely, most where the shift is largest. The loss is the mean over units; its
weight ``lambda_opd`` (0.01) is the objective's ``weight``. Skills exist only inside this objective's
items, for training: evaluation prompts never carry them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from ptgpo_algos.records import Context, Decision, Trajectory
from ptgpo_algos.objectives.base import (
    Objective,
    ObjectiveInputs,
    distinct_steps,
)

__all__ = ["SEED", "seed_unit_loss", "skill_context", "template_skill", "transcript"]

WRITER_TASK = ("Read this finished attempt and write up to {n} short lessons (skills) that would help on the "
               "same task, separated by ';', inside <action></action>")


def template_skill(trajectory: Trajectory, max_skills: int) -> str:
    """The deterministic stand-in for a written skill: what the trajectory achieved, in words."""
    steps = trajectory.steps
    valid = [s.sent for s in steps if s.valid]
    lessons = []
    if trajectory.meta.get("won"):
        lessons.append("these actions solved the task: " + ", ".join(valid))
    else:
        lessons.append(f"the task was not solved in {len(steps)} steps")
    for step in steps:
        for task in (step.achieved or {}):
            lessons.append(f"'{step.sent}' completed '{task}'")
    for step in steps:
        if not step.valid:
            lessons.append(f"'{step.sent}' was not admissible")
    return "; ".join(dict.fromkeys(lessons[:max_skills]))


def transcript(trajectory: Trajectory) -> str:
    """The trajectory as the skill writer reads it."""
    lines = [f"Action: {s.sent} -> reward {s.reward:g}" for s in trajectory.steps]
    outcome = "solved" if trajectory.meta.get("won") else "not solved"
    return "\n".join(lines + [f"Outcome: {outcome}"])


def skill_context(context: Context, skill: str, template: str) -> Context:
    """``context`` with its task line rewritten by ``template`` to carry ``skill``."""
    return Context(template.format(task=context.task, skill=skill), context.observation,
                   list(context.admissible_actions), list(context.history))


def seed_unit_loss(logp: torch.Tensor, skill_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """Per unit: ``sigmoid(beta (l_sk - sg(l))) * (sg(l_sk) - l)``."""
    gate = torch.sigmoid(beta * (skill_logp - logp.detach()))
    return gate * (skill_logp.detach() - logp)


@dataclass
class _Item:
    decision: Decision
    skill_logp: torch.Tensor  # per unit, under the rollout weights with the skill in context


class SEED(Objective):
    """The SEED objective (module docstring)."""

    def __init__(self, *, beta_opd: float, max_skills: int, skill_source: str, skill_template: str):
        self.beta, self.max_skills, self.source, self.template = beta_opd, max_skills, skill_source, skill_template

    def source_for(self, policy: Any) -> str:
        """Who writes the skills for ``policy``: ``policy`` or ``template`` (``auto``: the policy in ``generate``
        mode with a pretrained model)."""
        if self.source != "auto":
            return self.source
        from ptgpo_algos.policy.tiny import TINY_MARKER

        tiny = (Path(str(getattr(getattr(policy, "model", None), "name_or_path", "") or "")) / TINY_MARKER).exists()
        return "policy" if policy.mode == "generate" and not tiny else "template"

    def skills(self, policy: Any, trajectories: Sequence[Trajectory]) -> list[str | None]:
        """One skill per trajectory (None: the writer gave none)."""
        if self.source_for(policy) == "template":
            return [template_skill(t, self.max_skills) for t in trajectories]
        contexts = [Context(WRITER_TASK.format(n=self.max_skills), transcript(t), [], []) for t in trajectories]
        written = policy.decide(contexts, greedy=True)
        return [d.action.strip() if d.action and d.action.strip() else None for d in written]

    def prepare(self, inputs: ObjectiveInputs) -> tuple[list[_Item], dict[str, float]]:
        """A skill per trajectory, and each distinct decision's log-probabilities with the skill in its task line
        (no gradients)."""
        policy = inputs.policy
        trajectories = [t for g in inputs.batch for t in g]
        skills = dict(zip(map(id, trajectories), self.skills(policy, trajectories)))
        decisions, hinted = [], []
        for group in inputs.batch:
            for i, _, step in distinct_steps(group):
                skill = skills[id(group[i])]
                if skill is None:
                    continue
                decisions.append(step.decision)
                hinted.append(replace(step.decision, prompt_ids=policy.prompts.prompt_ids(
                    skill_context(step.context, skill, self.template))))
        written = sum(s is not None for s in skills.values())
        if not decisions:
            return [], {"skills": written}
        scored = policy.score(hinted, entropy_grad=False)
        lengths = [int(n) for n in scored.mask.sum(-1)]
        items = [_Item(d, scored.logprobs[i, :n].detach().float().cpu()) for i, (d, n) in
                 enumerate(zip(decisions, lengths))]
        return items, {"skills": written}

    def loss(self, policy: Any, items: Sequence[_Item]) -> tuple[torch.Tensor, dict[str, float]]:
        """The gated skill-distillation loss averaged over units, and the gate's mean."""
        scored = policy.score([item.decision for item in items], entropy_grad=False)
        device = policy.device
        total, units, gates = torch.zeros((), device=device), 0, 0.0
        for i, item in enumerate(items):
            n = len(item.skill_logp)
            logp, skill = scored.logprobs[i, :n].float(), item.skill_logp.to(device)
            total = total + seed_unit_loss(logp, skill, self.beta).sum()
            gates += float(torch.sigmoid(self.beta * (skill - logp.detach())).sum())
            units += n
        return total / max(1, units), {"gate": gates / max(1, units)}
