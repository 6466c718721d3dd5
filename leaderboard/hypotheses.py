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
    cost: trained_tokens    # optional: the unit the comparison is matched in (default decisions)
```

The metric is success in %, one number per (method, level, seed). With ``cost: decisions`` (the
default) it is final success (``final_success`` x 100): the runs' budget is matched in decisions. With
any other unit of :data:`leaderboard.curves.COST_UNITS` it is each run's curve read at the level's common
cost in that unit, the smallest final spend among both methods' runs on the level
(:func:`leaderboard.matched.success_at`: linear interpolation between the evaluations around it); a run
without a curve in that unit is refused with its file named. When every run of the level was stopped
by one budget in that very unit (``budget_unit``, a bench with ``budget_unit: train_cpu_s``...), the
budget matches it already and the metric is final success, held at the budget.
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

from leaderboard.curves import COST_UNITS, curve_file, read_cost_curve
from leaderboard.inference import Welch, holm, welch
from leaderboard.matched import common_cost, success_at
from leaderboard.records import InputFileError, ResultRecord, read_yaml_input
from leaderboard.render import csv_text, markdown_code, markdown_text

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
_KEYS = ("name", "first", "second", "levels", "question", "cost")


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
    #: The unit the comparison is matched in (:data:`leaderboard.curves.COST_UNITS`).
    cost: str = "decisions"


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
    #: Per level, the common cost the curves were read at, or the budget the runs stopped at when
    #: ``at_budget`` (empty for ``decisions``: final success).
    held_at: tuple[float, ...] = ()
    #: Whether every run was stopped by a budget in the hypothesis's unit, so final success is matched.
    at_budget: bool = False


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
    cost = raw.get("cost", "decisions")
    if cost not in COST_UNITS:
        raise HypothesisError(f"{where}.cost: {cost!r} is not a unit of cost; choose one of {', '.join(COST_UNITS)}")
    return Hypothesis(_text(raw.get("name"), f"{where}.name"), first, second, levels,
                      _text(question, f"{where}.question") if question else "", cost)


def load_hypotheses(path: str | os.PathLike) -> Preregistration:
    """Read and validate a hypotheses YAML (see the module docstring); errors name the file and key."""
    path = Path(path)
    try:
        data = read_yaml_input(path)
    except InputFileError as error:
        raise HypothesisError(str(error)) from None
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


def _runs(records: Iterable[tuple[Path, ResultRecord]], method: str, level: str,
          where: str) -> dict[int, tuple[Path, ResultRecord]]:
    """The ok records of ``method`` on ``level`` by seed; a failed record is refused, and fewer than two seeds."""
    runs = {}
    for path, record in records:
        if record.method != method or record.env_label != level:
            continue
        if record.status != "ok" or record.final_success is None:
            raise HypothesisError(f"{where}: {path} has no result ({record.status}: {record.error}); re-run the "
                                  "cell before deciding anything (a failed cell is re-run, not dropped)")
        runs[record.seed] = (path, record)
    if len(runs) < 2:
        raise HypothesisError(f"{where}: {method} on {level} has {len(runs)} seed(s) with a record; a test "
                              "needs at least two (is the run finished?)")
    return runs


def _cost_curve(path: Path, record: ResultRecord, unit: str, where: str):
    """The run's curve against ``unit``; refused, naming the record, when it has none."""
    target, refused = (None, None) if record.curve_path is None else curve_file(path, record.curve_path)
    curve, problems = (None, []) if target is None else read_cost_curve(target, unit)
    if curve is None:
        why = refused or (problems[0] if problems else f"it recorded no {unit}")
        raise HypothesisError(f"{where}: {path} has no learning curve in {unit} ({why}); a comparison at matched "
                              f"{COST_UNITS[unit]} needs every run's (re-run the cell with this version)")
    return curve


def _level_successes(records, hypothesis: Hypothesis, level: str,
                     where: str) -> tuple[dict[int, float], dict[int, float], float | None, bool]:
    """Success in % by seed of both methods on ``level``, the cost they hold at (None: final success, for
    ``decisions``), and whether that cost is the budget every run was stopped at (final success)."""
    runs = [_runs(records, method, level, where) for method in (hypothesis.first, hypothesis.second)]
    finals = [{seed: 100.0 * record.final_success for seed, (_, record) in side.items()} for side in runs]
    if hypothesis.cost == "decisions":
        return finals[0], finals[1], None, False
    stopped = [record for side in runs for _, record in side.values()]
    budgets = {record.budget for record in stopped}
    if len(budgets) == 1 and all(r.budget_unit == hypothesis.cost and r.budget_overshoot is not None for r in stopped):
        return finals[0], finals[1], budgets.pop(), True
    curves = [{seed: _cost_curve(path, record, hypothesis.cost, where) for seed, (path, record) in side.items()}
              for side in runs]
    cost = common_cost([curve for side in curves for curve in side.values()])
    try:
        first, second = ({seed: 100.0 * success_at(curve, cost) for seed, curve in side.items()} for side in curves)
    except ValueError as error:
        raise HypothesisError(f"{where}: on {level}, a curve cannot be read at {cost:g} {hypothesis.cost} "
                              f"({error}): it has no evaluation before training") from None
    return first, second, cost, False


def decide(records: Sequence[tuple[Path, ResultRecord]], preregistration: Preregistration) -> list[Outcome]:
    """Test every hypothesis on ``records`` (with their files) and correct over the family by Holm."""
    tests = []
    for hypothesis in preregistration.hypotheses:
        where = f"{preregistration.source}: {hypothesis.name}"
        levels = [_level_successes(records, hypothesis, level, where) for level in hypothesis.levels]
        first, second = [level[0] for level in levels], [level[1] for level in levels]
        held_at = tuple(level[2] for level in levels if level[2] is not None)
        at_budget = bool(levels) and all(level[3] for level in levels)
        test = welch([list(v.values()) for v in first], [list(v.values()) for v in second])
        seeds = tuple((len(a), len(b)) for a, b in zip(first, second))
        means = [sum(sum(v.values()) / len(v) for v in side) / len(side) for side in (first, second)]
        tests.append((hypothesis, seeds, means, test, (held_at, at_budget)))
    adjusted = holm([test.p for *_, test, _ in tests])
    outcomes = []
    for (hypothesis, seeds, means, test, (held_at, at_budget)), p in zip(tests, adjusted):
        separated = p is not None and p < preregistration.alpha and test.difference != 0.0
        outcomes.append(Outcome(hypothesis, seeds, means[0], means[1], test, p,
                                "separated" if separated else "not separated", held_at, at_budget))
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


def _held_at(outcome: Outcome) -> str:
    """Where the decision holds: final success at the matched decision budget, or the common cost of
    each level in the hypothesis's unit."""
    unit = outcome.hypothesis.cost
    if unit == "decisions":
        return "matched decisions (final success)"
    costs = ", ".join(f"{cost:,.0f}" if cost >= 100 else f"{cost:.3g}" for cost in outcome.held_at)
    if outcome.at_budget:
        return f"final success at a budget of {COST_UNITS[unit]}: {costs}"
    return f"{COST_UNITS[unit]} at {costs}"


def hypotheses_markdown(outcomes: Sequence[Outcome], preregistration: Preregistration) -> str:
    """The outcome of every hypothesis as a Markdown table, null results included, each with the unit of
    cost its decision holds in."""
    lines = [
        "# Preregistered hypotheses",
        "",
        f"From {markdown_code(Path(preregistration.source).name)}. Effect: first − second in percentage points of success "
        "at the cost the *Held at* column names (final success when the budget is matched in decisions; else "
        "each run's curve read at the level's common cost, `leaderboard/matched.py`), with its 95 % Welch "
        "interval; over several levels, the difference of the means over levels. "
        f"Holm's correction over the {len(outcomes)} hypotheses, family-wise α = {preregistration.alpha:g}. "
        "*Separated*: Holm p < α; *not separated* is a result too, not a tie.",
        "",
        "| | Comparison | Levels | Held at | Seeds | Means (%) | Effect [95 % CI] | df | p | Holm p | Decision |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        h = o.hypothesis
        df = "–" if o.test.df is None else ("∞" if math.isinf(o.test.df) else f"{o.test.df:.1f}")
        lines.append(
            f"| {markdown_text(h.name)} | {markdown_code(h.first)} − {markdown_code(h.second)} | "
            f"{markdown_text(', '.join(h.levels))} | {_held_at(o)} | {_seeds_text(o)} | "
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
                     "df", "p", "holm_p", "decision", "cost", "held_at"])
    for o in outcomes:
        h, t = o.hypothesis, o.test
        # The same escaping as the leaderboard's CSV: no text cell can start a spreadsheet formula.
        writer.writerow([*map(csv_text, (h.name, h.first, h.second, " ".join(h.levels))), f"{o.first_mean:.4f}",
                         f"{o.second_mean:.4f}", f"{t.difference:.4f}", "" if t.low is None else f"{t.low:.4f}",
                         "" if t.high is None else f"{t.high:.4f}", "" if t.df is None else f"{t.df:.4f}",
                         "" if t.p is None else f"{t.p:.6g}", "" if o.holm_p is None else f"{o.holm_p:.6g}",
                         o.decision, h.cost, " ".join(f"{cost:.6g}" for cost in o.held_at)])
    return buffer.getvalue()
