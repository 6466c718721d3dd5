"""The critic's settings: the ``algorithm.critic`` section, read by the estimators that learn a value
(``ppo``, ``hiper``) and by no other; and which critic each of those estimators trains
(:data:`CRITIC_ESTIMATORS`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ptgpo_algos.validation import check_bool, check_number, setting, settings_from_mapping
from ptgpo_envs.plugins import Registry

__all__ = ["CRITIC_ESTIMATORS", "CriticSettings", "ValuePasses", "uses_critic", "value_passes"]

_WHERE = "algorithm.critic."
#: The estimators that read a learned critic's values, each mapped to the critic class the trainer builds
#: for it, by import string (``"module:Class"``, imported when a run builds it). An estimator declares its
#: critic where it registers: ``register_estimator(name, critic="my_package.critic:MyCritic")``, a subclass
#: of :class:`~ptgpo_algos.critic.component.Critic` built with ``from_algorithm(algorithm, policy)``.
CRITIC_ESTIMATORS: Registry[type] = Registry("critic-reading estimator")


def uses_critic(estimator: str) -> bool:
    """Whether the estimator named ``estimator`` needs a learned critic (it was registered with one)."""
    return estimator in CRITIC_ESTIMATORS


@dataclass(frozen=True)
class ValuePasses:
    """What a critic's value loss reads, for the memory planner (:mod:`ptgpo_algos.training.memory_plan`): its head's
    outputs per state, and whether, besides the pass over each turn's prompt, a second pass with
    gradients reads into the response (HiPER's low head, at the token closing ``</subgoal>``)."""

    heads: int = 1
    response_pass: bool = False


def value_passes(algorithm: Any) -> ValuePasses | None:
    """The :class:`ValuePasses` of the critic that ``algorithm.name`` trains (its class's
    ``value_passes(algorithm)``, imported now); None for an estimator without one."""
    if not uses_critic(algorithm.name):
        return None
    return CRITIC_ESTIMATORS.get(algorithm.name).value_passes(algorithm)


@dataclass(frozen=True)
class CriticSettings:
    """PPO's critic (``algorithm.critic``): a value head on the policy's last hidden state, its loss and
    its own optimiser settings. The GAE keys (``gamma``, ``lam``, ``norm``) are the ``ppo`` estimator's,
    in ``algorithm.config``."""

    value_coef: float = setting(0.5, "weight of the value loss beside the policy loss (PPO's c1)")
    value_clip: float | None = setting(0.5, "the value clip range c around the rollout-time value (verl's "
                                       "cliprange_value; None: no clip)")
    value_head_lr: float | None = setting(None, "the value head's learning rate, its own optimiser parameter group "
                                          "(None: optim.lr)")
    value_head_weight_decay: float = setting(0.0, "the value head's AdamW weight decay")
    shared_trunk: bool = setting(True, "the value head reads the policy's own last hidden state (false: a separate "
                                 "critic model, a copy of the policy's, trained with the head at value_head_lr)")
    detach_trunk: bool = setting(False, "the value loss trains the head only, not the shared trunk")
    bootstrap_truncated: bool = setting(True, "an episode cut off by the horizon is bootstrapped with the value of "
                                        "its final state (false: treated as terminated, its last value 0)")

    def __post_init__(self) -> None:
        check_number(_WHERE + "value_coef", self.value_coef, 0.0)
        if self.value_clip is not None:
            check_number(_WHERE + "value_clip", self.value_clip, 0.0, exclusive_low=True)
        if self.value_head_lr is not None:
            check_number(_WHERE + "value_head_lr", self.value_head_lr, 0.0, exclusive_low=True)
        check_number(_WHERE + "value_head_weight_decay", self.value_head_weight_decay, 0.0)
        for name in ("shared_trunk", "detach_trunk", "bootstrap_truncated"):
            check_bool(_WHERE + name, getattr(self, name))
        if not self.shared_trunk and self.detach_trunk:
            raise ValueError(f"{_WHERE}detach_trunk: true freezes the trunk the value head reads, but shared_trunk: "
                             "false gives the critic a trunk of its own to train; set one of them back")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CriticSettings:
        """The settings from ``algorithm.critic`` (unknown keys refused, naming the valid ones)."""
        return settings_from_mapping(cls, values, "algorithm.critic")

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain mapping."""
        return dataclasses.asdict(self)
