"""What ``run.record_rollouts: 1`` costs: the recorder's own seconds and bytes per iteration, against the
iteration's seconds, on two seeded tiny-model runs (PTGPO on FrozenLake 4x4 with tree rollouts, GiGPO
on the easy Household with linear rollouts; 4 groups of 8, 2 evaluation episodes).

The recorder's call is timed inside the run (a subclass of
:class:`~ptgpo_algos.training.callbacks.RolloutRecorder`), so the share is the recording's, not the difference
of two noisy runs. Usage: ``python scripts/recording_cost.py [--iterations 6] [--out DIR]``; one JSON
line per run. The untrained tiny model (no pretraining) plays; the figures are costs, not learning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptgpo_algos.training.callbacks import RolloutRecorder  # noqa: E402
from ptgpo_algos.config import TrainConfig  # noqa: E402

RUNS = {
    "frozenlake-4x4-ptgpo": dict(env_id="ptgpo/FrozenLake-v0", algo="ptgpo", **{"rollouts.strategy": "tree"}),
    "household-easy-gigpo": dict(env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "easy"}, algo="gigpo",
                                 **{"rollouts.strategy": "linear"}),
}


class TimedRecorder(RolloutRecorder):
    """The recorder, adding up the seconds its writes take."""

    def __init__(self, out_dir: Path, every: int):
        super().__init__(out_dir, every)
        self.seconds = 0.0

    def on_rollouts(self, run, iteration, batch, advantages) -> None:  # noqa: ANN001 (the callback's signature)
        start = time.perf_counter()
        super().on_rollouts(run, iteration, batch, advantages)
        self.seconds += time.perf_counter() - start


def measure(name: str, settings: dict, iterations: int, out_dir: Path) -> dict:
    """Train one run recording every iteration; its seconds and the recording's, per iteration."""
    from ptgpo_algos.training.trainer import Trainer

    config = TrainConfig.from_dict({
        **settings, "group_size": 8, "tasks_per_iteration": 4, "iterations": iterations, "eval_every": iterations,
        "checkpoint_every": iterations, "eval_seeds": 2, "out_dir": str(out_dir / name),
        "tiny": {"hidden_size": 32, "pretrain_steps": 0}})
    recorder = TimedRecorder(config.run_dir, 1)
    start = time.perf_counter()
    Trainer(config, progress=False, callbacks=[recorder]).train()
    total = time.perf_counter() - start
    size = sum(path.stat().st_size for path in (config.run_dir / "rollouts").iterdir())
    return {"run": name, "iterations": iterations, "seconds_per_iteration": round(total / iterations, 3),
            "recording_ms_per_iteration": round(1000 * recorder.seconds / iterations, 1),
            "recording_share": round(recorder.seconds / total, 4),
            "recording_kib_per_iteration": round(size / iterations / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=6, help="iterations of each run [6]")
    parser.add_argument("--out", help="where the runs are written [a temporary folder]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        out_dir = Path(args.out or folder)
        for name, settings in RUNS.items():
            print(json.dumps(measure(name, settings, args.iterations, out_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
