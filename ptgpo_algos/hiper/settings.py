"""The ``algorithm.hiper`` section (read when ``algorithm.name`` is ``hiper``): HiPER's own settings, at the
values of its published ALFWorld script (JonP07/HiPER-agent, example_scripts/HiPER_trainer/
run_alfworld.sh and the verl config defaults it leaves alone). docs/algorithms/hiper.md gives the
source of each and the WebShop values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ptgpo_algos.validation import check_bool, check_choice, check_number, setting, settings_from_mapping

__all__ = ["HiperSettings", "KEEP_PENALTY_MODES", "check_hiper_run"]

KEEP_PENALTY_MODES = ("fixed", "normalized")


@dataclass(frozen=True)
class HiperSettings:
    """HiPER's settings (``algorithm.hiper``); every value is checked where the section enters."""

    gamma: float = setting(1.0, "discount per environment step, both levels")
    lam_turn: float = setting(1.0, "GAE lambda of the low level (turns inside a segment)")
    lam_seg: float = setting(0.95, "GAE lambda of the high level (over segments)")
    bootstrap_truncated: bool = setting(True, "an episode cut at the step limit bootstraps from its own values "
                                              "(HiPER: true on ALFWorld, false on WebShop)")
    reward_scale: float = setting(10.0, "environment rewards are multiplied by this before the penalties "
                                        "(HiPER's environments pay 10 for a success, PTGPO's pay 1)")
    invalid_penalty: float = setting(0.1, "subtracted from the reward of an invalid turn")
    keep_penalty: float = setting(0.3, "subtracted for KEEP turns (normalized: an episode loses it times its "
                                       "share of KEEP turns); WebShop 3.5")
    keep_penalty_mode: str = setting("normalized", "fixed (each KEEP turn) or normalized")
    consistency_penalty: float = setting(0.3, "subtracted when a KEEP turn rewrites the subgoal")
    normalize: bool = setting(True, "whiten each level's advantages over the batch")
    high_value_coef: float = setting(1.0, "weight of the high value head's loss against the low one's")
    switch_head: bool = setting(True, "a third value head for the switch decision, whose advantage goes to the "
                                      "<switch> tokens (HiPER's released scripts; the paper describes two heads)")
    switch_value_coef: float = setting(1.0, "weight of the switch head's loss")

    def __post_init__(self) -> None:
        check_bool("algorithm.hiper.bootstrap_truncated", self.bootstrap_truncated)
        check_bool("algorithm.hiper.normalize", self.normalize)
        check_bool("algorithm.hiper.switch_head", self.switch_head)
        check_number("algorithm.hiper.gamma", self.gamma, 0.0, 1.0, exclusive_low=True)
        check_number("algorithm.hiper.lam_turn", self.lam_turn, 0.0, 1.0)
        check_number("algorithm.hiper.lam_seg", self.lam_seg, 0.0, 1.0)
        check_number("algorithm.hiper.reward_scale", self.reward_scale, 0.0, math.inf, exclusive_low=True)
        for name in ("invalid_penalty", "keep_penalty", "consistency_penalty", "high_value_coef", "switch_value_coef"):
            check_number(f"algorithm.hiper.{name}", getattr(self, name), 0.0)
        check_choice("algorithm.hiper.keep_penalty_mode", self.keep_penalty_mode, KEEP_PENALTY_MODES)

    @classmethod
    def from_mapping(cls, values: Any) -> HiperSettings:
        """The section from a config's ``hiper:`` mapping (unknown keys are refused by name)."""
        return settings_from_mapping(cls, values, "algorithm.hiper")


def check_hiper_run(mode: str, algorithm: Any, strategy: str) -> None:
    """Refuse, naming the field, what ``algorithm.name: hiper`` cannot run on (``algorithm``: the config's
    section): ``choose`` mode (the policy picks a listed action, so there is no text to hold a switch or a
    subgoal), a loss that takes one advantage per step (HiPER puts each level on its own tokens), a
    rollout strategy that shares steps between episodes (HiPER credits each turn within its episode),
    estimator keys (its own are ``algorithm.hiper``), and the placebo or auxiliary objectives, which
    rewrite each step's advantage where HiPER trains on per-token ones."""
    if mode != "generate":
        raise ValueError(f"policy.mode: hiper needs generate mode (the policy writes <switch>, <subgoal> and <action> "
                         f"blocks; in {mode} mode it only picks a listed action); set policy.mode: generate")
    if algorithm.loss != "ppo-clip":
        raise ValueError(f"algorithm.loss: hiper puts each level's advantage on its own tokens, which only ppo-clip "
                         f"takes; got {algorithm.loss}, set algorithm.loss: ppo-clip")
    if strategy != "linear":
        raise ValueError(f"rollouts.strategy: hiper credits each turn within its own episode, but {strategy} shares "
                         "steps between episodes; set rollouts.strategy: linear")
    if algorithm.config:
        raise ValueError(f"algorithm.config: hiper takes no estimator keys ({', '.join(sorted(algorithm.config))}); "
                         "its discount, lambdas and penalties are algorithm.hiper's")
    for field, given in (("algorithm.placebo", algorithm.placebo), ("algorithm.objectives", algorithm.objectives)):
        if given:
            raise ValueError(f"{field}: it rewrites each step's advantage, but hiper trains on per-token advantages "
                             f"from its critic, which would not follow; leave {field} unset for hiper")
