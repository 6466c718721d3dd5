"""Train the tiny model on FrozenLake with GiGPO in about a minute on a CPU.

    python examples/train_frozenlake.py [--iterations N] [--out DIR]

The lake is one fixed 3x3 map, so that a minute is enough to see learning; ``pretrain_steps: 0``
skips the tiny model's language-model pretraining (minutes, once), which four fixed moves do not
need. Held-out success is sampled at temperature 0.4, the tiny model's evaluation protocol. The same
run from the command line::

    ptgpo train --env ptgpo/FrozenLake-v0 --algo gigpo --iterations 15 --eval-every 5 --eval-episodes 16 \
        --lr 1e-3 --set 'env.kwargs={desc: [SFF, FHF, FFG]}' --set env.max_steps=8 \
        --set tiny.pretrain_steps=0 --set policy.history_length=1 --tasks 4 \
        --set optim.minibatch_size=64 --out runs/example-frozenlake
"""

import argparse
import json

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.trainer import run_training

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=15)
parser.add_argument("--out", default="runs/example-frozenlake")
args = parser.parse_args()

config = TrainConfig.from_dict({
    "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 8},
    "algorithm": {"name": "gigpo"},
    "policy": {"model": "tiny", "tiny": {"pretrain_steps": 0}, "history_length": 1},
    "rollouts": {"group_size": 8, "tasks_per_iteration": 4},
    # A larger step and smaller mini-batches than the tiny model's defaults (tuned for Household's
    # thousands of decisions an iteration): this run has a few hundred.
    "optim": {"lr": 1e-3, "minibatch_size": 64},
    "evaluation": {"every": 5, "seeds": 16},
    "run": {"iterations": args.iterations, "out_dir": args.out, "seed": 0},
})
summary = run_training(config, progress=False)

# curve.jsonl holds one held-out evaluation per line, from the untrained policy on.
with open(summary.curve_path) as handle:
    for line in handle:
        point = json.loads(line)
        print(f"iteration {point['iteration']:3d}  decisions {point['decisions']:6d}  "
              f"held-out success {point['success']:.2f}")
print(f"{summary.iterations} iterations, {summary.decisions} decisions, {summary.wall_time_s:.0f} s; "
      f"run folder {args.out}")
