"""The training run's configuration: the stages' sections composed, read from files and checked once, when built.

A :class:`TrainConfig` is made of sections, each a frozen dataclass that lives beside the stage it
configures and checks its own fields with one style (:mod:`ptgpo_algos.validation`,
:mod:`ptgpo_algos.sections`)::

    env          what to play: environment id, keywords, horizon, training seeds (here: every stage reads it)
    algorithm    the advantage estimator (by name, with its keys), the policy loss and its aggregation,
                 the auxiliary objectives beside it                          (ptgpo_algos.updates.settings)
    policy       the model and how it acts: tiny or a Hugging Face model, choose/generate, prompts, dtype
                                                                             (ptgpo_algos.policy.settings)
    rollouts     how rollouts are collected: backend, group size, tasks per iteration, the strategy and
                 each strategy's own settings                                (ptgpo_algos.rollouts.settings)
    optim        the update: learning rate, PPO passes and mini-batches, KL, entropy, clipping
                                                                             (ptgpo_algos.updates.settings)
    evaluation   held-out evaluation: how often, which seeds, at which temperature (ptgpo_algos.rollouts.settings)
    run          when to stop, checkpoints, logs, the seed and the output folder (ptgpo_algos.training.settings)
    env_workers  where environments step: in this process, or in worker processes (ptgpo_algos.rollouts.settings)

This module composes them: the rules that span sections (the strategy an estimator needs, evaluation
seeds outside the training range, an objective that needs full weights), the defaults that depend on
other fields, and reading keys in every spelling.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

from ptgpo_algos.advantages import ESTIMATORS, estimator_defaults
from ptgpo_algos.hiper.settings import check_hiper_run
from ptgpo_algos.policy.recipes import load_recipe
from ptgpo_algos.policy.settings import PolicyConfig
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, settings_sections
from ptgpo_algos.rollouts.settings import (
    EVAL_SEED_BASE,
    SEEDINGS,
    EnvWorkersConfig,
    EvaluationConfig,
    RolloutsConfig,
    check_slots,
    default_evaluation_temperature,
    gather_strategy_settings,
)
from ptgpo_algos.sections import flat_name, option
from ptgpo_algos.training.settings import MAX_SEED, RESUMABLE_FIELDS, RunConfig, WandbSettings
from ptgpo_algos.updates.settings import AlgorithmConfig, OptimConfig
from ptgpo_algos.validation import check_int, check_mapping, check_number, check_string, numbers_as_floats, unknown_keys
from ptgpo_algos.yaml_safe import load_yaml
from ptgpo_envs import check_env_id

# The sections are the stages' (each checks its own fields); they are named here too, as the config's parts.
__all__ = [
    "EVAL_SEED_BASE", "FLAT_KEYS", "MAX_SEED", "MAX_STEPS", "RESUMABLE_FIELDS", "SECTIONS", "AlgorithmConfig",
    "CliField", "EnvConfig", "EnvWorkersConfig", "EvaluationConfig", "OptimConfig", "PolicyConfig",
    "RolloutsConfig", "RunConfig", "SEEDINGS", "TrainConfig", "WandbSettings", "check_spellings", "cli_fields",
    "default_evaluation_temperature", "flat_name", "key_paths", "label", "merge_overrides",
]

#: The end of the training seed range: seeds are drawn with numpy's 64-bit integers.
_TRAIN_SEED_STOP = 2**63 - 1
#: Steps of one episode: far beyond any recipe (50 steps), refused before a model is built.
MAX_STEPS = 1_000_000


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


# ----------------------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class EnvConfig:
    """What to play. Evaluation may play another split of the same environment (ALFWorld's
    eval_in_distribution, WebShop's test goals): ``eval_kwargs`` override ``kwargs`` there."""

    id: str = option("ptgpo/Household-v0", "environment id, e.g. ptgpo/Household-v0", flat="env_id", flag="env")
    kwargs: dict[str, Any] = option(help="the environment's keyword arguments", flat="env_kwargs", factory=dict)
    eval_kwargs: dict[str, Any] = option(help="keywords that override kwargs in evaluation",
                                         flat="eval_env_kwargs", factory=dict)
    max_steps: int | None = option(None, "episode horizon (default: the environment's)")
    train_seeds: tuple[int, int] = option((0, EVAL_SEED_BASE), "[start, stop) of the training task seeds")
    held_out: float | None = option(None, "share of start layouts kept for evaluation: a training seed whose "
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


#: Section name -> class.
SECTIONS: dict[str, type] = {
    "env": EnvConfig, "algorithm": AlgorithmConfig, "policy": PolicyConfig, "rollouts": RolloutsConfig,
    "optim": OptimConfig, "evaluation": EvaluationConfig, "run": RunConfig, "env_workers": EnvWorkersConfig,
}
#: A section of older configs, read as the objective of the same name (null: off).
LEGACY_HINDSIGHT = "hindsight"


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
        check_slots(strategy, self.rollouts)
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
                given = gather_strategy_settings(given)
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
