"""Decisions/s and trained tokens/s of SmolLM2-135M-Instruct beside the tiny model's, on this machine's CPU.

For each model (``tiny``, ``smollm2``), action mode (``choose``, ``generate``) and rollout dtype
(``--rollout-dtypes``: ``policy.rollout_dtype``, float32 by default): linear rollouts of ``--tasks``
tasks x ``--group-size`` episodes of ``ptgpo/FrozenLake-v0`` side by side, capped at ``--max-steps``
steps (decisions per second of the rollout's wall time), then pi_old recomputed at the update's
float32 (``drift``: its mean absolute difference from the rollout's log-probabilities, per choice in
``choose`` mode and per token in ``generate`` mode) and one PPO pass over those steps (prompt and
response tokens trained per second), for each update dtype (``--update-dtypes``: float32, or bfloat16
for ``policy.cpu_autocast``, whose update computes under bf16 autocast with float32 weights, optimiser
and log-probabilities; its pi_old is recomputed at that precision). ``--threads`` sets torch's threads (2 by default: the
project's CPU machines). Loading and converting the model is not timed; the tiny model is built without
pretraining (the same shape and speed as the trainer's pretrained one).

Usage: ``python scripts/bench_smollm2.py [--threads 2] [--tasks 8 --group-size 4] [--rollout-dtypes float32
bfloat16] [--update-dtypes float32 bfloat16] [--micro-batch-size 4] [--out runs/bench_smollm2.json]``. The machine's
load average is written beside the figures: timings on a shared machine depend on what else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for key, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("MALLOC_MMAP_THRESHOLD_", "1000000000"),
                   ("MALLOC_TRIM_THRESHOLD_", "1000000000"), ("MALLOC_TOP_PAD_", "100000000"),
                   ("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(key, value)

ROOT = Path(__file__).resolve().parents[1]
ENV = "ptgpo/FrozenLake-v0"


def measure(model: str, mode: str, rollout_dtype: str, update_dtype: str, args: argparse.Namespace) -> dict:
    """One model in one mode, its rollouts at ``rollout_dtype``: rollout decisions/s, pi_old's drift
    and its recomputation's seconds, then trained tokens/s of one PPO pass over them at ``update_dtype``."""
    import numpy as np
    import torch

    from ptgpo_algos.advantages import compute_advantages
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.updates.settings import OptimConfig
    from ptgpo_algos.records import Task
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.rollouts.collection import collect_rollouts
    from ptgpo_algos.updates.samples import flatten_batch, recompute_old_logprobs
    from ptgpo_algos.updates.updater import ppo_update

    # The tiny model untrained: its speed is its pretrained twin's, without minutes of pretraining first.
    tiny = {"tiny": {"pretrain_steps": 0}} if model == "tiny" else {}
    config = TrainConfig.from_dict({"env_id": ENV, "model": model, "mode": mode, "max_steps": args.max_steps,
                                    "max_new_tokens": args.max_new_tokens, "seed": 0, **tiny,
                                    "policy": {"rollout_dtype": rollout_dtype,
                                               "cpu_autocast": update_dtype == "bfloat16"}})
    started = time.perf_counter()
    policy = build_policy(config, "cpu")
    load_s = time.perf_counter() - started
    tasks = [Task(ENV, seed, {}, config.env.max_steps) for seed in range(args.tasks)]
    batch, stats = collect_rollouts(policy, tasks, group_size=args.group_size, mode="linear",
                                    rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
                                    max_decisions=None)
    decisions = [s.decision for group in batch for t in group for s in t.steps]
    prompt_tokens = sum(len(d.prompt_ids) for d in decisions)
    samples = flatten_batch(batch, compute_advantages("grpo", batch))
    for sample in samples:  # every step contributes to the timed update
        sample.advantage = sample.advantage or 0.1
    started = time.perf_counter()
    drift = recompute_old_logprobs(policy, samples, None)["old_logprob_drift"]
    recompute_s = time.perf_counter() - started
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-6)
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=1.0, epochs=1,
                        minibatch_size=len(samples), micro_batch_size=args.micro_batch_size, clip_ratio_c=None)
    started = time.perf_counter()
    update = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    train_s = time.perf_counter() - started
    parsed = [d for d in decisions if d.action is not None and d.format_error is None]
    return {
        "model": model, "mode": mode, "rollout_dtype": rollout_dtype, "update_dtype": update_dtype,
        "load_s": load_s, "drift": drift, "recompute_s": recompute_s, "decisions": stats.decisions,
        "rollout_s": stats.wall_time_s, "decisions_per_s": stats.decisions_per_s,
        "mean_prompt_tokens": prompt_tokens / max(1, len(decisions)),
        "valid_decisions": len(parsed) / max(1, len(decisions)),
        "train_tokens": update["train_tokens"], "train_s": train_s,
        "train_tokens_per_s": update["train_tokens"] / train_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    parser.add_argument("--modes", nargs="+", default=["choose", "generate"])
    parser.add_argument("--rollout-dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    parser.add_argument("--micro-batch-size", type=int, default=None,
                        help="optim.micro_batch_size: steps per forward/backward pass (default: all at once)")
    parser.add_argument("--update-dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"],
                        help="bfloat16: policy.cpu_autocast (the update under bf16 autocast)")
    parser.add_argument("--out", default="runs/bench_smollm2.json")
    args = parser.parse_args(argv)

    import torch

    from ptgpo_algos.files import atomic_write_text

    torch.set_num_threads(args.threads)
    report = {"threads": args.threads, "env": ENV, "tasks": args.tasks, "group_size": args.group_size,
              "micro_batch_size": args.micro_batch_size,
              "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
              "load_average_at_start": os.getloadavg(), "rows": []}
    print("| model | mode | rollout dtype | update dtype | decisions | decisions/s | x first rollout dtype | drift | "
          "mean prompt tokens | valid | pi_old recompute s | trained tokens/s | x first update dtype |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        for mode in args.modes:
            first, first_update = None, None
            for dtype in args.rollout_dtypes:
                for update_dtype in args.update_dtypes:
                    row = measure(model, mode, dtype, update_dtype, args)
                    first = first or row["decisions_per_s"]
                    first_update = first_update or row["train_tokens_per_s"]
                    row["speedup"] = row["decisions_per_s"] / first
                    row["update_speedup"] = row["train_tokens_per_s"] / first_update
                    report["rows"].append(row)
                    print(f"| {model} | {mode} | {dtype} | {update_dtype} | {row['decisions']} | "
                          f"{row['decisions_per_s']:.2f} | {row['speedup']:.2f} | {row['drift']:.4f} | "
                          f"{row['mean_prompt_tokens']:.0f} | {row['valid_decisions']:.0%} | {row['recompute_s']:.1f} | "
                          f"{row['train_tokens_per_s']:.0f} | {row['update_speedup']:.2f} |", flush=True)
    report["load_average_at_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(report, indent=1))
    print(f"load average {report['load_average_at_start'][0]:.1f} at the start, "
          f"{report['load_average_at_end'][0]:.1f} at the end; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
