"""Preregistered hypotheses: comparisons fixed before a run, each decided by its test after correction.

A leaderboard compares every pair it shows, which is the right family for a table and the wrong one
for a study: a study names, before its first cell, the few comparisons it was run to answer, and
corrects over those only. A results folder may hold them in ``hypotheses.yaml`` (or ``ptgpo
leaderboard --hypotheses FILE``):

```yaml
alpha: 0.05                 # family-wise, Holm's step-down over the hypotheses listed
hypotheses:
  - name: H1
    first: ptgpo            # the effect is first - second, in percentage points
    second: gigpo
    levels: [multiroom, doorkey, keycorridor]   # environment labels; several: the mean over levels
    question: PTGPO's credit assignment against GiGPO
```

The metric is final success in % (``final_success`` x 100), one number per (method, level, seed).
Over several levels the statistic is the difference of the means over levels of the per-level means,
tested by Welch's t test with Welch-Satterthwaite degrees of freedom (``leaderboard.inference.welch``);
seeds are independent runs, not paired. A hypothesis is *separated* when its Holm-adjusted p
is below alpha, in the direction of the effect's sign; otherwise *not separated*: both are results.

Nothing is decided from an incomplete study: every method of a hypothesis needs an ``ok`` record on
every one of its levels for at least two seeds, and a failed record among them is refused with its
file named (a failed cell is re-run, not dropped).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from leaderboard.inference import Welch, holm, welch
from leaderboard.records import InputFileError, ResultRecord, read_input
from leaderboard.render import csv_text, markdown_code, markdown_text
from ptgpo_algos.yaml_safe import load_yaml

__all__ = [
    "HYPOTHESES_FILE",
    "Hypothesis",
    "HypothesisError",
    "Outcome",
    "Preregistration",
    "decide",
    "hypotheses_csv",
    "hypotheses_markdown",
    "load_hypotheses",
]

#: The file in a results folder that ``ptgpo leaderboard`` reads the preregistered hypotheses from.
HYPOTHESES_FILE = "hypotheses.yaml"
_KEYS = ("name", "first", "second", "levels", "question")


class HypothesisError(ValueError):
    """A hypotheses file that cannot be read, or records that cannot decide it; the message names the
    file or the record."""


@dataclass(frozen=True)
class Hypothesis:
    """One preregistered two-sided comparison: ``first`` minus ``second`` over ``levels``."""

    name: str
    first: str
    second: str
    levels: tuple[str, ...]
    question: str = ""


@dataclass(frozen=True)
class Preregistration:
    """The hypotheses of one study, their family-wise ``alpha`` and the file they came from."""

    alpha: float
    hypotheses: tuple[Hypothesis, ...]
    source: str


@dataclass(frozen=True)
class Outcome:
    """A hypothesis decided: per-level seeds and means of both methods (in %), the Welch test, the
    Holm-adjusted p and the decision (``separated`` or ``not separated``)."""

    hypothesis: Hypothesis
    seeds: tuple[tuple[int, int], ...]  # per level: (first's seeds, second's seeds)
    first_mean: float
    second_mean: float
    test: Welch
    holm_p: float | None
    decision: str


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise HypothesisError(f"{where}: expected a non-empty text, got {value!r}")
    return value.strip()


def _hypothesis(raw: Any, where: str) -> Hypothesis:
    if not isinstance(raw, dict):
        raise HypothesisError(f"{where}: expected a mapping with {', '.join(_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise HypothesisError(f"{where}: unknown key(s) {unknown}; the keys are {', '.join(_KEYS)}")
    levels = raw.get("levels")
    if not isinstance(levels, list) or not levels:
        raise HypothesisError(f"{where}.levels: expected a non-empty list of environment labels, got {levels!r}")
    levels = tuple(_text(level, f"{where}.levels[{i}]") for i, level in enumerate(levels))
    if len(set(levels)) != len(levels):
        raise HypothesisError(f"{where}.levels: a level appears twice in {list(levels)}")
    first, second = _text(raw.get("first"), f"{where}.first"), _text(raw.get("second"), f"{where}.second")
    if first == second:
        raise HypothesisError(f"{where}: first and second are both {first!r}; a hypothesis compares two methods")
    question = raw.get("question", "")
    return Hypothesis(_text(raw.get("name"), f"{where}.name"), first, second, levels,
                      _text(question, f"{where}.question") if question else "")


def load_hypotheses(path: str | os.PathLike) -> Preregistration:
    """Read and validate a hypotheses YAML (see the module docstring); errors name the file and key."""
    path = Path(path)
    try:
        data = load_yaml(read_input(path).decode("utf-8"), name=str(path))
    except InputFileError as error:
        raise HypothesisError(str(error)) from None
    except OSError as error:
        raise HypothesisError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise HypothesisError(f"{path}: not UTF-8 text ({error.reason}); give a YAML file") from None
    except yaml.YAMLError as error:
        raise HypothesisError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict) or not isinstance(data.get("hypotheses"), list) or not data["hypotheses"]:
        raise HypothesisError(f"{path}: expected a mapping with a non-empty 'hypotheses' list "
                              "(see leaderboard/hypotheses.py)")
    unknown = sorted(set(data) - {"alpha", "hypotheses"})
    if unknown:
        raise HypothesisError(f"{path}: unknown key(s) {unknown}; the keys are alpha, hypotheses")
    alpha = data.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise HypothesisError(f"{path}: alpha must be a number in (0, 1), got {alpha!r}")
    hypotheses = tuple(_hypothesis(raw, f"{path}: hypotheses[{i}]") for i, raw in enumerate(data["hypotheses"]))
    names = [h.name for h in hypotheses]
    if len(set(names)) != len(names):
        raise HypothesisError(f"{path}: hypothesis names must be unique, got {names}")
    return Preregistration(float(alpha), hypotheses, str(path))


def _successes(records: Iterable[tuple[Path, ResultRecord]], method: str, level: str, where: str) -> dict[int, float]:
    """Final success in % by seed of ``method`` on ``level``; a failed record is refused."""
    values = {}
    for path, record in records:
        if record.method != method or record.env_label != level:
            continue
        if record.status != "ok" or record.final_success is None:
            raise HypothesisError(f"{where}: {path} has no result ({record.status}: {record.error}); re-run the "
                                  "cell before deciding anything (a failed cell is re-run, not dropped)")
        values[record.seed] = 100.0 * record.final_success
    if len(values) < 2:
        raise HypothesisError(f"{where}: {method} on {level} has {len(values)} seed(s) with a record; a test "
                              "needs at least two (is the run finished?)")
    return values


def decide(records: Sequence[tuple[Path, ResultRecord]], preregistration: Preregistration) -> list[Outcome]:
    """Test every hypothesis on ``records`` (with their files) and correct over the family by Holm."""
    tests = []
    for hypothesis in preregistration.hypotheses:
        where = f"{preregistration.source}: {hypothesis.name}"
        first = [_successes(records, hypothesis.first, level, where) for level in hypothesis.levels]
        second = [_successes(records, hypothesis.second, level, where) for level in hypothesis.levels]
        test = welch([list(v.values()) for v in first], [list(v.values()) for v in second])
        seeds = tuple((len(a), len(b)) for a, b in zip(first, second))
        means = [sum(sum(v.values()) / len(v) for v in side) / len(side) for side in (first, second)]
        tests.append((hypothesis, seeds, means, test))
    adjusted = holm([test.p for *_, test in tests])
    outcomes = []
    for (hypothesis, seeds, means, test), p in zip(tests, adjusted):
        separated = p is not None and p < preregistration.alpha and test.difference != 0.0
        outcomes.append(Outcome(hypothesis, seeds, means[0], means[1], test, p,
                                "separated" if separated else "not separated"))
    return outcomes


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "< 0.0001" if value < 1e-4 else f"{value:.4f}"


def _effect(outcome: Outcome) -> str:
    test = outcome.test
    interval = "" if test.low is None else f" [{test.low:+.1f}, {test.high:+.1f}]"
    return f"{test.difference:+.1f}{interval}"


def _decision(outcome: Outcome) -> str:
    if outcome.decision != "separated":
        return "not separated"
    higher = outcome.hypothesis.first if outcome.test.difference > 0 else outcome.hypothesis.second
    return f"**separated** ({markdown_code(higher)} higher)"


def _seeds_text(outcome: Outcome) -> str:
    pairs = {f"{a}/{b}" for a, b in outcome.seeds}
    return pairs.pop() if len(pairs) == 1 else ", ".join(f"{a}/{b}" for a, b in outcome.seeds)


def hypotheses_markdown(outcomes: Sequence[Outcome], preregistration: Preregistration) -> str:
    """The outcome of every hypothesis as a Markdown table, null results included."""
    lines = [
        "# Preregistered hypotheses",
        "",
        f"From {markdown_code(Path(preregistration.source).name)}. Effect: first − second in percentage points "
        "of final success, with its 95 % Welch interval; over several levels, the difference of the means over levels. "
        f"Holm's correction over the {len(outcomes)} hypotheses, family-wise α = {preregistration.alpha:g}. "
        "*Separated*: Holm p < α; *not separated* is a result too, not a tie.",
        "",
        "| | Comparison | Levels | Seeds | Means (%) | Effect [95 % CI] | df | p | Holm p | Decision |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        h = o.hypothesis
        df = "–" if o.test.df is None else ("∞" if math.isinf(o.test.df) else f"{o.test.df:.1f}")
        lines.append(
            f"| {markdown_text(h.name)} | {markdown_code(h.first)} − {markdown_code(h.second)} | "
            f"{markdown_text(', '.join(h.levels))} | {_seeds_text(o)} | "
            f"{o.first_mean:.1f} vs {o.second_mean:.1f} | {_effect(o)} | {df} | {_p(o.test.p)} | {_p(o.holm_p)} | "
            f"{_decision(o)} |"
        )
    questions = [f"- **{markdown_text(o.hypothesis.name)}**: {markdown_text(o.hypothesis.question)}"
                 for o in outcomes if o.hypothesis.question]
    return "\n".join(lines + ([""] + questions if questions else [])) + "\n"


def hypotheses_csv(outcomes: Sequence[Outcome]) -> str:
    """One row per hypothesis: the comparison, the test and the decision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["name", "first", "second", "levels", "first_mean", "second_mean", "difference", "low", "high",
                     "df", "p", "holm_p", "decision"])
    for o in outcomes:
        h, t = o.hypothesis, o.test
        # The same escaping as the leaderboard's CSV: no text cell can start a spreadsheet formula.
        writer.writerow([*map(csv_text, (h.name, h.first, h.second, " ".join(h.levels))), f"{o.first_mean:.4f}",
                         f"{o.second_mean:.4f}", f"{t.difference:.4f}", "" if t.low is None else f"{t.low:.4f}",
                         "" if t.high is None else f"{t.high:.4f}", "" if t.df is None else f"{t.df:.4f}",
                         "" if t.p is None else f"{t.p:.6g}", "" if o.holm_p is None else f"{o.holm_p:.6g}",
                         o.decision])
    return buffer.getvalue()
