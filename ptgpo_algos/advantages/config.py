"""The estimators' configuration keys: one rule per key, checked at the edge with a helpful message.

Every estimator accepts ``gamma``, ``invalid_penalty`` and ``empg`` (:mod:`ptgpo_algos.advantages.empg`), and all but those registered without
coverage credit ``coverage_beta`` and ``coverage_when``; its own keys are the keyword-only parameters of its function,
declared beside its import string for a built-in one (see :mod:`ptgpo_algos.advantages.registry`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ptgpo_algos.advantages.empg import empg_setting
from ptgpo_algos.advantages.ops import NORMS
from ptgpo_algos.validation import as_number

__all__ = [
    "COMMON_DEFAULTS", "CONFIG_KEYS", "COVERAGE_KEYS", "COVERAGE_TRIGGERS", "ConfigKey", "real_rule", "validate_config",
]


@dataclass(frozen=True)
class ConfigKey:
    """A configuration key: what it means, what values it takes, and how to convert one."""

    meaning: str
    expected: str  # shown in error messages, e.g. "a number in [0, 1]"
    convert: Callable[[Any], Any]  # returns the converted value or raises ValueError


def real_rule(low: float, high: float = math.inf, *, open_low: bool = False) -> Callable[[Any], float]:
    """A conversion rule for a finite real number in ``[low, high]`` (``open_low``: above ``low``);
    booleans are refused, a string that spells a number (``"1e-3"``) is that number."""
    def convert(value: Any) -> float:
        value = as_number(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError
        value = float(value)
        if not (math.isfinite(value) and low <= value <= high) or (open_low and value == low):
            raise ValueError
        return value

    return convert


def _count(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError
    return int(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError
    return bool(value)


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise ValueError
        return value

    return convert


def _one_of(options: tuple[str, ...]) -> str:
    return f"one of {', '.join(options)}"


def _open_unit(value: Any) -> float:
    number = real_rule(0.0, 1.0, open_low=True)(value)
    if number >= 1.0:  # base 1 makes every transition worth the same: no credit at all
        raise ValueError
    return number


TURN_GROUPS = ("index", "pooled")
COVERAGE_VARIANTS = ("trajectory", "step")
COVERAGE_TRIGGERS = ("all_failed", "all_equal")


CONFIG_KEYS: Mapping[str, ConfigKey] = {
    "gamma": ConfigKey("discount of the step returns G and C", "a number in [0, 1]", real_rule(0.0, 1.0)),
    "invalid_penalty": ConfigKey(
        "subtracted from the reward of each invalid action", "a finite number >= 0", real_rule(0.0)
    ),
    "coverage_beta": ConfigKey(
        "scale of coverage credit in the groups coverage_when names (0 disables)",
        "a finite number >= 0",
        real_rule(0.0),
    ),
    "coverage_when": ConfigKey(
        "groups that take coverage credit: every environment return 0 (all_failed), or all returns "
        "equal, all-succeeded groups included (all_equal)",
        _one_of(COVERAGE_TRIGGERS),
        _choice(COVERAGE_TRIGGERS),
    ),
    "empg": ConfigKey(
        "entropy-modulated policy gradients on the estimator's advantages (EMPG): off (null/false), the "
        "paper's settings (true), or a mapping of k, k_f, zeta and center",
        "null, true, false or a mapping of some of k, k_f, zeta (numbers >= 0) and center (true/false)",
        empg_setting,
    ),
    "norm": ConfigKey("pool normalisation", _one_of(NORMS), _choice(NORMS)),
    "omega": ConfigKey("weight of the step-level term", "a finite number >= 0", real_rule(0.0)),
    "K": ConfigKey(
        "deepest history level (HGPO levels, ProGPO potential depths)", "an integer >= 0", _count
    ),
    "alpha": ConfigKey("HGPO level weights (k+1)^alpha", "a finite number >= 0", real_rule(0.0)),
    "include_episode": ConfigKey("add GRPO's episode term as an HGPO level", "True or False", _flag),
    "lam": ConfigKey("weight of PTGPO's HGPO back-off", "a finite number >= 0", real_rule(0.0)),
    "success_reward": ConfigKey(
        "environment return of a solved task: a trajectory whose return reaches it succeeded "
        "(G2PO: also the value of the success terminal node)",
        "a finite number > 0",
        real_rule(0.0, open_low=True),
    ),
    "turn_group": ConfigKey(
        "PlanPO's turn-level group: same turn index (index) or all turns of the group (pooled)",
        _one_of(TURN_GROUPS),
        _choice(TURN_GROUPS),
    ),
    "alpha_init": ConfigKey("PlanPO's turn-term weight at progress 0", "a finite number >= 0", real_rule(0.0)),
    "alpha_final": ConfigKey("PlanPO's turn-term weight at progress 1", "a finite number >= 0", real_rule(0.0)),
    "progress": ConfigKey(
        "training progress, iteration / iterations (PlanPO's linear weight decay)",
        "a number in [0, 1]",
        real_rule(0.0, 1.0),
    ),
    "coverage_weight": ConfigKey(
        "CovGPO's lambda, scale of the coverage advantage in all-failed groups",
        "a finite number >= 0",
        real_rule(0.0),
    ),
    "variant": ConfigKey(
        "CovGPO's coverage credit per trajectory (P_i) or per step (n_{i,t})",
        _one_of(COVERAGE_VARIANTS),
        _choice(COVERAGE_VARIANTS),
    ),
    "transition_weight": ConfigKey(
        "ProGPO's lambda, weight of the potential-based transition credit", "a finite number >= 0", real_rule(0.0)
    ),
    "variance_prior": ConfigKey(
        "ProGPO's tau, added to each potential pool's outcome variance before inverse-variance fusion",
        "a finite number > 0",
        real_rule(0.0, open_low=True),
    ),
    "distance_base": ConfigKey(
        "GraphGPO's base of the distance reward success_reward * base^d(s') (smaller: steeper)",
        "a number in (0, 1)",
        _open_unit,
    ),
    "gae_lambda": ConfigKey(
        "GAE's lambda: 1 the discounted return minus the value, 0 the one-step TD error",
        "a number in [0, 1]",
        real_rule(0.0, 1.0),
    ),
    "whiten": ConfigKey(
        "normalise the advantages to mean 0 and standard deviation 1 over the whole batch (verl's masked_whiten)",
        "true or false",
        _flag,
    ),
}

COMMON_DEFAULTS: Mapping[str, Any] = {
    "gamma": 0.95, "invalid_penalty": 0.1, "coverage_beta": 0.0, "coverage_when": "all_failed", "empg": None,
}

#: The common keys of coverage credit, which an estimator registered without it does not take.
COVERAGE_KEYS = ("coverage_beta", "coverage_when")


def validate_config(spec: Any, config: Mapping[str, Any], kind: str = "advantage estimator") -> dict:
    """An estimator's defaults updated with ``config``, each value checked and converted by its rule
    (``spec`` is the estimator's :class:`~ptgpo_algos.advantages.registry.EstimatorSpec`, or any spec
    with ``name``, ``defaults`` and ``keys``: a policy loss's, ``kind`` naming it in messages).

    Raises ``ValueError`` naming the valid keys for an unknown key, or the expected values for a value
    of the wrong type or out of range.
    """
    estimator = spec.name
    unknown = sorted(set(config) - set(spec.defaults))
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(map(repr, unknown))} for {kind} "
            f"{estimator!r}; valid keys: {', '.join(sorted(spec.defaults)) or 'none'}"
        )
    checked = dict(spec.defaults)
    for key, value in config.items():
        rule = spec.keys[key]
        try:
            checked[key] = rule.convert(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{key}={value!r} is invalid for {kind} {estimator!r}: {key} "
                f"({rule.meaning}) must be {rule.expected}"
            ) from None
    return checked
