"""The policy update across ranks: :class:`~ptgpo_algos.updates.updater.Updater` with three of its seams replaced.

Each rank holds the training samples of its own tasks. The update's loop runs on every rank over the
*whole* batch's layout (:meth:`ShardedUpdater.layout`: every rank's prompts, unit counts and trained
flags, gathered in rank order, which is the single-process order), with the run's generator, which
is the same on every rank: so every rank cuts the same mini-batches as one process would, and takes
the same optimiser steps. In each mini-batch a rank runs the forward and backward of the samples it
holds; the loss is divided by the mini-batch's global unit count and FSDP sums the ranks' gradients
(:func:`~ptgpo_algos.distributed.fsdp.shard_model`), so each step's gradient is the single-process
one, up to the order of float sums.

FSDP's collectives need every rank in every forward and backward, one for one: a rank with fewer
forward passes in a mini-batch (or none), or fewer to score before the update, makes up the
difference with :func:`~ptgpo_algos.distributed.policy.idle_pass`, which adds nothing and is one
pass. A pass is a chunk of the policy's scoring (``max_rows`` candidate rows, a recurring context
once), and in the update each chunk takes its own backward, so that the collectives of a rank's
passes line up with another rank's idle ones.

With a learned critic each chunk also reads the trunk's states for the value head (a second forward,
matched by the idle pass's own); the value loss is divided by the whole mini-batch's summed weights,
and the replicated head's gradients are summed across ranks after the chunks' backwards.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ptgpo_algos.distributed.collectives import Metric, all_reduce, gather_objects, reduce_metrics
from ptgpo_algos.distributed.policy import idle_pass
from ptgpo_algos.updates.samples import (COUNTS, TrainingSample, micro_batches, recompute_old_logprobs, reference_logprobs,
                                scoring_parts, units)
from ptgpo_algos.updates.updater import BatchLayout, Updater, value_weight_sum

__all__ = ["ShardedUpdater", "passes", "whole_layout"]


def passes(policy, parts: Sequence[Sequence[TrainingSample]], one_chunk_each: bool = False) -> int:
    """The forward passes that scoring the micro-batches ``parts`` makes: the chunks ``policy`` cuts them
    into (:meth:`scoring_passes`: candidate rows beyond its ``max_rows`` take several chunks, a recurring
    context is computed once), or with ``one_chunk_each`` the pieces that each take one chunk."""
    if one_chunk_each:
        return sum(len(policy.one_chunk_parts([s.decision for s in part])) for part in parts)
    return sum(policy.scoring_passes([s.decision for s in part]) for part in parts)


def whole_layout(parts: Sequence[BatchLayout], rank: int) -> BatchLayout:
    """The whole batch's layout from each rank's own (``parts``, in rank order; their ``groups`` hold
    prompt keys, not indices), for ``rank``: the samples numbered in rank order, those with the same
    prompt grouped across ranks in order of first appearance."""
    keys = [key for part in parts for group in part.groups for key in group]
    groups: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    offset = sum(len(part.units) for part in parts[:rank])
    return BatchLayout(list(groups.values()), [u for p in parts for u in p.units],
                       [t for p in parts for t in p.trained], [t for p in parts for t in p.tokens],
                       offset=offset, count=len(parts[rank].units))


class ShardedUpdater(Updater):
    """The update on a sharded policy (see the module docstring); ``rank``: this process's."""

    def __init__(self, *args, rank: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.rank = rank

    def layout(self, samples: Sequence[TrainingSample], kl: bool) -> BatchLayout:
        """Every rank's samples in one layout (prompts compared by a hash of their tokens)."""
        own = super().layout(samples, kl)
        keys = [[hash(tuple(s.decision.prompt_ids))] for s in samples]
        return whole_layout(gather_objects(BatchLayout(keys, own.units, own.trained, own.tokens)), self.rank)

    def prepare(self, samples: Sequence[TrainingSample]) -> dict[str, float]:
        """pi_old of this rank's trained samples when it is recomputed (``old_logprob_drift`` combined
        over all ranks' units), and the KL reference's log-probabilities."""
        trained = self.trained(samples)
        parts = [[trained[i] for i in part] for part in scoring_parts(trained, self.scoring_batch_size)]
        stats: dict[str, float] = {}
        if self.old_logprobs == "recompute":
            mine = passes(self.policy, parts)
            most, = all_reduce([mine], op="max")
            drift = recompute_old_logprobs(self.policy, trained, self.scoring_batch_size) if trained else {}
            _idle(self.policy, int(most) - mine)
            count = sum(len(s.old_logprobs) for s in trained)
            stats = reduce_metrics({k: Metric(v, count=count) for k, v in drift.items()}) if self.report_drift else {}
        if self.reference is not None:
            mine = passes(self.reference, parts)
            most, = all_reduce([mine], op="max")
            if trained:
                reference_logprobs(self.reference, trained, self.scoring_batch_size)
            _idle(self.reference, int(most) - mine)
        return stats

    def backward(self, chunk: list[TrainingSample], total_units: float) -> dict[str, float]:
        """This rank's part of the mini-batch (maybe none), then idle passes up to the rank with the
        most micro-batches; the figures combined over ranks (losses add up, the rest are means over
        the units)."""
        mine = passes(self.policy, micro_batches(chunk, self.optim.micro_batch_size), one_chunk_each=True)
        most, = all_reduce([mine], op="max")
        value_weights = None
        if self.critic is not None:
            value_weights, = all_reduce([value_weight_sum(chunk)])
        stats = super().backward(chunk, total_units, one_chunk_each=True, value_weights=value_weights) if chunk else {}
        _idle(self.policy, int(most) - mine, backward=True, critic=self.critic)
        if self.critic is not None:
            _sum_gradients(self.critic.head.parameters())
        count = sum(s.weight * units(s.decision, self.policy.mode) for s in chunk)
        return reduce_metrics({k: Metric(v, kind="sum") if k.endswith("loss") or k in COUNTS
                               else Metric(v, count=count) for k, v in stats.items()})


    def clip_gradients(self, parameters: list[torch.nn.Parameter]) -> torch.Tensor:
        """Clip the sharded parameters' gradients and a critic's replicated head's together (torch's clip
        takes one kind of tensor at a time): their norm over all shards, and every rank scales by it."""
        grads = [p.grad for p in parameters if p.grad is not None]
        kinds = [[g for g in grads if isinstance(g, DTensor)], [g for g in grads if not isinstance(g, DTensor)]]
        norms = [torch.nn.utils.get_total_norm(kind) for kind in kinds if kind]
        norms = [n.full_tensor() if isinstance(n, DTensor) else n for n in norms]
        if len(norms) > 1:
            total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))
        else:
            total = norms[0] if norms else torch.zeros(())
        scale = float(torch.clamp(self.optim.max_grad_norm / (total + 1e-6), max=1.0))
        for grad in grads:
            grad.mul_(scale)
        return total


def _idle(policy, count: int, backward: bool = False, critic=None) -> None:
    for _ in range(count):
        idle_pass(policy, backward=backward, critic=critic)


def _sum_gradients(parameters) -> None:
    """Each replicated parameter's gradient summed over the ranks (a rank that computed none adds 0), as
    FSDP sums the sharded ones'."""
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
