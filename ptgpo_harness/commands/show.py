"""``ptgpo show``: a run's recorded iterations as self-contained HTML pages, one per iteration.

Examples::

    ptgpo train --env ptgpo/FrozenLake-v0 --algo ptgpo --record-rollouts 5 --out runs/fl
    ptgpo show runs/fl                          # runs/fl/show/iteration-NNNNNN.html, index.html
    ptgpo show runs/fl --iteration 5 10 --out pages/fl

Each page draws every group as its prefix tree (tree rollouts) or its trajectories, with each
decision's observation and response on a click, and its advantage under the run's estimator and any
other registered one (:mod:`ptgpo_algos.viewer`). A benchmark cell's folder is a run folder too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "draw a run's recorded rollouts (run.record_rollouts) as HTML pages: trees, observations, every estimator's credit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo show``'s arguments: the run folder, which iterations, where to write."""
    parser.add_argument("run", help="a training run folder (or a benchmark cell's) that recorded rollouts")
    parser.add_argument("--iteration", type=int, nargs="+", metavar="N",
                        help="the recorded iterations to draw (default: every recorded one)")
    parser.add_argument("--out", help="output folder [RUN/show]")


def run(args: argparse.Namespace) -> int:
    """Write the pages; the exit status."""
    from ptgpo_harness.commands import run_folder_command
    from ptgpo_algos.viewer import write_pages

    def write(run_dir: Path, out_dir: Path) -> int:
        pages = write_pages(run_dir, out_dir, args.iteration)
        print(f"wrote {len(pages)} page{'s' * (len(pages) != 1)} to {out_dir} (open {out_dir / 'index.html'})")
        return 0

    return run_folder_command("show", args.run, args.out, "show", write)
