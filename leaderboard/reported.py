"""Results reported in papers (``leaderboard/reported.yaml``), loaded as rows that stay apart from
measured ones.

File format::

    caveat: free text shown under the reported table
    sources:
      KEY: {citation: "...", setup: "...", protocol: verl-agent, quality: secondary,
            conditions: {split: valid_seen, episodes: 128, temperature: 0.4, max_steps: 50,
                         alfworld: 0.4.2, webshop: small (1,000 products), selection: final}}
    rows:
      - method: GRPO
        model: Qwen2.5-1.5B-Instruct
        source: KEY                       # one of sources
        protocol: verl-agent              # optional: this row's, when not its source's
        conditions: {selection: best}     # optional: this row's, over its source's
        results:                          # env label -> metric -> value (in %)
          ALFWorld: {Pick: 85.3, All: {value: 72.8, pm: 3.6}}
          WebShop: {score: 75.8, success: 56.8}

A value is a number, or ``{value: number, pm: number}`` where ``pm`` is the spread printed next to it
in the paper (kept as printed: papers do not always say whether it is a standard deviation or a
standard error). Cells a paper leaves blank are simply absent.

``protocol`` names the protocol the numbers were measured under (a recipe's name where one of
:mod:`ptgpo_algos.policy.recipes` reproduces it); without one it is "not stated". ``conditions``
(optional; a source's, updated by a row's) states what changes numbers under one protocol name:
:data:`CONDITION_KEYS`, the evaluation ``split``, ``episodes``, sampling ``temperature``,
``max_steps``, the ``alfworld`` and ``webshop`` versions or sets, and ``selection`` (``final`` or
``best`` success during training); they are part of the row's protocol description, so rows that
differ in them never read as one protocol. ``quality`` (optional) says how the figures were read:
one of :data:`QUALITIES`. Measured cells of another protocol in the same column are marked
(:mod:`leaderboard.protocols`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaderboard.records import InputFileError, read_yaml_input

__all__ = [
    "CONDITION_KEYS",
    "DEFAULT_REPORTED",
    "QUALITIES",
    "ReportedFileError",
    "ReportedResults",
    "ReportedRow",
    "ReportedSource",
    "ReportedValue",
    "load_reported",
]

#: The file shipped with the package.
DEFAULT_REPORTED = Path(__file__).resolve().parent / "reported.yaml"


#: What a row's ``conditions`` may state, in the order its protocol description lists them.
CONDITION_KEYS = ("split", "episodes", "temperature", "max_steps", "alfworld", "webshop", "selection")
#: How a source's figures were read: from the paper, from the official code's logs or README, or from
#: another text that quotes them.
QUALITIES = ("paper", "official code", "secondary")


class ReportedFileError(ValueError):
    """The reported-results YAML does not follow the format in this module's docstring."""


@dataclass(frozen=True)
class ReportedSource:
    """A paper the reported results come from: its key, citation and setup."""

    key: str
    citation: str
    setup: str | None = None
    protocol: str | None = None
    quality: str | None = None
    conditions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportedValue:
    """A reported figure and the ± the paper prints with it, if any."""

    value: float
    pm: float | None = None


@dataclass(frozen=True)
class ReportedRow:
    """One method's reported results in one source: benchmark -> metric -> value."""

    method: str
    model: str | None
    source: str
    results: dict[str, dict[str, ReportedValue]]
    protocol: str | None = None
    conditions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportedResults:
    """The whole reported-results file: its rows, sources and caveat."""

    rows: list[ReportedRow]
    sources: dict[str, ReportedSource]
    caveat: str | None = None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportedFileError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _value(raw: Any, where: str) -> ReportedValue:
    if isinstance(raw, dict):
        unknown = set(raw) - {"value", "pm"}
        if "value" not in raw or unknown:
            raise ReportedFileError(f"{where}: expected {{value: number, pm: number}}, got {raw!r}")
        pm = raw.get("pm")
        return ReportedValue(_number(raw["value"], where), None if pm is None else _number(pm, f"{where}.pm"))
    return ReportedValue(_number(raw, where))


def _protocol(raw: dict[str, Any], where: str) -> str | None:
    protocol = raw.get("protocol")
    if protocol is not None and (not isinstance(protocol, str) or not protocol.strip()):
        raise ReportedFileError(f"{where}: protocol must be a name such as verl-agent, got {protocol!r}")
    return protocol


def _conditions(raw: dict[str, Any], where: str) -> dict[str, str]:
    conditions = raw.get("conditions") or {}
    if not isinstance(conditions, dict) or set(conditions) - set(CONDITION_KEYS):
        raise ReportedFileError(
            f"{where}: conditions must map some of {', '.join(CONDITION_KEYS)} to values, got {conditions!r}"
        )
    return {key: str(conditions[key]) for key in CONDITION_KEYS if key in conditions}


def _quality(raw: dict[str, Any], where: str) -> str | None:
    quality = raw.get("quality")
    if quality is not None and quality not in QUALITIES:
        raise ReportedFileError(f"{where}: quality must be one of {', '.join(QUALITIES)}, got {quality!r}")
    return quality


def load_reported(path: str | os.PathLike) -> ReportedResults:
    """Read and validate a reported-results YAML; errors name the file and the offending entry."""
    path = Path(path)
    try:
        data = read_yaml_input(path)
    except InputFileError as error:
        raise ReportedFileError(str(error)) from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ReportedFileError(
            f"{path}: expected a mapping with a 'rows' list (see leaderboard/reported.py)"
        )
    sources: dict[str, ReportedSource] = {}
    for key, raw in (data.get("sources") or {}).items():
        if not isinstance(raw, dict) or not isinstance(raw.get("citation"), str):
            raise ReportedFileError(f"{path}: sources.{key} needs a 'citation' string")
        protocol = _protocol(raw, f"{path}: sources.{key}")
        where = f"{path}: sources.{key}"
        sources[str(key)] = ReportedSource(str(key), raw["citation"], raw.get("setup"), protocol,
                                           _quality(raw, where), _conditions(raw, where))
    rows = []
    for index, raw in enumerate(data["rows"]):
        where = f"{path}: rows[{index}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("method"), str):
            raise ReportedFileError(f"{where} needs a 'method' string")
        if raw.get("source") not in sources:
            raise ReportedFileError(f"{where}: source {raw.get('source')!r} is not one of {sorted(sources)}")
        results = raw.get("results")
        if not isinstance(results, dict) or not results:
            raise ReportedFileError(f"{where} needs 'results': env label -> metric -> value")
        parsed: dict[str, dict[str, ReportedValue]] = {}
        for env_label, metrics in results.items():
            if not isinstance(metrics, dict):
                raise ReportedFileError(f"{where}.results.{env_label}: expected metric -> value")
            parsed[str(env_label)] = {
                str(metric): _value(value, f"{where}.results.{env_label}.{metric}")
                for metric, value in metrics.items()
            }
        protocol = _protocol(raw, where) or sources[raw["source"]].protocol
        given = {**sources[raw["source"]].conditions, **_conditions(raw, where)}
        conditions = {key: given[key] for key in CONDITION_KEYS if key in given}
        rows.append(ReportedRow(raw["method"], raw.get("model"), raw["source"], parsed, protocol, conditions))
    caveat = data.get("caveat")
    return ReportedResults(rows, sources, None if caveat is None else str(caveat).strip())
