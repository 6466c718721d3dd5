"""``ptgpo bench [CONFIG]``: run a benchmark grid (resumable) and build its leaderboard.

Without CONFIG it runs the embedded CPU default (tiny model, Household easy and hard, every estimator
and baseline, two seeds); ``--quick`` runs the config's short version; ``--ray [ADDRESS]`` runs the
cells as tasks on a Ray cluster (:mod:`ptgpo_harness.bench.ray_pool`). See :mod:`ptgpo_harness.bench`
for the config schema and the output folder. Exit status: 0 when every cell succeeded, 1 when some
cell failed (its record says why; the others still ran), 2 for a bad config.
"""

from __future__ import annotations

import argparse
import sys

#: ``--ray`` without an address: a local cluster.
LOCAL_CLUSTER = "local"

HELP = "run a benchmark (environments x methods x seeds) from a YAML config and build the leaderboard"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo bench``'s arguments: the config file and the flags that change how it runs."""
    parser.add_argument(
        "config", nargs="?", default=None,
        help="benchmark YAML (e.g. configs/bench/alfworld_qwen2.5-1.5b.yaml); default: the embedded CPU benchmark",
    )
    parser.add_argument("--quick", action="store_true", help="run the config's short version (its 'quick' section)")
    parser.add_argument("--workers", type=int, default=None, help="cells run in parallel (default: config, else CPU cores)")
    parser.add_argument("--out", default=None, help="output folder (default: bench_results/<config name>)")
    parser.add_argument("--retry-failed", action="store_true", help="also re-run cells whose record says failed")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and whether each is done, run nothing")
    parser.add_argument("--print-default", action="store_true", help="print the embedded default config and exit")
    parser.add_argument(
        "--ray", nargs="?", const=LOCAL_CLUSTER, default=None, metavar="ADDRESS",
        help="run each cell as a Ray task asking for its resources (the config's cpus/gpus) on the cluster at "
             "ADDRESS (auto: the one `ray start` runs here; ray://host:10001), or on a local cluster of "
             "--workers CPUs when no address is given; needs pip install 'ptgpo[ray]'",
    )
    parser.add_argument("--max-retries", type=int, default=2,
                        help="with --ray: times a cell's task is retried when it leaves no record (default 2)")


def run(args: argparse.Namespace) -> int:
    """Run ``ptgpo bench``: plan the cells, run those not done, build the leaderboard; its exit status."""
    from pathlib import Path

    from ptgpo_harness.bench import BenchError, default_config_text, load_config, run_bench
    from ptgpo_algos.files import FolderBusyError

    if args.print_default:
        print(default_config_text(), end="")
        return 0
    try:
        config = load_config(args.config, quick=args.quick)
        if args.workers is not None and args.workers < 1:
            raise BenchError(f"--workers must be a positive integer, got {args.workers}")
    except BenchError as error:
        print(f"ptgpo bench: {error}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path("bench_results") / config.name
    if args.dry_run:
        return _dry_run(config, out_dir)
    if args.ray is not None:
        from ptgpo_envs.ray_vector import require_ray

        try:
            require_ray()
        except ImportError as error:
            print(f"ptgpo bench --ray: {error}", file=sys.stderr)
            return 2
    try:
        report = run_bench(config, out_dir, workers=args.workers, retry_failed=args.retry_failed,
                           progress=not args.no_progress, ray=args.ray is not None,
                           ray_address=None if args.ray == LOCAL_CLUSTER else args.ray,
                           max_retries=args.max_retries)
    except (BenchError, FolderBusyError, ValueError) as error:
        print(f"ptgpo bench: {error}", file=sys.stderr)
        return 2
    except ConnectionError as error:
        print(f"ptgpo bench --ray: {error}", file=sys.stderr)
        return 2
    print(
        f"{len(report.cells)} cells: {len(report.ran)} ran, {len(report.skipped)} already done, "
        f"{len(report.failed)} failed, in {report.wall_time_s / 60:.1f} min ({report.cpu_seconds / 60:.1f} CPU-min)"
    )
    for name in report.failed:
        print(f"  failed: {name} (see {out_dir / (name + '.json')})")
    if report.failed:
        # A plain re-run keeps a failed cell's record (its failure would most likely repeat).
        print(f"to run the failed cells again: ptgpo bench {args.config or ''} --retry-failed"
              + (f" --out {args.out}" if args.out else "") + (" --quick" if args.quick else ""))
    print(f"records and runs: {report.out_dir}")
    for path in report.leaderboard_files:
        print(f"leaderboard: {path}")
    if report.leaderboard_error:
        print(f"ptgpo bench: leaderboard not built: {report.leaderboard_error}", file=sys.stderr)
    if config.smoke_run:
        from leaderboard.board import SMOKE_NOTICE

        print(SMOKE_NOTICE)
    return 1 if report.failed else 0


def _dry_run(config, out_dir) -> int:
    """The checks a real run makes before its first cell, then each cell and whether it is done;
    nothing written."""
    from leaderboard.records import record_exists
    from ptgpo_harness.bench import BenchError, check_out_dir, check_train_configs, plan_cells

    cells = plan_cells(config)
    try:
        check_train_configs(cells)
        check_out_dir(out_dir, config)
    except BenchError as error:
        print(f"ptgpo bench: {error}", file=sys.stderr)
        return 2
    for cell in cells:
        done = "done" if record_exists(out_dir, cell.name) else "todo"
        print(f"{done}  {cell.name}")
    return 0
