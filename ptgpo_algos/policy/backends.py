"""Building the run's policies: the trainable policy from the config, and the rollout backend that samples.

A *rollout backend* turns the trainable policy into the policy that collects rollouts and runs
evaluation (:class:`~ptgpo_algos.policy.base.RolloutPolicy`): ``transformers`` is the trainable
policy itself; ``vllm`` is a vLLM engine serving its weights, re-synced after every update. A new
backend is one function and one registration line::

    def build(policy, config, device):      # -> a RolloutPolicy
        ...
    ROLLOUT_BACKENDS.register("my-backend", build)

and is then chosen with ``rollouts.backend: my-backend`` (other packages register through the
``ptgpo.rollout_backends`` entry points).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.policy.base import SYNC_TOKENS
from ptgpo_envs.plugins import Registry

if TYPE_CHECKING:
    from ptgpo_algos.records import Batch

__all__ = ["ROLLOUT_BACKENDS", "SYNC_FLOOR_MULTIPLE", "SYNC_MIN_TOLERANCE", "SYNC_PROMPTS", "SYNC_TOKENS",
           "WeightSyncError", "build_policy", "build_rollout_policy",
           "push_weights", "sync_prompts", "sync_tolerance", "sync_weights"]

#: Rollout backends by name: ``build(trainable_policy, config, device) -> RolloutPolicy``.
ROLLOUT_BACKENDS: Registry[Callable[[Any, "TrainConfig", str], Any]] = Registry(
    "rollout backend", "ptgpo.rollout_backends")


def build_policy(config: TrainConfig, device: str):
    """The trainable policy ``config.policy`` describes (the tiny model is built, or read from its cache)."""
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.precision import precision_for

    spec = config.policy
    gradient_checkpointing = spec.gradient_checkpointing
    if gradient_checkpointing is None:
        gradient_checkpointing = device.startswith("cuda") and not spec.is_tiny
    return load_policy(
        spec.model,
        tiny_spec={"seed": config.run.seed, **spec.tiny},
        tiny_env_ids=[config.env.id],
        mode=spec.mode,
        score=spec.score,
        temperature=spec.temperature,
        history_length=spec.history_length,
        max_prompt_tokens=spec.max_prompt_tokens,
        max_new_tokens=spec.max_new_tokens,
        prompt_template=spec.prompt_template,
        require_think=spec.require_think,
        device=device,
        precision=precision_for(device, spec.dtype, spec.cpu_autocast),
        rollout_dtype=spec.rollout_dtype,
        lora=spec.lora,
        gradient_checkpointing=gradient_checkpointing,
        min_new_tokens=spec.min_new_tokens,
        logprob_chunk=spec.logprob_chunk,
        decode_cache=spec.decode_cache,
        share_prefixes=spec.share_prefixes,
        plan_format=config.algorithm.name == "hiper",
    )


def exported_config(config: TrainConfig, model_folder: str) -> TrainConfig:
    """The config of a run's exported model: the same acting settings, weights from ``model_folder``
    (any LoRA adapter merged into them)."""
    policy = dataclasses.replace(config.policy, model=model_folder, lora=None, gradient_checkpointing=False)
    return dataclasses.replace(config, policy=policy)


def build_rollout_policy(config: TrainConfig, policy: Any, device: str):
    """The policy that collects rollouts, from the configured backend."""
    return ROLLOUT_BACKENDS.get(config.rollouts.backend)(policy, config, device)


def _transformers(policy: Any, config: TrainConfig, device: str):
    return policy


def _vllm(policy: Any, config: TrainConfig, device: str):
    from ptgpo_algos.policy.precision import precision_for
    from ptgpo_algos.policy.vllm_backend import VLLMPolicy, cpu_engine_defaults

    # The engine computes at the trainer's compute dtype unless the config says otherwise.
    engine = cpu_engine_defaults() if device == "cpu" else {
        "gpu_memory_utilization": 0.3, "dtype": precision_for(device, config.policy.dtype, config.policy.cpu_autocast).compute}
    if getattr(policy, "has_adapters", False):
        # LoRA through vLLM's own LoRA support: each sync ships the adapters, never the base weights.
        engine.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank_slot(policy.lora_rank))
    engine.update(config.rollouts.vllm)
    checkpoint = _base_checkpoint(policy) or config.policy.model
    return VLLMPolicy.from_policy(policy, checkpoint, seed=config.run.seed,
                                  sync_bucket_bytes=config.rollouts.sync_bucket_mib * 2**20, **engine)


#: The adapter ranks vLLM's ``max_lora_rank`` accepts.
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _lora_rank_slot(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that holds adapters of ``rank``."""
    for slot in _VLLM_LORA_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(f"{label('policy.lora')}: rank {rank} is above vLLM's largest LoRA rank ({_VLLM_LORA_RANKS[-1]})")


def _base_checkpoint(policy: Any) -> str | None:
    """The folder or hub name the trainable policy's base model was loaded from."""
    model = policy.model.get_base_model() if getattr(policy, "has_adapters", False) else policy.model
    return getattr(getattr(model, "config", None), "_name_or_path", None)


ROLLOUT_BACKENDS.register("transformers", _transformers)
ROLLOUT_BACKENDS.register("vllm", _vllm)


class WeightSyncError(RuntimeError):
    """The rollout engine does not act like the trained model after a weight sync."""


#: Prompts a sync check samples from (:data:`~ptgpo_algos.policy.base.SYNC_TOKENS` tokens each).
SYNC_PROMPTS = 4
#: A sync check fails when the mean |log-probability difference| exceeds this multiple of its noise
#: floor, measured before the run's first update in this process, when engine and trainer hold the same
#: weights: the two compute paths' own disagreement (bf16 kernels: ~1e-2; float32: ~1e-6).
SYNC_FLOOR_MULTIPLE = 4.0
#: ... and never below this: a float32 floor of ~1e-6 would otherwise fail on rounding.
SYNC_MIN_TOLERANCE = 1e-3


def sync_tolerance(config: TrainConfig, floor: float) -> float:
    """``rollouts.sync_tolerance`` when given, else :data:`SYNC_FLOOR_MULTIPLE` x the measured ``floor``
    (at least :data:`SYNC_MIN_TOLERANCE`)."""
    if config.rollouts.sync_tolerance is not None:
        return config.rollouts.sync_tolerance
    return max(SYNC_FLOOR_MULTIPLE * floor, SYNC_MIN_TOLERANCE)


def sync_prompts(batch: Batch) -> list[list[int]]:
    """Up to :data:`SYNC_PROMPTS` distinct prompts of ``batch``'s steps, taken from its groups in turn
    (other tasks first, then more of the same ones)."""
    groups = []
    for group in batch:
        distinct: list[list[int]] = []
        for prompt in (list(step.decision.prompt_ids) for trajectory in group for step in trajectory.steps):
            if prompt not in distinct:
                distinct.append(prompt)
        groups.append(distinct)
    prompts: list[list[int]] = []
    for ordinal in range(max(map(len, groups), default=0)):
        for distinct in groups:
            if ordinal < len(distinct) and distinct[ordinal] not in prompts and len(prompts) < SYNC_PROMPTS:
                prompts.append(distinct[ordinal])
    return prompts


def push_weights(rollout_policy, policy) -> dict[str, Any]:
    """Hand ``policy``'s current weights to ``rollout_policy``: only the LoRA adapters when both sides
    support them (the engine's own LoRA), else the full weights, tied ones once where the receiver
    takes ``aliases``."""
    if getattr(policy, "has_adapters", False) and hasattr(rollout_policy, "load_adapter"):
        return rollout_policy.load_adapter(policy.save_adapter) or {}
    keywords = {}
    if hasattr(policy, "tied_weights") and "aliases" in inspect.signature(rollout_policy.load_weights).parameters:
        keywords["aliases"] = policy.tied_weights()
    return rollout_policy.load_weights(policy.export_weights(), **keywords) or {}


def sync_weights(rollout_policy, policy, prompts: Sequence[Sequence[int]], floor: float,
                 tolerance: float, push: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Push ``policy``'s weights into the rollout engine (:func:`push_weights`, or ``push``: a sharded
    model's weights gathered into a rank's rollout copy), then check that the trainer scores the
    engine's own sampled tokens on ``prompts`` as the engine does (:data:`SYNC_TOKENS` each): the mean
    |log-probability difference| must be within ``tolerance`` (see :func:`sync_tolerance`; ``floor`` is
    logged beside it).

    A sync that silently leaves part of the engine stale (the LM head of a tied-embedding model is the
    known case, or adapters that never arrived) would make the run sample from other weights than it
    trains; this fails loudly.
    """
    start = time.perf_counter()
    pushed = push() if push is not None else push_weights(rollout_policy, policy)
    sync_time = time.perf_counter() - start
    report = rollout_policy.verify_sync(policy, prompts, max_tokens=SYNC_TOKENS)
    if report.mean_logprob_diff > tolerance:
        raise WeightSyncError(
            f"after the weight sync the trainer's log-probabilities of the engine's own sampled tokens differ "
            f"from the engine's by {report.mean_logprob_diff:.3g} on average (> tolerance {tolerance:.3g}: "
            f"{SYNC_FLOOR_MULTIPLE:g} x the noise floor {floor:.3g} measured before the first update, or "
            f"rollouts.sync_tolerance; largest {report.max_logprob_diff:.3g}); engine tokens {report.tokens[:1]}"
        )
    return {"sync_time_s": sync_time, "sync_mean_logprob_diff": report.mean_logprob_diff,
            "sync_max_logprob_diff": report.max_logprob_diff, "sync_floor": floor, "sync_tolerance": tolerance,
            **{f"sync_{k}": v for k, v in pushed.items()}}
