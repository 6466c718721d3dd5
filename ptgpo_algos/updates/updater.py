"""The policy update of an iteration, built once from the ``optim`` and ``algorithm`` sections.

:class:`Updater` holds what every iteration's update shares: the policy and its optimiser, the loss
(:class:`~ptgpo_algos.updates.losses.PolicyLoss`, resolved once from ``algorithm.loss``,
``algorithm.loss_config`` and the ``optim`` terms), the frozen KL reference, and how pi_old is taken
(decided once, :func:`old_logprobs_mode`). Each iteration the trainer calls::

    stats = updater.prepare(samples)           # pi_old and the reference, scored without gradients
    stats |= updater.run(samples, auxiliary)   # PPO epochs over shuffled mini-batches

:meth:`Updater.run` takes ``optim.epochs`` passes over shuffled mini-batches of about
``optim.minibatch_size`` steps (steps with the same prompt share one, ``distinct_prompts`` in the
metrics counts them); each mini-batch is one optimiser step. Four methods are the seams a
data-parallel wrapper replaces (:class:`ptgpo_algos.distributed.updater.ShardedUpdater`), and the
only places that see the batch as a whole or touch the model's gradients, the optimiser or the
metrics across steps: :meth:`Updater.layout` (the whole batch as the loop sees it: prompts, unit
counts, which samples train), :meth:`Updater.backward` (forward and backward of a mini-batch, in
micro-batches), :meth:`Updater.optimizer_step` (gradient clipping, the AdamW step and the learning-rate
schedule's, :mod:`ptgpo_algos.updates.optimizer`) and
:meth:`Updater.reduce` (the step figures into the iteration's metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ptgpo_algos.updates.settings import AlgorithmConfig, OptimConfig
from ptgpo_algos.updates.loss_registry import get_loss
from ptgpo_algos.updates.losses import PolicyLoss
from ptgpo_algos.updates.samples import (
    TrainingSample,
    accumulate_gradients,
    minibatches,
    recompute_old_logprobs,
    reference_logprobs,
    same_prompt_groups,
    trained_samples,
    units,
)

__all__ = ["Auxiliary", "BatchLayout", "Updater", "old_logprobs_mode", "policy_loss_for", "ppo_update",
           "value_weight_sum"]

#: The auxiliary objectives' share of a step: ``auxiliary(index, parts)`` backpropagates its part
#: ``index`` of ``parts`` (the epoch's mini-batches) and returns its figures.
Auxiliary = Callable[[int, int], dict[str, float]]


def policy_loss_for(optim: OptimConfig, algorithm: AlgorithmConfig) -> PolicyLoss:
    """The update's loss as the sections say: ``algorithm.loss`` with ``algorithm.loss_config`` and the
    common keys it takes from ``optim``, and ``optim``'s entropy, KL and importance-weight terms."""
    spec = get_loss(algorithm.loss)
    common = {"clip_ratio": optim.clip_ratio, "clip_ratio_c": optim.clip_ratio_c}
    return PolicyLoss(spec, spec.keywords(common, algorithm.loss_config), optim.entropy_coef, optim.kl_coef or 0.0,
                      optim.tis_cap)


def old_logprobs_mode(setting: str, *, elsewhere: bool, float32_scores: bool) -> str:
    """pi_old of the PPO ratio: ``recompute`` (the trainer scores the steps with its current weights
    before the update, as verl does) or ``rollout`` (the log-probabilities recorded at rollout time).

    ``auto`` (``optim.old_logprobs``) recomputes unless the rollouts are the trainer's own scores under
    these very weights (not played ``elsewhere``: by a separate engine or a lagged collector) and in
    float32 (``float32_scores``: no autocast), which a recomputation would only reproduce to rounding.
    """
    if setting != "auto":
        return setting
    return "rollout" if not elsewhere and float32_scores else "recompute"


@dataclass(frozen=True)
class BatchLayout:
    """What the update's loop reads of the whole batch, by sample index: the samples grouped by prompt
    (``groups``), each one's weighted unit count, whether a forward pass runs on it (``trained``,
    :func:`~ptgpo_algos.updates.samples.trained_samples`) and its tokens. ``offset`` and ``count``: the indices
    of the samples this process holds (all of them in one process; a block when ranks share a batch)."""

    groups: list[list[int]]
    units: list[float]
    trained: list[bool]
    tokens: list[int]
    offset: int = 0
    count: int | None = None

    def local(self, samples: Sequence[TrainingSample], indices: Sequence[int]) -> list[TrainingSample]:
        """This process's samples among ``indices`` (``samples``: the ones it holds), in order."""
        stop = self.offset + (len(samples) if self.count is None else self.count)
        return [samples[i - self.offset] for i in indices if self.offset <= i < stop]


class Updater:
    """The policy update (see the module docstring). ``reference``: the frozen policy of the KL term
    (None: no KL); ``old_logprobs``: ``recompute`` or ``rollout`` (:func:`old_logprobs_mode`);
    ``report_drift``: log ``old_logprob_drift`` (the rollouts came from elsewhere); ``rng``: the
    run's generator, which shuffles the mini-batches."""

    def __init__(self, policy, optimizer: torch.optim.Optimizer, optim: OptimConfig, algorithm: AlgorithmConfig, *,
                 rng: np.random.Generator, reference=None, old_logprobs: str = "recompute",
                 report_drift: bool = False, schedule: Any = None, critic: Any = None):
        if old_logprobs not in ("recompute", "rollout"):
            raise ValueError(f"old_logprobs: recompute or rollout, got {old_logprobs!r} (old_logprobs_mode "
                             "resolves auto)")
        self.policy = policy
        self.optimizer = optimizer
        self.optim = optim
        self.loss = policy_loss_for(optim, algorithm)
        self.rng = rng
        self.reference = reference
        self.old_logprobs = old_logprobs
        self.report_drift = report_drift
        #: The learning-rate schedule, stepped after each optimiser step (:mod:`ptgpo_algos.updates.optimizer`; None: constant).
        self.schedule = schedule
        #: The learned critic whose value loss joins the policy's (:class:`ptgpo_algos.critic.component.Critic`;
        #: None: critic-free). It trains on every sample, zero advantage or not.
        self.critic = critic
        #: The first epoch's order of the prompt groups, drawn by :meth:`prepare` when it hands the first
        #: optimiser step's pi_old to that step (None: :meth:`run` draws it).
        self._first_order: np.ndarray | None = None

    @property
    def scoring_batch_size(self) -> int:
        """Steps per forward pass without gradients: the micro-batch, else the mini-batch."""
        return self.optim.micro_batch_size or self.optim.minibatch_size

    def trained(self, samples: Sequence[TrainingSample]) -> list[TrainingSample]:
        """The samples the update runs forward passes on (:func:`~ptgpo_algos.updates.samples.trained_samples`)."""
        return trained_samples(samples, entropy_coef=self.loss.entropy_coef, kl=self.reference is not None,
                               values=self.critic is not None)

    def prepare(self, samples: Sequence[TrainingSample]) -> dict[str, float]:
        """Score the trained samples without gradients before the update: pi_old when it is recomputed,
        and the KL reference's log-probabilities, so that the reference's forward never runs while the
        policy's graph is alive. Returns ``old_logprob_drift`` when ``report_drift``."""
        trained = self.trained(samples)
        stats: dict[str, float] = {}
        if trained and self.old_logprobs == "recompute":
            if not self.report_drift:
                # The first step's samples are scored under the very weights they train with: their
                # pi_old is that step's forward, detached (the same value, one pass fewer; with one
                # mini-batch an iteration, no pass at all). The drift needs every sample scored.
                first = self._first_step(samples)
                for sample in first:
                    sample.old_from_first_step = True
                trained = [s for s in trained if not s.old_from_first_step]
            drift = recompute_old_logprobs(self.policy, trained, self.scoring_batch_size) if trained else {}
            if self.report_drift:
                stats.update(drift)
            trained = self.trained(samples)
        if trained and self.reference is not None:
            reference_logprobs(self.reference, trained, self.scoring_batch_size)
        return stats

    def _first_step(self, samples: Sequence[TrainingSample]) -> list[TrainingSample]:
        """The samples the update's first mini-batch trains on (it takes the first optimiser step), the
        first epoch's order drawn now and kept for :meth:`run`."""
        layout = self.layout(samples, kl=self.reference is not None)
        self._first_order = self.rng.permutation(len(layout.groups))
        first = next(minibatches(layout.groups, self._first_order, self.optim.minibatch_size), [])
        return layout.local(samples, [i for i in first if layout.trained[i]])

    def run(self, samples: list[TrainingSample], auxiliary: Auxiliary | None = None) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches, one optimiser step each; the mean of each figure over
        the steps, and counts: ``train_tokens`` (the trained steps' prompt and response tokens, every
        epoch), ``computed_tokens`` (the token positions the forward passes ran, each prefix the rows of
        a micro-batch share once). The KL term is on when the samples carry reference log-probabilities.
        With ``auxiliary`` (the auxiliary objectives, :mod:`ptgpo_algos.objectives`) a mini-batch
        without RL units still takes its step."""
        steps: list[dict[str, float]] = []
        trained_tokens = computed_tokens = 0
        layout = self.layout(samples, kl=bool(samples) and samples[0].ref_logprobs is not None)
        for _ in range(self.optim.epochs):
            order, self._first_order = self._first_order, None
            if order is None:
                order = self.rng.permutation(len(layout.groups))
            chunks = list(minibatches(layout.groups, order, self.optim.minibatch_size))
            for index, indices in enumerate(chunks):
                trained = [i for i in indices if layout.trained[i]]
                if not trained and auxiliary is None:
                    continue
                total_units = sum(layout.units[i] for i in indices)
                self.optimizer.zero_grad(set_to_none=True)
                stats = self.backward(layout.local(samples, trained), total_units) if trained else {}
                if auxiliary is not None:
                    stats.update(auxiliary(index, len(chunks)))
                stats["grad_norm"] = self.optimizer_step()
                computed_tokens += int(stats.pop("computed_tokens", 0))
                steps.append(stats)
                trained_tokens += sum(layout.tokens[i] for i in trained)
        scheduled = {} if self.schedule is None else {"lr": float(self.schedule.get_last_lr()[0])}
        return {**self.reduce(steps), "updates": len(steps), "train_tokens": trained_tokens,
                "computed_tokens": computed_tokens, "distinct_prompts": len(layout.groups), **scheduled}

    def layout(self, samples: Sequence[TrainingSample], kl: bool) -> BatchLayout:
        """The :class:`BatchLayout` of ``samples``, the whole batch in one process."""
        trained = {id(s) for s in trained_samples(samples, entropy_coef=self.loss.entropy_coef, kl=kl,
                                                  values=self.critic is not None)}
        return BatchLayout(same_prompt_groups(samples),
                           [s.weight * units(s.decision, self.policy.mode) for s in samples],
                           [id(s) in trained for s in samples], [_tokens(s) for s in samples])

    def backward(self, chunk: list[TrainingSample], total_units: float, one_chunk_each: bool = False,
                 value_weights: float | None = None) -> dict[str, float]:
        """Forward and backward over a mini-batch's trained samples, in micro-batches; ``total_units``
        is the mini-batch's weighted unit count, every policy term's denominator; the critic's value term
        is divided by the mini-batch's summed sample weights (``value_weights``; None: ``chunk``'s)."""
        extra = None
        if self.critic is not None:
            weights = value_weights if value_weights is not None else value_weight_sum(chunk)
            extra = lambda part: self.critic.loss(self.policy, part, weights)  # noqa: E731
        return accumulate_gradients(self.policy, chunk, self.loss, total_units, self.optim.micro_batch_size,
                                    activation_offload=self.optim.activation_offload, one_chunk_each=one_chunk_each,
                                    extra=extra)

    def train_step(self, loss: torch.Tensor) -> float:
        """One optimiser step on ``loss`` alone (an objective that trains in steps of its own); the
        gradient norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return self.optimizer_step()

    def optimizer_step(self) -> float:
        """Clip the gradient to ``optim.max_grad_norm`` (over all shards of a sharded model; with a critic on
        the policy's trunk, over its head too; a critic model of its own apart), take the optimiser's step
        and the schedule's; the policy's norm before clipping."""
        shared = self.critic is not None and self.critic.shares_trunk
        parameters = list(self.policy.parameters()) + (self.critic.parameters() if shared else [])
        norm = self.clip_gradients(parameters)
        if self.critic is not None and not shared:  # a critic model of its own is clipped on its own, as verl does
            self.clip_gradients(self.critic.parameters())
        self.optimizer.step()
        if self.schedule is not None:
            self.schedule.step()
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def clip_gradients(self, parameters: list[torch.nn.Parameter]) -> torch.Tensor:
        """Clip ``parameters``' gradients together to ``optim.max_grad_norm``; their norm before."""
        return torch.nn.utils.clip_grad_norm_(parameters, self.optim.max_grad_norm)

    def reduce(self, steps: list[dict[str, float]]) -> dict[str, float]:
        """Each figure's mean over the optimiser steps (a figure a step lacks counts as 0 there)."""
        totals: dict[str, float] = {}
        for stats in steps:
            for key, figure in stats.items():
                totals[key] = totals.get(key, 0.0) + figure
        return {key: value / max(1, len(steps)) for key, value in totals.items()}


def value_weight_sum(samples: Sequence[TrainingSample]) -> float:
    """The summed weights of the samples with a value target (the value loss's denominator)."""
    return float(sum(s.weight for s in samples if s.value_return is not None))


def _tokens(sample: TrainingSample) -> int:
    decision = sample.decision
    return len(decision.prompt_ids) + sum(map(len, decision.candidate_ids or [decision.response_ids]))


def ppo_update(policy, optimizer: torch.optim.Optimizer, samples: list[TrainingSample], optim: OptimConfig,
               algorithm: AlgorithmConfig | None = None, *, rng: np.random.Generator,
               auxiliary: Auxiliary | None = None) -> dict[str, Any]:
    """PPO epochs on ``samples`` as they are (pi_old and the reference already on them, or the
    rollout's pi_old): ``Updater(...).run`` without :meth:`~Updater.prepare`; ``algorithm`` None takes
    the default loss."""
    updater = Updater(policy, optimizer, optim, algorithm or AlgorithmConfig(), rng=rng, old_logprobs="rollout")
    return updater.run(samples, auxiliary)
