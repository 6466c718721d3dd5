"""A second computation of a results folder's preregistered hypotheses, by code of its own.

The independent route of a preregistered run's decision: it reads the result records (``*.json``)
and ``hypotheses.yaml`` as plain JSON and YAML, without importing ``leaderboard``, and recomputes
each hypothesis's Welch test (over levels: the difference of the means over levels of the per-level
means, its variance the sum over levels of both methods' s^2/n divided by the number of levels
squared, Welch-Satterthwaite degrees of freedom; SciPy's t distribution), the 95 % interval, and
Holm's step-down over the family. With ``--compare`` it checks the leaderboard's
``leaderboard/hypotheses.csv`` against it and exits 1 on a disagreement beyond the file's printed
precision.

It decides on final success only: a hypothesis in ``decisions``, or in the unit every one of its runs
was stopped in by one budget (``budget_unit``, with a ``budget_overshoot``). A hypothesis read on the
curves (another unit, or runs a guard stopped short of the budget) is not recomputed: that reading is
the leaderboard's alone. With ``--compare`` its p is taken from the leaderboard's file to complete
Holm's family, so the other hypotheses' Holm p are still checked; without it such a family is refused.

Usage: ``python scripts/recompute_hypotheses.py FOLDER [--compare] [--hypotheses FILE]`` (the folder's
``hypotheses.yaml`` unless a file is named, as ``ptgpo leaderboard --hypotheses`` takes one).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import yaml
from scipy import stats


def load_runs(folder: Path) -> dict[tuple[str, str], list[dict]]:
    """Every ok RL record of the folder by (level, method)."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("method_kind") != "rl":
            continue
        if record.get("status") != "ok":
            raise SystemExit(f"{path}: status {record.get('status')}: a study is decided on complete records")
        runs.setdefault((record["env_label"], record["method"]), []).append(record)
    return runs


def successes(runs, level: str, method: str, cost: str) -> list[float] | None:
    """Final success in % of ``method``'s seeds on ``level``; None where a run was not stopped by a budget in
    ``cost`` (the leaderboard reads such a hypothesis on the curves)."""
    records = runs.get((level, method), [])
    if len(records) < 2:
        raise SystemExit(f"{method} on {level}: {len(records)} record(s); a test needs at least two seeds")
    if cost != "decisions":
        stopped = all(r.get("budget_unit") == cost and r.get("budget_overshoot") is not None for r in records)
        if not stopped:
            return None
    return [100.0 * r["final_success"] for r in records]


def welch_over_levels(first: list[list[float]], second: list[list[float]]) -> dict[str, float]:
    """Welch's test of mean-over-levels(first) - mean-over-levels(second)."""
    levels = len(first)
    parts, difference = [], 0.0
    for a, b in zip(first, second):
        difference += (sum(a) / len(a) - sum(b) / len(b)) / levels
        for sample in (a, b):
            mean = sum(sample) / len(sample)
            variance = sum((x - mean) ** 2 for x in sample) / (len(sample) - 1)
            parts.append((variance / len(sample) / levels**2, len(sample) - 1))
    var = sum(v for v, _ in parts)
    if var == 0.0:
        return {"difference": difference, "low": difference, "high": difference, "df": math.nan,
                "p": 1.0 if difference == 0.0 else 0.0}
    df = var**2 / sum(v**2 / dof for v, dof in parts if v > 0)
    se = math.sqrt(var)
    half = stats.t.ppf(0.975, df) * se
    p = 2.0 * stats.t.sf(abs(difference) / se, df)
    return {"difference": difference, "low": difference - half, "high": difference + half, "df": df, "p": p}


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the input's order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def recompute(folder: Path, hypotheses: Path | None = None,
              curve_p: dict[str, float] | None = None) -> tuple[list[dict], float]:
    """Every hypothesis of ``hypotheses`` (``folder/hypotheses.yaml`` by default) tested on the folder's
    records, with its Holm p, and the family's alpha. A hypothesis read on the curves takes its p from
    ``curve_p`` (the leaderboard's) and is marked ``curves``; without one there it is refused."""
    spec = yaml.safe_load((hypotheses or folder / "hypotheses.yaml").read_text())
    runs = load_runs(folder)
    results = []
    for h in spec["hypotheses"]:
        cost = h.get("cost", "decisions")
        first = [successes(runs, level, h["first"], cost) for level in h["levels"]]
        second = [successes(runs, level, h["second"], cost) for level in h["levels"]]
        if None in first + second:
            if curve_p is None or h["name"] not in curve_p:
                raise SystemExit(f"{h['name']}: not every run was stopped by a budget in {cost}, so the leaderboard "
                                 "reads it on the curves; this route reads final success only (--compare takes "
                                 "that p from the leaderboard's hypotheses.csv to complete the family)")
            results.append({"name": h["name"], "curves": True, "p": curve_p[h["name"]]})
            continue
        results.append({"name": h["name"], **welch_over_levels(first, second)})
    for result, adjusted in zip(results, holm([r["p"] for r in results])):
        result["holm_p"] = adjusted
    return results, float(spec.get("alpha", 0.05))


def leaderboard_rows(folder: Path) -> dict[str, dict[str, str]] | None:
    """The leaderboard's ``hypotheses.csv`` rows by name (None: not written yet)."""
    path = folder / "leaderboard" / "hypotheses.csv"
    return {row["name"]: row for row in csv.DictReader(path.open())} if path.is_file() else None


def compare(rows: dict[str, dict[str, str]], results: list[dict]) -> list[str]:
    """Where the leaderboard's hypotheses.csv ``rows`` disagree with ``results`` beyond its printed precision
    (four decimals of a percentage point; six significant digits of a p value); of a hypothesis read on
    the curves only the Holm p is compared."""
    problems = []
    for result in results:
        row = rows.get(result["name"])
        if row is None:
            problems.append(f"{result['name']}: not in hypotheses.csv")
            continue
        for field in (("holm_p",) if result.get("curves") else ("difference", "low", "high", "p", "holm_p")):
            value = float(row[field]) if row[field] else math.nan
            allowed = 6e-5 if field in ("difference", "low", "high") else 6e-6 * abs(result[field]) + 1e-12
            if not abs(value - result[field]) <= allowed:
                problems.append(f"{result['name']} {field}: leaderboard {value:.6g}, recomputed {result[field]:.6g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--compare", action="store_true", help="check leaderboard/hypotheses.csv against this")
    parser.add_argument("--hypotheses", type=Path, default=None,
                        help="the hypotheses file to decide (default: FOLDER/hypotheses.yaml)")
    args = parser.parse_args(argv)
    hypotheses = args.hypotheses or args.folder / "hypotheses.yaml"
    if not hypotheses.is_file():
        parser.error(f"{hypotheses}: no such file (--hypotheses names another)")
    rows = leaderboard_rows(args.folder) if args.compare else None
    curve_p = None if rows is None else {name: float(row["p"]) for name, row in rows.items() if row.get("p")}
    results, alpha = recompute(args.folder, hypotheses, curve_p)
    print("| | effect [95 % CI] | df | p | Holm p | decision |\n|---|---|---:|---:|---:|---|")
    for r in results:
        if r.get("curves"):
            print(f"| {r['name']} | read on the curves (the leaderboard's p) | | {r['p']:.4f} | {r['holm_p']:.4f} | |")
            continue
        decision = "separated" if r["holm_p"] < alpha and r["difference"] != 0 else "not separated"
        print(f"| {r['name']} | {r['difference']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}] | {r['df']:.1f} | "
              f"{r['p']:.4f} | {r['holm_p']:.4f} | {decision} |")
    if args.compare:
        missing = f"{args.folder / 'leaderboard' / 'hypotheses.csv'}: missing (run ptgpo leaderboard {args.folder} first)"
        problems = [missing] if rows is None else compare(rows, results)
        for problem in problems:
            print(problem, file=sys.stderr)
        print("the leaderboard agrees" if not problems else f"{len(problems)} disagreement(s)")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
