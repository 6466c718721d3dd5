"""The pool of cell processes: each cell in its own spawned process with one torch thread, at most
``workers`` at a time, dying with the harness; a process that dies without a record gets a failed one."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from leaderboard.records import ResultRecord, read_record, record_exists, record_path, write_record
from ptgpo_harness.bench.eta import remaining_seconds
from ptgpo_harness.bench.plan import Cell
from ptgpo_harness.bench.records import run_cell
from ptgpo_algos.child_processes import die_with_parent, stop_processes, usable_cores
from ptgpo_algos.device import temporary_environment
from ptgpo_envs.plugins import PINNED_PLUGINS_ENV
from ptgpo_envs.progress import HF_BARS_ENV, NO_PROGRESS_ENV

__all__ = ["cell_line", "cell_process", "child_env", "default_workers", "died_without_record", "finish_cell",
           "read_cpu_seconds", "record_failed", "run_cells", "say"]


def cell_process(cell: Cell, out_dir: str, parent: int) -> None:
    """Entry point of a cell's spawned process: one thread, output to the cell's log, then run."""
    import sys

    die_with_parent(parent)
    run_dir = Path(out_dir) / "runs" / cell.name
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "cell.log", "a", buffering=1, encoding="utf-8")
    # dup2 also captures what C extensions and child libraries write to the file descriptors.
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    # One thread comes from OMP_NUM_THREADS=1 (set by the parent, read when torch is imported).
    run_cell(cell, out_dir)
    # The CPU time of a one-thread cell approximates its wall time on an idle core, whatever the
    # machine's load now: the figure to size budgets with.
    (run_dir / _CPU_FILE).write_text(f"{time.process_time():.3f}\n")


_CPU_FILE = "cpu_seconds.txt"


def read_cpu_seconds(run_dir: Path) -> float | None:
    """The CPU seconds a cell's processes used, as the cell wrote them in its run folder (None: unknown)."""
    try:
        return float((run_dir / _CPU_FILE).read_text())
    except (OSError, ValueError):
        return None


# The child reads these before importing torch (spawned processes inherit the environment; a Ray
# cell's task gets them through its runtime environment).
CHILD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OMP_WAIT_POLICY": "PASSIVE",
    "TOKENIZERS_PARALLELISM": "false",
    "MALLOC_MMAP_THRESHOLD_": "1000000000",
    "MALLOC_TRIM_THRESHOLD_": "1000000000",
    "MALLOC_TOP_PAD_": "100000000",
    HF_BARS_ENV: "1",  # a cell writes to its log file: no \r frames
}


def child_env() -> dict[str, str]:
    """What a cell's process reads from its environment: :data:`CHILD_ENV`, and where they are set the
    benchmark's pinned plugin list (:func:`ptgpo_envs.plugins.pinned_plugins`) and ``--no-progress``."""
    passed = {key: os.environ[key] for key in (PINNED_PLUGINS_ENV, NO_PROGRESS_ENV) if key in os.environ}
    return {**CHILD_ENV, **passed}


def default_workers() -> int:
    """One cell at a time per core this process may run on (:func:`~ptgpo_algos.child_processes.usable_cores`)."""
    return usable_cores()


def run_cells(cells: list[Cell], out_dir: Path, workers: int, logger: logging.Logger, progress: bool) -> list[str]:
    """Run ``cells``, each in its own spawned process, ``workers`` at a time; return the names of the cells
    that failed."""
    from ptgpo_envs.progress import progress_bar

    context = multiprocessing.get_context("spawn")
    pending = deque(cells)
    running: dict[Any, tuple[Cell, float]] = {}
    failed: list[str] = []
    finished: list[tuple[int | None, float]] = []
    watch = _NoticeWatch(out_dir)
    bar = progress_bar(total=len(cells), desc="bench cells", unit="cell", disable=not progress)
    try:
        while pending or running:
            while pending and len(running) < workers:
                cell = pending.popleft()
                process = context.Process(target=cell_process, args=(cell, str(out_dir), os.getpid()),
                                          name=cell.name)
                with temporary_environment(child_env()):
                    process.start()
                running[process] = (cell, time.monotonic())
                logger.info("start %s", cell.name)
            multiprocessing.connection.wait([p.sentinel for p in running], timeout=5.0)
            for cell, _ in running.values():
                for notice in watch.new_notices(cell.name):
                    say(f"{cell.name}: {notice}")
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                cell, began = running.pop(process)
                status = finish_cell(cell, process.exitcode, out_dir, time.monotonic() - began, logger)
                if status != "ok":
                    failed.append(cell.name)
                finished.append((cell.budget, read_cpu_seconds(out_dir / "runs" / cell.name) or 0.0))
                left = remaining_seconds(finished, [c.budget for c in pending] + [c.budget for c, _ in running.values()],
                                         workers)
                say(cell_line(out_dir, cell.name, len(finished), len(cells), left))
                bar.update(1)
                bar.set_postfix(failed=len(failed))
    except BaseException:
        stop_processes(list(running))
        logger.info("interrupted: %d cell(s) stopped without a record, re-run to resume", len(running))
        raise
    finally:
        bar.close()
    return failed


#: The lines of a cell's log that the harness repeats on its console: what holds a worker for minutes.
NOTICES = ("pretraining the tiny model (",)


class _NoticeWatch:
    """Reads what running cells add to their ``cell.log`` and picks out the :data:`NOTICES`."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.offsets: dict[str, int] = {}

    def new_notices(self, name: str) -> list[str]:
        path = self.out_dir / "runs" / name / "cell.log"
        try:
            with open(path, "rb") as handle:
                handle.seek(self.offsets.get(name, 0))
                text = handle.read()
        except OSError:
            return []
        # Only whole lines: a line being written is read again on the next look.
        complete = text[: text.rfind(b"\n") + 1]
        self.offsets[name] = self.offsets.get(name, 0) + len(complete)
        lines = complete.decode("utf-8", "replace").splitlines()
        return [line.strip() for line in lines if line.strip().startswith(NOTICES)]


def say(line: str) -> None:
    """A line on the console, above the progress bar when there is one (and with ``--no-progress`` too)."""
    import sys

    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


def cell_line(out_dir: Path, name: str, done: int, total: int, left_s: float | None) -> str:
    """The console's line for a finished cell: its outcome, the count and the time the others need."""
    try:
        record = read_record(record_path(out_dir, name))
    except (OSError, ValueError):
        outcome = "failed (its record cannot be read)"
    else:
        outcome = (f"ok, final success {record.final_success:.3f}" if record.status == "ok"
                   else f"FAILED: {record.error}")
    eta = "" if left_s is None or done == total else f"; about {max(1, round(left_s / 60))} min left"
    return f"[{done}/{total}] {name}: {outcome}{eta}"


def died_without_record(exitcode: int | None) -> str:
    """Why a cell whose process ended with ``exitcode`` has no record of its own."""
    reason = f"the cell's process exited with code {exitcode} before writing a result"
    if exitcode is not None and exitcode < 0:
        reason += f" (signal {-exitcode}, e.g. killed for memory)"
    return reason


def finish_cell(cell: Cell, exitcode: int | None, out_dir: Path, wall: float, logger: logging.Logger,
            reason: str | None = None) -> str:
    """Log the cell's outcome, first recording it as failed if it left no record (``reason``: why;
    by default, what ``exitcode`` says)."""
    if not record_exists(out_dir, cell.name):
        reason = reason or died_without_record(exitcode)
        write_record(
            record_path(out_dir, cell.name),
            ResultRecord(
                method=cell.method, method_kind=cell.kind, env_id=cell.env.id, env_label=cell.env.label,
                env_kwargs=cell.env.kwargs, seed=cell.seed, budget=cell.budget, budget_unit=cell.budget_unit,
                status="failed", error=f"{reason}; see runs/{cell.name}/cell.log", wall_time_s=round(wall, 3),
            ),
        )
    record = read_record(record_path(out_dir, cell.name))
    cpu = read_cpu_seconds(out_dir / "runs" / cell.name)
    took = f"{wall:.1f} s" + ("" if cpu is None else f" ({cpu:.1f} s CPU)")
    if record.status == "ok":
        logger.info("ok %s in %s: final success %.3f, best %.3f, %d decisions", cell.name, took,
                    record.final_success, record.best_success or 0.0, record.decisions)
    else:
        logger.info("FAILED %s in %s: %s", cell.name, took, record.error)
    return record.status


def record_failed(out_dir: Path, name: str) -> bool:
    """Whether cell ``name``'s record says it failed; a record that cannot be read counts as failed."""
    try:
        return read_record(record_path(out_dir, name)).status == "failed"
    except (OSError, ValueError):
        return True
