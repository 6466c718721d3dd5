"""The cells of a benchmark grid, and the checks a run makes before its first cell."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from leaderboard.records import cell_name
from ptgpo_harness.bench.config import DEFAULT_RESOURCES, BenchConfig, BenchError, EnvironmentEntry
from ptgpo_algos.config import merge_overrides
from ptgpo_algos.yaml_safe import load_yaml

__all__ = ["Cell", "check_out_dir", "check_train_configs", "plan_cells"]

#: Iterations of a benchmark run: uncapped, so that the decision budget ends it.
_UNCAPPED_ITERATIONS = 1_000_000


@dataclass(frozen=True)
class Cell:
    """One (environment, method, seed) run. ``spec`` is what the cell runs with, stored in its record:
    the TrainConfig fields for an RL cell, the baseline's job for a baseline cell."""

    name: str
    kind: str  # "rl" | "baseline"
    method: str
    env: EnvironmentEntry
    seed: int
    budget: float | None
    spec: dict[str, Any] = field(default_factory=dict)
    #: What the cell asks of a Ray cluster (``cpus``, ``gpus``); the local pool runs one per worker.
    resources: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    budget_unit: str = "decisions"
    recipe: str | None = None  # the policy section's, for the records of cells that build no config


def plan_cells(config: BenchConfig) -> list[Cell]:
    """Every cell of the grid, environment-major, RL methods before baselines, seeds innermost."""
    from baselines.registry import BASELINES

    cells = []
    recipe = merge_overrides({}, config.policy).get("policy.recipe")
    for env in config.environments:
        env_budget = env.budget if env.budget is not None else config.budget
        iterations = env.iterations if env.iterations is not None else config.iterations
        # A method's own settings override the policy section's.
        unit, rl_budget, stop = _stopping(config, env_budget, iterations)
        for method in config.methods:
            for seed in config.cell_seeds(method):
                # A finished cell's checkpoint (18.5 GB for a fully trained 1.5B model) is removed unless
                # the policy section keeps it: a benchmark's disk holds final models, not optimiser states.
                spec = merge_overrides(merge_overrides({"iterations": iterations or _UNCAPPED_ITERATIONS,
                                                        "keep_checkpoint": False}, config.policy), method.train)
                spec.update({
                    "env_id": env.id,
                    "env_kwargs": env.kwargs,
                    "max_steps": env.max_steps,
                    "algo": method.algo,
                    "algo_config": method.algo_config,
                    "rollout": method.rollout,
                    **stop,
                    "train_seeds": list(env.train_seeds),
                    "eval_seeds": env.eval_seeds,
                    "seed": seed,
                })
                if env.eval_kwargs is not None:
                    spec["eval_env_kwargs"] = env.eval_kwargs
                if env.held_out is not None:
                    spec["held_out"] = env.held_out
                cells.append(Cell(cell_name(env.label, method.name, seed), "rl", method.name, env, seed, rl_budget,
                                  spec, config.cell_resources(method), unit, recipe))
        for baseline in config.baselines:
            kind = BASELINES.get(baseline.name)
            spec = {"baseline": baseline.name, "options": baseline.options}
            if kind.uses_policy:
                spec["policy"] = config.policy
            if kind.trains and config.budget_unit != "decisions":
                raise BenchError(f"baselines: {baseline.name} trains for a budget of decisions, and this config's "
                                 f"budget_unit is {config.budget_unit}; run it in a config whose budget counts "
                                 "decisions")
            budget = env_budget if kind.trains else None
            for seed in config.cell_seeds(baseline):
                cells.append(Cell(cell_name(env.label, baseline.method, seed), "baseline", baseline.method, env, seed,
                                  budget, spec, config.cell_resources(baseline), recipe=recipe))
    return cells


def _stopping(config: BenchConfig, budget: float, iterations: int | None) -> tuple[str, float, dict[str, Any]]:
    """What ends an environment's RL cells, as ``(unit, amount, TrainConfig fields)``: iterations when
    the config gives them (every method trains as many), else the budget in its unit, with iterations
    uncapped unless the config caps them too."""
    if iterations is not None:
        return "iterations", iterations, {}
    if config.budget_unit == "decisions":
        return "decisions", budget, {"total_decisions": budget}
    return config.budget_unit, budget, {"run.budget": {"unit": config.budget_unit, "amount": budget,
                                                       "stop": config.budget_stop}}


def check_train_configs(cells: Sequence[Cell]) -> None:
    """Validate every RL cell's TrainConfig, what it needs of this machine (:mod:`ptgpo_algos.training.preflight`)
    and every environment's keywords up front, as a run would, so that a typo fails now rather than in
    every cell."""
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.preflight import check_machine
    from ptgpo_algos.training.preflight import check_environment
    from ptgpo_envs import check_env_kwargs

    environments = {cell.env.label: cell.env for cell in cells}
    for label, env in environments.items():
        try:
            check_env_kwargs(env.id, env.kwargs, "kwargs")
            if env.eval_kwargs:
                check_env_kwargs(env.id, env.evaluation_kwargs, "eval_kwargs")
        except ValueError as error:
            raise BenchError(f"environment {label!r}: {error}") from None
    checked = set()
    for cell in cells:
        if cell.kind != "rl":
            continue
        try:
            config = TrainConfig.from_dict(dict(cell.spec))
            if (cell.env.label, cell.method) not in checked:
                check_machine(config)
                check_environment(config)
                checked.add((cell.env.label, cell.method))
        except ValueError as error:
            raise BenchError(f"method {cell.method!r} on {cell.env.label!r}: {error}") from None


def check_out_dir(out_dir: str | os.PathLike, config: BenchConfig) -> str:
    """The config to save in ``out_dir/config.yaml``: ``config``, grown by what the folder already holds.

    A results folder grows: a run may add seeds, methods, baselines and environments to it (the saved
    config then lists the union, and the leaderboard reads every record). It refuses a run that changes
    a shared setting (budget, policy, ...) or an entry it already holds under the same name, since the
    skipped cells ran with the old one; the message names each key that differs. ``workers`` and
    ``resources`` say where cells run, not what they do, and may differ. Refuses a file in place of the
    folder. Writes nothing."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BenchError(f"{out_dir} is a file, not a results folder; choose another --out")
    data = config.to_dict()
    for env in data["environments"]:
        start, stop = env["train_seeds"]
        env["train_seeds"] = {"start": start, "count": stop - start}
        env["eval_seeds"] = _compact_seeds(env["eval_seeds"])
    data = yaml.safe_load(yaml.safe_dump(data, sort_keys=False))  # plain data, as a saved one reads
    path = out_dir / "config.yaml"
    if path.is_file():
        try:
            saved = load_yaml(path.read_text(encoding="utf-8"), name=str(path)) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise BenchError(f"{path} is damaged ({' '.join(str(error).split())[:200]}); restore it, or choose "
                             "another --out") from None
        if not isinstance(saved, dict):
            raise BenchError(f"{path} is not a benchmark config; restore it, or choose another --out")
        data, differences = _grown(saved, data)
        if differences:
            raise BenchError(
                f"{out_dir} holds results of a different benchmark config (see {path}): "
                f"{'; '.join(differences)}. A folder takes new seeds, methods, baselines and environments, "
                "not changed settings: resume with the saved ones, or choose another --out"
            )
    return yaml.safe_dump(data, sort_keys=False)


#: The lists a results folder grows by (by name, or label for environments and labelled baselines), and
#: the seeds.
_GROWING = {"environments": "label", "methods": "name", "baselines": "name"}
#: Settings that say where cells run, not what they do.
_WHERE = ("workers", "resources")


def _grown(saved: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``saved`` with what ``new`` adds (seeds, named entries), and each difference between the two in
    what is shared (``key: saved X, now Y``)."""
    differences = [f"{key}: saved {saved.get(key)!r}, now {new.get(key)!r}"
                   for key in dict.fromkeys([*saved, *new])
                   if key not in (*_GROWING, *_WHERE, "seeds") and saved.get(key) != new.get(key)]
    grown = {**saved, **{key: new[key] for key in _WHERE if key in new}}
    held_seeds = list(saved.get("seeds") or [])
    grown["seeds"] = held_seeds + [seed for seed in new.get("seeds") or [] if seed not in held_seeds]
    for key, name in _GROWING.items():
        held = {_entry_key(entry, name): entry for entry in saved.get(key) or [] if isinstance(entry, dict)}
        merged = list(saved.get(key) or [])
        for entry in new.get(key) or []:
            old = held.get(_entry_key(entry, name))
            if old is None:
                merged.append(entry)
                continue
            differences += [f"{key}[{_entry_key(entry, name)}].{field}: saved {old.get(field)!r}, now {entry.get(field)!r}"
                            for field in dict.fromkeys([*old, *entry])
                            if field != "resources" and old.get(field) != entry.get(field)]
        grown[key] = merged
    return grown, differences


def _entry_key(entry: dict[str, Any], name: str) -> Any:
    """What names a saved list's entry: its ``name`` field, or a baseline's label where it has one."""
    return entry.get("label") or entry.get(name)


def _compact_seeds(seeds: list[int]) -> list[int] | dict[str, int]:
    """A consecutive run of seeds as ``{start, count}`` (the config's own notation), else the list."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return {"start": seeds[0], "count": len(seeds)}
    return seeds
