"""MCGPO (matched-context pairwise preferences): actions taken in matched contexts, ranked by held-out outcomes.

No paper, code or citing text of MCGPO could be found; its structure is inferred from its abstract
(``shared/specs/seed-methods.md``), and every choice below is a config key:

* **Contexts.** A decision's context is the pre-action state summary (``Step.state_key``) and the rubric
  progress: the tasks the trajectory's earlier steps completed, as the environment reported them
  (``Step.achieved``; empty on environments that report none, where both rules coincide). Rules are
  tried in order, ``exact`` (state and progress) then ``coarse`` (state only); ``rules`` picks them.
* **Folds.** The trajectories of a group are split into ``folds`` fixed folds by their index in the group
  (index mod ``folds``). The decisions of one fold are compared; only the *other* folds' terminal
  outcomes orient them: an action's value in a context is the mean, over the other folds'
  trajectories that took it there (each once, at its first visit), of the return discounted by the
  steps they had left, ``gamma^(T - t - 1) R`` (``gamma`` 0.95, the suite's discount), so a decision is
  never ranked by its own outcome. Undiscounted, an action that wastes a step (walking into a wall)
  ties with the direct move whenever both trajectories went on to succeed, and beats a move towards a
  hole: measured on a 3x3 FrozenLake with G2PO, the undiscounted pairs taught the policy to wander
  safely until every rollout timed out, where neither estimator nor pairs have a signal left.
* **Support.** Two decisions of a fold with different actions are matched by the first rule under
  which they share a context that has, in the other folds, ``min_support`` (2) distinct actions with
  values, both of theirs among them.
* **Pairs.** A matched pair whose values differ by more than ``min_gap`` is a preference (preferred: the
  higher value); at most ``max_pairs`` per group, drawn with the run's generator when there are more.
* **Weights.** ``w = n / (n + support_prior) * rule_weight``, where ``n`` is the smaller number of
  orienting trajectories behind the two values and ``rule_weight`` is 1 for ``exact`` and
  ``coarse_weight`` for ``coarse``.
* **Loss.** ``-w log sigmoid(beta (m(a+) - m(a-)))``, averaged over pairs, where ``m`` is a decision's
  log-probability under the current weights (the choice in ``choose`` mode, the response's summed token
  log-probability in ``generate`` mode) less its rollout log-probability (``margin: reference``, as DPO
  measures it against its reference), or the log-probability itself (``margin: absolute``). Measured
  against the rollout policy, a pair the policy already ranks the other way starts at margin 0 and its
  push fades as it is learned; in absolute terms it starts at full strength and keeps pushing until
  the policy agrees (on a 3x3 FrozenLake with G2PO, undiscounted and absolute pairs lowered the
  policy's entropy faster than G2PO alone and ended all three seeds at 0 held-out success).

The abstract puts it on GraphGPO; here it goes on any estimator (G2PO is the closest to GraphGPO).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ptgpo_algos.records import Decision, Step, Trajectory
from ptgpo_algos.objectives.base import Objective, ObjectiveInputs
from ptgpo_algos.objectives.registry import RULE_SETS

__all__ = ["MCGPO", "Pair", "context_keys", "group_pairs", "pair_loss"]


def context_keys(trajectory: Trajectory) -> list[dict[str, tuple]]:
    """Per step, its context under each rule: ``exact`` (state, progress so far) and ``coarse`` (state)."""
    done: set[str] = set()
    out = []
    for step in trajectory.steps:
        progress = tuple(sorted(done))
        out.append({"exact": (step.state_key, progress), "coarse": (step.state_key,)})
        done.update(step.achieved or {})
    return out


@dataclass(frozen=True)
class Pair:
    """``better`` is preferred to ``worse``, with weight ``weight`` (values: the orienting returns)."""

    better: Step
    worse: Step
    weight: float
    rule: str


def _action_values(group: Sequence[Trajectory], keys: list[list[dict]], fold: int, folds: int, rule: str,
                   gamma: float):
    """``{context: {action: [values]}}`` of the trajectories outside ``fold``, each once per context and
    action (its first visit): the return discounted by the steps left, ``gamma^(T - t - 1) R``."""
    table: dict[tuple, dict[str, list[float]]] = {}
    for i, trajectory in enumerate(group):
        if i % folds == fold:
            continue
        seen = set()
        length, outcome = len(trajectory.steps), trajectory.total_reward
        for t, (step, key) in enumerate(zip(trajectory.steps, keys[i])):
            if (key[rule], step.sent) not in seen:
                seen.add((key[rule], step.sent))
                value = gamma ** (length - t - 1) * outcome
                table.setdefault(key[rule], {}).setdefault(step.sent, []).append(value)
    return table


def _fold_decisions(group: Sequence[Trajectory], keys: list[list[dict]], fold: int, folds: int):
    """The distinct decisions of ``fold``, each with its contexts."""
    seen: set[int] = set()
    out = []
    for i, trajectory in enumerate(group):
        if i % folds != fold:
            continue
        for step, key in zip(trajectory.steps, keys[i]):
            if id(step) not in seen and step.decision is not None:
                seen.add(id(step))
                out.append((step, key))
    return out


def _match(a, b, tables, rules, min_support):
    """The first rule under which decisions ``a`` and ``b`` share a context with support for both
    actions: ``(rule, values)``, or None."""
    (step_a, key_a), (step_b, key_b) = a, b
    for rule in rules:
        if key_a[rule] != key_b[rule]:
            continue
        values = tables[rule].get(key_a[rule], {})
        if len(values) >= min_support and step_a.sent in values and step_b.sent in values:
            return rule, values
    return None


def group_pairs(group: Sequence[Trajectory], *, folds: int, rules: Sequence[str], min_support: int,
                min_gap: float, support_prior: float, coarse_weight: float, gamma: float = 1.0) -> list[Pair]:
    """Every preference pair of a group (module docstring), before the ``max_pairs`` cap."""
    keys = [context_keys(t) for t in group]
    pairs = []
    for fold in range(folds):
        tables = {rule: _action_values(group, keys, fold, folds, rule, gamma) for rule in rules}
        buckets: dict[tuple, list] = {}
        for entry in _fold_decisions(group, keys, fold, folds):
            buckets.setdefault(entry[1][rules[-1]], []).append(entry)  # pairs share the last rule's context
        for entries in buckets.values():
            for i, a in enumerate(entries):
                for b in entries[i + 1:]:
                    found = _match(a, b, tables, rules, min_support) if a[0].sent != b[0].sent else None
                    if found is None:
                        continue
                    rule, values = found
                    value_a, value_b = np.mean(values[a[0].sent]), np.mean(values[b[0].sent])
                    if abs(value_a - value_b) <= min_gap:
                        continue
                    n = min(len(values[a[0].sent]), len(values[b[0].sent]))
                    better, worse = (a[0], b[0]) if value_a > value_b else (b[0], a[0])
                    scale = 1.0 if rule == "exact" else coarse_weight
                    pairs.append(Pair(better, worse, scale * n / (n + support_prior), rule))
    return pairs


def pair_loss(better: torch.Tensor, worse: torch.Tensor, weight: torch.Tensor, beta: float) -> torch.Tensor:
    """Mean of ``-w log sigmoid(beta (better - worse))`` over pairs (log-probabilities)."""
    return (-weight * F.logsigmoid(beta * (better - worse))).mean()


class MCGPO(Objective):
    """The MCGPO objective (module docstring)."""

    def __init__(self, *, beta: float, folds: int, rules: str, min_support: int, min_gap: float,
                 support_prior: float, coarse_weight: float, max_pairs: int, gamma: float, margin: str):
        self.beta, self.max_pairs, self.margin = beta, max_pairs, margin
        self.settings = dict(folds=folds, rules=RULE_SETS[rules], min_support=min_support, min_gap=min_gap,
                             support_prior=support_prior, coarse_weight=coarse_weight, gamma=gamma)

    def prepare(self, inputs: ObjectiveInputs) -> tuple[list[Pair], dict[str, float]]:
        """Every group's preference pairs (at most ``max_pairs`` a group, drawn with the run's generator)."""
        pairs: list[Pair] = []
        for group in inputs.batch:
            found = group_pairs(group, **self.settings)
            if len(found) > self.max_pairs:
                picks = sorted(inputs.rng.choice(len(found), size=self.max_pairs, replace=False))
                found = [found[int(i)] for i in picks]
            pairs += found
        exact = sum(p.rule == "exact" for p in pairs)
        return pairs, {"pairs": len(pairs), "exact_share": exact / len(pairs) if pairs else 0.0}

    def loss(self, policy: Any, items: Sequence[Pair]) -> tuple[torch.Tensor, dict[str, float]]:
        """The weighted pairwise logistic loss on the margins of the better and the worse decision, and the pairs'
        accuracy."""
        steps: dict[int, Decision] = {}
        for pair in items:
            steps.setdefault(id(pair.better), pair.better.decision)
            steps.setdefault(id(pair.worse), pair.worse.decision)
        order = list(steps)
        scored = policy.score([steps[k] for k in order], entropy_grad=False)
        logp = (scored.logprobs.float() * scored.mask.float()).sum(-1)
        if self.margin == "reference":
            old = [steps[k].choice_logprob if policy.mode == "choose" else sum(steps[k].logprobs) for k in order]
            logp = logp - torch.tensor(old, dtype=torch.float32, device=logp.device)
        index = {k: i for i, k in enumerate(order)}
        better = logp[[index[id(p.better)] for p in items]]
        worse = logp[[index[id(p.worse)] for p in items]]
        weight = torch.tensor([p.weight for p in items], dtype=torch.float32, device=logp.device)
        loss = pair_loss(better, worse, weight, self.beta)
        agree = float(((better - worse) > 0).float().mean())
        return loss, {"pair_accuracy": agree}
