"""The config's ``optim.fsdp`` section: how FSDP2 shards a model across ranks. Apart from
:mod:`ptgpo_algos.distributed.fsdp` so that the config, which holds it, imports no torch: torch is
imported only where the settings become torch objects."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from ptgpo_algos.validation import check_bool, check_choice, check_mapping, unknown_keys

__all__ = ["FSDP_DTYPES", "FsdpConfig"]

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

    def dtypes(self, device: str) -> tuple[Any, Any]:
        """``(param_dtype, reduce_dtype)`` on ``device`` (torch dtypes), ``auto`` resolved."""
        import torch

        def resolve(name: str) -> torch.dtype:
            if name == "auto":
                name = "bfloat16" if device.startswith("cuda") else "float32"
            return getattr(torch, name)

        return resolve(self.param_dtype), resolve(self.reduce_dtype)

    def policies(self, device: str) -> dict[str, Any]:
        """The keyword arguments of ``fully_shard``: mixed precision, offload, resharding."""
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

        param, reduce = self.dtypes(device)
        if self.cpu_offload and not device.startswith("cuda"):
            raise ValueError("optim.fsdp.cpu_offload: true needs GPUs (on CPUs the shards are in CPU memory already)")
        offload = CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy()
        return {"mp_policy": MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce), "offload_policy": offload,
                "reshard_after_forward": self.reshard_after_forward}
