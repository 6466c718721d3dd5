"""What computing shared prefixes once saves: PTGPO against GiGPO, with ``policy.share_prefixes`` off and on.

Four seeded tiny-model runs in this one process, at the same decision budget: PTGPO (prefix-tree
rollouts) and GiGPO (linear rollouts), each with every trained row computed whole (``off``, as
before the sharing) and with each shared prefix computed once (``on``). For each run it reports, per
policy decision: the tokens the update sent through the loss (``train_tokens``, the same either way),
the tokens its forward passes computed (``computed_tokens``), and the training CPU seconds (process
CPU time of rollouts, advantages and update, evaluation excluded) and the update's alone; then the
ratios PTGPO / GiGPO with sharing off and on, measured in the same run, and each method's on / off.

Usage: ``python scripts/bench_prefix_sharing.py [--decisions 2000] [--seed 0] [--out FILE.json]``. One
thread (``torch.set_num_threads(1)``), so the CPU seconds are one core's. The untrained tiny model
(no pretraining) plays; the figures are costs, not learning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for key, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_NUM_THREADS", "1"), ("HF_HUB_OFFLINE", "1"),
                   ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(key, value)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METHODS = {"ptgpo": {"algo": "ptgpo", "rollout": "tree"}, "gigpo": {"algo": "gigpo", "rollout": "linear"}}
#: The evidence run's MultiRoom cell (configs/bench_evidence_cpu.yaml), with the untrained tiny model (random
#: play wins 9.5 % there, so both methods have non-zero advantages to train on).
SETTINGS = dict(env_id="ptgpo/BabyAI-v0", env_kwargs={"level": "MultiRoom-N2-S4"}, mode="choose",
                history_length=1, group_size=8, tasks_per_iteration=4, tiny={"intermediate_size": 128,
                                                                             "pretrain_steps": 0},
                eval_every=10_000, eval_seeds=2, eval_curve_episodes=2)


class CpuClock:
    """Process CPU seconds spent inside the trainer's collect, estimate and update stages."""

    STAGES = ("collect", "estimate", "update")

    def __init__(self):
        self.seconds = dict.fromkeys(self.STAGES, 0.0)

    def install(self):
        from ptgpo_algos.training.trainer import Trainer

        originals = {stage: getattr(Trainer, stage) for stage in self.STAGES}
        clock = self

        def timed(stage, method):
            def wrapper(self, *args, **kwargs):
                start = time.process_time()
                try:
                    return method(self, *args, **kwargs)
                finally:
                    clock.seconds[stage] += time.process_time() - start
            return wrapper

        for stage, method in originals.items():
            setattr(Trainer, stage, timed(stage, method))
        return originals

    @staticmethod
    def uninstall(originals):
        from ptgpo_algos.training.trainer import Trainer

        for stage, method in originals.items():
            setattr(Trainer, stage, method)


def run(method: str, share: bool, decisions: int, seed: int, out_dir: Path) -> dict:
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.metrics import read_metrics
    from ptgpo_algos.training.trainer import run_training

    config = TrainConfig.from_dict({**SETTINGS, **METHODS[method], "share_prefixes": share, "seed": seed,
                                    "total_decisions": decisions, "iterations": 10_000, "out_dir": str(out_dir)})
    clock = CpuClock()
    originals = clock.install()
    try:
        summary = run_training(config, progress=False)
    finally:
        clock.uninstall(originals)
    rows = read_metrics(summary.metrics_path)
    spent = sum(row["rollout/decisions"] for row in rows)
    totals = {key: sum(row.get(f"update/{key}", 0) for row in rows) for key in ("train_tokens", "computed_tokens")}
    train_cpu = sum(clock.seconds.values())
    return {"method": method, "share_prefixes": share, "decisions": spent, "iterations": len(rows), **totals,
            "train_cpu_s": round(train_cpu, 2), "update_cpu_s": round(clock.seconds["update"], 2),
            "train_tokens_per_decision": round(totals["train_tokens"] / spent, 1),
            "computed_tokens_per_decision": round(totals["computed_tokens"] / spent, 1),
            "train_cpu_ms_per_decision": round(1000 * train_cpu / spent, 2),
            "update_cpu_ms_per_decision": round(1000 * clock.seconds["update"] / spent, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=2000, help="each run's decision budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.decisions < 1:
        parser.error(f"--decisions: a positive number, got {args.decisions}")
    import torch

    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in METHODS:
            for share in (False, True):
                figures = run(method, share, args.decisions, args.seed, Path(tmp) / f"{method}-{share}")
                results[f"{method}-{'on' if share else 'off'}"] = figures
                print(json.dumps(figures), flush=True)
    ratios = {}
    for key in ("train_tokens_per_decision", "computed_tokens_per_decision", "train_cpu_ms_per_decision",
                "update_cpu_ms_per_decision"):
        for state in ("off", "on"):
            ptgpo, gigpo = results[f"ptgpo-{state}"][key], results[f"gigpo-{state}"][key]
            ratios[f"ptgpo/gigpo {key} ({state})"] = round(ptgpo / gigpo, 3) if gigpo else None
        for method in METHODS:
            on, off = results[f"{method}-on"][key], results[f"{method}-off"][key]
            ratios[f"{method} on/off {key}"] = round(on / off, 3) if off else None
    for name, value in ratios.items():
        print(f"{name}: {value}")
    if args.out is not None:
        from ptgpo_algos.files import atomic_write_text

        atomic_write_text(args.out, json.dumps({"settings": SETTINGS, "decisions": args.decisions, "seed": args.seed,
                                                "runs": results, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
