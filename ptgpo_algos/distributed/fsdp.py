"""Sharding a model with FSDP2 (``torch.distributed.fsdp.fully_shard``): one unit per decoder layer,
the rest (embeddings, final norm, output layer) in the root unit.

Each rank holds ``1 / world_size`` of every parameter, of its gradient and of AdamW's moments (the
optimiser is built on the sharded parameters, so its state is sharded too). A unit's full
parameters exist only while it computes: gathered before its forward, freed after it
(``reshard_after_forward``), gathered again for its backward, whose gradients are reduce-scattered
back to the shards. Precision as in the single-process trainer
(:mod:`ptgpo_algos.policy.precision`): float32 masters, the forward and backward in bfloat16 on
GPUs (FSDP's ``param_dtype``: the gathered copies are cast) and float32 on CPUs; gradients are
reduced in float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from ptgpo_algos.validation import check_bool, check_choice, check_mapping, unknown_keys

__all__ = ["FSDP_DTYPES", "FsdpConfig", "decoder_layers", "fsdp_modules", "shard_model"]

#: The dtypes ``param_dtype`` and ``reduce_dtype`` take (``auto``: bf16 on GPUs, float32 on CPUs).
FSDP_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class FsdpConfig:
    """How a model is sharded across ranks (the config's ``optim.fsdp``).

    ``param_dtype``: the dtype a unit's gathered parameters compute in (``auto``: bfloat16 on GPUs,
    float32 on CPUs; the sharded masters stay float32). ``reduce_dtype``: the dtype gradients are
    reduced in. ``reshard_after_forward``: free a layer's gathered parameters after its forward and
    gather them again for its backward (less memory, one more all-gather per layer). ``cpu_offload``:
    keep the sharded parameters, gradients and optimiser state in CPU memory, copied to the GPU per
    unit (much less GPU memory, slower; the optimiser step runs on the CPU).
    """

    param_dtype: str = "auto"
    reduce_dtype: str = "float32"
    reshard_after_forward: bool = True
    cpu_offload: bool = False

    def __post_init__(self) -> None:
        check_choice("optim.fsdp.param_dtype", self.param_dtype, FSDP_DTYPES)
        check_choice("optim.fsdp.reduce_dtype", self.reduce_dtype, FSDP_DTYPES)
        check_bool("optim.fsdp.reshard_after_forward", self.reshard_after_forward)
        check_bool("optim.fsdp.cpu_offload", self.cpu_offload)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> FsdpConfig:
        """From a config's ``optim.fsdp`` mapping; unknown keys are refused with the valid ones named."""
        values = check_mapping("optim.fsdp", values if values is not None else {})
        unknown_keys("optim.fsdp", values, [f.name for f in fields(cls)])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data (a saved config's ``optim.fsdp``)."""
        return asdict(self)

    def dtypes(self, device: str) -> tuple[torch.dtype, torch.dtype]:
        """``(param_dtype, reduce_dtype)`` on ``device``, ``auto`` resolved."""
        def resolve(name: str) -> torch.dtype:
            if name == "auto":
                name = "bfloat16" if device.startswith("cuda") else "float32"
            return getattr(torch, name)

        return resolve(self.param_dtype), resolve(self.reduce_dtype)

    def policies(self, device: str) -> dict[str, Any]:
        """The keyword arguments of ``fully_shard``: mixed precision, offload, resharding."""
        param, reduce = self.dtypes(device)
        if self.cpu_offload and not device.startswith("cuda"):
            raise ValueError("optim.fsdp.cpu_offload: true needs GPUs (on CPUs the shards are in CPU memory already)")
        offload = CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy()
        return {"mp_policy": MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce), "offload_policy": offload,
                "reshard_after_forward": self.reshard_after_forward}


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
    global unit count (:mod:`ptgpo_algos.distributed.step`), so that a batch split across ranks gives
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
