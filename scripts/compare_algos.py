"""Learning curves of several algorithms at the same decision budget, several seeds, in parallel.

Each (algorithm, seed) cell is one ``run_training`` in its own single-threaded process (measured
here: two 1-thread processes do more work than one 2-thread process). Every cell stops at the same
``--decisions`` budget, so the curves compare success per policy decision spent. Writes
``<out>/<algo>-s<seed>/curve.jsonl`` per cell and ``<out>/summary.json``: per algorithm, the mean and
per-seed final success and the area under the success-vs-decisions curve.

Every cell starts from ``--config`` (default: the tuned tiny-model config of the easy target) with
the Household difficulty set by ``--difficulty``; the rollout mode follows the algorithm (prefix
trees for ptgpo, linear groups otherwise).

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
from statistics import fmean as mean

from ptgpo_algos.files import atomic_write_text

ALGOS = ("grpo", "rloo", "gigpo", "hgpo", "ptgpo")


def _cell(args: tuple[str, int, dict]) -> dict:
    algo, seed, base = args
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.metrics import read_metrics
    from ptgpo_algos.training.trainer import run_training

    config = TrainConfig.from_dict({**base, "algo": algo, "seed": seed,
                                    "run.out_dir": str(Path(base["run.out_dir"]) / f"{algo}-s{seed}")})
    summary = run_training(config, progress=False)
    curve = [json.loads(line) for line in open(summary.curve_path)]
    metrics = read_metrics(summary.metrics_path)
    # Sampled (training) success over the last quarter of the run, and the estimator's diagnostics
    # averaged over the run: where greedy evaluation is all zeros these still tell the methods apart.
    tail = metrics[-max(1, len(metrics) // 4):]
    diagnostics = {key: sum(row[key] for row in metrics) / len(metrics)
                   for key in metrics[0] if key.startswith("advantages/") and isinstance(metrics[0][key], (int, float))}
    return {"algo": algo, "seed": seed, "curve": curve, "final_success": summary.final_eval["success"],
            "best_success": summary.best_success,
            "late_rollout_success": sum(row["rollout/success"] for row in tail) / len(tail),
            "diagnostics": diagnostics, "decisions": summary.decisions,
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
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(root / "configs" / "train_household_easy_gigpo.yaml"),
                        help="training config every cell starts from (algo, seed, budget and out_dir are set here)")
    parser.add_argument("--difficulty", default="hard", help="Household difficulty (env_kwargs.difficulty); '' keeps the config's")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--decisions", type=int, default=200_000, help="policy decisions per cell")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="runs/compare")
    args = parser.parse_args()
    from ptgpo_algos.config import TrainConfig

    # Cells run side by side on one core each, at a matched decision budget: on-policy rollouts; each
    # cell sets its own estimator, seed and folder (the tree/linear choice follows the estimator).
    base = dict(TrainConfig.from_yaml(args.config).flat_items())
    for key in ("algorithm.name", "run.seed", "run.out_dir", "rollouts.strategy", "run.time_limit_s", "run.resume",
                "rollouts.asynchronous"):
        base.pop(key, None)
    if args.difficulty:
        base["env.kwargs"] = {**base["env.kwargs"], "difficulty": args.difficulty}
    base.update({"run.iterations": 100_000, "run.total_decisions": args.decisions,
                 "evaluation.every": args.eval_every, "run.out_dir": args.out})
    cells = [(algo, seed, base) for algo in args.algos for seed in args.seeds]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(_cell, cells))
    summary = {}
    for algo in args.algos:
        mine = [r for r in results if r["algo"] == algo]
        aucs = [_auc(r["curve"], args.decisions) for r in mine]
        keys = sorted(set().union(*(r["diagnostics"] for r in mine)))
        summary[algo] = {
            "final_success_mean": mean([r["final_success"] for r in mine]),
            "final_success": [r["final_success"] for r in mine],
            "best_success": [r["best_success"] for r in mine],
            "auc_mean": mean(aucs), "auc": aucs,
            "late_rollout_success_mean": mean([r["late_rollout_success"] for r in mine]),
            "late_rollout_success": [r["late_rollout_success"] for r in mine],
            "diagnostics_mean": {k: mean([r["diagnostics"].get(k, 0.0) for r in mine]) for k in keys},
            "decisions": [r["decisions"] for r in mine],
            "decisions_saved": [r["decisions_saved"] for r in mine],
            "wall_time_s": [r["wall_time_s"] for r in mine],
        }
    atomic_write_text(Path(args.out) / "summary.json", json.dumps({"args": vars(args), "base": base, "algorithms": summary}, indent=1))
    print(f"{'algo':6s} {'final':>6s} {'auc':>6s} {'late sampled':>12s} {'nonzero adv':>11s}")
    for algo, row in summary.items():
        print(f"{algo:6s} {row['final_success_mean']:6.3f} {row['auc_mean']:6.3f} {row['late_rollout_success_mean']:12.3f} "
              f"{row['diagnostics_mean'].get('advantages/nonzero_fraction', float('nan')):11.3f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
