"""The benchmark config: a YAML grid of environments, methods, baselines and seeds, validated at the edge.

The schema is documented in :mod:`ptgpo_harness.bench`; every problem is a :class:`BenchError` naming the
key and what it should be.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from leaderboard.records import cell_name
from ptgpo_algos.config import check_spellings, key_paths, merge_overrides
from ptgpo_algos.rollouts.settings import MAX_EPISODES_PER_ITERATION
from ptgpo_algos.training.settings import MAX_SEED
from ptgpo_algos.cost import BUDGET_UNITS as COST_BUDGET_UNITS
from ptgpo_algos.cost import STOP_RULES
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES
from ptgpo_algos.validation import (check_choice, check_int, check_list, check_mapping, check_number, check_string,
                                    unknown_keys)
from ptgpo_algos.yaml_safe import load_yaml

__all__ = ["BUDGET_UNITS", "BaselineEntry", "BenchConfig", "BenchError", "DEFAULT_CONFIG_NAME", "EnvironmentEntry", "MethodEntry",
           "default_config_text", "load_config"]

#: The embedded CPU default, shipped inside the package (one source of truth for `ptgpo bench`).
DEFAULT_CONFIG_NAME = "default.yaml"

_QUICK_KEYS = ("name", "budget", "iterations", "seeds", "workers", "policy", "max_eval_episodes")
#: TrainConfig fields the harness sets for each cell (by path); a config that sets them elsewhere is refused.
_SET_PER_CELL = ("env.id", "env.kwargs", "env.max_steps", "env.train_seeds", "algorithm.name", "algorithm.config",
                 "rollouts.strategy", "run.seed", "run.out_dir", "run.resume", "run.total_decisions",
                 "run.budget", "evaluation.seeds")
_TOP_KEYS = ("name", "budget", "budget_unit", "budget_stop", "iterations", "seeds", "workers", "resources", "policy", "environments", "methods",
             "baselines", "quick")
#: What ``budget`` may count: policy decisions, or a cost of :data:`ptgpo_algos.cost.BUDGET_UNITS`.
BUDGET_UNITS = ("decisions", *COST_BUDGET_UNITS)
#: What a cell asks of a Ray cluster (``ptgpo bench --ray``) unless its method or baseline says otherwise.
DEFAULT_RESOURCES = {"cpus": 1.0, "gpus": 0.0}


class BenchError(ValueError):
    """The benchmark config is wrong; the message names the offending key and what it should be."""


# ----------------------------------------------------------------------------------- config model
@dataclass(frozen=True)
class EnvironmentEntry:
    """``train_seeds`` is a range ``[start, stop)``; ``eval_kwargs`` override ``kwargs`` in evaluation,
    as ``TrainConfig.eval_env_kwargs`` does."""

    label: str
    id: str
    kwargs: dict[str, Any]
    train_seeds: tuple[int, int]
    eval_seeds: list[int]
    eval_kwargs: dict[str, Any] | None = None
    max_steps: int | None = None
    #: This environment's budget, in the config's ``budget_unit``.
    budget: float | None = None
    iterations: int | None = None
    #: The share of start layouts kept for evaluation (``held_out``), or None.
    held_out: float | None = None

    @property
    def evaluation_kwargs(self) -> dict[str, Any]:
        """The environment kwargs of evaluation: ``kwargs`` with ``eval_kwargs`` over them."""
        return {**self.kwargs, **(self.eval_kwargs or {})}


@dataclass(frozen=True)
class MethodEntry:
    """An RL method of a benchmark: its label, estimator and estimator config, rollout strategy (``linear``
    or ``tree``) and training overrides."""

    name: str
    algo: str
    algo_config: dict[str, Any]
    rollout: str
    train: dict[str, Any]
    resources: dict[str, float] | None = None  # overrides of the top-level resources, key by key
    #: The method's own seeds (a subset of the config's or others), else the config's ``seeds``.
    seeds: list[int] | None = None


@dataclass(frozen=True)
class BaselineEntry:
    """A baseline of a benchmark: its registered name and options, and the ``label`` its records carry
    (None: the name), so that one baseline may run twice with different options."""

    name: str
    options: dict[str, Any]
    resources: dict[str, float] | None = None
    seeds: list[int] | None = None
    label: str | None = None

    @property
    def method(self) -> str:
        """The name of the baseline's cells and records."""
        return self.label or self.name


@dataclass(frozen=True)
class BenchConfig:
    """A validated benchmark config: its name, default budget (in ``budget_unit``; None where nothing
    trains, or every environment has its own), seeds, policy section, environments, methods and baselines."""

    name: str
    budget: float | None
    seeds: list[int]
    policy: dict[str, Any]
    environments: list[EnvironmentEntry]
    methods: list[MethodEntry]
    baselines: list[BaselineEntry]
    workers: int | None = None
    resources: dict[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    #: The matched budget in training iterations, when RL cells stop by iterations (else by ``budget``).
    iterations: int | None = None
    #: The config's short version (``--quick``): a smoke run, which its tables say they are.
    smoke_run: bool = False
    #: What ``budget`` counts (:data:`BUDGET_UNITS`): decisions, or a cost every RL cell stops at.
    budget_unit: str = "decisions"
    #: Where a cost budget stops an RL cell (:data:`ptgpo_algos.cost.STOP_RULES`).
    budget_stop: str = "reached"

    def cell_seeds(self, entry: MethodEntry | BaselineEntry) -> list[int]:
        """The seeds ``entry`` runs: its own when it gives them (e.g. fewer for secondary methods), else
        the config's."""
        return entry.seeds if entry.seeds is not None else self.seeds

    def cell_resources(self, entry: MethodEntry | BaselineEntry) -> dict[str, float]:
        """What one cell of ``entry`` asks of a Ray cluster: ``cpus`` and ``gpus``."""
        return {**self.resources, **(entry.resources or {})}

    @classmethod
    def from_dict(cls, data: Any, *, quick: bool = False) -> BenchConfig:
        """Validate a parsed YAML config; with ``quick``, apply its ``quick`` section first."""
        try:
            return cls._validated(data, quick)
        except BenchError:
            raise
        except ValueError as error:  # a check of ptgpo_algos.validation: already names the key
            raise BenchError(str(error)) from None

    @classmethod
    def _validated(cls, data: Any, quick: bool) -> BenchConfig:
        data = check_mapping("the config", data)
        unknown_keys("the config", data, _TOP_KEYS)
        data = copy.deepcopy(data)
        quick_section = check_mapping("quick", data.pop("quick", {}) or {})
        unknown_keys("quick", quick_section, _QUICK_KEYS)
        max_eval = None
        if quick:
            quick_section = dict(quick_section)
            max_eval = quick_section.pop("max_eval_episodes", None)
            if max_eval is not None:
                max_eval = check_int("quick.max_eval_episodes", max_eval, 1)
            policy_overrides = _train_fields(quick_section.pop("policy", {}) or {}, "quick.policy")
            data["policy"] = _quick_policy(_train_fields(data.get("policy", {}) or {}, "policy"), policy_overrides)
            data.update(quick_section)
            data["name"] = quick_section.get("name", f"{data.get('name', 'bench')}-quick")

        name = _folder_name(check_string("name", data.get("name")))
        unit, budget, stop = _budget_settings(data)
        seeds = _seeds(data.get("seeds"), "seeds")
        workers = data.get("workers")
        if workers is not None:
            workers = check_int("workers", workers, 1)
        resources = {**DEFAULT_RESOURCES, **_resources(data.get("resources", {}), "resources")}
        policy = _not_per_cell(_train_fields(data.get("policy", {}) or {}, "policy"), "policy")

        environments = [
            _environment(entry, f"environments[{i}]", max_eval, unit)
            for i, entry in enumerate(check_list("environments", data.get("environments"), non_empty=True))
        ]
        stopping = {"budget", "iterations"} & set(quick_section) if quick else set()
        if stopping:
            # A quick run is small everywhere: its budget replaces the environments' own, and a quick
            # decision budget alone ends its RL cells too.
            environments = [dataclasses.replace(env, iterations=None, budget=None if "budget" in stopping
                                                else env.budget) for env in environments]
            iterations = quick_section.get("iterations")
        else:
            iterations = data.get("iterations")
        if iterations is not None:
            iterations = check_int("iterations", iterations, 1)
        if unit != "decisions" and (iterations is not None or any(env.iterations is not None for env in environments)):
            raise BenchError(f"iterations and budget_unit: {unit} both end the RL cells; keep one of them")
        methods = [_method(entry, f"methods[{i}]") for i, entry in enumerate(check_list("methods", data.get("methods", []) or []))]
        baselines = [_baseline(entry, f"baselines[{i}]") for i, entry in enumerate(check_list("baselines", data.get("baselines", []) or []))]
        if quick and "seeds" in quick_section:
            # A quick run's seeds are every method's: it is a smoke run of the whole grid.
            methods = [dataclasses.replace(m, seeds=None) for m in methods]
            baselines = [dataclasses.replace(b, seeds=None) for b in baselines]
        if not methods and not baselines:
            raise BenchError("methods, baselines: expected at least one method or baseline between them, got none")
        _budget_where_trained(budget, environments, methods, baselines, iterations)
        _unique([e.label for e in environments], "environments[].label")
        _unique([m.name for m in methods] + [b.method for b in baselines], "method and baseline names (or labels)")
        _distinct_files([e.label for e in environments], [m.name for m in methods] + [b.method for b in baselines])
        if iterations is not None or any(env.iterations is not None for env in environments):
            _iterations_once(policy, methods)
        return cls(name, budget, seeds, policy, environments, methods, baselines, workers, resources, iterations, quick,
                   unit, stop)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data; an iteration budget appears only where one is set (so a results
        folder of a config without one still resumes)."""
        data = asdict(self)
        del data["smoke_run"]  # the folder says so itself (leaderboard.aggregate.SMOKE_MARKER)
        # Defaults left out, so that a results folder written before these keys existed still resumes.
        if data["budget_unit"] == "decisions":
            del data["budget_unit"]
        if data["budget_stop"] == "reached":
            del data["budget_stop"]
        if data["budget"] is None:  # nothing trains, or every environment has its own
            del data["budget"]
        for entry in [data, *data["environments"]]:
            if entry["iterations"] is None:
                del entry["iterations"]
        for entry in data["environments"]:
            if entry["held_out"] is None:
                del entry["held_out"]
        for entry in data["methods"] + data["baselines"]:
            if entry["seeds"] is None:
                del entry["seeds"]
        for entry in data["baselines"]:
            if entry["label"] is None:
                del entry["label"]
        return data


def _iterations_once(policy: dict[str, Any], methods: list[MethodEntry]) -> None:
    """An iteration budget is the bench's: the policy section and the methods may not set their own."""
    for where, fields in [("policy", policy)] + [(f"methods[{m.name}].train", m.train) for m in methods]:
        paths = [path for key, value in fields.items() for path, _ in key_paths(key, value)]
        if "run.iterations" in paths:
            raise BenchError(f"{where} sets iterations, and so does the bench's iteration budget (iterations); "
                             "keep the top-level iterations, which every RL cell runs")


def _budget_where_trained(budget: float | None, environments: list[EnvironmentEntry], methods: list[MethodEntry],
                          baselines: list[BaselineEntry], iterations: int | None) -> None:
    """Without a top-level ``budget``, refuse a config where something trains on an environment without
    a budget of its own (a method, unless an iteration budget ends it; a baseline that trains), naming
    them; a bench that only evaluates needs none."""
    from baselines.registry import BASELINES

    if budget is not None:
        return
    trained = [f"baselines: {b.method}" for b in baselines if BASELINES.get(b.name).trains]
    for i, env in enumerate(environments):
        by_iterations = iterations is not None or env.iterations is not None
        training = ([] if by_iterations or not methods else [f"methods: {', '.join(m.name for m in methods)}"]) + trained
        if training and env.budget is None:
            raise BenchError(f"budget: required when a cell trains ({'; '.join(training)}), and environments[{i}] "
                             f"({env.label}) has no budget of its own; set the top-level budget (what each training "
                             "cell spends, in budget_unit) or that environment's")


def _budget_settings(data: dict[str, Any]) -> tuple[str, float | None, str]:
    """The config's ``budget_unit``, ``budget`` (None when not given: checked against what trains once
    the methods are read) and ``budget_stop``."""
    unit = check_choice("budget_unit", data.get("budget_unit", "decisions"), BUDGET_UNITS)
    stop = check_choice("budget_stop", data.get("budget_stop", "reached"), STOP_RULES)
    if stop != "reached" and unit == "decisions":
        raise BenchError("budget_stop: a budget of decisions is spent exactly; budget_stop applies to a "
                         "budget_unit of cost (train_cpu_s...)")
    budget = data.get("budget")
    return unit, None if budget is None else _budget("budget", budget, unit), stop


def _budget(where: str, value: Any, unit: str) -> float:
    """A budget in ``unit``: a whole number of decisions, or a positive amount of a cost."""
    if unit == "decisions":
        return check_int(where, value, 1)
    return check_number(where, value, 0.0, exclusive_low=True)


def _seeds(value: Any, where: str) -> list[int]:
    """A non-empty list of distinct run seeds."""
    seeds = _int_list(value, where, high=MAX_SEED)
    if len(set(seeds)) != len(seeds):
        raise BenchError(f"{where}: expected distinct seeds, got {seeds!r}")
    return seeds


def _own_seeds(entry: dict[str, Any], where: str) -> list[int] | None:
    return _seeds(entry["seeds"], f"{where}.seeds") if "seeds" in entry else None


def _int_list(value: Any, where: str, high: int | None = None) -> list[int]:
    """A non-empty list of integers in ``[0, high]``."""
    items = check_list(where, value, non_empty=True)
    return [check_int(f"{where}[{i}]", item, 0, high) for i, item in enumerate(items)]


def _resources(value: Any, where: str) -> dict[str, float]:
    """``{cpus: 1, gpus: 0}``, either key optional: what a cell asks of a Ray cluster."""
    value = check_mapping(where, value or {})
    unknown_keys(where, value, tuple(DEFAULT_RESOURCES))
    return {key: check_number(f"{where}.{key}", amount, 0.0) for key, amount in value.items()}


def _train_fields(value: Any, where: str) -> dict[str, Any]:
    """Training config keys of one place of the benchmark config (the policy section, a method's train),
    each field set once (:func:`~ptgpo_algos.config.check_spellings`)."""
    fields = check_mapping(where, value)
    try:
        check_spellings((key, item, None) for key, item in fields.items())
    except ValueError as error:
        raise BenchError(f"{where}: {error}") from None
    return fields


def _quick_policy(policy: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``quick.policy`` over ``policy``. Where each key of the one replaces the same key of the other, the
    keys as written (which results folders of quick runs hold); where they spell a field differently or
    share a section (``optim: {lr: ...}`` over ``optim: {epochs: ...}``), merged field by field, so that
    what ``policy`` sets and ``quick.policy`` does not is kept."""
    written = {**policy, **overrides}
    layered = merge_overrides(policy, overrides)
    return written if merge_overrides({}, written) == layered else layered


def _not_per_cell(train_fields: dict[str, Any], where: str) -> dict[str, Any]:
    for key, value in train_fields.items():
        try:
            paths = [path for path, _ in key_paths(key, value)]
        except ValueError as error:
            raise BenchError(f"{where}: {error}") from None
        if any(path.startswith(cell) for path in paths for cell in _SET_PER_CELL):
            raise BenchError(
                f"{where}.{key} is set per cell by the harness; set it under environments, methods, "
                "seeds or budget instead"
            )
    return train_fields


def _unique(names: list[str], where: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise BenchError(f"{where}: expected unique names, {name!r} appears twice")
        seen.add(name)


def _folder_name(name: str) -> str:
    """The config's name, which names its folder under bench_results/: one plain folder name, so that
    a name such as ``../x`` or ``/x`` cannot place the results elsewhere."""
    if not _FOLDER_NAME.fullmatch(name):
        raise BenchError(f"name: expected a folder name of letters, digits and . _ + - (it names "
                         f"bench_results/<name>/), not starting with '.', got {name!r}")
    return name


_FOLDER_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")


def _distinct_files(labels: list[str], methods: list[str]) -> None:
    """Every (environment, method) pair gets a record file of its own: file names keep only letters,
    digits and . _ + -, so two pairs that differ only elsewhere would overwrite each other's records."""
    first: dict[str, tuple[str, str]] = {}
    for label in labels:
        for method in methods:
            other = first.setdefault(cell_name(label, method, 0), (label, method))
            if other != (label, method):
                raise BenchError(
                    f"environment {other[0]!r} with method {other[1]!r} and environment {label!r} with method "
                    f"{method!r} would write the same record file ({cell_name(label, method, 0)}.json: file names "
                    "keep only letters, digits and . _ + -); rename one so that they differ in those characters"
                )


def _seed_range(value: Any, where: str, most: int | None = None) -> tuple[int, int]:
    """``{start: 0, count: 100}`` -> ``(0, 100)``, at most ``most`` seeds."""
    if not isinstance(value, dict):
        raise BenchError(f"{where}: expected a range {{start: S, count: N}}, got {value!r}")
    unknown_keys(where, value, ("start", "count"))
    start = check_int(f"{where}.start", value.get("start", 0), 0)
    count = check_int(f"{where}.count", value.get("count"), 1, most)
    return start, start + count


def _eval_range(value: Any, where: str) -> tuple[int, int]:
    """An ``eval_seeds`` range: each of its seeds is an episode played, so the count is bounded as a training
    config's count of evaluation seeds is."""
    return _seed_range(value, where, MAX_EPISODES_PER_ITERATION)


def _seed_set(value: Any, where: str) -> list[int]:
    """``[3, 5, 8]`` or ``{start: 0, count: 100}`` of evaluation seeds."""
    if isinstance(value, dict):
        return list(range(*_eval_range(value, where)))
    return _int_list(value, where)


def _environment(entry: Any, where: str, max_eval: int | None, unit: str) -> EnvironmentEntry:
    import ptgpo_envs

    entry = check_mapping(where, entry)
    unknown_keys(where, entry, ("label", "id", "kwargs", "eval_kwargs", "max_steps", "train_seeds", "eval_seeds", "budget",
                        "iterations", "held_out"))
    env_id = check_string(f"{where}.id", entry.get("id"))
    if env_id not in ptgpo_envs.env_ids():
        raise BenchError(f"{where}.id: unknown environment {env_id!r}; registered: {', '.join(ptgpo_envs.env_ids())}")
    train = _seed_range(entry.get("train_seeds"), f"{where}.train_seeds")
    share = entry.get("held_out")
    if share is not None:
        share = check_number(f"{where}.held_out", share, 0.0, 1.0, exclusive_low=True)
        evaluation = _held_out_seeds(entry, share, where, max_eval)
    else:
        evaluation = _seed_set(entry.get("eval_seeds"), f"{where}.eval_seeds")
    # Seeds index tasks, so held-out evaluation needs seeds outside the training range (even with
    # eval_kwargs: an environment may map seeds of every split onto the same task list).
    overlap = [seed for seed in evaluation if train[0] <= seed < train[1]]
    if overlap:
        raise BenchError(
            f"{where}: {len(overlap)} eval_seeds (e.g. {overlap[0]}) fall in train_seeds "
            f"[{train[0]}, {train[1]}); evaluation must use held-out tasks"
        )
    if max_eval is not None:
        evaluation = evaluation[:max_eval]
    max_steps = entry.get("max_steps")
    if max_steps is not None:
        max_steps = check_int(f"{where}.max_steps", max_steps, 1)
    eval_kwargs = entry.get("eval_kwargs")
    if eval_kwargs is not None:
        eval_kwargs = dict(check_mapping(f"{where}.eval_kwargs", eval_kwargs))
    budget = entry.get("budget")
    if budget is not None:
        budget = _budget(f"{where}.budget", budget, unit)
    iterations = entry.get("iterations")
    if iterations is not None:
        iterations = check_int(f"{where}.iterations", iterations, 1)
    return EnvironmentEntry(
        label=check_string(f"{where}.label", entry.get("label", env_id)),
        id=env_id,
        kwargs=dict(check_mapping(f"{where}.kwargs", entry.get("kwargs", {}) or {})),
        train_seeds=train,
        eval_seeds=evaluation,
        eval_kwargs=eval_kwargs,
        max_steps=max_steps,
        budget=budget,
        iterations=iterations,
        held_out=share,
    )


def _held_out_seeds(entry: dict[str, Any], share: float, where: str, max_eval: int | None) -> list[int]:
    """The evaluation seeds of an environment with ``held_out``: of ``eval_seeds`` (a list), those whose
    start layout falls in the held-out share; of a range ``{start, count}``, the first ``count`` from
    ``start`` that do. Training redraws the seeds that do, so no evaluation layout is trained on."""
    from ptgpo_envs import make_env
    from ptgpo_envs import held_out

    seeds = entry.get("eval_seeds")
    kwargs = {**check_mapping(f"{where}.kwargs", entry.get("kwargs") or {}),
              **check_mapping(f"{where}.eval_kwargs", entry.get("eval_kwargs") or {})}
    max_steps = entry.get("max_steps")
    env = make_env(entry["id"], kwargs, None if max_steps is None else check_int(f"{where}.max_steps", max_steps, 1))
    try:
        def kept(seed: int) -> bool:
            return held_out(env.reset(seed=seed)[1]["layout"], share)

        if not isinstance(seeds, dict):
            return [seed for seed in _int_list(seeds, f"{where}.eval_seeds") if kept(seed)][:max_eval]
        start, stop = _eval_range(seeds, f"{where}.eval_seeds")
        count = stop - start if max_eval is None else min(stop - start, max_eval)
        found, seed = [], start
        # A share of p needs about count / p seeds; far more means the share holds almost no layout.
        while len(found) < count:
            if seed - start > 100 * count / share:
                raise BenchError(f"{where}.held_out: only {len(found)} of the seeds {start}..{seed} start in the "
                                 f"held-out share {share} of layouts; raise the share")
            if kept(seed):
                found.append(seed)
            seed += 1
        return found
    finally:
        env.close()


def _method(entry: Any, where: str) -> MethodEntry:
    entry = check_mapping(where, entry)
    unknown_keys(where, entry, ("name", "algo", "algo_config", "rollout", "train", "resources", "objectives", "seeds"))
    algo = check_string(f"{where}.algo", entry.get("algo"))
    rollout = check_choice(f"{where}.rollout", entry.get("rollout", "linear"), tuple(ROLLOUT_STRATEGIES))
    train = _not_per_cell(_train_fields(entry.get("train", {}) or {}, f"{where}.train"), f"{where}.train")
    if "objectives" in entry:
        train = _with_objectives(train, entry["objectives"], where)
    return MethodEntry(
        name=check_string(f"{where}.name", entry.get("name", algo)),
        algo=algo,
        algo_config=dict(check_mapping(f"{where}.algo_config", entry.get("algo_config", {}) or {})),
        rollout=rollout,
        train=train,
        resources=_resources(entry["resources"], f"{where}.resources") if "resources" in entry else None,
        seeds=_own_seeds(entry, where),
    )


def _with_objectives(train: dict[str, Any], objectives: Any, where: str) -> dict[str, Any]:
    """A method's ``objectives`` (auxiliary losses beside its estimator, ``ptgpo_algos.objectives``), checked
    now and put among its training settings."""
    from ptgpo_algos.objectives import validate_objectives

    if any(path == "algorithm.objectives" for key, value in train.items() for path, _ in key_paths(key, value)):
        raise BenchError(f"{where}: objectives are given both as {where}.objectives and in {where}.train; keep one")
    return {**train, "algorithm.objectives": validate_objectives(f"{where}.objectives", objectives)}


def _baseline(entry: Any, where: str) -> BaselineEntry:
    from baselines.registry import BASELINES

    if isinstance(entry, str):
        entry = {"name": entry}
    entry = check_mapping(where, entry)
    unknown_keys(where, entry, ("name", "label", "options", "resources", "seeds"))
    name = check_string(f"{where}.name", entry.get("name"))
    if name not in BASELINES:
        raise BenchError(f"{where}.name: unknown baseline {name!r}; available: {', '.join(BASELINES)}")
    label = check_string(f"{where}.label", entry["label"]) if "label" in entry else None
    resources = _resources(entry["resources"], f"{where}.resources") if "resources" in entry else None
    return BaselineEntry(name, dict(check_mapping(f"{where}.options", entry.get("options", {}) or {})), resources,
                         _own_seeds(entry, where), label)


def default_config_text() -> str:
    """The text of the embedded CPU benchmark config (what ``ptgpo bench --print-default`` prints)."""
    return resources.files("ptgpo_harness.bench").joinpath(DEFAULT_CONFIG_NAME).read_text(encoding="utf-8")


def load_config(path: str | os.PathLike | None = None, *, quick: bool = False) -> BenchConfig:
    """Read and validate a YAML benchmark config; ``None`` loads the embedded CPU default."""
    if path is None:
        text, where = default_config_text(), f"the embedded default ({DEFAULT_CONFIG_NAME})"
    else:
        path = Path(path)
        if not path.is_file():
            raise BenchError(f"benchmark config {path} does not exist (see configs/bench/ for examples)")
        text, where = path.read_text(encoding="utf-8"), str(path)
    try:
        data = load_yaml(text, name=where)
    except yaml.YAMLError as error:
        raise BenchError(f"{where} is not valid YAML: {' '.join(str(error).split())}") from None
    try:
        return BenchConfig.from_dict(data, quick=quick)
    except BenchError as error:
        raise BenchError(f"{where}: {error}") from None
