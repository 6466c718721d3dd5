"""Full weights from a sharded model, one tensor at a time, for a rollout engine's weight sync.

Every rank holds a shard of each parameter; the engine needs whole tensors. :func:`gathered_weights`
all-gathers one tensor at a time in ``state_dict`` order (every rank must iterate it in step: each
tensor is a collective), so no rank ever holds more than one gathered tensor beyond its shards.
:func:`gathered_messages` feeds them to :func:`ptgpo_algos.policy.weight_stream.weight_messages` on
the main rank, the bounded messages the engine's workers read; the other ranks take part in the
gathers and send nothing.

A LoRA model's adapters travel alone (``adapters_only``: the ``lora_`` tensors, as vLLM's LoRA
support loads them), or merged into copies of the base weights by the caller as
:meth:`ptgpo_algos.policy.hf.CausalLMPolicy.export_weights` does.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import nn

from ptgpo_algos.policy.weight_stream import Piece, weight_messages

__all__ = ["gathered_messages", "gathered_weights", "tied_aliases"]


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def tied_aliases(module: nn.Module, *, prefix: str = "") -> dict[str, str]:
    """``{alias: name}`` of ``module``'s parameters that are another one under a second name (a
    tied-embedding model's output layer is its embedding), names without ``prefix``: what a rollout
    engine's weight sync hands each worker's loader under both names (the ``aliases`` of
    :meth:`~ptgpo_algos.policy.vllm_backend.VLLMPolicy.load_weights`). Found by parameter identity,
    which sharding keeps and which is the same on every rank."""
    first: dict[int, str] = {}
    aliases = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        source = first.setdefault(id(parameter), name)
        if source != name:
            aliases[name.removeprefix(prefix)] = source.removeprefix(prefix)
    return aliases


def gathered_weights(module: nn.Module, *, prefix: str = "", adapters_only: bool = False
                     ) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` of ``module``'s state, names without ``prefix`` (a wrapper's, such as
    :class:`~ptgpo_algos.distributed.policy.RootRouted`'s ``model.``). A tensor tied to one already
    yielded (a tied-embedding model's output layer) is left out, as the sync's aliases expect."""
    aliases = set(tied_aliases(module))
    for name, tensor in module.state_dict().items():
        if name in aliases or (adapters_only and "lora_" not in name):
            continue
        yield name.removeprefix(prefix), _full(tensor).detach()


def gathered_messages(module: nn.Module, limit: int, *, main: bool, dtype: torch.dtype | None = None,
                      prefix: str = "", adapters_only: bool = False
                      ) -> Iterator[tuple[list[Piece], list[memoryview]]]:
    """The weight stream's messages of ``module`` on the ``main`` rank; on the others nothing, after
    taking part in every gather (so every rank must consume this iterator to its end)."""
    weights = gathered_weights(module, prefix=prefix, adapters_only=adapters_only)
    if main:
        yield from weight_messages(weights, limit, dtype)
        return
    for _ in weights:
        pass
