"""Estimators registered by name (the verl ``core_algos`` pattern).

An estimator is a pure function ``fn(table, signal, **own_config) -> Estimate``: it reads the
:class:`StepTable` and the :class:`Signal` (the values it credits) and returns one advantage per step.
Its keyword-only parameters, with their defaults, *are* its configuration keys; every estimator also
accepts the common keys ``gamma`` and ``invalid_penalty``, which the driver
(:func:`ptgpo_algos.advantages.estimate.estimate_advantages`) applies by building the signal, and
``coverage_beta`` and ``coverage_when`` unless it is registered with ``coverage_beta=None``. An estimator whose formula needs
a common key itself (G2PO's penalty enters two terms differently) declares it as a keyword-only
parameter too: the driver then passes it on, and the parameter's default is that estimator's default.

:data:`ESTIMATORS` is an open registry (:mod:`ptgpo_envs.plugins`): another package adds an estimator
with :func:`register_estimator` from the ``ptgpo.estimators`` entry points, declaring the rules of any
key the suite does not document already (``keys``)::

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
from ptgpo_envs.plugins import Registry

__all__ = ["ESTIMATORS", "Estimate", "EstimatorSpec", "get_estimator", "register_estimator"]


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
    """A registered estimator: its function, every config key it accepts with its default and rule, and the
    common keys it takes itself."""

    name: str
    function: Callable[..., Estimate]
    defaults: Mapping[str, Any]  # every accepted config key and its default
    common_parameters: tuple[str, ...] = ()  # common keys the function takes itself
    keys: Mapping[str, ConfigKey] = field(default_factory=dict)  # the rule of every accepted key
    strategy: str | None = None  # the rollout strategy whose records it credits (None: any)
    paper: str = ""  # where the method is published, as ``ptgpo algos`` lists it ("": not said)


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
    rules = {**CONFIG_KEYS, **(keys or {})}

    def decorator(function: Callable[..., Estimate]) -> Callable[..., Estimate]:
        own = {
            parameter.name: parameter.default
            for parameter in inspect.signature(function).parameters.values()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        }
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
        spec = EstimatorSpec(name, function, MappingProxyType(defaults), passed_on,
                             MappingProxyType({key: rules[key] for key in defaults}), strategy, paper)
        if critic is not None:  # first: a malformed import string is refused before the estimator is added
            CRITIC_ESTIMATORS.register_lazy(name, critic)
        try:
            ESTIMATORS.register(name, spec)
        except Exception:
            if critic is not None:
                CRITIC_ESTIMATORS.unregister(name)
            raise
        return function

    return decorator


def get_estimator(name: str) -> EstimatorSpec:
    """The estimator registered as ``name``; ``ValueError`` naming the valid ones (and the closest) otherwise."""
    return ESTIMATORS.get(name)
