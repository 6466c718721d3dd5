"""Time the leaderboard build on a large synthetic results folder.

Writes ``--methods`` methods x ``--seeds`` seeds of result records over three environments that make
ten tasks together (household-easy: six task types; household-hard: three; sokoban: plain success),
each RL record with a ``--points``-row learning curve, then times ``ptgpo leaderboard`` on it as a
fresh process (imports included: what ``ptgpo bench`` adds to a benchmark) and prints its phases.

Usage: ``python scripts/bench_leaderboard.py [--out /tmp/leaderboard-speed] [--methods 20]
[--seeds 5] [--points 20]``. The folder is replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from leaderboard.aggregate import build_leaderboard
from leaderboard.records import ResultRecord, write_record
from leaderboard.render import write_outputs

ENVIRONMENTS = {
    "household-easy": (
        "ptgpo/Household-v0",
        {"difficulty": "easy"},
        ["Pick", "Look", "Clean", "Heat", "Cool", "Pick2"],
    ),
    "household-hard": ("ptgpo/Household-v0", {"difficulty": "hard"}, ["Pick", "Look", "Clean"]),
    "sokoban": ("ptgpo/Sokoban-v0", {}, []),
}
BUDGET = 40_000


def write_folder(out: Path, methods: int, seeds: int, points: int) -> int:
    """The synthetic records (method ``m`` succeeds around ``m / methods``); returns how many."""
    rng = np.random.default_rng(0)
    count = 0
    for m in range(methods):
        kind = "rl" if m < methods - 2 else "baseline"
        for env_label, (env_id, kwargs, types) in ENVIRONMENTS.items():
            for seed in range(seeds):
                level = np.clip(m / methods + rng.normal(0, 0.1), 0, 1)
                by_type = {t: float(np.clip(level + rng.normal(0, 0.1), 0, 1)) for t in types}
                curve = None
                if kind == "rl":
                    curve = f"runs/{env_label}-m{m}-s{seed}/curve.jsonl"
                    (out / curve).parent.mkdir(parents=True, exist_ok=True)
                    rows = [
                        {
                            "decisions": int(BUDGET * i / (points - 1)),
                            "success": float(level * i / (points - 1)),
                        }
                        for i in range(points)
                    ]
                    (out / curve).write_text("".join(json.dumps(r) + "\n" for r in rows))
                record = ResultRecord(
                    method=f"method{m:02d}",
                    method_kind=kind,
                    env_id=env_id,
                    env_label=env_label,
                    env_kwargs=kwargs,
                    seed=seed,
                    budget=BUDGET if kind == "rl" else None,
                    status="ok",
                    decisions=BUDGET + int(rng.integers(0, 400)) if kind == "rl" else 0,
                    final_success=float(level),
                    success_by_type=by_type,
                    curve_path=curve,
                )
                write_record(out, record)
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/leaderboard-speed"))
    parser.add_argument("--methods", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--points", type=int, default=20)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    records = write_folder(args.out, args.methods, args.seeds, args.points)

    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ptgpo_harness.cli", "leaderboard", str(args.out), "--reported", "none"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    whole = time.perf_counter() - start

    start = time.perf_counter()
    board = build_leaderboard(args.out)
    built = time.perf_counter() - start
    start = time.perf_counter()
    write_outputs(board, args.out / "leaderboard", ["md", "csv", "tex", "html"])
    text = time.perf_counter() - start
    start = time.perf_counter()
    write_outputs(board, args.out / "leaderboard", ["png"])
    png = time.perf_counter() - start
    print(
        f"{records} records ({args.methods} methods x {args.seeds} seeds x 10 tasks in 3 environments): "
        f"`ptgpo leaderboard` {whole:.2f} s as a new process; in process: read + statistics {built:.2f} s, "
        f"tables {text:.2f} s, plots {png:.2f} s"
    )


if __name__ == "__main__":
    main()
