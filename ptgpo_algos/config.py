"""The training run's configuration: nested frozen sections, validated and resolved once, when built.

A :class:`TrainConfig` is made of sections, each a frozen dataclass that checks its own fields with
one style (:mod:`ptgpo_algos.validation`)::

    env          what to play: environment id, keywords, horizon, training seeds
    algorithm    the advantage estimator (by name, with its keys), the policy loss and its aggregation,
                 the auxiliary objectives beside it
    policy       the model and how it acts: tiny or a Hugging Face model, choose/generate, prompts, dtype
    rollouts     how rollouts are collected: backend, group size, tasks per iteration, linear/tree/patr/3spo/bpo
    optim        the update: learning rate, PPO passes and mini-batches, KL, entropy, clipping
    evaluation   held-out evaluation: how often, which seeds, at which temperature
    run          when to stop, checkpoints, logs, the seed and the output folder
    env_workers  where environments step: in this process, or in worker processes

``TrainConfig.from_dict`` (and ``from_yaml``) take the sections as mappings and dotted keys
(``"optim.lr": 1e-3``). Older config files and run folders spell fields by flat names
(``learning_rate: 1e-3``); they are read too (:data:`FLAT_KEYS`), so every saved config loads. A
field's flat name is its own name unless its metadata names an older one (``flat="learning_rate"``);
fields newer than flat files have none. Messages name a field by its path and flat name
(:func:`label`). One source of settings (a file, a command line) sets a field once, in one spelling
(:func:`check_spellings`); a later source overrides an earlier one in any (:func:`merge_overrides`).
An older config's ``hindsight`` section is read as the ``hindsight`` objective
(``algorithm.objectives``), with the same keys.
Defaults that depend on other fields are resolved once, when the config is built: the tiny model
trains at lr 5e-4 with two PPO passes over 512-step mini-batches, no KL, evaluated sampled at 0.4; a
pretrained LLM at 1e-6, one pass over 64-step mini-batches, KL 0.01, evaluated greedily;
``rollouts.strategy`` is ``tree`` for ptgpo, its own for 3spo and bpo, ``linear`` otherwise; PATR's K
(``rollouts.patr.every``) is the environment's default. A recipe (``policy.recipe``,
:mod:`ptgpo_algos.policy.recipes`) fills in a published protocol's settings and prompt wherever the given
keys say nothing, before those defaults. The saved config holds the resolved values, a prompt template's
text included.

Each field's ``metadata`` carries its help text, its flat name and, for the common ones, its command
line flag: ``ptgpo train``'s options are generated from it (:func:`cli_fields`).

Building a config checks nothing of the machine (a model folder that exists, an optional package, a
writable run folder): a config written on one machine builds on another, and
:mod:`ptgpo_algos.training.preflight` checks the machine when a run starts. The one file it reads is a prompt
template given by path, whose text the config keeps. The components' registries are
read (an estimator's name and keys, a loss, the objectives, a recipe), since their rules convert the
values the config keeps; none of those modules imports this one back.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

from ptgpo_algos.advantages import ESTIMATORS, estimator_defaults
from ptgpo_algos.advantages.config import validate_config
from ptgpo_algos.cost import Budget
from ptgpo_algos.critic.settings import CriticSettings
from ptgpo_algos.hiper.settings import HiperSettings, check_hiper_run
from ptgpo_algos.distributed.fsdp_config import FsdpConfig
from ptgpo_algos.policy.base import ACTION_MODES, SCORE_MODES
from ptgpo_algos.policy.recipes import load_recipe, recipe_names
from ptgpo_algos.policy.templates import PromptTemplate, load_prompt_template
from ptgpo_algos.policy.tiny import TinyModelSpec
from ptgpo_algos.rollouts.collection import BRANCH_STRATEGIES
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, settings_sections
from ptgpo_algos.validation import (
    check_bool,
    check_choice,
    check_int,
    check_mapping,
    check_number,
    check_registered,
    check_string,
    numbers_as_floats,
    settings_from_mapping,
    unknown_keys,
)
from ptgpo_algos.yaml_safe import load_yaml
from ptgpo_envs import check_env_id

__all__ = [
    "EVAL_SEED_BASE", "FLAT_KEYS", "MAX_SEED", "RESUMABLE_FIELDS", "SECTIONS", "AlgorithmConfig", "CliField",
    "EnvConfig", "EnvWorkersConfig", "EvaluationConfig", "OptimConfig", "PolicyConfig",
    "RolloutsConfig", "RunConfig", "SEEDINGS", "TrainConfig", "WandbSettings", "check_spellings", "cli_fields",
    "default_evaluation_temperature", "flat_name", "key_paths", "label", "merge_overrides",
]

#: Evaluation seeds start here by default; training seeds are drawn below it, so they never overlap.
EVAL_SEED_BASE = 1_000_000
#: How one process draws an iteration's rollouts (``rollouts.seeding``): from one generator per task
#: seeded from a seed per task, as the ranks of ``--nproc`` do, or from the run's generators, shared.
SEEDINGS = ("per_task", "shared")

#: The largest run seed (numpy's and torch's seeding accept 32-bit seeds everywhere the run uses one).
MAX_SEED = 2**32 - 1
#: The end of the training seed range: seeds are drawn with numpy's 64-bit integers.
_TRAIN_SEED_STOP = 2**63 - 1
#: Episodes of one iteration (group_size x tasks_per_iteration), of one evaluation, and steps of one
#: episode: far beyond any recipe (128 episodes, 50 steps), and refused before a model is built, since
#: the buffers they size would otherwise be allocated after it (terabytes for a mistyped 1e12).
MAX_EPISODES_PER_ITERATION = 2**20
MAX_STEPS = 1_000_000
#: Tokens of one generated response: beyond every model's context window; a mistyped 1e12 would have a
#: model that never writes its end token generate for ever.
MAX_NEW_TOKENS = 2**24
#: The fields a resumed run may change: they say when to stop (and where the folder is, what it keeps),
#: not what the run does. A resume with any other field changed is refused (:mod:`ptgpo_algos.training.run_folder`).
RESUMABLE_FIELDS = frozenset({"run.iterations", "run.total_decisions", "run.time_limit_s", "run.budget",
                              "run.resume", "run.out_dir", "run.keep_checkpoint", "run.keep_final_model"})


def _field(default: Any = None, help: str = "", *, flat: str | bool = True, flag: str | None = None,
           factory: Any = None) -> Any:
    """A section field with its help text, its command-line flag and the name flat config files spell
    it by (``True``: its own name; a string: an older name; ``False``: none, the field came later)."""
    metadata = {"help": help, "flat": flat, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _rollout_strategy(estimator: str, given: str | None) -> str:
    """The rollout strategy of a run: the one given, else the estimator's own (3SPO's search for
    ``3spo``, the prefix tree for ``ptgpo``), else ``linear``; an estimator that credits what only its
    own strategy records refuses another."""
    own = ESTIMATORS.get(estimator).strategy
    strategy = given or own or ("tree" if estimator == "ptgpo" else "linear")
    if own is not None and strategy != own:
        raise ValueError(f"{label('rollouts.strategy')}: the {estimator} estimator credits what only the {own} "
                         f"strategy records, not {strategy}; set it to {own}")
    return strategy


def _check_slots(strategy: str, rollouts: RolloutsConfig) -> None:
    """A strategy whose groups its own settings size (PATR's, 3SPO's, BPO's), not ``group_size``, declares
    their episodes per task (``slots``): the same bound on an iteration's episodes, checked before
    anything is built."""
    declared = ROLLOUT_STRATEGIES.get(strategy)
    per_task = {} if declared.slots is None else declared.slots(rollouts.settings[declared.settings_key])
    for name, count in per_task.items():
        if count * rollouts.tasks_per_iteration > MAX_EPISODES_PER_ITERATION:
            raise ValueError(f"rollouts.{name}: {count} x tasks_per_iteration {rollouts.tasks_per_iteration} is more "
                             f"than {MAX_EPISODES_PER_ITERATION} episodes an iteration; lower one of them")


def default_evaluation_temperature(tiny: bool) -> float:
    """The evaluation protocol when none is given: sampled at 0.4 for the tiny model, greedy otherwise.

    The tiny model acts on one or two history pairs: greedily it falls into two-step loops (take X /
    put X back) and scored 0.0 on Look tasks where the same weights sampled at 0.4 scored 0.52; on
    Sokoban, 0.0 greedy against 0.20 sampled at 0.4. A pretrained LLM is evaluated greedily, as usual.
    """
    return 0.4 if tiny else 0.0


# ----------------------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class EnvConfig:
    """What to play. Evaluation may play another split of the same environment (ALFWorld's
    eval_in_distribution, WebShop's test goals): ``eval_kwargs`` override ``kwargs`` there."""

    id: str = _field("ptgpo/Household-v0", "environment id, e.g. ptgpo/Household-v0", flat="env_id", flag="env")
    kwargs: dict[str, Any] = _field(help="the environment's keyword arguments", flat="env_kwargs", factory=dict)
    eval_kwargs: dict[str, Any] = _field(help="keywords that override kwargs in evaluation",
                                         flat="eval_env_kwargs", factory=dict)
    max_steps: int | None = _field(None, "episode horizon (default: the environment's)")
    train_seeds: tuple[int, int] = _field((0, EVAL_SEED_BASE), "[start, stop) of the training task seeds")
    held_out: float | None = _field(None, "share of start layouts kept for evaluation: a training seed whose "
                                    "layout falls there is redrawn (none: train on every layout)")

    def __post_init__(self) -> None:
        check_string(label("env.id"), self.id)
        check_env_id(self.id, label("env.id"))
        object.__setattr__(self, "kwargs", check_mapping(label("env.kwargs"), self.kwargs))
        object.__setattr__(self, "eval_kwargs", check_mapping(label("env.eval_kwargs"), self.eval_kwargs))
        if self.max_steps is not None:
            check_int(label("env.max_steps"), self.max_steps, 1, MAX_STEPS)
        seeds = self.train_seeds
        if isinstance(seeds, list):
            seeds = tuple(seeds)
        if (not isinstance(seeds, tuple) or len(seeds) != 2
                or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
                or not 0 <= seeds[0] < seeds[1] <= _TRAIN_SEED_STOP):
            raise ValueError(f"{label('env.train_seeds')}: give [start, stop) with 0 <= start < stop <= 2**63 - 1 "
                             f"(seeds are drawn as 64-bit integers), got {seeds!r}")
        object.__setattr__(self, "train_seeds", seeds)
        if self.held_out is not None:
            check_number(label("env.held_out"), self.held_out, 0.0, 1.0, exclusive_low=True)

    @property
    def evaluation_kwargs(self) -> dict[str, Any]:
        """The keywords in evaluation: ``kwargs`` with ``eval_kwargs`` over them."""
        return {**self.kwargs, **self.eval_kwargs}


@dataclass(frozen=True)
class AlgorithmConfig:
    """The advantage estimator (:mod:`ptgpo_algos.advantages`) and the policy loss (:mod:`ptgpo_algos.updates.losses`)."""

    name: str = _field("gigpo", "advantage estimator, e.g. grpo, rloo, gigpo, hgpo, ptgpo", flat="algo", flag="algo")
    config: dict[str, Any] = _field(help="the estimator's keys (gamma, norm, omega...)", flat="algo_config",
                                    factory=dict)
    loss: str = _field("ppo-clip", "policy loss, by name")
    loss_config: dict[str, Any] = _field(help="the policy loss's own keys (clip_ratio and clip_ratio_c are optim's)",
                                         flat=False, factory=dict)
    loss_agg: str = _field("token-mean", "token-mean (every action unit counts once) or trajectory-mean "
                           "(every trajectory counts once)")
    placebo: bool = _field(False, "a negative control: the estimator's advantages randomly permuted over the "
                           "batch's steps each iteration (the same magnitudes, no information)")
    objectives: list[dict[str, Any]] = _field(help="auxiliary objectives beside the RL loss, each with its weight "
                                              "and keys, e.g. [{name: isdpo, weight: 1.0}] (isdpo, seed, mcgpo)",
                                              factory=list)
    critic: CriticSettings = _field(help="ppo: the learned critic (ptgpo_algos.critic.settings.CriticSettings: "
                                    "value_coef, value_clip, value_head_lr, detach_trunk...)", flat=False,
                                    factory=CriticSettings)
    hiper: HiperSettings = _field(help="hiper: its credit and penalties (ptgpo_algos.hiper.settings.HiperSettings)",
                                  flat=False, factory=HiperSettings)

    def __post_init__(self) -> None:
        # The losses and objectives import torch: imported here, they load only when a config is built,
        # not with every module that names TrainConfig (the leaderboard, the CLI's help).
        from ptgpo_algos.updates.losses import LOSS_AGGREGATIONS, LOSSES
        from ptgpo_algos.objectives import validate_objectives

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
    from ptgpo_algos.updates.losses import COMMON_LOSS_KEYS, get_loss

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
class PolicyConfig:
    """The model and how it acts (:mod:`ptgpo_algos.policy`)."""

    model: str = _field("tiny", "'tiny' (built locally), a pretrained model by name (smollm2; "
                       "`ptgpo models list`), a model folder, a .gguf file or a hub name", flag="model")
    tiny: dict[str, Any] = _field(help="the tiny model's spec (TinyModelSpec fields)", factory=dict)
    mode: str = _field("choose", "choose (score admissible actions) or generate (ReAct text)",
                       flag="mode")
    score: str = _field("mean", "choose mode: a candidate's mean or summed token log-probability")
    temperature: float = _field(1.0, "sampling temperature of rollouts")
    history_length: int = _field(2, "earlier observation/action pairs in the prompt")
    max_prompt_tokens: int = _field(1024, "prompt budget in tokens")
    max_new_tokens: int = _field(128, "generate mode: response budget in tokens")
    device: str = _field("auto", "auto, cpu, cuda or cuda:N")
    dtype: str = _field("auto", "compute dtype: auto (bf16 on GPUs, fp32 on CPUs), float32 or bfloat16; trainable "
                        "weights and the optimiser are float32 always, frozen weights (a LoRA base, the KL "
                        "reference) at this dtype on GPUs, and CPUs compute in float32")
    rollout_dtype: str | None = _field(None, "the dtype rollouts and evaluations compute at (transformers backend): "
                                       "bfloat16 runs them under bf16 autocast, 1.4-3.5x as fast on CPUs with bf16 "
                                       "units (AMX, avx512_bf16), while the update stays at dtype and recomputes "
                                       "pi_old there; null: dtype's compute", flat=False)
    cpu_autocast: bool = _field(False, "on a CPU, compute as a GPU does at dtype bfloat16: forward and backward "
                                "passes (update, rollouts, evaluation) under bf16 autocast and frozen weights in "
                                "bf16, while trainable weights, the optimiser and log-probabilities stay float32; "
                                "for CPUs with bf16 units (AMX, avx512_bf16), where bf16 is faster", flat=False)
    gradient_checkpointing: bool | None = _field(None, "None: on for pretrained models on GPUs")
    lora: dict[str, Any] | None = _field(None, "LoRA adapters (r, alpha, dropout, target_modules); None: full "
                                         "fine-tuning")
    recipe: str | None = _field(None, "a published protocol as defaults and prompts (verl-agent); settings given "
                                "explicitly override it", flag="recipe")
    prompt_template: dict[str, str] | None = _field(None, "a prompt template file (YAML) instead of PTGPO's prompt; "
                                                    "the config keeps its text",
                                                    flag="prompt-template")
    require_think: bool = _field(False, "generate mode: a response without <think>...</think> is an invalid step")
    min_new_tokens: int = _field(0, "generate mode: no response ends before this many tokens (fixed-length "
                                 "benchmarks; 0: any length)")
    logprob_chunk: int = _field(512, "response positions sent through the output layer at a time when scoring "
                                "(memory: about 4 x chunk x vocabulary floats)")
    decode_cache: str = _field("dynamic", "generate mode, transformers rollouts: the KV cache, dynamic or static "
                               "(allocated once at full length: fixed shapes a step)")
    share_prefixes: bool = _field(True, "the update computes each prefix its rows share once (siblings' context, a "
                                  "context's candidates, a group's system text and task); false: every row whole")

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"{label('policy.model')}: give 'tiny', smollm2, a local model folder or a hub name, got "
                             f"{self.model!r}")
        object.__setattr__(self, "tiny", check_mapping(label("policy.tiny"), self.tiny))
        if self.is_tiny:
            unknown_keys(label("policy.tiny"), self.tiny, TinyModelSpec.FIELDS)
            TinyModelSpec(**self.tiny)
        check_choice(label("policy.mode"), self.mode, ACTION_MODES)
        check_choice(label("policy.score"), self.score, SCORE_MODES)
        check_number(label("policy.temperature"), self.temperature, 0.0, exclusive_low=True)
        check_int(label("policy.history_length"), self.history_length, 0)
        check_int(label("policy.max_prompt_tokens"), self.max_prompt_tokens, 1)
        check_int(label("policy.max_new_tokens"), self.max_new_tokens, 1, MAX_NEW_TOKENS)
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ValueError(f"{label('policy.device')}: expected auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype == "float16":
            raise ValueError(f"{label('policy.dtype')}: float16 trains only under loss scaling, which the trainer does "
                             "not do; use bfloat16 (GPUs since Ampere) or float32")
        check_choice(label("policy.dtype"), self.dtype, ("auto", "float32", "bfloat16"))
        if self.rollout_dtype is not None:
            check_choice(label("policy.rollout_dtype"), self.rollout_dtype, ("float32", "bfloat16"))
        check_bool(label("policy.cpu_autocast"), self.cpu_autocast)
        if self.cpu_autocast and self.dtype == "float32":
            raise ValueError(f"{label('policy.cpu_autocast')}: true computes in bfloat16, which policy.dtype: float32 "
                             "contradicts; set dtype to auto or bfloat16, or cpu_autocast to false")
        check_int(label("policy.min_new_tokens"), self.min_new_tokens, 0, self.max_new_tokens,
                  hint="at most max_new_tokens")
        check_int(label("policy.logprob_chunk"), self.logprob_chunk, 1)
        check_choice(label("policy.decode_cache"), self.decode_cache, ("dynamic", "static"))
        check_bool(label("policy.share_prefixes"), self.share_prefixes)
        if self.gradient_checkpointing is not None:
            check_bool(label("policy.gradient_checkpointing"), self.gradient_checkpointing)
        if self.lora is not None:
            object.__setattr__(self, "lora", check_mapping(label("policy.lora"), self.lora))
            targets = self.lora.get("target_modules", "all-linear")
            if "lm_head" in ([targets] if isinstance(targets, str) else list(targets)):
                raise ValueError(f"{label('policy.lora')}: adapters on lm_head are not supported (scores go through "
                                 "the output layer's weight directly); leave lm_head out of target_modules")
        if self.recipe is not None:
            check_choice(label("policy.recipe"), self.recipe, recipe_names())
        if self.prompt_template is not None:
            object.__setattr__(self, "prompt_template", _prompt_template(self.prompt_template))
        check_bool(label("policy.require_think"), self.require_think)

    @property
    def is_tiny(self) -> bool:
        """Whether the policy is the locally built tiny model."""
        return self.model == "tiny"


@dataclass(frozen=True)
class RolloutsConfig:
    """How one iteration's rollouts are collected (:mod:`ptgpo_algos.rollouts.collection`)."""

    backend: str = _field("transformers", "rollout backend: transformers or vllm", flat="rollout_backend")
    vllm: dict[str, Any] = _field(help="vLLM engine arguments", factory=dict)
    sync_tolerance: float | None = _field(None, "after a weight sync, the largest mean |difference| between the "
                                          "engine's log-probabilities of its own sampled tokens and the trainer's "
                                          "(None: 4 x the noise floor measured before the first update, at "
                                          "least 1e-3)")
    sync_bucket_mib: int = _field(1024, "weight sync: MiB of weights per message to the rollout engine (a "
                                  "message may not exceed 4 GiB)")
    strategy: str | None = _field(None, "linear, tree, patr, 3spo or bpo (default: tree for ptgpo, 3spo for 3spo, "
                                  "bpo for bpo, linear otherwise)",
                                  flat="rollout", flag="rollout")
    group_size: int = _field(8, "rollouts per task", flag="group-size")
    initial_rollouts: int | None = _field(None, "tree: independent rollouts before branching (default: half "
                                          "the group)")
    branch: str = _field("uniform", "tree: where to branch (uniform, entropy, novel)")
    settings: dict[str, Any] = _field(help="each rollout strategy's own settings, by the dataclass it declares, "
                                      "written and saved as rollouts.<its section> (rollouts.patr, rollouts.spo3, "
                                      "rollouts.bpo, a plugin's) and read back as attributes of the section; "
                                      "`ptgpo algos` lists them", flat=False, factory=dict)
    tasks_per_iteration: int = _field(8, "tasks (groups) per iteration", flag="tasks")
    asynchronous: bool = _field(False, "collect the next iteration's rollouts in a second process while this one "
                                "trains (one update of policy lag; for CPUs)", flat="async_rollouts",
                                flag="async-rollouts")
    seeding: str = _field("per_task", "one process, synchronous: per_task plays each task with its own generators, "
                          "seeded from a seed per task that the run's generator draws, as every rank of --nproc "
                          "does (the same run on any placement); shared plays all tasks in one batched pass "
                          "drawing from the run's generators (faster on many tasks; how runs recorded before "
                          "per_task played). A resume plays as its run began: a run folder whose config.json "
                          "lacks the field resumes with shared", flat=False)

    def __post_init__(self) -> None:
        check_string(label("rollouts.backend"), self.backend)
        object.__setattr__(self, "vllm", check_mapping(label("rollouts.vllm"), self.vllm))
        if self.sync_tolerance is not None:
            check_number(label("rollouts.sync_tolerance"), self.sync_tolerance, 0.0, exclusive_low=True)
        check_int(label("rollouts.sync_bucket_mib"), self.sync_bucket_mib, 1, 4095,
                  hint="vLLM refuses a message of 4 GiB or more")
        if self.strategy is not None:
            check_choice(label("rollouts.strategy"), self.strategy, tuple(ROLLOUT_STRATEGIES))
        check_int(label("rollouts.group_size"), self.group_size, 2, MAX_EPISODES_PER_ITERATION,
                  hint="group methods compare at least two rollouts of a task")
        if self.initial_rollouts is not None:
            check_int(label("rollouts.initial_rollouts"), self.initial_rollouts, 1, self.group_size)
        check_choice(label("rollouts.branch"), self.branch, BRANCH_STRATEGIES)
        object.__setattr__(self, "settings", _strategy_settings(self.settings))
        check_int(label("rollouts.tasks_per_iteration"), self.tasks_per_iteration, 1,
                  MAX_EPISODES_PER_ITERATION // self.group_size,
                  hint=f"group_size x tasks_per_iteration is at most {MAX_EPISODES_PER_ITERATION} episodes an "
                       "iteration")
        check_bool(label("rollouts.asynchronous"), self.asynchronous)
        check_choice(label("rollouts.seeding"), self.seeding, SEEDINGS)
        if self.asynchronous and self.backend != "transformers":
            raise ValueError(f"{label('rollouts.asynchronous')}: the rollout worker runs a transformers copy of "
                             f"the policy; with backend {self.backend!r} set it to false")
        if self.asynchronous and self.strategy is not None and ROLLOUT_STRATEGIES.get(self.strategy).memory is not None:
            raise ValueError(f"{label('rollouts.asynchronous')}: the {self.strategy} strategy learns from each "
                             "collection before the next one starts, which a collection running ahead cannot; set it "
                             "to false")


    def __getattr__(self, name: str) -> Any:
        # A strategy's settings read as a field of the section: rollouts.patr, rollouts.spo3, a plugin's.
        settings = self.__dict__.get("settings", {})
        if name in settings:
            return settings[name]
        raise AttributeError(f"{type(self).__name__} has no field or strategy settings {name!r}")


def _strategy_settings(given: Any) -> dict[str, Any]:
    """Every registered strategy's settings (its section's defaults where none are given), each built and
    checked by its declared dataclass; a section no strategy declares is refused."""
    given = check_mapping("rollouts", given)
    sections = settings_sections()
    unknown_keys("rollouts", [key for key in given if key not in sections], list(sections))
    built = {}
    for key, strategy in sections.items():
        value = given.get(key, {})
        where = f"rollouts.{key} ({key})" if strategy.flat else f"rollouts.{key}"
        built[key] = value if isinstance(value, strategy.settings) else settings_from_mapping(strategy.settings,
                                                                                                value, where)
    return built


def _gather_strategy_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """The rollouts section's keys with each strategy's settings (``rollouts.patr``...) gathered under the
    ``settings`` field, which a config spells by the sections themselves."""
    fields = [f.name for f in dataclasses.fields(RolloutsConfig) if f.name != "settings"]
    sections = settings_sections()
    clash = sorted(set(fields) & set(sections))
    if clash:
        raise ValueError(f"the rollout strategy {sections[clash[0]].name} names its settings rollouts.{clash[0]}, "
                         "a field of the section; give it another section")
    unknown_keys("rollouts", given, [*fields, *sections])
    gathered = {key: value for key, value in given.items() if key not in sections}
    gathered["settings"] = {key: value for key, value in given.items() if key in sections}
    return gathered


@dataclass(frozen=True)
class OptimConfig:
    """The PPO update (:mod:`ptgpo_algos.updates.samples`). ``None`` values take the model's defaults."""

    lr: float | None = _field(None, "learning rate [5e-4 tiny, 1e-6 pretrained]", flat="learning_rate", flag="lr")
    weight_decay: float = _field(0.0, "AdamW weight decay")
    lr_schedule: str = _field("constant", "learning-rate schedule over optimiser steps: constant, linear or cosine "
                              "(down to 0 at lr_decay_steps), after a linear warm-up (ptgpo_algos.updates.optimizer)")
    lr_warmup_steps: int = _field(0, "optimiser steps of linear warm-up from 0 to lr")
    lr_decay_steps: int | None = _field(None, "the optimiser step at which linear and cosine reach 0 (needed by both)")
    clip_ratio: float = _field(0.2, "PPO clip range")
    kl_coef: float | None = _field(None, "low-variance KL to the initial policy [0 tiny, 0.01 pretrained]")
    entropy_coef: float = _field(0.0, "entropy bonus")
    max_grad_norm: float = _field(1.0, "gradient clipping norm")
    epochs: int | None = _field(None, "PPO passes over each batch [2 tiny, 1 pretrained]", flat="ppo_epochs")
    minibatch_size: int | None = _field(None, "steps per mini-batch [512 tiny, 64 pretrained]")
    micro_batch_size: int | None = _field(None, "steps per forward/backward pass; a mini-batch's micro-batches "
                                          "accumulate one gradient (None: the whole mini-batch at once)")
    clip_ratio_c: float | None = _field(3.0, "dual clip: a negative advantage's unit loss is at most "
                                        "clip_ratio_c x |A| (> 1; null: off)")
    old_logprobs: str = _field("auto", "pi_old in the PPO ratio: recompute (the trainer scores the batch without "
                               "gradients before the update, as verl does), rollout (the log-probabilities "
                               "recorded at rollout time) or auto (recompute, unless the trainer itself played "
                               "the rollouts with these weights in float32: then they are its own already)")
    tis_cap: float | None = _field(None, "truncated importance sampling between the rollout engine and the "
                                   "trainer: weigh each unit by min(pi_trainer / pi_engine, tis_cap) (not with "
                                   "old_logprobs: rollout; null: off)")
    activation_offload: bool = _field(False, "keep the activations saved for the backward in CPU memory "
                                      "(pinned) instead of on the GPU: slower, less GPU memory")
    fsdp: FsdpConfig = _field(help="across ranks (--nproc N, torchrun): how FSDP2 shards the model "
                                   "(ptgpo_algos.distributed.fsdp_config.FsdpConfig: param_dtype, reduce_dtype, "
                                   "reshard_after_forward, cpu_offload)", flat=False, factory=FsdpConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.fsdp, FsdpConfig):
            object.__setattr__(self, "fsdp", FsdpConfig.from_dict(self.fsdp))
        if self.lr is not None:
            check_number(label("optim.lr"), self.lr, 0.0, 1.0, exclusive_low=True)
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


@dataclass(frozen=True)
class EvaluationConfig:
    """Held-out evaluation (:mod:`ptgpo_algos.rollouts.evaluation`)."""

    every: int = _field(10, "evaluate every N iterations", flat="eval_every", flag="eval-every")
    every_fraction: float | None = _field(None, "evaluate instead at the first iteration boundary at or after each "
                                          "multiple of this fraction of the run's budget (0.1: every 10 %; the "
                                          "budget that ends the run, in its own unit); None: every N iterations",
                                          flat=False)
    seeds: list[int] = _field(help="held-out seeds, or a count N for N seeds from 1,000,000", flat="eval_seeds",
                              flag="eval-episodes",
                              factory=lambda: list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + 64)))
    batch_size: int = _field(64, "episodes played side by side", flat="eval_batch_size")
    curve_episodes: int | None = _field(None, "evaluations before the last play the first N seeds only (a cheaper "
                                        "learning curve); the last plays them all (None: all, every time)",
                                        flat="eval_curve_episodes")
    temperature: float | None = _field(None, "sample at this temperature; 0 = greedy [0.4 tiny, 0 pretrained]",
                                       flat="eval_temperature", flag="eval-temperature")

    def __post_init__(self) -> None:
        check_int(label("evaluation.every"), self.every, 1)
        if self.every_fraction is not None:
            check_number(label("evaluation.every_fraction"), self.every_fraction, 0.0, 1.0, exclusive_low=True)
        seeds = self.seeds
        if isinstance(seeds, int) and not isinstance(seeds, bool):
            check_int(label("evaluation.seeds"), seeds, 1, MAX_EPISODES_PER_ITERATION,
                      hint="a count of held-out seeds")
            seeds = list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + seeds))
        if (not isinstance(seeds, (list, tuple)) or not seeds
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
            raise ValueError(f"{label('evaluation.seeds')}: give a non-empty list of non-negative integer seeds, "
                             "or a count")
        object.__setattr__(self, "seeds", list(seeds))
        check_int(label("evaluation.batch_size"), self.batch_size, 1, MAX_EPISODES_PER_ITERATION)
        if self.curve_episodes is not None:
            check_int(label("evaluation.curve_episodes"), self.curve_episodes, 1)
        if self.temperature is not None:
            check_number(label("evaluation.temperature"), self.temperature, 0.0)


#: Weights & Biases' run modes (``disabled``: wandb's calls do nothing).
WANDB_MODES = ("online", "offline", "disabled")


@dataclass(frozen=True)
class WandbSettings:
    """``run.wandb``: where :class:`~ptgpo_algos.training.callbacks.WandbLogger` logs. ``name`` None: the run
    folder's name; ``mode`` None: wandb's own choice (``WANDB_MODE``, else online)."""

    project: str = "ptgpo"
    name: str | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        check_string("run.wandb.project", self.project)
        if self.name is not None:
            check_string("run.wandb.name", self.name)
        if self.mode is not None:
            check_choice("run.wandb.mode", self.mode, WANDB_MODES)

    @classmethod
    def from_mapping(cls, values: Any) -> WandbSettings:
        """The settings from a config's ``run.wandb`` mapping (``{}``: the defaults)."""
        return settings_from_mapping(cls, values, "run.wandb")


@dataclass(frozen=True)
class RunConfig:
    """When to stop, where to write, and the run's seed."""

    iterations: int = _field(100, "maximum number of iterations", flag="iterations")
    total_decisions: int | None = _field(None, "stop once this many policy decisions are spent (a matched "
                                         "budget)", flag="total-decisions")
    time_limit_s: float | None = _field(None, "stop after this many seconds of wall time",
                                        flag="time-limit")
    budget: Budget | None = _field(None, "stop once the run has spent this much in another unit than decisions: "
                                   "{unit: trained_tokens, optimizer_updates, train_cpu_s or gpu_s, amount: N, "
                                   "stop: reached or nearest}: at the first iteration boundary at or after it "
                                   "(reached), or at the boundary nearest it (nearest; ptgpo_algos.cost)", flat=False)
    checkpoint_every: int = _field(10, "checkpoint every N iterations")
    keep_checkpoint: bool = _field(True, "keep checkpoint.pt once the run has finished (false: removed after "
                                   "final_model/ is saved, so a finished run cannot be extended; benchmark cells "
                                   "default to false)")
    keep_final_model: bool = _field(True, "save final_model/ when the run finishes (false: the records and "
                                    "curves are the result; a benchmark of fully fine-tuned 1.5B models keeps "
                                    "3.1 GB a cell otherwise)")
    memory_check: bool = _field(True, "predict the peak GPU memory and the disk a run needs before loading a "
                                "model, and refuse a config that cannot fit (false: print the plan and go on)")
    tensorboard: bool = _field(False, "also write TensorBoard logs", flag="tensorboard")
    wandb: WandbSettings | None = _field(None, "also log to Weights & Biases: {project, name, mode}, each optional "
                                         "(pip install 'ptgpo[wandb]'); None: off", flat=False)
    record_rollouts: int | None = _field(None, "keep every Nth iteration's groups in rollouts/ (`ptgpo export` "
                                         "reads them); None: none", flat=False, flag="record-rollouts")
    seed: int = _field(0, "run seed", flag="seed")
    out_dir: str | None = _field(None, "output folder [runs/<env>-<algo>-s<seed>]", flag="out")
    resume: bool = _field(False, "continue the run in out_dir from its checkpoint", flag="resume")
    reproducible: bool = _field(False, "CPU kernels and one thread that give the same numbers on every x86-64 "
                                "processor (slower; the ptgpo command sets them before torch starts)",
                                flag="reproducible")

    def __post_init__(self) -> None:
        check_int(label("run.iterations"), self.iterations, 1)
        if self.total_decisions is not None:
            check_int(label("run.total_decisions"), self.total_decisions, 1)
        if self.time_limit_s is not None:
            check_number(label("run.time_limit_s"), self.time_limit_s, 0.0, exclusive_low=True)
        if self.budget is not None and not isinstance(self.budget, Budget):
            object.__setattr__(self, "budget", Budget.from_mapping(self.budget))
        check_int(label("run.checkpoint_every"), self.checkpoint_every, 1)
        check_bool(label("run.keep_checkpoint"), self.keep_checkpoint)
        check_bool(label("run.keep_final_model"), self.keep_final_model)
        check_bool(label("run.memory_check"), self.memory_check)
        check_bool(label("run.tensorboard"), self.tensorboard)
        if self.wandb is not None and not isinstance(self.wandb, WandbSettings):
            object.__setattr__(self, "wandb", WandbSettings.from_mapping(self.wandb))
        if self.record_rollouts is not None:
            check_int(label("run.record_rollouts"), self.record_rollouts, 1, hint="every N iterations; null: off")
        check_int(label("run.seed"), self.seed, 0, MAX_SEED)
        if self.out_dir is not None and (not isinstance(self.out_dir, str) or not self.out_dir.strip()):
            raise ValueError(f"{label('run.out_dir')}: expected a folder path (a string), got {self.out_dir!r}")
        check_bool(label("run.resume"), self.resume)
        check_bool(label("run.reproducible"), self.reproducible)


@dataclass(frozen=True)
class EnvWorkersConfig:
    """Where environments step: ``in-process`` (fast environments), ``processes`` (slow engines such as
    ALFWorld, ``num_workers`` worker processes; default one per CPU core) or ``ray`` (``num_workers``
    Ray actors of ``num_cpus`` each, on the cluster at ``address``; default one actor per ``num_cpus``
    of the cluster)."""

    backend: str = _field("in-process", "in-process, processes or ray", flat=False)
    num_workers: int | None = _field(None, "worker processes or Ray actors (processes and ray backends)",
                                     flat=False)
    address: str | None = _field(None, "Ray cluster address (ray backend): auto, ray://host:port, or none "
                                       "for a local cluster", flat=False)
    num_cpus: float = _field(1.0, "CPUs each Ray actor reserves (ray backend)", flat=False)

    def __post_init__(self) -> None:
        check_choice(label("env_workers.backend"), self.backend, ("in-process", "processes", "ray"))
        if self.num_workers is not None:
            check_int(label("env_workers.num_workers"), self.num_workers, 1)
        if self.address is not None:
            check_string(label("env_workers.address"), self.address)
        object.__setattr__(self, "num_cpus", check_number(label("env_workers.num_cpus"), self.num_cpus, 0.0,
                                                          exclusive_low=True))
        if self.backend != "ray" and (self.address is not None or self.num_cpus != 1.0):
            raise ValueError(f"env_workers.address and env_workers.num_cpus are Ray's: set backend: ray, "
                             f"or leave them out (backend is {self.backend!r})")

    @property
    def options(self) -> dict[str, Any]:
        """What :func:`~ptgpo_algos.rollouts.episodes.make_vector_env` passes to the backend."""
        return {"address": self.address, "num_cpus": self.num_cpus} if self.backend == "ray" else {}


#: Section name -> class.
SECTIONS: dict[str, type] = {
    "env": EnvConfig, "algorithm": AlgorithmConfig, "policy": PolicyConfig, "rollouts": RolloutsConfig,
    "optim": OptimConfig, "evaluation": EvaluationConfig, "run": RunConfig, "env_workers": EnvWorkersConfig,
}
#: A section of older configs, read as the objective of the same name (null: off).
LEGACY_HINDSIGHT = "hindsight"


def flat_name(section_field: dataclasses.Field) -> str | None:
    """The name a flat config file spells a section field by, from its metadata (None: it has none)."""
    flat = section_field.metadata.get("flat", True)
    return section_field.name if flat is True else flat or None


#: Flat field names (``learning_rate``) -> their place in the sections: what older flat config files
#: and run folders' ``config.json`` spell, read by :func:`key_paths` and named in messages.
FLAT_KEYS: dict[str, str] = {
    flat_name(f): f"{section}.{f.name}"
    for section, cls in SECTIONS.items() for f in dataclasses.fields(cls) if flat_name(f)
}
_FIELDS: dict[str, dataclasses.Field] = {
    f"{section}.{f.name}": f for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
}

#: Command-line flags that are not config keys themselves (``lr``), with the name a file spells them.
_FLAG_ALIASES: dict[str, str] = {
    f.metadata["flag"]: flat_name(f) or path for path, f in _FIELDS.items()
    if f.metadata.get("flag") and f.metadata["flag"] != flat_name(f)
}


def label(path: str) -> str:
    """How messages name the field at ``path`` (``section.field``, or a strategy's settings
    ``rollouts.patr``): the path, and the flat name files spell it by, e.g. ``optim.lr (learning_rate)``."""
    flat_sections = {place: key for key, place in _flat_strategy_sections().items()}
    flat = flat_sections[path] if path in flat_sections and path not in _FIELDS else flat_name(_FIELDS[path])
    return f"{path} ({flat})" if flat else path


def _flat_strategy_sections() -> dict[str, str]:
    """The strategies' settings that older flat config files spell at the top level (``patr``) -> their place."""
    return {key: f"rollouts.{key}" for key, strategy in settings_sections().items() if strategy.flat}


# ----------------------------------------------------------------------------------------- the config
@dataclass(frozen=True)
class TrainConfig:
    """A whole training run's configuration (see the module docstring)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    rollouts: RolloutsConfig = field(default_factory=RolloutsConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    run: RunConfig = field(default_factory=RunConfig)
    env_workers: EnvWorkersConfig = field(default_factory=EnvWorkersConfig)

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise TypeError(f"TrainConfig.{name} must be a {cls.__name__}, got {type(value).__name__}")
        tiny = self.policy.is_tiny
        strategy = _rollout_strategy(self.algorithm.name, self.rollouts.strategy)
        initial = self.rollouts.initial_rollouts or max(1, self.rollouts.group_size // 2)
        _check_slots(strategy, self.rollouts)
        if self.algorithm.name == "hiper":
            check_hiper_run(self.policy.mode, self.algorithm, strategy)
        settings = dict(self.rollouts.settings)
        declared = ROLLOUT_STRATEGIES.get(strategy)
        if declared.resolve is not None:
            settings[declared.settings_key] = declared.resolve(settings[declared.settings_key], self.env.id)
        object.__setattr__(self, "rollouts", dataclasses.replace(self.rollouts, strategy=strategy,
                                                                 initial_rollouts=initial, settings=settings))
        object.__setattr__(self, "optim", self.optim.resolved(tiny))
        if self.evaluation.temperature is None:
            object.__setattr__(self, "evaluation", dataclasses.replace(
                self.evaluation, temperature=default_evaluation_temperature(tiny)))
        if self.policy.lora is not None:
            from ptgpo_algos.objectives import objective_needs

            name = objective_needs(self.algorithm.objectives).get("full_weights")
            if name is not None:
                raise ValueError(f"{label('algorithm.objectives')}: {name} needs a full copy of the model's weights, "
                                 "which LoRA training (policy.lora) does not keep; train without lora or leave "
                                 f"{name} out")
        start, stop = self.env.train_seeds
        overlap = [s for s in self.evaluation.seeds if start <= s < stop]
        if overlap:
            raise ValueError(f"{label('evaluation.seeds')} overlap env.train_seeds [{start}, {stop}) (e.g. "
                             f"{overlap[0]}): held-out evaluation needs seeds outside the training range")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build from sections, dotted keys and flat names (see the module docstring); ``ValueError``
        names the first bad key and says how to fix it."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a training config is a mapping of field names to values, got {type(data).__name__}")
        values: dict[str, dict[str, Any]] = {}
        hindsight_off = False
        # Whole fields first, then keys inside mapping fields (env.kwargs.difficulty) on top of them.
        items = sorted(((p, v) for k, v in data.items() for p, v in key_paths(k, v)), key=lambda pv: pv[0].count("."))
        for path, item in items:
            section, _, rest = path.partition(".")
            if not rest:  # a section on its own: null turns hindsight off, {} takes its defaults
                if item is None and section == LEGACY_HINDSIGHT:
                    hindsight_off = True
                else:
                    values.setdefault(section, {})
                continue
            known = values.setdefault(section, {})
            name, _, inner = rest.partition(".")
            if inner:
                mapping = known.get(name, {})
                if not isinstance(mapping, Mapping):
                    raise ValueError(f"{section}.{name} is {mapping!r}, not a mapping: {path} cannot be set")
                known[name] = _set_inner(dict(mapping), inner, item)
            elif name in known and known[name] != item:
                raise ValueError(f"{path} is given twice, as {known[name]!r} and {item!r}; keep one")
            else:
                known[name] = item
        if hindsight_off and LEGACY_HINDSIGHT in values:
            raise ValueError("hindsight is both off (null) and set; keep one")
        _read_legacy_hindsight(values)
        _apply_recipe(values)
        sections = {}
        for section, given in values.items():
            section_class = SECTIONS[section]
            if section_class is RolloutsConfig:
                given = _gather_strategy_settings(given)
            unknown_keys(section, given, [f.name for f in dataclasses.fields(section_class)])
            sections[section] = section_class(**numbers_as_floats(section_class, given))
        return cls(**sections)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
        """A YAML file of config keys, with ``overrides`` (dotted or flat keys) on top."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"config file {str(path)!r} does not exist")
        try:
            with path.open(encoding="utf-8") as handle:
                data = load_yaml(handle) or {}
        except yaml.YAMLError as error:
            raise ValueError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: cannot be read ({error})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the YAML must be a mapping of config keys to values")
        try:
            check_spellings((key, value, None) for key, value in data.items())
            return cls.from_dict(merge_overrides(data, overrides or {}))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """The sections as nested plain data (what ``config.json`` holds); ``from_dict`` reads it back."""
        data = dataclasses.asdict(self)
        data["env"]["train_seeds"] = list(self.env.train_seeds)
        # Each strategy's settings in its own key of the section, where the settings field stands.
        data["rollouts"] = {key: value for name, field_value in data["rollouts"].items()
                            for key, value in (field_value.items() if name == "settings" else [(name, field_value)])}
        return data

    def flat_items(self) -> Iterator[tuple[str, Any]]:
        """``(dotted path, value)`` of every field, for comparisons and logs."""
        for section, values in self.to_dict().items():
            if values is None:
                yield section, None
                continue
            for name, value in values.items():
                yield f"{section}.{name}", value

    def replace(self, **paths: Any) -> TrainConfig:
        """A copy with fields changed by dotted path or flat name, e.g. ``replace(**{"policy.model": m})``."""
        return TrainConfig.from_dict(merge_overrides(self.to_dict(), paths))

    # ------------------------------------------------------------------ derived values
    @property
    def run_dir(self) -> Path:
        """The run folder: ``run.out_dir``, else ``runs/<env>-<algorithm>-s<seed>``."""
        if self.run.out_dir:
            return Path(self.run.out_dir)
        return Path("runs") / f"{self.env.id.split('/')[-1]}-{self.algorithm.name}-s{self.run.seed}"


def key_paths(key: str, value: Any) -> list[tuple[str, Any]]:
    """The ``section.field[.key...]`` paths a key sets: a section mapping, a dotted key (of a section,
    or of a flat name: ``tiny.pretrain_steps``) or a flat name. A section alone is a path of its own."""
    if not isinstance(key, str):
        raise ValueError(f"config keys are strings, got {key!r}")
    if key in SECTIONS or key == LEGACY_HINDSIGHT:
        if value is None and key == LEGACY_HINDSIGHT:
            return [(LEGACY_HINDSIGHT, None)]
        section = check_mapping(key, value)
        return [(key, {})] + [(f"{key}.{name}", item) for name, item in section.items()]
    flat_keys = {**FLAT_KEYS, **_flat_strategy_sections()}
    if key in flat_keys:
        return [(flat_keys[key], value)]
    head, _, rest = key.partition(".")
    if rest and (head in SECTIONS or head == LEGACY_HINDSIGHT):
        return [(key, value)]
    if rest and head in flat_keys:
        return [(f"{flat_keys[head]}.{rest}", value)]
    unknown_keys("the training config", [key], [*SECTIONS, *flat_keys], _FLAG_ALIASES)
    return []


def check_spellings(entries: Iterable[tuple[str, Any, str | None]]) -> None:
    """Refuse a field set twice within one source of settings (a config file, one command line, a
    benchmark's policy section): under two spellings (``seed`` and ``run: {seed: ...}``, ``learning_rate``
    and ``optim.lr``), or whole and by a key below it (``env_kwargs`` and ``env.kwargs.difficulty``).
    Which one would win depends on the order keys are read, so neither is taken. Sources layered on each
    other (a flag over the config file) are :func:`merge_overrides`'s, where the later one wins.

    ``entries`` are ``(key, value, place)``: a key in any spelling :func:`key_paths` reads, its value, and
    how a message names where it was given (``--seed``; None: by its spelling in a file).
    """
    places: dict[str, str] = {}
    for key, value, place in entries:
        for path, item in key_paths(key, value):
            if "." not in path and item is not None:
                continue  # a section mentioned: its fields are paths of their own
            where = _place(key, path, place)
            if path in places:
                _refuse_twice(places[path], where, path)
            places[path] = where
    for path, where in places.items():
        parts = path.split(".")
        for end in range(1, len(parts)):
            above = ".".join(parts[:end])
            if above in places:
                _refuse_twice(places[above], where, above)


def _place(key: str, path: str, place: str | None) -> str:
    """Where ``key`` (setting ``path``) was given, as a message names it."""
    section = key in SECTIONS or key == LEGACY_HINDSIGHT
    if place is not None:
        return f"{place} ({path})" if section and path != key else place
    if section and path != key:
        return f"{path} (in the {key} section)"
    return f"{key} (a dotted key)" if "." in key else f"{key} (top level)"


def _refuse_twice(first: str, second: str, path: str) -> None:
    if first == second:
        raise ValueError(f"{first} is given twice; keep one")
    name = label(path) if path in _FIELDS or path in _flat_strategy_sections().values() else path
    raise ValueError(f"{first} and {second} both set {name}; keep one")


def _read_legacy_hindsight(values: dict[str, dict[str, Any]]) -> None:
    """An older config's ``hindsight`` section becomes the ``hindsight`` objective, its keys unchanged,
    after the objectives the config lists."""
    given = values.pop(LEGACY_HINDSIGHT, None)
    if given is None:
        return
    algorithm = values.setdefault("algorithm", {})
    listed = algorithm.get("objectives") or []
    if isinstance(listed, (list, tuple)):
        algorithm["objectives"] = [*listed, {"name": "hindsight", **given}]


def _apply_recipe(values: dict[str, dict[str, Any]]) -> None:
    """Set what the config's recipe sets (:mod:`ptgpo_algos.policy.recipes`) wherever ``values``, the
    settings given, say nothing: given settings win, down to one key of a mapping field."""
    name = values.get("policy", {}).get("recipe")
    if not isinstance(name, str):
        return  # none, or not a name, which policy.recipe's check refuses
    try:
        recipe = load_recipe(name)
    except ValueError as error:
        raise ValueError(f"{label('policy.recipe')}: {error}") from None
    algorithm = values.get("algorithm", {}).get("name", AlgorithmConfig.name)
    estimator_keys = estimator_defaults(algorithm) if algorithm in ESTIMATORS else {}
    for path, value in recipe.defaults(values.get("env", {}).get("id", EnvConfig.id), algorithm).items():
        section, _, rest = path.partition(".")
        field_name, _, key = rest.partition(".")
        given = values.setdefault(section, {})
        if not key:
            given.setdefault(field_name, value)
            continue
        # An estimator key is for the estimators that take it (not every estimator has a gamma).
        takes = (section, field_name) != ("algorithm", "config") or key in estimator_keys
        if takes and isinstance(given.get(field_name, {}), Mapping):
            given[field_name] = {key: value, **given.get(field_name, {})}


def _prompt_template(value: Any) -> dict[str, str]:
    """A template file's text (or a saved template, checked again), as the config keeps it."""
    where = f"{label('policy.prompt_template')}"
    try:
        if isinstance(value, (str, os.PathLike)):
            return load_prompt_template(value).to_mapping()
        return PromptTemplate.from_mapping(value, "the template").to_mapping()
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _set_inner(mapping: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    if rest:
        inner = mapping.get(head, {})
        mapping[head] = _set_inner(dict(inner) if isinstance(inner, Mapping) else {}, rest, value)
    else:
        mapping[head] = value
    return mapping


def merge_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``overrides`` on top, both in any accepted spelling, as paths ``from_dict`` reads.

    A path replaces what was set at or below it (``env.kwargs`` replaces ``env.kwargs.difficulty``); a
    path below a field (``env.kwargs.difficulty``) is merged into it.
    """
    merged: dict[str, Any] = {}
    for source in (data, overrides):
        for key, value in source.items():
            for path, item in key_paths(key, value):
                if "." not in path and item == {}:
                    # A section mentioned adds nothing (its fields follow as paths of their own): it must
                    # not drop the fields set before it by flat names (micro_batch_size, then optim: ...).
                    merged.setdefault(path, {})
                    continue
                merged = {p: v for p, v in merged.items() if not (p == path or p.startswith(path + "."))}
                if path.startswith("hindsight.") and merged.get("hindsight", {}) is None:
                    del merged["hindsight"]  # setting a field turns hindsight on again
                merged[path] = item
    return merged


# ----------------------------------------------------------------------------------------- the CLI
@dataclass(frozen=True)
class CliField:
    """A config field that has a command-line flag."""

    flag: str
    path: str
    type: type
    help: str
    default: Any


def cli_fields() -> list[CliField]:
    """Every field with a ``flag`` in its metadata, in section order: ``ptgpo train``'s options."""
    out = []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            flag = f.metadata.get("flag")
            if not flag:
                continue
            default = f.default if f.default is not dataclasses.MISSING else None
            kind = {"bool": bool, "int": int, "float": float}.get(
                str(f.type).split(" |")[0].replace("None", "").strip(), str)
            if f.name == "seeds":
                kind, default = int, 64  # a count of held-out seeds
            out.append(CliField(flag, f"{section}.{f.name}", kind, f.metadata["help"], default))
    return out
