"""The update stage's sections of the run config: ``algorithm`` (the advantage estimator by name with its
keys, the policy loss, the auxiliary objectives, the critics' settings) and ``optim`` (the step: learning
rate and schedule, PPO passes and batches, KL, entropy, clipping)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ptgpo_algos.advantages import ESTIMATORS
from ptgpo_algos.advantages.config import validate_config
from ptgpo_algos.critic.settings import CriticSettings
from ptgpo_algos.distributed.fsdp_config import FsdpConfig
from ptgpo_algos.hiper.settings import HiperSettings
from ptgpo_algos.objectives.registry import validate_objectives
from ptgpo_algos.updates.loss_registry import COMMON_LOSS_KEYS, LOSS_AGGREGATIONS, LOSSES, get_loss
from ptgpo_algos.updates.optimizer_registry import BUILT_IN_OPTIMIZERS, OPTIMIZERS
from ptgpo_algos.sections import field_labels, option
from ptgpo_algos.validation import check_bool, check_choice, check_int, check_mapping, check_number, check_registered

__all__ = ["AlgorithmConfig", "OptimConfig"]


@dataclass(frozen=True)
class AlgorithmConfig:
    """The advantage estimator (:mod:`ptgpo_algos.advantages`) and the policy loss (:mod:`ptgpo_algos.updates.loss_registry`)."""

    name: str = option("gigpo", "advantage estimator, e.g. grpo, rloo, gigpo, hgpo, ptgpo", flat="algo", flag="algo")
    config: dict[str, Any] = option(help="the estimator's keys (gamma, norm, omega...)", flat="algo_config",
                                    factory=dict)
    loss: str = option("ppo-clip", "policy loss, by name")
    loss_config: dict[str, Any] = option(help="the policy loss's own keys (clip_ratio and clip_ratio_c are optim's)",
                                         flat=False, factory=dict)
    loss_agg: str = option("token-mean", "token-mean (every action unit counts once) or trajectory-mean "
                           "(every trajectory counts once)")
    placebo: bool = option(False, "a negative control: the estimator's advantages randomly permuted over the "
                           "batch's steps each iteration (the same magnitudes, no information)")
    objectives: list[dict[str, Any]] = option(help="auxiliary objectives beside the RL loss, each with its weight "
                                              "and keys, e.g. [{name: isdpo, weight: 1.0}] (isdpo, seed, mcgpo)",
                                              factory=list)
    critic: CriticSettings = option(help="ppo: the learned critic (ptgpo_algos.critic.settings.CriticSettings: "
                                    "value_coef, value_clip, value_head_lr, detach_trunk...)", flat=False,
                                    factory=CriticSettings)
    hiper: HiperSettings = option(help="hiper: its credit and penalties (ptgpo_algos.hiper.settings.HiperSettings)",
                                  flat=False, factory=HiperSettings)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_registered(label("algorithm.name"), self.name, ESTIMATORS))
        config = check_mapping(label("algorithm.config"), self.config)
        try:
            checked = validate_config(ESTIMATORS.get(self.name), config)
        except ValueError as error:
            raise ValueError(f"{label('algorithm.config')}: {error}") from None
        # The keys given, as their rules convert them (a YAML "1e-3" is a number).
        object.__setattr__(self, "config", {key: checked[key] for key in config})
        object.__setattr__(self, "loss", check_registered(label("algorithm.loss"), self.loss, LOSSES))
        object.__setattr__(self, "loss_config", _loss_config(self.loss, self.loss_config))
        check_bool(label("algorithm.placebo"), self.placebo)
        check_choice(label("algorithm.loss_agg"), self.loss_agg, LOSS_AGGREGATIONS)
        object.__setattr__(self, "objectives", validate_objectives(label("algorithm.objectives"),
                                                                   self.objectives))
        if not isinstance(self.critic, CriticSettings):
            object.__setattr__(self, "critic", CriticSettings.from_mapping(self.critic))
        if not isinstance(self.hiper, HiperSettings):
            object.__setattr__(self, "hiper", HiperSettings.from_mapping(self.hiper))


def _loss_config(loss: str, given: Any) -> dict[str, Any]:
    """The policy loss's own keys as given, each converted by its rule (a YAML "1e-3" is a number)."""
    where = label("algorithm.loss_config")
    config = check_mapping(where, given)
    common = sorted(set(config) & set(COMMON_LOSS_KEYS))
    if common:
        raise ValueError(f"{where}: {', '.join(common)} is the optim section's (optim.{common[0]}), for every loss; "
                         "set it there")
    try:
        spec = get_loss(loss)
    except ValueError as error:  # a function registered without following the loss protocol
        raise ValueError(f"{label('algorithm.loss')}: {error}") from None
    try:
        checked = spec.keywords({key: None for key in COMMON_LOSS_KEYS}, config)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return {key: checked[key] for key in config}


@dataclass(frozen=True)
class OptimConfig:
    """The PPO update (:mod:`ptgpo_algos.updates.samples`). ``None`` values take the model's defaults."""

    lr: float | None = option(None, "learning rate [5e-4 tiny, 1e-6 pretrained]", flat="learning_rate", flag="lr")
    optimizer: str = option("adamw", f"optimiser, by name: {' or '.join(BUILT_IN_OPTIMIZERS)} (plain, no "
                            "momentum), or a plugin's (ptgpo_algos.updates.optimizer_registry)", flat=False)
    weight_decay: float = option(0.0, "weight decay: AdamW's decoupled, SGD's an L2 term in the gradient")
    lr_schedule: str = option("constant", "learning-rate schedule over optimiser steps: constant, linear or cosine "
                              "(down to 0 at lr_decay_steps), after a linear warm-up (ptgpo_algos.updates.optimizer)")
    lr_warmup_steps: int = option(0, "optimiser steps of linear warm-up from 0 to lr")
    lr_decay_steps: int | None = option(None, "the optimiser step at which linear and cosine reach 0 (needed by both)")
    clip_ratio: float = option(0.2, "PPO clip range")
    kl_coef: float | None = option(None, "low-variance KL to the initial policy [0 tiny, 0.01 pretrained]")
    entropy_coef: float = option(0.0, "entropy bonus")
    max_grad_norm: float = option(1.0, "gradient clipping norm")
    epochs: int | None = option(None, "PPO passes over each batch [2 tiny, 1 pretrained]", flat="ppo_epochs")
    minibatch_size: int | None = option(None, "steps per mini-batch [512 tiny, 64 pretrained]")
    micro_batch_size: int | None = option(None, "steps per forward/backward pass; a mini-batch's micro-batches "
                                          "accumulate one gradient (None: the whole mini-batch at once)")
    clip_ratio_c: float | None = option(3.0, "dual clip: a negative advantage's unit loss is at most "
                                        "clip_ratio_c x |A| (> 1; null: off)")
    old_logprobs: str = option("auto", "pi_old in the PPO ratio: recompute (the trainer scores the batch without "
                               "gradients before the update, as verl does), rollout (the log-probabilities "
                               "recorded at rollout time) or auto (recompute, unless the trainer itself played "
                               "the rollouts with these weights in float32: then they are its own already)")
    tis_cap: float | None = option(None, "truncated importance sampling between the rollout engine and the "
                                   "trainer: weigh each unit by min(pi_trainer / pi_engine, tis_cap) (not with "
                                   "old_logprobs: rollout; null: off)")
    activation_offload: bool = option(False, "keep the activations saved for the backward in CPU memory "
                                      "(pinned) instead of on the GPU: slower, less GPU memory")
    fsdp: FsdpConfig = option(help="across ranks (--nproc N, torchrun): how FSDP2 shards the model "
                                   "(ptgpo_algos.distributed.fsdp_config.FsdpConfig: param_dtype, reduce_dtype, "
                                   "reshard_after_forward, cpu_offload)", flat=False, factory=FsdpConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.fsdp, FsdpConfig):
            object.__setattr__(self, "fsdp", FsdpConfig.from_dict(self.fsdp))
        if self.lr is not None:
            check_number(label("optim.lr"), self.lr, 0.0, 1.0, exclusive_low=True)
        object.__setattr__(self, "optimizer", check_registered(label("optim.optimizer"), self.optimizer, OPTIMIZERS))
        check_number(label("optim.weight_decay"), self.weight_decay, 0.0)
        check_choice(label("optim.lr_schedule"), self.lr_schedule, ("constant", "linear", "cosine"))
        check_int(label("optim.lr_warmup_steps"), self.lr_warmup_steps, 0)
        if self.lr_decay_steps is not None:
            check_int(label("optim.lr_decay_steps"), self.lr_decay_steps, self.lr_warmup_steps + 1,
                      hint="more than lr_warmup_steps")
        elif self.lr_schedule != "constant":
            raise ValueError(f"{label('optim.lr_decay_steps')}: the {self.lr_schedule} schedule decays to 0 at a "
                             "step: set lr_decay_steps (optimiser steps), or lr_schedule: constant")
        check_number(label("optim.clip_ratio"), self.clip_ratio, 0.0, 1.0, exclusive_low=True)
        if self.kl_coef is not None:
            check_number(label("optim.kl_coef"), self.kl_coef, 0.0)
        check_number(label("optim.entropy_coef"), self.entropy_coef, 0.0)
        check_number(label("optim.max_grad_norm"), self.max_grad_norm, 0.0, exclusive_low=True)
        if self.epochs is not None:
            check_int(label("optim.epochs"), self.epochs, 1)
        if self.minibatch_size is not None:
            check_int(label("optim.minibatch_size"), self.minibatch_size, 1)
        if self.micro_batch_size is not None:
            check_int(label("optim.micro_batch_size"), self.micro_batch_size, 1)
        if self.clip_ratio_c is not None:
            check_number(label("optim.clip_ratio_c"), self.clip_ratio_c, 1.0, exclusive_low=True)
        check_choice(label("optim.old_logprobs"), self.old_logprobs, ("auto", "recompute", "rollout"))
        if self.tis_cap is not None:
            check_number(label("optim.tis_cap"), self.tis_cap, 1.0)
            if self.old_logprobs == "rollout":
                raise ValueError(f"{label('optim.tis_cap')}: truncated importance sampling weighs the trainer's "
                                 "pi_old against the engine's; set old_logprobs: recompute, or tis_cap: null")
        check_bool(label("optim.activation_offload"), self.activation_offload)

    def resolved(self, tiny: bool) -> OptimConfig:
        """The tiny model's measured settings, or a pretrained LLM's, where a field is None.

        The tiny model's values were measured on Household easy: at lr 1e-2 with 64-step mini-batches
        Adam turned its noisy policy gradient into large random policy changes (clip fraction 0.3-0.5)
        and success stalled; 5e-4 over 512-step mini-batches, two passes, rose steadily. Pretrained
        LLMs take the literature's single pass at a small step.
        """
        defaults = {"lr": 5e-4, "kl_coef": 0.0, "epochs": 2, "minibatch_size": 512} if tiny else \
            {"lr": 1e-6, "kl_coef": 0.01, "epochs": 1, "minibatch_size": 64}
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})


#: How messages name a field of this module's sections: its path and the flat name files spell it by.
label = field_labels({"algorithm": AlgorithmConfig, "optim": OptimConfig})
