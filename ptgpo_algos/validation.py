"""Checks of configuration values, in one style: ``ValueError("<where>: expected <what>, got <value>")``.

Every config of the suite (the training config's sections, the estimators' keys, the benchmark's
grid) checks its values with these, so a mistake reads the same wherever it is made and always names
the key to fix.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Iterable, Mapping

__all__ = ["check_bool", "check_choice", "check_int", "check_list", "check_mapping", "check_number",
           "check_registered", "check_string", "unknown_keys"]


def check_choice(where: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``; otherwise a ValueError that names ``where`` and the choices."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{where}: {value!r} is not valid; choose one of {', '.join(map(str, choices))}")
    return value


def check_registered(where: str, value: Any, registry: Any) -> Any:
    """``value`` must name an entry of ``registry`` (:class:`ptgpo_envs.plugins.Registry`), queried now."""
    if value not in registry:
        raise ValueError(f"{where}: {registry.unknown(value)}")
    return value


def check_mapping(where: str, value: Any) -> dict:
    """``value`` as a dict if it is a mapping; otherwise a ValueError that names ``where``."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping (key: value), got {value!r}")
    return dict(value)


def check_list(where: str, value: Any, non_empty: bool = False) -> list:
    """``value`` if it is a list (with an item, when ``non_empty``); otherwise a ValueError that names ``where``."""
    if not isinstance(value, list) or (non_empty and not value):
        raise ValueError(f"{where}: expected a {'non-empty ' if non_empty else ''}list, got {value!r}")
    return value


def check_bool(where: str, value: Any) -> bool:
    """``value`` if it is a bool; otherwise a ValueError that names ``where``."""
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    return value


def check_string(where: str, value: Any) -> str:
    """``value`` if it is a non-empty string; otherwise a ValueError that names ``where``."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def check_int(where: str, value: Any, low: int, high: int | None = None, hint: str = "") -> int:
    """``value`` if it is an integer (not a bool) in ``[low, high]``; otherwise a ValueError that names
    ``where`` (and ``hint``)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{where}: expected an integer {bound}, got {value!r}" + (f" ({hint})" if hint else ""))
    return value


def check_number(where: str, value: Any, low: float, high: float = math.inf, exclusive_low: bool = False) -> float:
    """``value`` as a float if it is a finite number in range (``> low`` with ``exclusive_low``); otherwise
    a ValueError that names ``where``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if exclusive_low else value >= low) and value <= high
    if not ok:
        low_text = f"> {low}" if exclusive_low else f">= {low}"
        high_text = "" if high == math.inf else f" and <= {high}"
        raise ValueError(f"{where}: expected a number {low_text}{high_text}, got {value!r}")
    return float(value)


def unknown_keys(where: str, keys: Iterable[str], known: Iterable[str]) -> None:
    """Raise naming each key not in ``known``, with a "did you mean" where one is close."""
    known = list(known)
    unknown = [key for key in keys if key not in known]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValueError(f"{where}: unknown key(s) {', '.join(hints)}; valid keys: {', '.join(known)}")
