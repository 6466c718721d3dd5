"""Learning curves of several algorithms at the same decision budget, several seeds, in parallel.

Each (algorithm, seed) cell is one ``run_training`` in its own single-threaded process (measured
here: two 1-thread processes do more work than one 2-thread process). Every cell stops at the same
``--decisions`` budget, so the curves compare success per policy decision spent. Writes
``<out>/<algo>-s<seed>/curve.jsonl`` per cell and ``<out>/summary.json``: per algorithm, the mean and
per-seed final success and the area under the success-vs-decisions curve.

Usage::

    python scripts/compare_algos.py --difficulty hard --decisions 200000 --seeds 0 1 2 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from leaderboard.records import atomic_write_text

ALGOS = ("grpo", "rloo", "gigpo", "hgpo", "ptgpo")


def _cell(args: tuple[str, int, dict]) -> dict:
    algo, seed, base = args
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.trainer import run_training

    config = TrainConfig.from_dict({**base, "algo": algo, "seed": seed,
                                    "out_dir": str(Path(base["out_dir"]) / f"{algo}-s{seed}")})
    summary = run_training(config, progress=False)
    curve = [json.loads(line) for line in open(summary.curve_path)]
    return {"algo": algo, "seed": seed, "curve": curve, "final_success": summary.final_eval["success"],
            "decisions_saved": summary.decisions_saved, "wall_time_s": summary.wall_time_s}


def _auc(curve: list[dict], budget: int) -> float:
    """Mean success over the decision budget (trapezoids on success vs decisions)."""
    area = 0.0
    for a, b in zip(curve, curve[1:]):
        area += (min(b["decisions"], budget) - min(a["decisions"], budget)) * (a["success"] + b["success"]) / 2
    return area / budget


def main() -> int:
    for key, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(key, value)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="ptgpo/Household-v0")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--decisions", type=int, default=200_000, help="policy decisions per cell")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="runs/compare")
    args = parser.parse_args()
    base = {
        "env_id": args.env, "env_kwargs": {"difficulty": args.difficulty} if args.difficulty else {},
        "model": "tiny", "group_size": 8, "tasks_per_iteration": 8, "iterations": 100_000,
        "total_decisions": args.decisions, "eval_every": args.eval_every, "eval_seeds": 64,
        "learning_rate": 1e-2, "ppo_epochs": 4, "minibatch_size": 64, "out_dir": args.out,
    }
    cells = [(algo, seed, base) for algo in args.algos for seed in args.seeds]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(_cell, cells))
    summary = {}
    for algo in args.algos:
        mine = [r for r in results if r["algo"] == algo]
        finals = [r["final_success"] for r in mine]
        aucs = [_auc(r["curve"], args.decisions) for r in mine]
        summary[algo] = {"final_success_mean": sum(finals) / len(finals), "final_success": finals,
                         "auc_mean": sum(aucs) / len(aucs), "auc": aucs,
                         "decisions_saved": [r["decisions_saved"] for r in mine]}
    atomic_write_text(Path(args.out) / "summary.json", json.dumps({"args": vars(args), "algorithms": summary}, indent=1))
    for algo, row in summary.items():
        print(f"{algo:6s} final {row['final_success_mean']:.3f}  auc {row['auc_mean']:.3f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
