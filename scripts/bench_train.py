"""Benchmark the tiny-model training path on this machine and write the numbers as JSON.

Measures, with the untrained tiny model on ``ptgpo/Household-v0`` (easy):

1. rollout throughput: policy decisions per second for linear and tree rollouts of 8 tasks x 8;
2. training throughput: tokens per second of PPO updates (prompt + candidate tokens processed);
3. the learning target: ``configs/train_household_easy_gigpo.yaml`` for ``--minutes`` of wall time
   (10 by default), evaluating on 64 held-out seeds; reports the curve and the time to reach 0.8.

Usage: ``python scripts/bench_train.py [--minutes 10] [--out runs/bench_train]``. Set
``OMP_NUM_THREADS=1`` to measure one core (what parallel benchmark cells get). ``--profile`` runs
only parts 1 and 2, under cProfile, and writes ``profile.txt`` (functions by own time, and the share
spent in torch's kernels): where a rollout and an update spend their time. Profiling slows the
Python side a little, so its throughput figures read low.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from ptgpo_algos.files import atomic_write_text

for key, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("MALLOC_MMAP_THRESHOLD_", "1000000000"),
                   ("MALLOC_TRIM_THRESHOLD_", "1000000000"), ("MALLOC_TOP_PAD_", "100000000"),
                   ("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(key, value)

ROOT = Path(__file__).resolve().parents[1]


def throughput(config, policy=None) -> dict:
    """Parts 1 and 2 with ``policy`` (built from ``config`` when not given; the update trains it)."""
    import numpy as np
    import torch

    from ptgpo_algos.advantages import compute_advantages
    from ptgpo_algos.records import Task
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.rollouts.collection import collect_rollouts
    from ptgpo_algos.updates.settings import OptimConfig
    from ptgpo_algos.updates.samples import flatten_batch
    from ptgpo_algos.updates.updater import ppo_update

    policy = policy if policy is not None else build_policy(config, "cpu")
    tasks = [Task(config.env.id, seed, dict(config.env.kwargs)) for seed in range(8)]
    result = {}
    for mode in ("linear", "tree"):
        batch, stats = collect_rollouts(policy, tasks, group_size=8, mode=mode, rng=np.random.default_rng(0),
                                        generator=torch.Generator().manual_seed(0))
        # Tokens the policy processed: each decision's prompt and all its candidates (shared prefix
        # steps of a tree counted once, like the decisions).
        decisions = {id(s): s.decision for group in batch for t in group for s in t.steps}.values()
        processed = sum(len(d.prompt_ids) + sum(map(len, d.candidate_ids or [d.response_ids])) for d in decisions)
        result[f"{mode}_decisions_per_s"] = stats.decisions_per_s
        result[f"{mode}_tokens_per_s"] = processed / stats.wall_time_s
        result[f"{mode}_decisions"] = stats.decisions
        result[f"{mode}_decisions_saved"] = stats.decisions_saved
    advantages = compute_advantages("grpo", batch)
    samples = flatten_batch(batch, advantages)
    for s in samples:  # time a full update: every step contributes
        s.advantage = s.advantage or 0.1
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-3)
    start = time.perf_counter()
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=1.0, epochs=1, minibatch_size=64,
                        clip_ratio_c=None)
    update = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    seconds = time.perf_counter() - start
    result.update(train_steps=len(samples), train_tokens=update["train_tokens"], train_seconds=seconds,
                  train_tokens_per_s=update["train_tokens"] / seconds, train_steps_per_s=len(samples) / seconds)
    return result


def profile_throughput(config, target: Path) -> dict:
    """``throughput(config)`` under cProfile; writes the 40 functions with the most own time, after a
    line giving the share of all time spent inside torch's compiled functions (built-ins named torch…)."""
    import cProfile
    import io
    import pstats

    from ptgpo_algos.policy.backends import build_policy

    policy = build_policy(config, "cpu")  # built outside: imports and loading stay out of the profile
    profiler = cProfile.Profile()
    result = profiler.runcall(throughput, config, policy)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    total = sum(entry[2] for entry in stats.stats.values())  # own time of every function
    kernels = sum(entry[2] for (filename, _, name), entry in stats.stats.items()
                  if filename == "~" and "torch" in name)
    share = kernels / total
    text.write(f"own time: {total:.2f} s in all, {kernels:.2f} s ({share:.0%}) in torch's compiled functions\n")
    stats.sort_stats("tottime").print_stats(40)
    atomic_write_text(target, text.getvalue())
    result["profile_torch_kernel_share"] = share
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--config", default=str(ROOT / "configs" / "train_household_easy_gigpo.yaml"))
    parser.add_argument("--out", default="runs/bench_train")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="profile the throughput part, write profile.txt and stop (no training run)")
    args = parser.parse_args()
    if args.profile and args.skip_throughput:
        parser.error("--profile profiles the throughput part: drop --skip-throughput")

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    out = Path(args.out)
    run_dir = out / "run"
    out.mkdir(parents=True, exist_ok=True)
    config = TrainConfig.from_yaml(args.config, {"out_dir": str(run_dir), "time_limit_s": args.minutes * 60,
                                                 "iterations": 100_000})
    # Timings on a shared machine depend on what else runs: keep the load next to them.
    report = {"config": args.config, "minutes": args.minutes, "threads": os.environ.get("OMP_NUM_THREADS"),
              "load_average_at_start": os.getloadavg()}
    if args.profile:
        report["throughput"] = profile_throughput(config, out / "profile.txt")
        print(json.dumps(report["throughput"], indent=1))
        print(f"profile: {out / 'profile.txt'}")
        atomic_write_text(out / "bench_train_profile.json", json.dumps(report, indent=1))
        return 0
    if run_dir.exists():  # only now: --profile leaves an earlier training run in place
        shutil.rmtree(run_dir)
    if not args.skip_throughput:
        report["throughput"] = throughput(config)
        print(json.dumps(report["throughput"], indent=1), flush=True)
    summary = run_training(config, progress=True)
    curve = [json.loads(line) for line in Path(summary.curve_path).read_text().splitlines()]
    reached = [row for row in curve if row["success"] >= 0.8]
    report.update(
        curve=[{k: row[k] for k in ("iteration", "decisions", "success", "wall_time_s")} for row in curve],
        untrained_success=curve[0]["success"],
        final_success=summary.final_eval["success"],
        best_success=summary.best_success,
        time_to_0_8_s=reached[0]["wall_time_s"] if reached else None,
        wall_time_s=summary.wall_time_s,
        decisions=summary.decisions,
        load_average_at_end=os.getloadavg(),
    )
    atomic_write_text(out / "bench_train.json", json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
