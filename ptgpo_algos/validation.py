"""Checks of configuration values, in one style: ``ValueError("<where>: expected <what>, got <value>")``.

Every config of the suite (the training config's sections, the estimators' keys, the benchmark's
grid) checks its values with these, so a mistake reads the same wherever it is made and always names
the key to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import Any, Iterable, Mapping

__all__ = ["as_number", "check_bool", "check_choice", "check_int", "check_list", "check_mapping", "check_number",
           "check_registered", "check_string", "numbers_as_floats", "unknown_keys"]

# A real number as YAML 1.2 and Python spell it: PyYAML (YAML 1.1) reads ``1e-3``, ``3e-5`` and ``.5e1``
# as strings, since 1.1 wants a dot and a signed exponent; users write them everywhere.
_NUMBER = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?")


def as_number(value: Any) -> Any:
    """``value`` as a float when it is a string that spells a real number (``1e-3``, ``.5``, ``+2.0E3``,
    ``1_000.5``); any other value unchanged, for the checks to judge."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value.strip().replace("_", ""))
    return value


def numbers_as_floats(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` for the dataclass ``cls`` with :func:`as_number` applied to its real-number fields (those
    annotated ``float`` or ``float | None``), so that a YAML or ``--set`` ``1e-3`` is the number it spells."""
    reals = {f.name for f in dataclasses.fields(cls) if str(f.type).replace(" ", "") in ("float", "float|None")}
    return {key: as_number(value) if key in reals else value for key, value in values.items()}


def setting(default: Any, help: str) -> Any:
    """A field of a settings dataclass (a strategy's section) with its help text in the metadata."""
    return dataclasses.field(default=default, metadata={"help": help})


def settings_from_mapping(cls: type, values: Any, where: str) -> Any:
    """The settings dataclass ``cls`` from a config's mapping at ``where``: a mapping, no key ``cls``
    lacks (the valid ones named), real numbers parsed as :func:`numbers_as_floats` does."""
    values = check_mapping(where, values)
    unknown_keys(where, values, [f.name for f in dataclasses.fields(cls)])
    return cls(**numbers_as_floats(cls, values))


def check_choice(where: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``; otherwise a ValueError that names ``where`` and the choices."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{where}: {value!r} is not valid; choose one of {', '.join(map(str, choices))}")
    return value


def check_registered(where: str, value: Any, registry: Any) -> Any:
    """The registered spelling of ``value`` (case aside: ``GiGPO`` is ``gigpo``) if it is a string that names
    an entry of ``registry`` (:class:`ptgpo_envs.plugins.Registry`), queried now; otherwise a ValueError that
    names ``where``, the closest name and every name."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a name (a string), got {value!r}")
    name = registry.resolve(value)
    if name not in registry:
        raise ValueError(f"{where}: {registry.unknown(value)}")
    return name


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
    a ValueError that names ``where``. A string that spells a number (``"1e-3"``) is that number."""
    value = as_number(value)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if exclusive_low else value >= low) and value <= high
    if not ok:
        low_text = f"> {low}" if exclusive_low else f">= {low}"
        high_text = "" if high == math.inf else f" and <= {high}"
        raise ValueError(f"{where}: expected a number {low_text}{high_text}, got {value!r}")
    return float(value)


def unknown_keys(where: str, keys: Iterable[str], known: Iterable[str],
                 aliases: Mapping[str, str] | None = None) -> None:
    """Raise naming each key not in ``known``, with a "did you mean" where one is close: ``aliases`` maps
    other spellings of a key (a command-line flag, ``lr``) to the key itself (``learning_rate``)."""
    known = list(known)
    aliases = aliases or {}
    unknown = [key for key in keys if key not in known]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = [aliases[key]] if key in aliases else difflib.get_close_matches(str(key), known, n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValueError(f"{where}: unknown key(s) {', '.join(hints)}; valid keys: {', '.join(known)}")
