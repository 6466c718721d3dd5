"""What ranks exchange besides gradients: counts summed, metrics combined, lists gathered in order.

Every function works without a process group too (one process: the identity), so that the same
code serves a single-process run. Metrics are gathered whole and combined by the pure
:func:`combine_metrics` in rank order, so every rank computes the same figures from the same
numbers in the same order (an all-reduce's floating-point order may differ by backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

__all__ = ["METRIC_KINDS", "Metric", "all_reduce", "combine_metrics", "gather_in_order", "gather_objects", "reduce_metrics",
           "world_size"]

#: How a metric combines across ranks: ``sum`` adds, ``mean`` weighs each rank's by its count, ``max``.
METRIC_KINDS = ("sum", "mean", "max")


@dataclass(frozen=True)
class Metric:
    """One rank's figure: its ``value``, the ``count`` of items it is a mean over (``mean``), its kind."""

    value: float
    count: float = 1.0
    kind: str = "mean"

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise ValueError(f"metric kind {self.kind!r} is not valid; choose one of {', '.join(METRIC_KINDS)}")
        if self.count < 0:
            raise ValueError(f"a metric's count must be >= 0, got {self.count}")


def world_size() -> int:
    """The number of ranks (1 without a process group)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def _device() -> torch.device:
    # NCCL moves only GPU tensors.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(values: Sequence[float], op: str = "sum") -> list[float]:
    """``values`` combined element-wise across ranks (``sum`` or ``max``), in float64."""
    if op not in ("sum", "max"):
        raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
    if not dist.is_initialized():
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor.cpu().tolist()


def combine_metrics(per_rank: Sequence[dict[str, Metric]]) -> dict[str, float]:
    """Each metric over all ranks: ``sum`` adds the values, ``max`` takes the largest, ``mean`` is the
    count-weighted mean (a rank that measured nothing, count 0, weighs nothing). A metric some rank
    lacks is combined over the ranks that have it; its kind must agree everywhere."""
    names = sorted({name for metrics in per_rank for name in metrics})
    out: dict[str, float] = {}
    for name in names:
        present = [metrics[name] for metrics in per_rank if name in metrics]
        kinds = {m.kind for m in present}
        if len(kinds) > 1:
            raise ValueError(f"metric {name!r} is combined as {' and '.join(sorted(kinds))} on different ranks")
        kind = kinds.pop()
        if kind == "sum":
            out[name] = sum(m.value for m in present)
        elif kind == "max":
            out[name] = max(m.value for m in present)
        else:
            counted = sum(m.count for m in present)
            out[name] = sum(m.value * m.count for m in present) / counted if counted else 0.0
    return out


def gather_objects(local: Any) -> list[Any]:
    """Each rank's ``local`` (plain data), in rank order, on every rank."""
    if not dist.is_initialized():
        return [local]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return gathered


def reduce_metrics(local: dict[str, Metric]) -> dict[str, float]:
    """:func:`combine_metrics` of every rank's ``local`` metrics, the same on every rank."""
    return combine_metrics(gather_objects(local))


def gather_in_order(local: Sequence[Any]) -> list[Any]:
    """Every rank's list concatenated in rank order (ranks hold consecutive blocks of the whole, as
    :func:`ptgpo_algos.distributed.work_split.split_evenly` makes them, so the order is the whole's)."""
    return [item for part in gather_objects(list(local)) for item in part]
