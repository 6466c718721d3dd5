"""``ptgpo algos``: list what a training config can name: estimators, rollout strategies, losses,
objectives, process scorers, rollout backends and optimisers, with their keys and defaults; plugins
marked. It reads the registries' declarations, importing no estimator, objective, scorer or optimiser."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

HELP = "list the advantage estimators, rollout strategies, losses, objectives, scorers and optimisers, with their keys"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo algos`` takes no arguments."""


def run(args: argparse.Namespace) -> int:
    """Print every registered name a training config takes, by the key that takes it."""
    from ptgpo_algos.advantages import ESTIMATORS, estimator_defaults
    from ptgpo_algos.updates.loss_registry import LOSSES, get_loss
    from ptgpo_algos.objectives import OBJECTIVES
    from ptgpo_algos.rollouts.patr.settings import SCORERS
    from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS
    from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES
    from ptgpo_algos.updates.optimizer_registry import OPTIMIZERS

    objectives = {name: {"weight": spec.default_weight, **spec.defaults} for name, spec in OBJECTIVES.items()}
    sections = [
        ("advantage estimators", "algorithm.name (--algo); keys: algorithm.config",
         {name: dict(estimator_defaults(name)) for name in ESTIMATORS}, ESTIMATORS),
        ("rollout strategies", "rollouts.strategy (--rollout)",
         {name: {key: default for key, default, _ in strategy.documented_settings()}
          for name, strategy in ROLLOUT_STRATEGIES.items()}, ROLLOUT_STRATEGIES),
        ("policy losses", "algorithm.loss; keys: algorithm.loss_config",
         {name: dict(get_loss(name).defaults) for name in LOSSES}, LOSSES),
        ("auxiliary objectives", "algorithm.objectives: [{name: ..., weight: ..., key: value}]", objectives,
         OBJECTIVES),
        ("process scorers", "rollouts.patr.scorer, rollouts.patr.judge", dict.fromkeys(SCORERS), SCORERS),
        ("rollout backends", "rollouts.backend", dict.fromkeys(ROLLOUT_BACKENDS), ROLLOUT_BACKENDS),
        ("optimisers", "optim.optimizer", dict.fromkeys(OPTIMIZERS), OPTIMIZERS),
    ]
    papers = {name: ESTIMATORS.get(name).paper for name in ESTIMATORS}
    for title, key, entries, registry in sections:
        print(f"{title} ({key}):")
        _print_entries(entries, registry, papers if registry is ESTIMATORS else {})
        for why in (registry.broken.values() if registry is not None else ()):
            print(f"  ! {why}")
    return 0


def _print_entries(entries: Mapping[str, Mapping[str, Any] | None], registry: Any, papers: Mapping[str, str]) -> None:
    width = max(map(len, entries))
    for name, keys in entries.items():
        origin = registry.origins.get(name) if registry is not None else None
        plugin = f"  [plugin: {origin}]" if origin else ""
        paper = papers.get(name, "")
        cited = f"  ({paper})" if paper else ""
        defaults = ", ".join(f"{key}={value!r}" for key, value in (keys or {}).items())
        print(f"  {name:<{width}}{plugin}{cited}  {defaults}".rstrip())
