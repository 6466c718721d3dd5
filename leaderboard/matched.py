"""Success at matched cost: every compared run's learning curve read at one cost that all of them reached.

A budget matched in decisions leaves the other costs unmatched: a method that trains on more tokens
per decision, or spends more CPU per iteration, gets more of them. Here the comparison is made in
each unit of :data:`leaderboard.curves.COST_UNITS` instead:

* The **common cost** of an environment in a unit is the smallest final spend among the compared runs
  (every seed of every method with a curve in that unit): the last point of each run's curve, its final
  evaluation, and so the one cost every run has a measured curve up to.
* Each run's success there is read off its curve by **linear interpolation** between the two
  evaluations that bracket it (at equal cost, the later evaluation counts); the run that spent least
  is read at its final evaluation. Curve points before the last are evaluations on
  ``evaluation.curve_episodes`` seeds when a run sets it, the last on all of them.
* A method's figure is the mean over its seeds with the standard error over seeds.

Runs that did not record a unit (older runs, baselines: no ``cost.jsonl``) are left out of that
unit's comparison; so the methods compared can differ between units. :func:`matched_markdown` and
:func:`matched_csv` write the tables (``matched-cost.md``, ``matched-cost.csv``), and
:mod:`leaderboard.hypotheses` decides a hypothesis whose ``cost`` is not ``decisions`` on the values
of :func:`success_at`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leaderboard.board import Leaderboard
from leaderboard.curves import AXES, Curve, method_curves

__all__ = ["MatchedCost", "MatchedMethod", "common_cost", "matched_costs", "matched_csv", "matched_markdown",
           "success_at"]


@dataclass(frozen=True)
class MatchedMethod:
    """One method's success at the common cost: mean and standard error over its ``seeds`` (fractions;
    ``se`` None for one seed), and its mean final spend."""

    method: str
    seeds: int
    mean: float
    se: float | None
    final_spend: float


@dataclass(frozen=True)
class MatchedCost:
    """The methods of one environment compared at ``cost``, the common cost in ``unit``."""

    env_label: str
    unit: str
    cost: float
    methods: tuple[MatchedMethod, ...]


def _last_at_each_cost(curve: Curve) -> tuple[np.ndarray, np.ndarray]:
    """The curve's points with one per cost, the last evaluation at that cost (points come sorted by
    cost, in file order at equal cost)."""
    keep = np.append(curve.x[1:] != curve.x[:-1], True)
    return curve.x[keep], curve.success[keep]


def success_at(curve: Curve, cost: float) -> float:
    """The run's success (a fraction) at ``cost``, linearly interpolated between the evaluations that
    bracket it; ``ValueError`` when the curve does not reach it or starts after it (no extrapolation)."""
    x, success = _last_at_each_cost(curve)
    if not x[0] <= cost <= x[-1]:
        raise ValueError(f"the curve covers {x[0]:g} to {x[-1]:g}, not {cost:g}")
    return float(np.interp(cost, x, success))


def common_cost(curves: Sequence[Curve]) -> float:
    """The smallest final spend among ``curves``: the cost every one of them reached."""
    if not curves:
        raise ValueError("common_cost needs at least one curve")
    return min(float(curve.x[-1]) for curve in curves)


def matched_costs(board: Leaderboard) -> list[MatchedCost]:
    """For each environment and each unit of cost that its runs recorded: every method's success at the
    common cost, methods in the leaderboard's order. Runs whose curves cannot be read are left out
    (the decisions curves report them to ``board.problems``); a run whose curve starts after the common
    cost (no evaluation before training) leaves its method out."""
    order = [row.method for row in board.rows]
    found = []
    for env_label in dict.fromkeys(column.env_label for column in board.columns):
        for unit in AXES:
            by_method = {method: [curve for _, curve in runs]
                         for method, runs in method_curves(board, env_label, unit, report=False).items()}
            if not by_method:
                continue
            cost = common_cost([curve for curves in by_method.values() for curve in curves])
            methods = []
            for method in sorted(by_method, key=lambda m: (order.index(m) if m in order else len(order), m)):
                curves = by_method[method]
                try:
                    values = [success_at(curve, cost) for curve in curves]
                except ValueError:
                    continue
                se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None
                methods.append(MatchedMethod(method, len(values), float(np.mean(values)), se,
                                             float(np.mean([curve.x[-1] for curve in curves]))))
            if methods:
                found.append(MatchedCost(env_label, unit, cost, tuple(methods)))
    return found


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _cell(method: MatchedMethod) -> str:
    se = "" if method.se is None else f" ± {100 * method.se:.1f}"
    return f"{100 * method.mean:.1f}{se}"


def matched_markdown(found: Sequence[MatchedCost]) -> str:
    """``matched-cost.md``: per environment, each method's success in % (mean ± SE over seeds) at the
    common cost of each unit, the common cost in the header."""
    lines = [
        "# Success at matched cost",
        "",
        "Each run's learning curve read at the smallest final spend among the compared runs of the "
        "environment, in each unit (linear interpolation between the evaluations that bracket it; "
        "`leaderboard/matched.py`). Success in %, mean ± standard error over seeds. A method without a "
        "curve in a unit (an older run, a baseline) has none there.",
    ]
    for env_label in dict.fromkeys(item.env_label for item in found):
        items = [item for item in found if item.env_label == env_label]
        methods = list(dict.fromkeys(m.method for item in items for m in item.methods))
        header = [f"{AXES[item.unit][0]} at {_amount(item.cost)}" for item in items]
        lines += ["", f"## {env_label}", "", "| Method | " + " | ".join(header) + " |",
                  "|---|" + "---:|" * len(items)]
        for method in methods:
            cells = []
            for item in items:
                match = next((m for m in item.methods if m.method == method), None)
                cells.append("–" if match is None else _cell(match))
            lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def matched_csv(found: Sequence[MatchedCost]) -> str:
    """``matched-cost.csv``: one row per environment, unit and method (success as fractions)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["env", "unit", "common_cost", "method", "seeds", "success_mean", "success_se", "final_spend"])
    for item in found:
        for m in item.methods:
            writer.writerow([item.env_label, item.unit, f"{item.cost:.6g}", m.method, m.seeds, f"{m.mean:.6f}",
                             "" if m.se is None else f"{m.se:.6f}", f"{m.final_spend:.6g}"])
    return buffer.getvalue()
