"""Processes this one starts and must not outlive: each dies with its parent, however the parent dies,
and a group is stopped together (a signal, a short grace, then ``SIGKILL``); how many of them this
machine's cores run at once. The benchmark's cell processes and the ranks of ``ptgpo train --nproc``
are both started and ended this way.

Layering: this module imports nothing of the suite and not torch, so the command line can read it.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import signal
import time
from typing import Sequence

__all__ = ["GRACE_S", "OversubscribedWarning", "die_with_parent", "stop_processes", "usable_cores"]

#: How long a stopped process may take to exit on its signal before it is killed.
GRACE_S = 5.0


class OversubscribedWarning(UserWarning):
    """More processes were asked for than there are cores to run them at once: they share the cores."""


def usable_cores() -> int:
    """The number of CPU cores this process may run on (its affinity; at least 1)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` dies, however it dies (``kill -9`` too), so that
    no orphan goes on writing into a folder that a re-run will use (Linux only). Call it first thing in
    the child; ``parent`` is the pid that started it.

    The kernel sends the signal when the *thread* that started this process ends: start children from
    the main thread. A parent that died before the request took effect is caught by the check after it.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the folder's lock still refuses a second writer
        return
    if os.getppid() != parent:
        os._exit(1)


def stop_processes(processes: Sequence[multiprocessing.process.BaseProcess], signum: int | None = signal.SIGTERM,
                   grace_s: float = GRACE_S) -> None:
    """Send ``signum`` to each of ``processes`` still running (None: send nothing, they are ending on
    their own), give them ``grace_s`` seconds to exit, kill those left with ``SIGKILL``, and reap them all."""
    for process in processes:
        if signum is not None and process.pid is not None and process.exitcode is None:
            _signal(process, signum)
    deadline = time.monotonic() + grace_s
    while True:
        running = [p for p in processes if p.pid is not None and p.exitcode is None]
        left = deadline - time.monotonic()
        if not running or left <= 0:
            break
        multiprocessing.connection.wait([p.sentinel for p in running], timeout=left)
    for process in running:
        _signal(process, signal.SIGKILL)
    for process in processes:
        if process.pid is not None:
            process.join()


def _signal(process: multiprocessing.process.BaseProcess, signum: int) -> None:
    try:
        os.kill(process.pid, signum)
    except ProcessLookupError:  # it exited meanwhile
        pass
