"""Conversion rules of the objectives' config keys (each a ``ConfigKey.convert``: the converted value, or
``ValueError``)."""

from __future__ import annotations

import math
import numbers
import string
from typing import Any, Callable

from ptgpo_algos.advantages.config import real_rule

__all__ = ["choice_rule", "count_rule", "fraction_rule", "optional_real_rule", "real_rule", "real_list_rule",
           "template_rule"]


fraction_rule = real_rule(0.0, 1.0)


def optional_real_rule(value: Any) -> float | None:
    """None, or any finite real number."""
    return None if value is None else real_rule(-math.inf)(value)


def count_rule(low: int) -> Callable[[Any], int]:
    """A rule for an integer of at least ``low``; booleans are refused."""
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ValueError
        return int(value)

    return convert


def choice_rule(options: tuple[str, ...]) -> Callable[[Any], str]:
    """A rule for one of ``options``."""
    def convert(value: Any) -> str:
        if value not in options:
            raise ValueError
        return value

    return convert


def template_rule(*fields: str) -> Callable[[Any], str]:
    """A ``str.format`` template that names exactly ``fields``."""

    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        if names != set(fields):
            raise ValueError
        return value

    return convert


def real_list_rule(low: float, length: int | None = None) -> Callable[[Any], list[float]]:
    """A rule for a non-empty list of reals of at least ``low`` (of ``length`` items when given)."""
    def convert(value: Any) -> list[float]:
        if not isinstance(value, (list, tuple)) or not value or (length is not None and len(value) != length):
            raise ValueError
        return [real_rule(low)(v) for v in value]

    return convert
