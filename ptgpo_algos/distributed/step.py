"""One optimisation step of the policy-gradient loss over a batch split across ranks.

Each rank scores its own samples; the loss (:func:`ptgpo_algos.losses.policy_loss`, a token mean)
is divided by the *global* weighted unit count, and FSDP sums the ranks' gradients
(:func:`~ptgpo_algos.distributed.fsdp.shard_model`), so the gradient is the single-process
gradient of the whole batch, whatever the split. Gradient clipping takes the norm over all shards.

FSDP's collectives need every rank in every forward and backward: a rank with fewer micro-batches
(or none) runs the missing ones on a one-token placeholder whose loss is multiplied by zero, which
adds exactly nothing to the gradient.

:class:`TokenScorer` is the module FSDP shards as its root: its forward goes from token ids to the
log-probabilities of chosen tokens, through the decoder and the chunked output layer
(:func:`~ptgpo_algos.policy.token_logprobs.token_logprobs`), so that the root unit's parameters
(embeddings, final norm, output layer) are gathered for exactly that forward and its backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from ptgpo_algos.distributed.collectives import all_reduce
from ptgpo_algos.losses import policy_loss
from ptgpo_algos.policy.token_logprobs import token_logprobs

__all__ = ["PgSample", "TokenScorer", "grad_norm", "policy_gradient_step", "scored_inputs"]


@dataclass(frozen=True)
class PgSample:
    """One step to train on: its prompt and response tokens, the response's pi_old log-probabilities,
    its advantage and its weight (trajectories through it)."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.prompt_ids or not self.response_ids:
            raise ValueError("a sample needs a prompt and a response of at least one token each")
        if len(self.old_logprobs) != len(self.response_ids):
            raise ValueError(f"old_logprobs has {len(self.old_logprobs)} values for {len(self.response_ids)} "
                             "response tokens")

    @property
    def units(self) -> float:
        """The sample's weighted unit count (its response tokens, ``weight`` times)."""
        return self.weight * len(self.response_ids)


class TokenScorer(nn.Module):
    """A causal LM's log-probabilities of given tokens: decoder, then the output layer a chunk at a time."""

    def __init__(self, model: nn.Module, chunk: int = 512):
        super().__init__()
        self.model = model
        self.chunk = int(chunk)

    def _base(self) -> nn.Module:
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                positions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``log p(targets[k])`` predicted at ``(rows[k], positions[k])`` of the right-padded batch."""
        base = self._base()
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                    use_cache=False).last_hidden_state
        head = base.get_output_embeddings()
        logp, _ = token_logprobs(hidden[rows, positions], head.weight, targets, bias=head.bias, chunk=self.chunk,
                                 compute_dtype=head.weight.dtype)
        return logp


def scored_inputs(samples: Sequence[PgSample], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The :class:`TokenScorer` inputs of ``samples`` (prompt + response rows, right-padded), and
    ``place``: where each scored token goes in a ``(samples, longest response)`` table."""
    rows = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    row_index, positions, columns, targets = [], [], [], []
    for i, (sample, row) in enumerate(zip(samples, rows)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        start = len(sample.prompt_ids) - 1  # position p predicts token p + 1
        row_index += [i] * len(sample.response_ids)
        positions += range(start, start + len(sample.response_ids))
        columns += range(len(sample.response_ids))
        targets += sample.response_ids
    tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "rows": tensor(row_index),
            "positions": tensor(positions), "targets": tensor(targets), "columns": tensor(columns)}


def _part_loss(scorer: nn.Module, part: Sequence[PgSample], total_units: float, pad_id: int, device: torch.device,
               clip_ratio: float) -> tuple[torch.Tensor, dict[str, float]]:
    inputs = scored_inputs(part, pad_id, device)
    columns = inputs.pop("columns")
    logp = scorer(**inputs).float()
    shape = (len(part), max(len(s.response_ids) for s in part))
    place = (inputs["rows"], columns)
    logprobs = torch.zeros(shape, device=device).index_put(place, logp)
    mask = torch.zeros(shape, device=device).index_put(place, torch.tensor(1.0, device=device))
    old = torch.zeros(shape)
    for i, sample in enumerate(part):
        old[i, : len(sample.old_logprobs)] = torch.tensor(sample.old_logprobs)
    advantages = torch.tensor([s.advantage for s in part], device=device)
    weight = torch.tensor([s.weight for s in part], device=device)
    return policy_loss(logprobs, old.to(device), advantages, mask, weight, clip_ratio=clip_ratio,
                       total_units=total_units)


def _placeholder_loss(scorer: nn.Module, pad_id: int, device: torch.device) -> torch.Tensor:
    """A forward and backward that take part in FSDP's collectives and add nothing to the gradient."""
    sample = PgSample((pad_id,), (pad_id,), (0.0,), 0.0)
    inputs = scored_inputs([sample], pad_id, device)
    inputs.pop("columns")
    return scorer(**inputs).sum() * 0.0


def grad_norm(parameters: Sequence[nn.Parameter], max_norm: float) -> float:
    """Clip the gradients of ``parameters`` (sharded or not) to ``max_norm`` over all ranks; the norm before."""
    total = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)
    full = total.full_tensor() if hasattr(total, "full_tensor") else total
    return float(full)


def policy_gradient_step(scorer: nn.Module, optimizer: torch.optim.Optimizer, samples: Sequence[PgSample], *,
                         pad_id: int = 0, clip_ratio: float = 0.2, max_grad_norm: float = 1.0,
                         micro_batch_size: int | None = None) -> dict[str, float]:
    """One optimiser step on this rank's ``samples`` (the whole batch on one process, a part of it on
    each rank). Returns the rank's loss share (``loss``: the ranks' add up to the whole batch's),
    the global ``grad_norm`` before clipping, and the global ``units`` and ``micro_batches``."""
    if micro_batch_size is not None and micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1 (or None: one micro-batch), got {micro_batch_size}")
    device = next(scorer.parameters()).device
    size = micro_batch_size or max(1, len(samples))
    parts = [list(samples[i : i + size]) for i in range(0, len(samples), size)]
    total_units, = all_reduce([sum(s.units for s in samples)])
    steps, = all_reduce([len(parts)], op="max")
    if total_units <= 0:
        raise ValueError("the batch has no response tokens on any rank: nothing to train on")
    optimizer.zero_grad(set_to_none=True)
    loss_share = 0.0
    for index in range(int(steps)):
        if index < len(parts):
            loss, stats = _part_loss(scorer, parts[index], total_units, pad_id, device, clip_ratio)
            loss_share += stats["loss"]
        else:
            loss = _placeholder_loss(scorer, pad_id, device)
        loss.backward()
    norm = grad_norm([p for p in scorer.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    return {"loss": loss_share, "grad_norm": norm, "units": total_units, "micro_batches": steps}
