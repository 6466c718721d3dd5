"""A rank's own vLLM rollout engine (``rollouts.backend: vllm`` across ranks): where it runs, and how
the sharded model's weights reach it.

Each rank builds its engine from the policy before the policy is sharded, with the configured
backend (:func:`~ptgpo_algos.policy.backends.build_rollout_policy`: the checkpoint the policy was
loaded from, the same engine settings as in one process), and plays its tasks with it in place of
the transformers rollout copy: no rank holds a second full model in the trainer's process.

**Placement.** vLLM runs an engine's model in an engine-core process of its own, spawned when the
engine is built, whose worker computes on the first GPU it sees. So a rank builds its engine with
``CUDA_VISIBLE_DEVICES`` naming the rank's own GPU alone (:func:`engine_visible_devices`), which the
spawned process inherits; the trainer's process keeps its own view. On CPUs each rank's engine is
bound to its block of the cores it may run on (``VLLM_CPU_OMP_THREADS_BIND``, :func:`cpu_core_block`) unless
the user set that variable. vLLM's ``external_launcher`` (its torchrun mode) is not used: it runs
the engine inside the trainer's process and makes the ranks' engines one vLLM world built for the
same prompts on every rank (tensor parallelism, deterministic scheduling, the KV-cache size reduced
across ranks), whereas here each rank plays its own tasks for its own number of steps.

**Weight sync** (:func:`push_gathered`): every rank gathers each tensor's full value from the shards
(:func:`~ptgpo_algos.distributed.gather.gathered_weights`, one collective per tensor, all ranks in
step) and streams it into its own engine through the engine's ``load_weights``, in messages of at
most ``rollouts.sync_bucket_mib`` (:mod:`ptgpo_algos.policy.weight_stream`); a tied-embedding
model's output layer travels once, under the aliases the worker's loader expects, as in one
process. A LoRA policy's engine gets the adapters alone, gathered and written in peft's format for
the engine's own LoRA support (:func:`save_gathered_adapters`), its base weights untouched. The
trainer's weight-sync check then verifies every rank's engine against the sharded model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import torch

from ptgpo_algos.device import temporary_environment
from ptgpo_algos.distributed.gather import gathered_weights, tied_aliases
from ptgpo_algos.distributed.policy import ROOT_PREFIX, gathered_state
from ptgpo_algos.distributed.process_group import RankInfo

__all__ = ["build_rank_engine", "cpu_core_block", "engine_visible_devices", "push_gathered",
           "save_gathered_adapters"]


def engine_visible_devices(device: str, visible: str | None) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for the engine of a rank that computes on ``device`` (``cuda:i``): the
    one GPU that index ``i`` names under the trainer's own ``visible`` setting (None: every GPU,
    numbered as is). None on a CPU rank (nothing to set)."""
    if not device.startswith("cuda"):
        return None
    index = int(device.partition(":")[2] or 0)
    if visible is None:
        return str(index)
    ids = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if index >= len(ids):
        raise ValueError(f"{device}: CUDA_VISIBLE_DEVICES={visible!r} names only {len(ids)} GPUs")
    return ids[index]


def cpu_core_block(local_rank: int, local_world: int, cores: Sequence[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for the engine of local rank ``local_rank`` of ``local_world``
    whose process may run on ``cores`` (CPU ids, in order): its own consecutive block of
    ``len(cores) // local_world`` of them (one, when the ranks outnumber the cores, shared as fairly
    as the count allows)."""
    if not 0 <= local_rank < local_world or not cores:
        raise ValueError(f"local rank {local_rank} of {local_world} on cores {list(cores)}")
    size = max(1, len(cores) // local_world)
    first = (local_rank * size) % len(cores)
    return ",".join(str(core) for core in cores[first:first + size])


def build_rank_engine(config: Any, policy: Any, info: RankInfo) -> Any:
    """This rank's rollout engine for ``policy`` (not yet sharded) as ``config``'s backend builds it,
    placed on the rank's own GPU, or its block of the node's CPU cores (see the module docstring)."""
    from ptgpo_algos.policy.backends import build_rollout_policy

    if info.device == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", info.world_size))
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_core_block(info.local_rank, local_world, cores)
    visible = engine_visible_devices(info.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    with temporary_environment({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}):
        return build_rollout_policy(config, policy, info.device)


def _on_device(weights: Iterable[tuple[str, torch.Tensor]], device: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``weights``, iterated with ``device`` current: the engine's weight stream consumes them (and so
    runs the gathers) on a thread of its own, and CUDA's current device is per thread."""
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    yield from weights


def save_gathered_adapters(policy: Any, root: torch.nn.Module, folder: str | Path) -> None:
    """A sharded LoRA policy's adapters, gathered from the shards, in peft's format in ``folder`` (what
    :meth:`~ptgpo_algos.policy.hf.CausalLMPolicy.save_adapter` writes in one process); every rank
    calls it and writes its own ``folder``."""
    policy.model.save_pretrained(str(folder), state_dict=gathered_state(policy, root, keep=True))


def push_gathered(engine: Any, policy: Any, root: torch.nn.Module, device: str) -> dict[str, Any]:
    """The sharded model's current weights into this rank's ``engine`` (see the module docstring);
    every rank calls it, for each tensor is gathered from all shards. Returns what the engine reports
    having received (messages, bytes)."""
    if getattr(policy, "has_adapters", False):
        return engine.load_adapter(lambda folder: save_gathered_adapters(policy, root, folder)) or {}
    weights = _on_device(gathered_weights(root, prefix=ROOT_PREFIX), device)
    return engine.load_weights(weights, aliases=tied_aliases(root, prefix=ROOT_PREFIX)) or {}
