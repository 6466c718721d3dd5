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
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ptgpo_envs.plugins import Registry

if TYPE_CHECKING:
    from ptgpo_algos.config import TrainConfig

__all__ = ["ROLLOUT_BACKENDS", "WeightSyncError", "build_policy", "build_rollout_policy", "sync_tolerance",
           "sync_weights"]

#: Rollout backends by name: ``build(trainable_policy, config, device) -> RolloutPolicy``.
ROLLOUT_BACKENDS: Registry[Callable[[Any, "TrainConfig", str], Any]] = Registry(
    "rollout backend", "ptgpo.rollout_backends")


def build_policy(config: TrainConfig, device: str):
    """The trainable policy ``config.policy`` describes (the tiny model is built, or read from its cache)."""
    from ptgpo_algos.policy import load_policy

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
        dtype=spec.dtype,
        lora=spec.lora,
        gradient_checkpointing=gradient_checkpointing,
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
    from ptgpo_algos.policy.vllm_backend import VLLMPolicy, cpu_engine_defaults

    engine = cpu_engine_defaults() if device == "cpu" else {"gpu_memory_utilization": 0.3}
    engine.update(config.rollouts.vllm)
    checkpoint = getattr(getattr(policy.model, "config", None), "_name_or_path", None) or config.policy.model
    return VLLMPolicy.from_policy(policy, checkpoint, seed=config.run.seed, **engine)


ROLLOUT_BACKENDS.register("transformers", _transformers)
ROLLOUT_BACKENDS.register("vllm", _vllm)


class WeightSyncError(RuntimeError):
    """The rollout engine does not act like the trained model after a weight sync."""


def sync_tolerance(config: TrainConfig, device: str) -> float:
    """The largest log-probability difference a sync may leave: engine and trainer agree to float32
    rounding on a CPU; bf16 kernels differ by much more."""
    if config.rollouts.sync_tolerance is not None:
        return config.rollouts.sync_tolerance
    return 1e-3 if device == "cpu" and config.policy.dtype in ("auto", "float32") else 0.1


def sync_weights(rollout_policy, policy, prompts: Sequence[Sequence[int]], tolerance: float) -> dict[str, Any]:
    """Push ``policy``'s weights into the rollout engine and check greedy decoding agrees on ``prompts``.

    A sync that silently leaves part of the engine stale (the LM head of a tied-embedding model is the
    known case) would make the run sample from a mixture of old and new weights; this fails loudly.
    """
    start = time.perf_counter()
    rollout_policy.load_weights(policy.export_weights())
    sync_time = time.perf_counter() - start
    report = rollout_policy.verify_sync(policy, prompts, max_tokens=4)
    if report.max_logprob_diff > tolerance:
        raise WeightSyncError(
            f"after the weight sync the rollout engine's greedy log-probabilities differ from the trained "
            f"model's by {report.max_logprob_diff:.3g} (> sync_tolerance {tolerance}); engine tokens "
            f"{report.engine_tokens}, trainer tokens {report.reference_tokens}"
        )
    return {"sync_time_s": sync_time, "sync_max_logprob_diff": report.max_logprob_diff,
            "sync_tokens_equal": report.tokens_equal}
