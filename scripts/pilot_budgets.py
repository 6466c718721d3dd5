"""A preregistered run's budgets from its pilot: where the median pilot run crosses a success threshold.

The rule of ``docs/results/matched-compute-cpu/protocol.md``: for each level of a pilot results folder,
every RL run's learning curve against a cost unit (``train_cpu_s`` by default, from its ``cost.jsonl``)
is read at each multiple of ``--step`` up to the level's pilot budget, by linear interpolation between
evaluations and, past a run's final evaluation, at its final success; m(c) is the median over the
runs (every method and seed alike). A level's budget is the smallest multiple at which m(c) reaches
``--threshold``, or the pilot budget when m never does.

Usage: ``python scripts/pilot_budgets.py docs/results/matched-compute-pilot [--unit train_cpu_s]
[--step 5] [--threshold 0.5]``. Prints a Markdown table of m(c) per level and the budgets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from leaderboard.curves import COST_UNITS, curve_file, read_cost_curve  # noqa: E402
from leaderboard.records import read_records_with_paths  # noqa: E402


def success_or_final(x: np.ndarray, success: np.ndarray, cost: float) -> float:
    """Success at ``cost``: interpolated between the evaluations around it, the final one's past the end."""
    return float(np.interp(cost, x, success, right=success[-1]))


def level_curves(folder: Path, unit: str) -> dict[str, tuple[float, list[tuple[str, np.ndarray, np.ndarray]]]]:
    """Per level: its pilot budget and every ok RL run's (name, cost, success) curve."""
    records, problems = read_records_with_paths(folder)
    if problems:
        raise SystemExit(f"{folder}: unreadable records: {problems}")
    levels: dict[str, list] = defaultdict(list)
    budgets: dict[str, set] = defaultdict(set)
    for path, record in records:
        if record.method_kind != "rl":
            continue
        if record.status != "ok":
            raise SystemExit(f"{path}: status {record.status}; the rule needs every pilot run (re-run it)")
        target, problem = curve_file(path, record.curve_path) if record.curve_path else (None, None)
        curve, curve_problems = (None, [problem]) if target is None else read_cost_curve(target, unit)
        if curve is None or curve_problems:
            raise SystemExit(f"{path}: no curve in {unit} ({curve_problems})")
        levels[record.env_label].append((path.stem, curve.x, curve.success))
        budgets[record.env_label].add(record.budget)
    out = {}
    for level, runs in levels.items():
        if len(budgets[level]) != 1:
            raise SystemExit(f"level {level}: pilot runs with different budgets {sorted(budgets[level])}")
        out[level] = (budgets[level].pop(), runs)
    return out


def budget_of(runs, pilot_budget: float, step: float, threshold: float) -> tuple[float, bool, list[tuple[float, float]]]:
    """The level's budget, whether m reached the threshold, and m at every multiple of ``step``."""
    table = []
    for k in range(1, math.floor(pilot_budget / step + 1e-9) + 1):
        cost = k * step
        table.append((cost, statistics.median(success_or_final(x, s, cost) for _, x, s in runs)))
    for cost, median in table:
        if median >= threshold:
            return cost, True, table
    return pilot_budget, False, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the pilot's results folder")
    parser.add_argument("--unit", default="train_cpu_s", choices=sorted(set(COST_UNITS) - {"decisions", "tokens"}))
    parser.add_argument("--step", type=float, default=5.0, help="budgets are multiples of this (default 5)")
    parser.add_argument("--threshold", type=float, default=0.5, help="the median success to reach (default 0.5)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such results folder")
    levels = level_curves(args.folder, args.unit)
    for level, (pilot_budget, runs) in levels.items():
        budget, reached, table = budget_of(runs, pilot_budget, args.step, args.threshold)
        print(f"## {level}: {len(runs)} pilot runs, pilot budget {pilot_budget:g} {args.unit}\n")
        print(f"| {args.unit} | median success |\n|---:|---:|")
        for cost, median in table:
            print(f"| {cost:g} | {100 * median:.1f} % |")
        verdict = (f"reaches {100 * args.threshold:.0f} % first at {budget:g}" if reached else
                   f"never reaches {100 * args.threshold:.0f} %: the pilot budget, {budget:g}")
        print(f"\n**Budget: {budget:g} {args.unit}** (the median {verdict}).\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
