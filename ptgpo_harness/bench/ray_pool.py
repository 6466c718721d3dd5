"""Cells on a Ray cluster (``ptgpo bench --ray [ADDRESS]``): each cell a Ray task with its resource request.

The driver (the ``ptgpo bench`` process, which holds the results folder's lock) submits one task per
cell, asking for the cell's ``cpus`` and ``gpus`` (the config's ``resources``), and the cluster runs
as many at once as its nodes fit. A task runs its cell exactly as the local pool does (a spawned
process with one torch thread, dying with its parent), in a temporary folder of the node it landed
on, and returns the cell's files: its record and its run folder's records, curves, metrics and log.
The driver writes them, so nodes need no shared disk; the trained model and checkpoints stay on the
node and are deleted with the temporary folder (the folder of a task killed midway is removed by the
next task that starts on that node: its lock is free).

A task whose cell could not leave a record (its process or node died, it was killed for memory) is
retried up to ``max_retries`` times, then recorded as failed with Ray's error; a cell that raised
recorded its own failure, which a retry would repeat (``--retry-failed`` re-runs it later, as with the
local pool). Tasks are owned by the driver: when it dies Ray kills them, and their cells die with them.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from leaderboard.records import record_exists, record_path
from ptgpo_harness.bench.plan import Cell
from ptgpo_harness.bench.pool import finish_cell, cell_process, child_env, died_without_record
from ptgpo_algos.files import LOCK_FILE, FolderBusyError, atomic_write_bytes, folder_lock

__all__ = ["CellDied", "run_cells_on_ray"]

#: The temporary folder a task runs its cell in (removed at its end, or by a later task when it was killed).
CELL_FOLDER_PREFIX = "ptgpo-cell-"
#: Run-folder files larger than this stay on the node (a cell's records, curves and logs are far smaller).
MAX_RETURNED_BYTES = 64 * 2**20
#: Not returned: the model and the checkpoints (large, and of no use to the leaderboard), the lock.
_LEFT_ON_THE_NODE = ("final_model", LOCK_FILE)


class CellDied(RuntimeError):
    """A cell's process ended without writing a record: Ray retries its task."""


def run_cell_task(cell: Cell) -> dict[str, bytes]:
    """The Ray task: ``cell`` run in its own process in a temporary folder; its files, by path relative
    to the results folder (the record last)."""
    import multiprocessing
    import tempfile

    _remove_abandoned_cell_folders()
    # The lock says the folder is in use: a task killed with its worker leaves it behind, unlocked.
    with tempfile.TemporaryDirectory(prefix=CELL_FOLDER_PREFIX) as folder, folder_lock(folder, "Ray cell"):
        process = multiprocessing.get_context("spawn").Process(target=cell_process, args=(cell, folder, os.getpid()),
                                                               name=cell.name)
        process.start()
        process.join()
        if not record_exists(folder, cell.name):
            raise CellDied(died_without_record(process.exitcode))
        return _cell_files(Path(folder), cell.name)


def _remove_abandoned_cell_folders(min_age_s: float = 60.0) -> None:
    """Remove the temporary cell folders of this node whose task was killed (their lock is free), with
    the checkpoints and models in them; folders younger than ``min_age_s`` may be about to be locked."""
    import shutil
    import tempfile

    for folder in Path(tempfile.gettempdir()).glob(f"{CELL_FOLDER_PREFIX}*"):
        try:
            if not (folder / LOCK_FILE).is_file() or time.time() - folder.stat().st_mtime < min_age_s:
                continue
            with folder_lock(folder, "removing an abandoned cell folder"):
                shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError, FolderBusyError):  # in use, another user's, or gone meanwhile
            continue


def _cell_files(out_dir: Path, name: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    run_dir = out_dir / "runs" / name
    left = []
    for path in sorted(run_dir.rglob("*")):
        relative = path.relative_to(run_dir)
        if not path.is_file() or relative.parts[0] in _LEFT_ON_THE_NODE or path.suffix == ".pt":
            continue
        if path.stat().st_size > MAX_RETURNED_BYTES:
            left.append(str(relative))
            continue
        files[str(path.relative_to(out_dir))] = path.read_bytes()
    if left:
        log = f"runs/{name}/cell.log"
        note = f"\nleft on the node (over {MAX_RETURNED_BYTES} bytes): {', '.join(left)}\n"
        files[log] = files.get(log, b"") + note.encode()
    record = record_path(out_dir, name)
    files[str(record.relative_to(out_dir))] = record.read_bytes()
    return files


def run_cells_on_ray(cells: list[Cell], out_dir: Path, workers: int, logger: logging.Logger, progress: bool, *,
                     address: str | None = None, max_retries: int = 2) -> list[str]:
    """Run ``cells`` as Ray tasks on the cluster at ``address`` (None: a local cluster of ``workers``
    CPUs, shut down at the end) and write what they return; the names of the failed cells."""
    from ptgpo_envs.progress import progress_bar

    from ptgpo_envs.ray_vector import connect_ray, require_ray

    ray = require_ray()
    local = address is None and not ray.is_initialized()
    connect_ray(address, num_cpus=workers)
    task = ray.remote(run_cell_task)
    logger.info("Ray cluster: %s", {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")})
    running: dict[Any, tuple[Cell, float]] = {}
    failed: list[str] = []
    bar = progress_bar(total=len(cells), desc="bench cells (ray)", unit="cell", disable=not progress)
    try:
        for cell in cells:
            ref = task.options(num_cpus=cell.resources["cpus"], num_gpus=cell.resources["gpus"],
                               max_retries=max_retries, retry_exceptions=[CellDied], name=cell.name,
                               runtime_env={"env_vars": child_env()}).remote(cell)
            running[ref] = (cell, time.monotonic())
            logger.info("submit %s (%s)", cell.name, cell.resources)
        while running:
            done, _ = ray.wait(list(running), num_returns=1, timeout=5.0)
            for ref in done:
                cell, began = running.pop(ref)
                if _collect(ray, ref, cell, out_dir, time.monotonic() - began, logger, max_retries) != "ok":
                    failed.append(cell.name)
                bar.update(1)
                bar.set_postfix(failed=len(failed))
    except BaseException:
        for ref in running:
            ray.cancel(ref, force=True)
        logger.info("interrupted: %d cell(s) cancelled without a record, re-run to resume", len(running))
        raise
    finally:
        bar.close()
        if local:
            ray.shutdown()
    return failed


def _collect(ray: Any, ref: Any, cell: Cell, out_dir: Path, wall: float, logger: logging.Logger,
             max_retries: int) -> str:
    """Write what a finished task returned (the record last), or a failed record saying why."""
    reason = None
    try:
        files = ray.get(ref)
    except ray.exceptions.RayError as error:
        cause = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        reason = f"the cell's Ray task failed ({max_retries} retries): {type(error).__name__}: {cause}"
    else:
        record = str(record_path(out_dir, cell.name).relative_to(out_dir))
        for relative in sorted(files, key=lambda name: name == record):
            atomic_write_bytes(out_dir / relative, files[relative])
    return finish_cell(cell, None, out_dir, wall, logger, reason)
