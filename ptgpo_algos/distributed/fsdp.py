"""Sharding a model with FSDP2 (``torch.distributed.fsdp.fully_shard``): one unit per decoder layer,
the rest (embeddings, final norm, output layer) in the root unit.

Each rank holds ``1 / world_size`` of every parameter, of its gradient and of the optimiser's state (AdamW's moments by default; the
optimiser is built on the sharded parameters, so its state is sharded too). A unit's full
parameters exist only while it computes: gathered before its forward, freed after it
(``reshard_after_forward``), gathered again for its backward, whose gradients are reduce-scattered
back to the shards. Precision as in the single-process trainer
(:mod:`ptgpo_algos.policy.precision`): float32 masters, the forward and backward in bfloat16 on
GPUs (FSDP's ``param_dtype``: the gathered copies are cast) and float32 on CPUs; gradients are
reduced in float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from ptgpo_algos.distributed.fsdp_config import FsdpConfig

__all__ = ["decoder_layers", "fsdp_modules", "shard_model"]


def decoder_layers(module: nn.Module) -> nn.ModuleList:
    """The decoder layers of the Hugging Face model inside ``module`` (itself, under a peft wrapper,
    or under a wrapper of ours): the first ``PreTrainedModel`` found, its ``get_decoder().layers``."""
    from transformers import PreTrainedModel

    model = next((m for m in module.modules() if isinstance(m, PreTrainedModel)), None)
    if model is None:
        raise TypeError(f"{type(module).__name__} holds no Hugging Face model: FSDP shards decoder-only "
                        "transformers models (Qwen2, Llama, ...)")
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise TypeError(f"{type(model).__name__}'s decoder has no `layers` list to shard one by one")
    return layers


def shard_model(root: nn.Module, config: FsdpConfig, device: str, mesh: Any = None) -> nn.Module:
    """Shard ``root`` in place across the ranks of ``mesh`` (default: all ranks): one FSDP unit per
    decoder layer, then ``root`` for what is left; returns ``root``.

    Gradients are summed across ranks, not averaged: the step's loss is already divided by the
    global unit count (:class:`~ptgpo_algos.distributed.updater.ShardedUpdater`), so that a batch split across ranks gives
    the single-process gradient whatever the split.
    """
    root.to(device)
    kwargs = config.policies(device)
    for layer in decoder_layers(root):
        fully_shard(layer, mesh=mesh, **kwargs)
    fully_shard(root, mesh=mesh, **kwargs)
    for unit in fsdp_modules(root):
        unit.set_gradient_divide_factor(1.0)
        # Plain sums only: gloo has no pre-multiplied sum, and NCCL copies no data for a plain sum.
        unit.set_force_sum_reduction_for_comms(True)
    return root


def fsdp_modules(root: nn.Module) -> list[FSDPModule]:
    """Every FSDP unit inside ``root`` (itself included)."""
    return [m for m in root.modules() if isinstance(m, FSDPModule)]
