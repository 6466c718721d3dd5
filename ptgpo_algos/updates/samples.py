"""The update's pieces as functions: a batch with its advantages becomes training samples, which are
scored without gradients, cut into mini-batches and micro-batches, and trained on
(:class:`ptgpo_algos.updates.updater.Updater` runs them in order).

1. :func:`flatten_batch` makes one sample per *distinct* step: a step shared by ``n`` trajectories of
   a prefix tree is trained once with weight ``n`` and the mean of the advantages it received. For
   the unclipped PPO objective this equals training the ``n`` copies separately, and it stays equal
   under clipping whenever those advantages share a sign (always, for step-level estimators that
   give a shared step one advantage); the token-mean denominator counts it ``n`` times.
2. Before the update, without gradients and in micro-batches: :func:`recompute_old_logprobs` scores
   the trained samples with the trainer's own weights, which become pi_old in the ratio (verl's
   default: a rollout engine's log-probabilities differ from the trainer's by kernels and precision,
   and a lagged collector's by an update; the samples of the update's first optimiser step skip it
   and take their pi_old from that step's own forward, ``TrainingSample.old_from_first_step``), and :func:`reference_logprobs` scores them with the frozen
   reference of the KL term, so that its forward never runs while the policy's graph is alive.
3. Mini-batches (:func:`minibatches`) never split the steps with the same prompt, whose context the
   policy then computes once; :func:`accumulate_gradients` runs one forward and backward in
   micro-batches of ``micro_batch_size`` steps whose gradients add up to the mini-batch's (every term
   is divided by the mini-batch's weighted unit count). The loss is the update's
   (:class:`~ptgpo_algos.updates.losses.PolicyLoss`: the configured policy-gradient loss, importance
   weights, KL and entropy). pi_old is the recomputed one when present, else the behaviour policy's
   recorded at rollout time; ``tis_cap`` weighs each unit by the truncated ratio of the two (Yao et
   al. 2025).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.records import Batch, Decision
from ptgpo_algos.updates.losses import PolicyLoss

__all__ = ["COUNTS", "ExtraLoss", "TrainingSample", "accumulate_gradients", "flatten_batch", "micro_batch_loss", "micro_batches",
           "minibatches", "recompute_old_logprobs", "reference_logprobs", "same_prompt_groups", "scoring_parts",
           "trained_samples", "units"]


#: A term added to each micro-batch's loss: ``extra(part)`` is its value (with gradients) and figures.
ExtraLoss = Callable[[list["TrainingSample"]], tuple[torch.Tensor, dict[str, float]]]

#: Figures of a micro-batch that are counts, which add up over micro-batches and ranks:
#: ``computed_tokens``, the token positions its forward pass ran through the model (each prefix its rows
#: share once, :attr:`~ptgpo_algos.policy.base.ScoredBatch.computed_tokens`).
COUNTS = ("computed_tokens",)


@dataclass
class TrainingSample:
    """One distinct step to train on: its decision, its (mean) advantage and its weight in the loss (see
    :func:`flatten_batch`)."""

    decision: Decision
    advantage: float
    weight: float
    #: pi_old of the sample's units recomputed by the trainer before the update (None: the rollout's).
    old_logprobs: torch.Tensor | None = None
    #: The frozen reference's log-probabilities of the sample's units (the KL term).
    ref_logprobs: torch.Tensor | None = None
    #: pi_old is the trainer's current weights' and the sample trains in the update's first optimiser
    #: step, whose forward is taken under those very weights: that forward, detached, is pi_old
    #: (stored in ``old_logprobs`` then, for later epochs), and no pass of its own is needed.
    old_from_first_step: bool = False
    #: The critic's value of the step's state when the batch was scored, and its value target (the GAE
    #: return); None without a critic (:mod:`ptgpo_algos.critic`).
    old_value: float | None = None
    value_return: float | None = None
    #: One advantage per response token, which the loss then uses instead of ``advantage`` (HiPER's
    #: levels, each on its own block; the loss must take per-unit advantages, as ppo-clip does); None:
    #: every unit gets ``advantage``.
    token_advantages: list[float] | None = None
    #: A critic's own targets for the sample when it has several heads (:mod:`ptgpo_algos.hiper.critic`).
    critic_targets: Any = None


def flatten_batch(
    batch: Batch, advantages: StepAdvantages | Sequence[Sequence[Sequence[float]]], loss_agg: str = "token-mean",
    mode: str = "choose",
) -> list[TrainingSample]:
    """One sample per distinct step (by identity): mean advantage over its trajectories, and a weight.

    ``advantages``: one per step of the batch (:class:`~ptgpo_algos.advantages.StepAdvantages`, or
    ``compute_advantages``' nested lists); a shape that does not match the batch's is refused.

    ``token-mean``: the weight is the number of trajectories through the step, so every unit of every
    trajectory counts once. ``trajectory-mean``: each trajectory through the step adds ``1 / units of
    that trajectory``, so every trajectory counts once whatever its length (a 7-step success weighs as
    much as a 30-step failure instead of a quarter of it). The loss divides by the summed weights, so
    both are means. ``loss_agg`` is one of :data:`~ptgpo_algos.updates.loss_registry.LOSS_AGGREGATIONS`, as
    ``algorithm.loss_agg`` checks.
    """
    values = StepAdvantages.of(batch, advantages).values.tolist()
    found: dict[int, list] = {}
    order: list[int] = []
    index = 0
    for group in batch:
        for trajectory in group:
            share = 1.0
            if loss_agg == "trajectory-mean":
                share = 1.0 / max(1, sum(units(s.decision, mode) for s in trajectory.steps))
            for step in trajectory.steps:
                advantage, index = values[index], index + 1
                entry = found.get(id(step))
                if entry is None:
                    found[id(step)] = [step, advantage, 1, share]
                    order.append(id(step))
                else:
                    entry[1] += advantage
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


def rollout_logprobs(decision: Decision, mode: str) -> list[float]:
    """The behaviour policy's log-probabilities of the decision's units, recorded at rollout time."""
    if mode == "choose":
        return [float(decision.choice_logprob)]
    return list(decision.logprobs)


def _pad(rows: Sequence[Sequence[float] | torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row[:width], dtype=torch.float32)
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


def trained_samples(samples: Sequence[TrainingSample], *, entropy_coef: float, kl: bool,
                    values: bool = False) -> list[TrainingSample]:
    """The samples an update runs forward passes on.

    Steps with zero advantage add nothing to the PPO term but count in the token mean: when no entropy,
    KL or value term (``values``: a critic trains on every step) needs them, their units stay in the
    denominator and their forward pass is skipped (exactly the same loss, often most of the batch in
    all-failed groups).
    """
    if entropy_coef or kl or values:
        return list(samples)
    return [s for s in samples if s.advantage != 0.0]


def micro_batches(chunk: Sequence[TrainingSample], size: int | None) -> list[list[TrainingSample]]:
    """``chunk`` cut into consecutive parts of at most ``size`` samples (None: one part)."""
    if size is None or size >= len(chunk):
        return [list(chunk)]
    return [list(chunk[i : i + size]) for i in range(0, len(chunk), size)]


def scoring_parts(samples: Sequence[TrainingSample], micro_batch_size: int | None) -> list[list[int]]:
    """The micro-batches (sample indices) that scoring without gradients computes ``samples`` in:
    those that share a prompt side by side, so that a shared context is computed once."""
    return micro_batches([i for group in same_prompt_groups(samples) for i in group], micro_batch_size)


def _score_without_grad(policy, samples: Sequence[TrainingSample], micro_batch_size: int | None) -> list[torch.Tensor]:
    """Each sample's unit log-probabilities under ``policy``, no gradients, in micro-batches of
    samples that share prompts (so that a shared context is computed once)."""
    out: list[torch.Tensor | None] = [None] * len(samples)
    with torch.no_grad():
        for part in scoring_parts(samples, micro_batch_size):
            scored = policy.score([samples[i].decision for i in part], entropy_grad=False)
            values = scored.logprobs.detach().float().cpu()
            lengths = scored.mask.detach().sum(-1).long().cpu()
            for row, i in enumerate(part):
                out[i] = values[row, : int(lengths[row])].clone()
    return out  # type: ignore[return-value]


def recompute_old_logprobs(policy, samples: Sequence[TrainingSample], micro_batch_size: int | None) -> dict[str, float]:
    """Set each sample's pi_old to the trainer's log-probabilities under its current weights.

    Returns ``old_logprob_drift``: the mean absolute difference from the rollout's log-probabilities
    over the units (0 when the trainer itself played the rollouts with these weights; the engine's
    kernels and precision, or a lagged collector's older weights, make it larger).
    """
    drift, count = 0.0, 0
    for sample, values in zip(samples, _score_without_grad(policy, samples, micro_batch_size)):
        sample.old_logprobs = values
        behaviour = torch.as_tensor(rollout_logprobs(sample.decision, policy.mode)[: len(values)])
        drift += float((values - behaviour).abs().sum())
        count += len(values)
    return {"old_logprob_drift": drift / max(1, count)}


def reference_logprobs(reference, samples: Sequence[TrainingSample], micro_batch_size: int | None) -> None:
    """Set each sample's reference log-probabilities (the KL term's), computed before the update."""
    for sample, values in zip(samples, _score_without_grad(reference, samples, micro_batch_size)):
        sample.ref_logprobs = values


def accumulate_gradients(policy, chunk: list[TrainingSample], loss: PolicyLoss, total_units: float,
                         micro_batch_size: int | None, *, activation_offload: bool = False,
                         one_chunk_each: bool = False, extra: ExtraLoss | None = None) -> dict[str, float]:
    """Forward and backward over ``chunk`` in micro-batches; the gradients add up to the whole chunk's.

    Each micro-batch's loss is divided by the whole mini-batch's weighted unit count
    (``total_units``), so the summed gradients equal one pass over the chunk. The loss's stats are
    combined likewise: the ``*loss`` entries and the :data:`COUNTS` add up, the others (means over a
    part's units) are averaged with the parts' unit counts as weights. ``one_chunk_each`` cuts a
    micro-batch further where the policy would score it in several chunks (across ranks, each forward
    and backward must be matched by another rank's, one for one). ``extra`` adds a term of its own to
    each micro-batch's loss (the critic's value loss), with its figures.
    """
    parts = micro_batches(chunk, micro_batch_size)
    if one_chunk_each:
        parts = [[part[i] for i in piece] for part in parts
                 for piece in policy.one_chunk_parts([s.decision for s in part])]
    part_units = [sum(s.weight * units(s.decision, policy.mode) for s in part) for part in parts]
    combined: dict[str, float] = {}
    for part, share in zip(parts, part_units):
        # Activations saved for the backward wait in CPU memory instead (pinned on GPUs): slower, and
        # the GPU holds one layer's at a time.
        offload = torch.autograd.graph.save_on_cpu(pin_memory=policy.device.type == "cuda") \
            if activation_offload else contextlib.nullcontext()
        with offload:
            value, stats = micro_batch_loss(policy, part, loss, total_units)
            if extra is not None:
                term, term_stats = extra(part)
                value = value + term
                stats = {**stats, **term_stats}
        value.backward()
        for key, figure in stats.items():
            weight = 1.0 if key.endswith("loss") or key in COUNTS else share / sum(part_units)
            combined[key] = combined.get(key, 0.0) + figure * weight
    return combined


def micro_batch_loss(policy, chunk: list[TrainingSample], loss: PolicyLoss,
                     total_units: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one micro-batch, with gradients: its samples scored by ``policy`` against pi_old
    (recomputed when the samples carry it, else the rollout's), the reference and, with
    ``loss.tis_cap``, the truncated importance weights."""
    decisions = [s.decision for s in chunk]
    device = policy.device
    scored = policy.score(decisions, entropy_grad=bool(loss.entropy_coef))
    width = scored.logprobs.shape[1]
    if any(s.old_from_first_step and s.old_logprobs is None for s in chunk):
        lengths = scored.mask.detach().sum(-1).long().cpu()
        values = scored.logprobs.detach().float().cpu()
        for row, sample in enumerate(chunk):
            if sample.old_from_first_step and sample.old_logprobs is None:
                sample.old_logprobs = values[row, : int(lengths[row])].clone()
    behaviour = [rollout_logprobs(d, policy.mode) for d in decisions]
    recomputed = chunk[0].old_logprobs is not None
    old = _pad([s.old_logprobs for s in chunk] if recomputed else behaviour, width).to(device)
    is_weights = None
    if loss.tis_cap is not None and recomputed:
        # Truncated importance sampling: the rollouts came from the engine's distribution, the ratio
        # is taken against the trainer's; weigh each unit by min(pi_old_trainer / pi_engine, cap).
        log_is = torch.clamp(old - _pad(behaviour, width).to(device), max=math.log(loss.tis_cap))
        is_weights = torch.exp(log_is)
    ref_logprobs = None
    if chunk[0].ref_logprobs is not None:
        ref_logprobs = _pad([s.ref_logprobs for s in chunk], width).to(device)
    if any(s.token_advantages is not None for s in chunk):
        advantages = _pad([s.token_advantages if s.token_advantages is not None
                           else [s.advantage] * units(s.decision, policy.mode) for s in chunk], width).to(device)
    else:
        advantages = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=device)
    weight = torch.tensor([s.weight for s in chunk], dtype=torch.float32, device=device)
    value, stats = loss(scored.logprobs.float(), old, advantages, scored.mask.float(), weight,
                        entropy=scored.entropy.float(), ref_logprobs=ref_logprobs, total_units=total_units,
                        is_weights=is_weights)
    return value, {**stats, "computed_tokens": float(scored.computed_tokens)}
