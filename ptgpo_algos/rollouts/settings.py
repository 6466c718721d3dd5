"""The rollout stage's sections of the run config: ``rollouts`` (how an iteration's groups are played,
each strategy's own settings among them), ``evaluation`` (held-out episodes) and ``env_workers`` (where
environments step)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ptgpo_algos.rollouts.branching import BRANCH_STRATEGIES
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, settings_sections
from ptgpo_algos.sections import field_labels, option
from ptgpo_algos.validation import (
    check_bool,
    check_choice,
    check_int,
    check_mapping,
    check_number,
    check_string,
    settings_from_mapping,
    unknown_keys,
)

__all__ = ["EVAL_SEED_BASE", "MAX_EPISODES_PER_ITERATION", "SEEDINGS", "EnvWorkersConfig", "EvaluationConfig",
           "RolloutsConfig", "check_slots", "default_evaluation_temperature", "gather_strategy_settings"]

#: Evaluation seeds start here by default; training seeds are drawn below it, so they never overlap.
EVAL_SEED_BASE = 1_000_000
#: How one process draws an iteration's rollouts (``rollouts.seeding``): from one generator per task
#: seeded from a seed per task, as the ranks of ``--nproc`` do, or from the run's generators, shared.
SEEDINGS = ("per_task", "shared")
#: Episodes of one iteration (group_size x tasks_per_iteration) and of one evaluation: far beyond any
#: recipe (128 episodes), and refused before a model is built, since
#: the buffers they size would otherwise be allocated after it (terabytes for a mistyped 1e12).
MAX_EPISODES_PER_ITERATION = 2**20


def check_slots(strategy: str, rollouts: RolloutsConfig) -> None:
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


@dataclass(frozen=True)
class RolloutsConfig:
    """How one iteration's rollouts are collected (:mod:`ptgpo_algos.rollouts.collection`)."""

    backend: str = option("transformers", "rollout backend: transformers or vllm", flat="rollout_backend")
    vllm: dict[str, Any] = option(help="vLLM engine arguments", factory=dict)
    sync_tolerance: float | None = option(None, "after a weight sync, the largest mean |difference| between the "
                                          "engine's log-probabilities of its own sampled tokens and the trainer's "
                                          "(None: 4 x the noise floor measured before the first update, at "
                                          "least 1e-3)")
    sync_bucket_mib: int = option(1024, "weight sync: MiB of weights per message to the rollout engine (a "
                                  "message may not exceed 4 GiB)")
    strategy: str | None = option(None, "linear, tree, patr, 3spo or bpo (default: tree for ptgpo, 3spo for 3spo, "
                                  "bpo for bpo, linear otherwise)",
                                  flat="rollout", flag="rollout")
    group_size: int = option(8, "rollouts per task", flag="group-size")
    initial_rollouts: int | None = option(None, "tree: independent rollouts before branching (default: half "
                                          "the group)")
    branch: str = option("uniform", "tree: where to branch (uniform, entropy, novel)")
    settings: dict[str, Any] = option(help="each rollout strategy's own settings, by the dataclass it declares, "
                                      "written and saved as rollouts.<its section> (rollouts.patr, rollouts.spo3, "
                                      "rollouts.bpo, a plugin's) and read back as attributes of the section; "
                                      "`ptgpo algos` lists them", flat=False, factory=dict)
    tasks_per_iteration: int = option(8, "tasks (groups) per iteration", flag="tasks")
    asynchronous: bool = option(False, "collect the next iteration's rollouts in a second process while this one "
                                "trains (one update of policy lag; for CPUs)", flat="async_rollouts",
                                flag="async-rollouts")
    seeding: str = option("per_task", "one process, synchronous: per_task plays each task with its own generators, "
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


def gather_strategy_settings(given: Mapping[str, Any]) -> dict[str, Any]:
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
class EvaluationConfig:
    """Held-out evaluation (:mod:`ptgpo_algos.rollouts.evaluation`)."""

    every: int = option(10, "evaluate every N iterations", flat="eval_every", flag="eval-every")
    every_fraction: float | None = option(None, "evaluate instead at the first iteration boundary at or after each "
                                          "multiple of this fraction of the run's budget (0.1: every 10 %; the "
                                          "budget that ends the run, in its own unit); None: every N iterations",
                                          flat=False)
    seeds: list[int] = option(help="held-out seeds, or a count N for N seeds from 1,000,000", flat="eval_seeds",
                              flag="eval-episodes",
                              factory=lambda: list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + 64)))
    batch_size: int = option(64, "episodes played side by side", flat="eval_batch_size")
    curve_episodes: int | None = option(None, "evaluations before the last play the first N seeds only (a cheaper "
                                        "learning curve); the last plays them all (None: all, every time)",
                                        flat="eval_curve_episodes")
    temperature: float | None = option(None, "sample at this temperature; 0 = greedy [0.4 tiny, 0 pretrained]",
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


@dataclass(frozen=True)
class EnvWorkersConfig:
    """Where environments step: ``in-process`` (fast environments), ``processes`` (slow engines such as
    ALFWorld, ``num_workers`` worker processes; default one per CPU core) or ``ray`` (``num_workers``
    Ray actors of ``num_cpus`` each, on the cluster at ``address``; default one actor per ``num_cpus``
    of the cluster)."""

    backend: str = option("in-process", "in-process, processes or ray", flat=False)
    num_workers: int | None = option(None, "worker processes or Ray actors (processes and ray backends)",
                                     flat=False)
    address: str | None = option(None, "Ray cluster address (ray backend): auto, ray://host:port, or none "
                                 "for a local cluster", flat=False)
    num_cpus: float = option(1.0, "CPUs each Ray actor reserves (ray backend)", flat=False)

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


#: How messages name a field of this module's sections: its path and the flat name files spell it by.
label = field_labels({"rollouts": RolloutsConfig, "evaluation": EvaluationConfig, "env_workers": EnvWorkersConfig})
