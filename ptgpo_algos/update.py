"""The policy update: a batch with its advantages becomes training samples, then PPO epochs over mini-batches.

1. :func:`flatten_batch` makes one sample per *distinct* step: a step shared by ``n`` trajectories of
   a prefix tree is trained once with weight ``n`` and the mean of the advantages it received. For
   the unclipped PPO objective this equals training the ``n`` copies separately, and it stays equal
   under clipping whenever those advantages share a sign (always, for step-level estimators that
   give a shared step one advantage); the token-mean denominator counts it ``n`` times.
2. :func:`ppo_update` takes ``epochs`` passes over shuffled mini-batches of about ``minibatch_size``
   steps; steps with the same prompt share a mini-batch, where the policy computes their context
   once (the loss is the same as with each computed apart; ``distinct_prompts`` in the metrics
   counts them). The loss is the configured policy loss (:data:`ptgpo_algos.losses.LOSSES`), with
   optional low-variance KL to a frozen reference and an entropy bonus; AdamW and gradient clipping.
   The old log-probabilities are the behaviour policy's, recorded at rollout time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from ptgpo_algos.data import Batch, Decision
from ptgpo_algos.losses import LOSS_AGGREGATIONS, LOSSES

__all__ = ["TrainingSample", "flatten_batch", "minibatches", "ppo_update", "same_prompt_groups"]


@dataclass
class TrainingSample:
    """One distinct step to train on: its decision, its (mean) advantage and its weight in the loss (see
    :func:`flatten_batch`)."""

    decision: Decision
    advantage: float
    weight: float


def flatten_batch(
    batch: Batch, advantages: Sequence[Sequence[Sequence[float]]], loss_agg: str = "token-mean", mode: str = "choose"
) -> list[TrainingSample]:
    """One sample per distinct step (by identity): mean advantage over its trajectories, and a weight.

    ``token-mean``: the weight is the number of trajectories through the step, so every unit of every
    trajectory counts once. ``trajectory-mean``: each trajectory through the step adds ``1 / units of
    that trajectory``, so every trajectory counts once whatever its length (a 7-step success weighs as
    much as a 30-step failure instead of a quarter of it). The loss divides by the summed weights, so
    both are means.
    """
    if loss_agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_agg: {loss_agg!r} is not valid; choose one of {', '.join(LOSS_AGGREGATIONS)}")
    found: dict[int, list] = {}
    order: list[int] = []
    for group, group_adv in zip(batch, advantages):
        for trajectory, traj_adv in zip(group, group_adv):
            share = 1.0
            if loss_agg == "trajectory-mean":
                share = 1.0 / max(1, sum(units(s.decision, mode) for s in trajectory.steps))
            for step, advantage in zip(trajectory.steps, traj_adv):
                entry = found.get(id(step))
                if entry is None:
                    found[id(step)] = [step, float(advantage), 1, share]
                    order.append(id(step))
                else:
                    entry[1] += float(advantage)
                    entry[2] += 1
                    entry[3] += share
    samples = []
    for key in order:
        step, total, count, weight = found[key]
        samples.append(TrainingSample(step.decision, total / count, weight))
    return samples


def units(decision: Decision, mode: str) -> int:
    """The loss units of a decision: the choice in ``choose`` mode, the response tokens in ``generate``."""
    return 1 if mode == "choose" else len(decision.response_ids)


def _old_logprobs(decision: Decision, mode: str) -> list[float]:
    if mode == "choose":
        return [float(decision.choice_logprob)]
    return list(decision.logprobs)


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row[:width])
    return out


def same_prompt_groups(samples: Sequence[TrainingSample]) -> list[list[int]]:
    """Indices of the samples grouped by prompt, in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, sample in enumerate(samples):
        groups.setdefault(tuple(sample.decision.prompt_ids), []).append(i)
    return list(groups.values())


def minibatches(groups: list[list[int]], order: Sequence[int], size: int) -> Iterator[list[int]]:
    """Shuffled mini-batches of about ``size`` samples that never split a group.

    Steps with the same prompt land in one mini-batch, where the policy computes their shared
    context once: a trained policy's rollouts repeat contexts ~2.5 times per iteration (a group's
    first step, the states GiGPO anchors on), against ~1.7 within random mini-batches.
    """
    chunk: list[int] = []
    for g in order:
        if chunk and len(chunk) + len(groups[g]) > size:
            yield chunk
            chunk = []
        chunk.extend(groups[g])
    if chunk:
        yield chunk


def ppo_update(
    policy,
    optimizer: torch.optim.Optimizer,
    samples: list[TrainingSample],
    *,
    clip_ratio: float,
    entropy_coef: float,
    kl_coef: float,
    reference=None,
    max_grad_norm: float,
    epochs: int,
    minibatch_size: int,
    rng: np.random.Generator,
    loss: str = "ppo-clip",
) -> dict[str, float]:
    """PPO epochs over shuffled mini-batches; returns the mean of each logged figure and counts."""
    loss_fn = LOSSES.get(loss)
    totals: dict[str, float] = {}
    updates = 0
    trained_tokens = 0
    same_prompt = same_prompt_groups(samples)
    for _ in range(epochs):
        for chunk in minibatches(same_prompt, rng.permutation(len(same_prompt)), minibatch_size):
            chunk = [samples[i] for i in chunk]
            # Steps with zero advantage add nothing to the PPO term but count in the token mean: when
            # no entropy or KL term needs them, keep their units in the denominator and skip their
            # forward pass (exactly the same loss, often most of the batch in all-failed groups).
            total_units = sum(s.weight * units(s.decision, policy.mode) for s in chunk)
            if not entropy_coef and reference is None:
                chunk = [s for s in chunk if s.advantage != 0.0]
                if not chunk:
                    continue
            value, stats = _minibatch_loss(policy, chunk, loss_fn, total_units, clip_ratio=clip_ratio,
                                           entropy_coef=entropy_coef, kl_coef=kl_coef, reference=reference)
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(list(policy.parameters()), max_grad_norm)
            optimizer.step()
            stats["grad_norm"] = float(grad_norm)
            for key, figure in stats.items():
                totals[key] = totals.get(key, 0.0) + figure
            updates += 1
            trained_tokens += sum(len(s.decision.prompt_ids) + sum(map(len, s.decision.candidate_ids
                                                                       or [s.decision.response_ids]))
                                  for s in chunk)
    means = {key: value / max(1, updates) for key, value in totals.items()}
    means["updates"] = updates
    means["train_tokens"] = trained_tokens
    means["distinct_prompts"] = len(same_prompt)
    return means


def _minibatch_loss(policy, chunk: list[TrainingSample], loss_fn, total_units: float, *, clip_ratio: float,
                    entropy_coef: float, kl_coef: float, reference) -> tuple[torch.Tensor, dict[str, Any]]:
    decisions = [s.decision for s in chunk]
    device = policy.device
    scored = policy.score(decisions)
    width = scored.logprobs.shape[1]
    old = _pad([_old_logprobs(d, policy.mode) for d in decisions], width).to(device)
    advantages = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=device)
    weight = torch.tensor([s.weight for s in chunk], dtype=torch.float32, device=device)
    ref_logprobs = None
    if reference is not None:
        with torch.no_grad():
            ref_logprobs = reference.score(decisions).logprobs.float()
    return loss_fn(
        scored.logprobs.float(), old, advantages, scored.mask.float(), weight, clip_ratio=clip_ratio,
        entropy=scored.entropy.float(), entropy_coef=entropy_coef, ref_logprobs=ref_logprobs, kl_coef=kl_coef,
        total_units=total_units,
    )
