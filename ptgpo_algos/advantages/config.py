"""The estimators' configuration keys: one rule per key, checked at the edge with a helpful message.

Every estimator accepts ``gamma``, ``invalid_penalty`` and ``coverage_beta``; its own keys are the
keyword-only parameters of its registered function (see :mod:`ptgpo_algos.advantages.registry`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ptgpo_algos.advantages.ops import NORMS

__all__ = ["COMMON_DEFAULTS", "CONFIG_KEYS", "ConfigKey", "validate_config"]


@dataclass(frozen=True)
class ConfigKey:
    """A configuration key: what it means, what values it takes, and how to convert one."""

    meaning: str
    expected: str  # shown in error messages, e.g. "a number in [0, 1]"
    convert: Callable[[Any], Any]  # returns the converted value or raises ValueError


def _real(low: float, high: float = math.inf) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError
        value = float(value)
        if not (math.isfinite(value) and low <= value <= high):
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


def _norm(value: Any) -> str:
    if value not in NORMS:
        raise ValueError
    return str(value)


CONFIG_KEYS: Mapping[str, ConfigKey] = {
    "gamma": ConfigKey("discount of the step returns G and C", "a number in [0, 1]", _real(0.0, 1.0)),
    "invalid_penalty": ConfigKey(
        "subtracted from the reward of each invalid action", "a finite number >= 0", _real(0.0)
    ),
    "coverage_beta": ConfigKey(
        "scale of coverage credit in groups whose outcome returns are all equal (0 disables)",
        "a finite number >= 0",
        _real(0.0),
    ),
    "norm": ConfigKey("pool normalisation", f"one of {', '.join(NORMS)}", _norm),
    "omega": ConfigKey("weight of the step-level term", "a finite number >= 0", _real(0.0)),
    "K": ConfigKey("deepest HGPO history level", "an integer >= 0", _count),
    "alpha": ConfigKey("HGPO level weights (k+1)^alpha", "a finite number >= 0", _real(0.0)),
    "include_episode": ConfigKey("add GRPO's episode term as an HGPO level", "True or False", _flag),
    "lam": ConfigKey("weight of PTGPO's HGPO back-off", "a finite number >= 0", _real(0.0)),
}

COMMON_DEFAULTS: Mapping[str, Any] = {"gamma": 0.95, "invalid_penalty": 0.1, "coverage_beta": 0.0}


def validate_config(estimator: str, defaults: Mapping[str, Any], config: Mapping[str, Any]) -> dict:
    """``defaults`` updated with ``config``, each value checked and converted.

    Raises ``ValueError`` naming the valid keys for an unknown key, or the expected values for a value
    of the wrong type or out of range.
    """
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(map(repr, unknown))} for advantage estimator "
            f"{estimator!r}; valid keys: {', '.join(sorted(defaults))}"
        )
    checked = dict(defaults)
    for key, value in config.items():
        rule = CONFIG_KEYS[key]
        try:
            checked[key] = rule.convert(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{key}={value!r} is invalid for advantage estimator {estimator!r}: {key} "
                f"({rule.meaning}) must be {rule.expected}"
            ) from None
    return checked
