"""I-SDPO (arXiv 2608.12957): all-failed groups learn from a self-teacher that sees privileged information.

Routing is decided once per group: a group with any success stays with the RL loss; a group whose
rollouts all failed, and for which privileged information exists, leaves the RL loss (its advantages
become zero) and is distilled instead. The teacher is an EMA copy of the policy,
``theta_tea <- (1 - tau_ema) theta_tea + tau_ema theta`` after every update, shown each decision's
context with the privileged information added to the task line: the environment expert's next actions
(``expert_action()``, or ALFWorld's ``expert_plan`` when the environment reports one; recorded at
rollout time only when this objective is configured). The paper is single-turn, with the ground-truth
solution as privileged information; the expert's plan is the agentic counterpart its authors suggest.

At every unit of a routed decision (``choose``: the choice among candidates; ``generate``: each response
token), the loss is the mixed KL ``l = (1 - alpha) KL(pi_tea || pi) + alpha KL(pi || pi_tea)``, weighted by
``w = exp(-beta H_tea) / mean exp(-beta H_tea)`` over all routed units (confident teacher positions
count more) and by the importance ratio ``pi / pi_old`` of the sampled unit, detached and clipped at
``is_clip`` (the rollouts were sampled by pi_old). In ``choose`` mode both KLs are exact over the
candidates. In ``generate`` mode the policy exposes only the sampled tokens' log-probabilities, so both
are single-sample estimates at the sampled token y: ``KL(pi || pi_tea)`` by its score-function surrogate
``r (log pi(y) - log pi_tea(y))`` with ``r = pi(y) / pi_old(y)``, and ``KL(pi_tea || pi)`` by
``-min(pi_tea(y) / pi_old(y), is_clip) log pi(y)`` (the paper uses the teacher's top-100 logits).

Unknowns of the paper for agents, each a config key with the paper's value where it has one:
``alpha`` 0.5, ``tau_ema`` 0.05, ``beta`` 1.0, ``is_clip`` 2.0, ``threshold`` (success: the
environment's ``won``, the paper's binary reward), ``hint_actions`` (how many expert actions the
teacher sees, 1: the next one) and ``hint_template``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.records import Batch, Context, Decision, Step
from ptgpo_algos.objectives.base import (
    Objective,
    ObjectiveInputs,
    OptimizerStep,
    candidate_logprobs,
    distinct_steps,
    trajectory_succeeded,
)

__all__ = ["ISDPO", "hint_context", "isdpo_unit_loss", "mixed_kl", "route_groups", "teacher_weights"]


def route_groups(batch: Batch, threshold: float | None) -> list[bool]:
    """Per group: True when it goes to distillation (no success, and every step has privileged
    information), False when it stays with the RL loss."""
    routed = []
    for group in batch:
        success = any(trajectory_succeeded(t, threshold) for t in group)
        privileged = all(step.extras.get("expert_plan") for t in group for step in t.steps)
        routed.append(not success and privileged and any(t.steps for t in group))
    return routed


def hint_context(context: Context, plan: Sequence[str], template: str, actions: int) -> Context:
    """``context`` with the privileged information (the first ``actions`` expert actions) in its task."""
    task = template.format(task=context.task, plan=", ".join(plan[:actions]))
    return Context(task, context.observation, list(context.admissible_actions), list(context.history))


def mixed_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor, alpha: float) -> torch.Tensor:
    """``(1 - alpha) KL(tea || stu) + alpha KL(stu || tea)`` over the last dimension (log-probabilities)."""
    forward = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)
    reverse = (student_logp.exp() * (student_logp - teacher_logp)).sum(-1)
    return (1.0 - alpha) * forward + alpha * reverse


def teacher_weights(teacher_entropy: torch.Tensor, beta: float) -> torch.Tensor:
    """``exp(-beta H) / mean(exp(-beta H))`` over the given units."""
    raw = torch.exp(-beta * teacher_entropy)
    return raw / raw.mean().clamp(min=1e-12)


def isdpo_unit_loss(student: torch.Tensor, teacher: torch.Tensor, old: torch.Tensor, alpha: float,
                    is_clip: float) -> torch.Tensor:
    """``generate`` mode, per sampled unit: the single-sample surrogate of the mixed KL (module
    docstring) from the sampled unit's log-probabilities under the student (with gradients), the
    teacher and pi_old."""
    ratio = torch.exp(torch.clamp(student - old, -20.0, 20.0))
    reverse = torch.clamp(ratio, max=is_clip) * (student.detach() - teacher)
    forward = -torch.clamp(torch.exp(teacher - old), max=is_clip) * student
    return (1.0 - alpha) * forward + alpha * reverse


@dataclass
class _Item:
    decision: Decision
    teacher: Decision
    teacher_logp: torch.Tensor  # choose: over candidates; generate: per response token
    weights: torch.Tensor  # per unit: entropy weight (importance ratio applied in the loss)


class ISDPO(Objective):
    """The I-SDPO objective (module docstring)."""

    def __init__(self, *, alpha: float, tau_ema: float, beta: float, is_clip: float, threshold: float | None,
                 hint_actions: int, hint_template: str):
        self.alpha, self.tau_ema, self.beta, self.is_clip = alpha, tau_ema, beta, is_clip
        self.threshold, self.hint_actions, self.hint_template = threshold, hint_actions, hint_template
        self.teacher: Any = None
        self._routed: list[bool] | None = None
        self._saved: dict[str, torch.Tensor] | None = None

    def route(self, batch: Batch, advantages: StepAdvantages) -> StepAdvantages:
        """Zero the advantages of the groups that go to distillation (no success, privileged information recorded)."""
        self._routed = route_groups(batch, self.threshold)
        return advantages.zeroed_groups(self._routed)

    def _teacher(self, policy: Any) -> Any:
        if self.teacher is None:
            if getattr(policy, "has_adapters", False):
                raise ValueError("objective isdpo: the EMA teacher is a copy of the full model; LoRA policies "
                                 "keep no separate copy (train without lora)")
            self.teacher = policy.reference_policy()
            if self._saved is not None:
                self.teacher.model.load_state_dict(self._saved)
        return self.teacher

    def prepare(self, inputs: ObjectiveInputs) -> tuple[list[_Item], dict[str, float]]:
        """The routed groups' distinct decisions with the teacher's log-probabilities under the hinted prompt and
        their entropy weights."""
        routed = self._routed if self._routed is not None else route_groups(inputs.batch, self.threshold)
        self._routed = None
        steps: list[Step] = [s for g, r in zip(inputs.batch, routed) if r for _, _, s in distinct_steps(g)]
        share = sum(routed) / max(1, len(routed))
        if not steps:
            return [], {"routed_share": share}
        policy, teacher = inputs.policy, self._teacher(inputs.policy)
        decisions = [s.decision for s in steps]
        hinted = [replace(s.decision, prompt_ids=policy.prompts.prompt_ids(
            hint_context(s.context, s.extras["expert_plan"], self.hint_template, self.hint_actions))) for s in steps]
        if policy.mode == "choose":
            logps = candidate_logprobs(teacher, hinted)
            entropy = torch.stack([-(lp.exp() * lp).sum() for lp in logps])[:, None]
            lengths = [1] * len(steps)
        else:
            scored = teacher.score(hinted, entropy_grad=False)
            lengths = [int(n) for n in scored.mask.sum(-1)]
            logps = [scored.logprobs[i, :n].float().cpu() for i, n in enumerate(lengths)]
            entropy = scored.entropy.float()
        flat_entropy = torch.cat([entropy[i, :n].float().cpu() for i, n in enumerate(lengths)])
        weights = teacher_weights(flat_entropy, self.beta).split(lengths)
        items = [_Item(d, h, lp.detach().float().cpu(), w) for d, h, lp, w in zip(decisions, hinted, logps, weights)]
        return items, {"routed_share": share, "teacher_entropy": float(flat_entropy.mean())}

    def loss(self, policy: Any, items: Sequence[_Item]) -> tuple[torch.Tensor, dict[str, float]]:
        """The mixed KL between teacher and policy, weighted by the teacher's entropy and the clipped importance
        ratio, averaged over units."""
        decisions = [item.decision for item in items]
        device = policy.device
        if policy.mode == "choose":
            student = candidate_logprobs(policy, decisions)
            terms = []
            for item, logp in zip(items, student):
                ratio = torch.exp(logp[item.decision.choice].detach() - item.decision.choice_logprob)
                kl = mixed_kl(logp.float(), item.teacher_logp.to(device), self.alpha)
                terms.append(kl * torch.clamp(ratio, max=self.is_clip) * item.weights.to(device)[0])
            loss = torch.stack(terms).mean()
            return loss, {"kl": float(loss.detach())}
        scored = policy.score(decisions, entropy_grad=False)
        total, units = torch.zeros((), device=device), 0
        for i, item in enumerate(items):
            n = len(item.teacher_logp)
            old = torch.as_tensor(item.decision.logprobs[:n], dtype=torch.float32, device=device)
            unit = isdpo_unit_loss(scored.logprobs[i, :n].float(), item.teacher_logp.to(device), old, self.alpha,
                                   self.is_clip)
            total = total + (unit * item.weights.to(device)).sum()
            units += n
        return total / max(1, units), {}

    def after_update(self, inputs: ObjectiveInputs, step: OptimizerStep) -> dict[str, float]:
        """Move the EMA teacher towards the policy by ``tau_ema``."""
        if self.teacher is None:
            return {}
        with torch.no_grad():
            own = dict(inputs.policy.model.named_parameters())
            for name, param in self.teacher.model.named_parameters():
                param.lerp_(own[name].detach().to(param.dtype), self.tau_ema)
        return {}

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """The teacher's weights (None before a teacher exists and nothing was loaded)."""
        if self.teacher is None:
            return self._saved
        return {k: v.detach().cpu().clone() for k, v in self.teacher.model.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        """Restore the teacher's weights (kept until the teacher is built)."""
        self._saved = copy.copy(state)
        if state is not None and self.teacher is not None:
            self.teacher.model.load_state_dict(state)
