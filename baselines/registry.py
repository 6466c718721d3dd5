"""The baselines the benchmark harness can run, by name, and the contract each one honours.

A baseline is a function ``run(job: BaselineRun) -> BaselineOutcome``: it may train (within
``job.budget`` policy decisions, on ``job.train_seeds``), must evaluate on exactly ``job.eval_seeds``
through :func:`ptgpo_algos.rollouts.evaluation.evaluate`, and reports what it spent. The harness turns the
outcome into the same result record as an RL method's, so baselines and methods share one leaderboard.

Entries name their function as ``"module:function"`` (like Gymnasium's entry points), so listing
the baselines imports neither SB3 nor torch. :data:`BASELINES` is an open registry
(:mod:`ptgpo_envs.plugins`): a new baseline is one function and one registration line,
``BASELINES.register("name", BaselineSpec("module:function", "what it is"))``, here or from another
package through the ``ptgpo.baselines`` entry points.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ptgpo_envs.plugins import Registry

__all__ = ["BASELINES", "BaselineSpec", "BaselineRun", "BaselineOutcome", "get_baseline", "run_baseline"]


@dataclass(frozen=True)
class BaselineRun:
    """One baseline cell: where to play, on which seeds, with what budget, and the baseline's options.

    Training draws task seeds from ``train_seeds`` with ``env_kwargs``; evaluation uses ``eval_env_kwargs`` when given (e.g. another split),
    else ``env_kwargs``. ``max_steps`` overrides the environment's horizon when not ``None``.

    ``policy`` is the benchmark's LLM policy section (``model``, ``mode``...), used by baselines that
    play the LLM policy (zero-shot); ``options`` are the baseline's own settings from the config.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    train_seeds: range
    eval_seeds: list[int]
    seed: int
    budget: int
    out_dir: Path
    eval_env_kwargs: dict[str, Any] | None = None
    max_steps: int | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


    @property
    def evaluation_kwargs(self) -> dict[str, Any]:
        """The environment kwargs of evaluation: ``eval_env_kwargs`` if set, else ``env_kwargs``."""
        return self.env_kwargs if self.eval_env_kwargs is None else self.eval_env_kwargs


@dataclass
class BaselineOutcome:
    """What a baseline reports: its final evaluation (``EvalResult.summary()``) and what it spent.

    ``decisions`` counts training decisions only (0 for baselines that do not train); ``tokens`` is
    ``None`` for agents that do not generate tokens.
    """

    final_eval: dict[str, Any]
    best_success: float
    decisions: int = 0
    tokens: int | None = None
    curve_path: str | None = None


@dataclass(frozen=True)
class BaselineSpec:
    """``entry_point`` is ``"module:function"``; ``trains`` says whether the baseline spends the decision
    budget; ``uses_policy`` whether it plays the benchmark's LLM policy (``BaselineRun.policy``)."""

    entry_point: str
    description: str
    trains: bool = False
    uses_policy: bool = False


#: Baselines by name; other packages add theirs through the ``ptgpo.baselines`` entry points.
BASELINES: Registry[BaselineSpec] = Registry("baseline", "ptgpo.baselines")
for _name, _spec in {
    "random": BaselineSpec("baselines.simple:run_random", "a uniformly random admissible action each step"),
    "expert": BaselineSpec("baselines.simple:run_expert", "the environment's own solver (upper reference)"),
    "sb3_ppo": BaselineSpec(
        "baselines.sb3_ppo:run", "stable-baselines3 PPO over admissible-action slots, hashed bag of words",
        trains=True,
    ),
    "zero_shot": BaselineSpec("baselines.zero_shot:run", "the untrained LLM policy, greedy", uses_policy=True),
}.items():
    BASELINES.register(_name, _spec)


def get_baseline(name: str) -> Callable[[BaselineRun], BaselineOutcome]:
    """The function that runs the baseline registered as ``name`` (imported from its entry point)."""
    module_name, function_name = BASELINES.get(name).entry_point.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def run_baseline(name: str, job: BaselineRun) -> BaselineOutcome:
    """Run the baseline registered as ``name`` on ``job``."""
    return get_baseline(name)(job)
