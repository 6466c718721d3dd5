"""``ptgpo export``: a run's recorded rollouts as a data set, one row per decision.

Examples::

    ptgpo train --env ptgpo/FrozenLake-v0 --algo ptgpo --record-rollouts 5 --out runs/fl
    ptgpo export runs/fl                        # runs/fl/export/rollouts.jsonl (+ dataset/)
    ptgpo export runs/fl --out data/fl --no-datasets

A row holds the decision's context (task, observation, history, admissible actions), the action,
the reward, the advantage and where it sits in its group's tree (:mod:`ptgpo_algos.rollouts.recordings`).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

HELP = "write a run's recorded rollouts (run.record_rollouts) as JSONL and a Hugging Face datasets folder"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo export``'s arguments: the run folder, where to write, whether to write a datasets folder."""
    parser.add_argument("run", help="a training run folder that recorded rollouts (run.record_rollouts)")
    parser.add_argument("--out", help="output folder [RUN/export]")
    parser.add_argument("--no-datasets", action="store_true",
                        help="write only rollouts.jsonl (default: also dataset/ where the datasets package is "
                             "installed)")


def run(args: argparse.Namespace) -> int:
    """Export the run's recordings; the exit status."""
    from ptgpo_harness.commands import run_folder_command
    from ptgpo_algos.export import export_run

    def write(run_dir: Path, out_dir: Path) -> int:
        summary = export_run(run_dir, out_dir, with_dataset=False if args.no_datasets else None)
        print(f"wrote {summary.rows} decisions of {summary.iterations} iterations to {summary.jsonl}")
        if summary.dataset is not None:
            print(f"wrote {summary.dataset} (datasets.load_from_disk)")
        elif not args.no_datasets and importlib.util.find_spec("datasets") is None:
            print("no datasets folder: pip install 'ptgpo[datasets]' to write one")
        return 0

    return run_folder_command("export", args.run, args.out, "export", write)
