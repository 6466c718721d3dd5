"""Run a benchmark grid: plan its cells, run the missing ones (in processes or as Ray tasks), then
build the leaderboard (the package's docstring, :mod:`ptgpo_harness.bench`, describes the benchmark)."""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from leaderboard.board import SMOKE_MARKER, SMOKE_NOTICE
from leaderboard.records import record_exists
from ptgpo_harness.bench.config import BenchConfig, BenchError
from ptgpo_harness.bench.plan import Cell, check_out_dir, check_train_configs, plan_cells
from ptgpo_harness.bench.pool import default_workers, read_cpu_seconds, record_failed, run_cells, say
from ptgpo_algos.files import atomic_write_text, folder_lock
from ptgpo_envs.plugins import pinned_plugins

__all__ = ["BenchReport", "run_bench"]


@dataclass
class BenchReport:
    """What :func:`run_bench` did: the cells planned, run, skipped and failed, the leaderboard files
    written (or the error), wall time and the cells' CPU time."""

    out_dir: Path
    cells: list[str]
    ran: list[str]
    skipped: list[str]
    failed: list[str]
    leaderboard_files: list[Path]
    leaderboard_error: str | None
    wall_time_s: float
    cpu_seconds: float  # CPU time of the cells that ran (sum over their processes)


def run_bench(
    config: BenchConfig,
    out_dir: str | os.PathLike | None = None,
    *,
    workers: int | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    build_leaderboard: bool = True,
    ray: bool = False,
    ray_address: str | None = None,
    max_retries: int = 2,
) -> BenchReport:
    """Run every missing cell of ``config`` (``workers`` at a time), then build the leaderboard.

    ``retry_failed`` also re-runs cells whose record says ``failed``. With ``ray`` the cells are Ray
    tasks (:mod:`.ray_pool`) on the cluster at ``ray_address`` (None: a local one of ``workers`` CPUs),
    each retried up to ``max_retries`` times when it leaves no record.
    """
    out_dir = Path(out_dir) if out_dir is not None else Path("bench_results") / config.name
    workers = workers or config.workers or default_workers()
    if workers < 1:
        raise BenchError(f"workers must be a positive integer, got {workers}")
    if max_retries < 0:
        raise BenchError(f"max_retries must be a non-negative integer, got {max_retries}")
    runner = run_cells
    if ray:
        from ptgpo_harness.bench.ray_pool import run_cells_on_ray

        runner = functools.partial(run_cells_on_ray, address=ray_address, max_retries=max_retries)
    # The plugins installed now are the ones every cell loads, whatever is installed while it runs.
    with pinned_plugins():
        cells = plan_cells(config)
        check_train_configs(cells)
        config_text = check_out_dir(out_dir, config)
        with folder_lock(out_dir, "benchmark"):
            atomic_write_text(out_dir / "config.yaml", config_text)
            if config.smoke_run:
                atomic_write_text(out_dir / SMOKE_MARKER, SMOKE_NOTICE + "\n")
            return _run_grid(config, cells, out_dir, workers, retry_failed, progress, build_leaderboard, runner)


def _run_grid(config: BenchConfig, cells: list[Cell], out_dir: Path, workers: int, retry_failed: bool,
              progress: bool, build_leaderboard: bool, runner: Callable = run_cells) -> BenchReport:
    logger = _file_logger(out_dir / "bench.log")

    todo, skipped = [], []
    for cell in cells:
        if record_exists(out_dir, cell.name) and not (retry_failed and record_failed(out_dir, cell.name)):
            skipped.append(cell.name)
        else:
            todo.append(cell)
    logger.info("benchmark %s: %d cells, %d to run, %d already done, %d workers", config.name,
                len(cells), len(todo), len(skipped), workers)
    for name in skipped:
        logger.info("skip %s (record exists)", name)
    failed_before = [name for name in skipped if record_failed(out_dir, name)]
    if todo:
        say(f"benchmark {config.name}: {len(todo)} of {len(cells)} cells to run, {workers} at a time; the time "
            f"left is estimated from the first cells that finish; a cell's log: {out_dir / 'runs'}/<cell>/cell.log")
    if failed_before:
        say(f"{len(failed_before)} cell(s) failed in an earlier run and are skipped: --retry-failed runs them again")

    # Long (training) cells first, so that short baseline cells fill the workers at the end. A budget
    # measured in seconds depends on what else the machine runs: the methods take turns seed by seed,
    # so that a busy hour is spread over all of them instead of falling on one method's cells.
    if config.budget_unit in ("train_cpu_s", "gpu_s"):
        levels = {env.label: i for i, env in enumerate(config.environments)}
        todo.sort(key=lambda cell: (cell.budget is None, levels[cell.env.label], cell.seed))
    else:
        todo.sort(key=lambda cell: cell.budget is None)
    start = time.monotonic()
    failed = runner(todo, out_dir, workers, logger, progress) if todo else []
    failed += failed_before
    files: list[Path] = []
    board_error = None
    if build_leaderboard:
        files, board_error = _build_leaderboard(out_dir, logger)
    wall = time.monotonic() - start
    cpu = sum(read_cpu_seconds(out_dir / "runs" / cell.name) or 0.0 for cell in todo)
    logger.info("done in %.1f s: %d ran, %d skipped, %d failed", wall, len(todo), len(skipped), len(failed))
    if todo:
        logger.info("the cells that ran used %.0f CPU seconds: about %.1f min on %d idle cores", cpu,
                    cpu / 60 / workers, workers)
    _close_logger(logger)
    return BenchReport(out_dir, [c.name for c in cells], [c.name for c in todo], skipped, failed, files, board_error,
                       wall, cpu)


def _build_leaderboard(out_dir: Path, logger: logging.Logger) -> tuple[list[Path], str | None]:
    """What ``ptgpo leaderboard OUT_DIR`` writes (every format, the papers' reported table included)."""
    from leaderboard.aggregate import build_leaderboard
    from leaderboard.board import LeaderboardError
    from leaderboard.render import write_outputs
    from leaderboard.reported import DEFAULT_REPORTED, load_reported

    try:
        board = build_leaderboard(out_dir, load_reported(DEFAULT_REPORTED))
    except LeaderboardError as error:
        # The records are kept either way; the user can fix the folder and run `ptgpo leaderboard`.
        logger.info("leaderboard not built: %s", error)
        return [], str(error)
    files = write_outputs(board, out_dir / "leaderboard")
    logger.info("leaderboard: %s", ", ".join(str(f) for f in files))
    return files, None


def _file_logger(path: Path) -> logging.Logger:
    logger = logging.getLogger(f"ptgpo.bench.{path}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


def _close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
