"""Estimators registered by name (the verl ``core_algos`` pattern).

An estimator is a pure function ``fn(table, signal, **own_config) -> Estimate``: it reads the
:class:`StepTable` and the :class:`Signal` (the values it credits) and returns one advantage per step.
Its keyword-only parameters, with their defaults, *are* its configuration keys; every estimator also
accepts the common keys ``gamma`` and ``invalid_penalty``, which the driver
(:func:`ptgpo_algos.advantages.estimate.estimate_advantages`) applies by building the signal, and
``coverage_beta`` and ``coverage_when`` unless it is registered with ``coverage_beta=None``. An estimator whose formula needs
a common key itself (G2PO's penalty enters two terms differently) declares it as a keyword-only
parameter too: the driver then passes it on, and the parameter's default is that estimator's default.

:data:`ESTIMATORS` is an open registry (:mod:`ptgpo_envs.plugins`). The built-in estimators are declared in
one table here, :data:`BUILT_IN_ESTIMATORS`: each by its name, its function's import string and its own
config keys with their defaults, so that checking a name and its keys and listing them (``ptgpo algos``)
import no estimator's module; its function is imported when it first estimates
(``tests/test_registries.py`` holds each declaration equal to its function's keyword-only parameters).
Another package adds an estimator with :func:`register_estimator` from the ``ptgpo.estimators`` entry
points, declaring the rules of any key the suite does not document already (``keys``)::

    @register_estimator("my_estimator", keys={"tau": ConfigKey("temperature", "a number > 0", convert)})
    def my_estimator(table, signal, *, tau: float = 1.0) -> Estimate: ...

An estimator that reads a learned critic's values names the critic the trainer builds for it by import
string, ``critic="my_package.critic:MyCritic"`` (:data:`ptgpo_algos.critic.settings.CRITIC_ESTIMATORS`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from ptgpo_algos.advantages.config import COMMON_DEFAULTS, CONFIG_KEYS, COVERAGE_KEYS, ConfigKey
from ptgpo_algos.critic.settings import CRITIC_ESTIMATORS
from ptgpo_envs.plugins import Registry, imported

__all__ = [
    "BUILT_IN_ESTIMATORS", "ESTIMATORS", "BuiltInEstimator", "Estimate", "EstimatorSpec", "get_estimator",
    "own_keys", "register_estimator",
]


@dataclass(frozen=True)
class Estimate:
    """An estimator's output: ``advantages`` (n_steps,) and optional per-group counts for logs.

    ``group_counts`` maps a count's name to an (n_groups,) integer array, e.g. PTGPO's
    ``branching_nodes``; the driver puts them in each group's ``GroupDiagnostics.counts`` and
    ``summarize_diagnostics`` sums them under the same name.
    """

    advantages: np.ndarray
    group_counts: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: its function (or the function's ``"module:attribute"`` import string),
    every config key it accepts with its default and rule, and the common keys it takes itself."""

    name: str
    implementation: Callable[..., Estimate] | str
    defaults: Mapping[str, Any]  # every accepted config key and its default
    common_parameters: tuple[str, ...] = ()  # common keys the function takes itself
    keys: Mapping[str, ConfigKey] = field(default_factory=dict)  # the rule of every accepted key
    strategy: str | None = None  # the rollout strategy whose records it credits (None: any)
    paper: str = ""  # where the method is published, as ``ptgpo algos`` lists it ("": not said)

    @property
    def function(self) -> Callable[..., Estimate]:
        """The estimator's function, its module imported here the first time where it is named by import string."""
        return imported(self.implementation) if isinstance(self.implementation, str) else self.implementation


#: Advantage estimators by name; other packages add theirs through the ``ptgpo.estimators`` entry points.
ESTIMATORS: Registry[EstimatorSpec] = Registry("advantage estimator", "ptgpo.estimators")


def register_estimator(
    name: str, *, coverage_beta: float | None = 0.0, keys: Mapping[str, ConfigKey] | None = None,
    strategy: str | None = None, paper: str = "", critic: str | None = None,
) -> Callable:
    """Register ``fn`` under ``name``; ``coverage_beta`` is this estimator's default for that key, or
    ``None`` for an estimator that does not take coverage credit (one that reads the outcomes from the
    table itself, where a substituted signal would be silently ignored): it then rejects that key and
    ``coverage_when``.
    ``keys`` gives the rules of keyword parameters that :data:`CONFIG_KEYS` does not document.
    ``strategy`` names the rollout strategy whose own records (``Step.extras``) the estimator credits,
    for one that runs on no other (3SPO's step rewards): the training config then defaults to it and
    refuses another. ``paper`` says where the method is published (``ptgpo algos`` lists it). ``critic``
    names, as ``"module:Class"``, the learned critic the trainer builds for an estimator that reads its
    values (imported when a run builds it)."""

    def decorator(function: Callable[..., Estimate]) -> Callable[..., Estimate]:
        _register(name, function, own_keys(function), coverage_beta=coverage_beta, keys=keys, strategy=strategy,
                  paper=paper, critic=critic)
        return function

    return decorator


def own_keys(function: Callable[..., Estimate]) -> dict[str, Any]:
    """An estimator function's own config keys: its keyword-only parameters, with their defaults."""
    return {
        parameter.name: parameter.default
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


def _register(
    name: str, implementation: Callable[..., Estimate] | str, own: Mapping[str, Any], *,
    coverage_beta: float | None, keys: Mapping[str, ConfigKey] | None, strategy: str | None, paper: str,
    critic: str | None,
) -> None:
    rules = {**CONFIG_KEYS, **(keys or {})}
    unknown = set(own) - set(rules)
    passed_on = tuple(key for key in own if key in COMMON_DEFAULTS)
    if unknown or set(COVERAGE_KEYS) & set(passed_on):
        raise RuntimeError(
            f"cannot register {name!r}: keys {sorted(unknown)} have no rule (pass keys=...) or it takes "
            f"{' or '.join(COVERAGE_KEYS)} itself (the driver applies them)"
        )
    defaults = {**COMMON_DEFAULTS, "coverage_beta": coverage_beta, **own}
    if coverage_beta is None:
        for key in COVERAGE_KEYS:
            del defaults[key]
    spec = EstimatorSpec(name, implementation, MappingProxyType(defaults), passed_on,
                         MappingProxyType({key: rules[key] for key in defaults}), strategy, paper)
    if critic is not None:  # first: a malformed import string is refused before the estimator is added
        CRITIC_ESTIMATORS.register_lazy(name, critic)
    try:
        ESTIMATORS.register(name, spec)
    except Exception:
        if critic is not None:
            CRITIC_ESTIMATORS.unregister(name)
        raise


@dataclass(frozen=True)
class BuiltInEstimator:
    """A built-in estimator as :data:`BUILT_IN_ESTIMATORS` declares it: ``target`` is its function's
    ``"module:attribute"``, ``own`` its function's keyword-only parameters with their defaults; the rest
    as :func:`register_estimator` takes them."""

    name: str
    target: str
    own: Mapping[str, Any] = field(default_factory=dict)
    coverage_beta: float | None = 0.0
    strategy: str | None = None
    paper: str = ""
    critic: str | None = None


_NORM = {"norm": "mean_std_norm"}

#: The built-in estimators, in the order ``ptgpo algos`` lists them; each one's function is imported when it
#: first estimates.
BUILT_IN_ESTIMATORS: tuple[BuiltInEstimator, ...] = (
    BuiltInEstimator("grpo", "ptgpo_algos.advantages.grpo:grpo", _NORM),
    BuiltInEstimator("rloo", "ptgpo_algos.advantages.rloo:rloo"),
    BuiltInEstimator("gigpo", "ptgpo_algos.advantages.gigpo:gigpo", {**_NORM, "omega": 1.0}),
    BuiltInEstimator("hgpo", "ptgpo_algos.advantages.hgpo:hgpo",
                     {**_NORM, "K": 2, "alpha": 1.0, "include_episode": False}),
    BuiltInEstimator("ptgpo", "ptgpo_algos.advantages.ptgpo:ptgpo",
                     {**_NORM, "omega": 1.0, "lam": 1.0, "K": 2, "alpha": 1.0}, coverage_beta=0.1),
    BuiltInEstimator("g2po", "ptgpo_algos.advantages.g2po:g2po",
                     {"gamma": 0.95, "invalid_penalty": 0.1, **_NORM, "omega": 1.0, "success_reward": 1.0},
                     coverage_beta=None),
    BuiltInEstimator("planpo", "ptgpo_algos.advantages.planpo:planpo",
                     {**_NORM, "success_reward": 1.0, "alpha_init": 0.1, "alpha_final": 0.05, "progress": 0.0,
                      "turn_group": "index"}, coverage_beta=None),
    BuiltInEstimator("progpo", "ptgpo_algos.advantages.progpo:progpo",
                     {"gamma": 0.95, **_NORM, "omega": 1.0, "transition_weight": 1.0, "K": 2,
                      "variance_prior": 0.25}),
    BuiltInEstimator("covgpo", "ptgpo_algos.advantages.covgpo:covgpo",
                     {**_NORM, "coverage_weight": 0.1, "variant": "trajectory"}, coverage_beta=None),
    BuiltInEstimator("graphgpo", "ptgpo_algos.advantages.graphgpo:graphgpo",
                     {**_NORM, "omega": 1.0, "success_reward": 1.0, "distance_base": 0.2}, coverage_beta=None),
    BuiltInEstimator("3spo", "ptgpo_algos.advantages.spo3:spo3", {"norm": "mean_norm", "invalid_penalty": 0.1},
                     coverage_beta=None, strategy="3spo"),
    BuiltInEstimator("bpo", "ptgpo_algos.advantages.bpo:bpo", strategy="bpo", paper="arXiv 2607.14171"),
    BuiltInEstimator("ppo", "ptgpo_algos.advantages.ppo:ppo",
                     {"gamma": 0.95, "invalid_penalty": 0.1, "gae_lambda": 0.95, "whiten": True}, coverage_beta=None,
                     paper="Schulman et al. 2017, PPO (arXiv 1707.06347), with GAE (Schulman et al. 2016, arXiv "
                           "1506.02438); verl-agent's PPO with a critic is the seed papers' baseline",
                     critic="ptgpo_algos.critic.component:Critic"),
    BuiltInEstimator("hiper", "ptgpo_algos.advantages.hiper:hiper", coverage_beta=None,
                     paper="Peng et al. 2026, HiPER: hierarchical plan-execute RL with hierarchical advantage "
                           "estimation (ICML 2026, arXiv 2602.16165)",
                     critic="ptgpo_algos.hiper.critic:HiperCritic"),
)



def _register_built_ins() -> None:
    for built_in in BUILT_IN_ESTIMATORS:
        _register(built_in.name, built_in.target, built_in.own, coverage_beta=built_in.coverage_beta, keys=None,
                  strategy=built_in.strategy, paper=built_in.paper, critic=built_in.critic)


_register_built_ins()


def get_estimator(name: str) -> EstimatorSpec:
    """The estimator registered as ``name``; ``ValueError`` naming the valid ones (and the closest) otherwise."""
    return ESTIMATORS.get(name)
