"""What a checkpoint keeps of a run besides the weights and the optimiser, and how a resumed run takes it
back: the state (:class:`~ptgpo_algos.training.state.TrainState`), the config, the learning-rate
schedule, and what the collector, the objectives, the critic and the callbacks hold (plain data).
The placement writes and reads the file (:mod:`ptgpo_algos.training.placement`)."""

from __future__ import annotations

from typing import Any

__all__ = ["component_state", "restore_components"]


def component_state(trainer: Any) -> dict[str, Any]:
    """What a checkpoint of ``trainer``'s run keeps besides the weights and the optimiser."""
    state = trainer.state
    state.wall_time_s = trainer.elapsed()
    payload = {
        "rng": state.rng_state(),
        "counters": state.counters(),
        "last_eval": state.last_eval,
        "train_layouts": None if state.train_layouts is None else sorted(state.train_layouts),
        "config": trainer.config.to_dict(),
        "pending_rollout": trainer.collector.state_dict(),
        "rollout_memory": None if state.rollout_memory is None else state.rollout_memory.state_dict(),
        "objectives": trainer.objectives.state_dict(),
        "cost": state.cost.state_dict(),
    }
    if trainer.schedule is not None:
        payload["lr_schedule"] = trainer.schedule.state_dict()
    if trainer.critic is not None:
        payload["critic"] = trainer.critic.state_dict()
    for callback in trainer.callbacks:
        if callback.state_key is not None:
            payload[callback.state_key] = callback.state_dict()
    return payload


def restore_components(trainer: Any, checkpoint: dict[str, Any]) -> None:
    """Give ``trainer``'s components their state back from ``checkpoint``: the learning-rate schedule,
    the callbacks, the objectives, the collector's request in flight and the critic."""
    if trainer.schedule is not None:
        trainer.schedule.load_state_dict(checkpoint["lr_schedule"])
    for callback in trainer.callbacks:
        if callback.state_key is not None:
            callback.load_state_dict(checkpoint.get(callback.state_key))
    trainer.objectives.load_state_dict(_objective_state(checkpoint))
    trainer.collector.load_state_dict(checkpoint.get("pending_rollout"))
    if trainer.critic is not None:
        trainer.critic.load_state_dict(checkpoint["critic"])


def _objective_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The objectives' saved state; a checkpoint of an older run kept hindsight's buffer on its own."""
    state = dict(checkpoint.get("objectives") or {})
    if "hindsight_buffer" in checkpoint:
        state.setdefault("hindsight", checkpoint["hindsight_buffer"])
    return state
