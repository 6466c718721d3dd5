"""Running a function on N ranks: N processes spawned on this machine, or, under ``torchrun``, this
process as one of those it started.

``launch(fn, nproc)`` is what ``ptgpo train ... --nproc N`` runs: it picks a free local port,
spawns ``nproc`` processes with ``torchrun``'s variables (:data:`~ptgpo_algos.distributed.process_group.ENV_KEYS`),
starts the process group in each, calls ``fn(info, *args)`` and returns each rank's result in rank
order. A process that ``torchrun`` started already has those variables: ``launch`` then runs ``fn``
in it and returns its result alone, so one command line serves both. Several nodes go through
torchrun's rendezvous, one command per node::

    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HEAD:29500 \\
        -m ptgpo_harness.cli train --config CONFIG

(every node with the same install, config and data; ``RANK`` and ``LOCAL_RANK`` come from torchrun).

A local launch never leaves ranks behind: each rank dies with the launcher, however it dies
(:func:`~ptgpo_algos.child_processes.die_with_parent`), a SIGTERM or Ctrl-C that ends the launcher
is passed on to the ranks, and when one rank fails the others are stopped
(:func:`~ptgpo_algos.child_processes.stop_processes`) and :class:`RankFailed` names it and says why.
How many local ranks: one per visible GPU at most; on CPUs one per usable core, up to
:data:`MAX_RANKS_PER_CORE` a core with a warning (they take turns on the cores), never more.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import socket
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.multiprocessing as mp

from ptgpo_algos.child_processes import OversubscribedWarning, die_with_parent, stop_processes, usable_cores
from ptgpo_algos.distributed.process_group import (abandon, end_rank_process, init_process_group, is_distributed,
                                                    teardown)

__all__ = ["MAX_RANKS_PER_CORE", "RankError", "RankFailed", "check_process_count", "free_port", "launch",
           "under_launcher"]

#: CPU ranks beyond the usable cores take turns on them, up to this many a core; more are refused.
MAX_RANKS_PER_CORE = 2

#: How long ranks that all delivered their results may take to leave the process group and exit.
_LEAVE_S = 60.0


@dataclass(frozen=True)
class RankError:
    """The exception a rank raised, as plain data (an exception object may not pickle): its class name and
    those of its bases (``lineage``), its message on one line, its traceback, when it was raised
    (``time.monotonic``), and for an ``OSError`` its ``errno``, ``strerror`` and file."""

    kind: str
    lineage: tuple[str, ...]
    message: str
    traceback: str
    raised_at: float
    errno: int | None = None
    filename: str | None = None

    @classmethod
    def of(cls, error: BaseException) -> "RankError":
        """``error`` (being handled now) as a :class:`RankError`."""
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        # A message of many lines (another process's traceback): its first and last say what and why.
        message = " ... ".join(lines[:1] + lines[1:][-1:])
        lineage = tuple(kind.__name__ for kind in type(error).__mro__)
        if isinstance(error, OSError) and error.errno is not None:
            filename = None if error.filename is None else str(error.filename)
            return cls(type(error).__name__, lineage, error.strerror or message, traceback.format_exc(),
                       time.monotonic(), error.errno, filename)
        return cls(type(error).__name__, lineage, message, traceback.format_exc(), time.monotonic())

    @property
    def lost_peer(self) -> bool:
        """Whether this is a collective that failed because another rank had gone (a consequence, not a cause)."""
        return "DistBackendError" in self.lineage or any(
            words in self.traceback for words in ("Connection closed by peer", "Connection reset by peer"))


class RankFailed(RuntimeError):
    """A rank of a local launch failed (the others were stopped): ``rank``, and either the ``error`` it
    raised or its process's ``exitcode`` (minus the signal that killed it); ``log``: a file that holds
    the rank's traceback, where one was saved."""

    def __init__(self, rank: int, error: RankError | None = None, exitcode: int | None = None,
                 log: str | None = None):
        self.rank, self.error, self.exitcode, self.log = rank, error, exitcode, log
        super().__init__(f"rank {rank} failed: {self.cause}")

    @property
    def cause(self) -> str:
        """Why, on one line."""
        if self.error is not None:
            where = "" if self.log is None else f" (its traceback is in {self.log})"
            return f"{self.error.kind}: {self.error.message}{where}"
        if self.exitcode is not None and self.exitcode < 0:
            number = -self.exitcode
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = "unnamed"
            why = "; the kernel's out-of-memory killer sends it too" if number == signal.SIGKILL else ""
            return f"its process was killed by signal {number} ({name}{why})"
        return f"its process exited with code {self.exitcode} before it finished"

    def os_error(self) -> OSError | None:
        """The rank's ``OSError`` rebuilt (a full disk, a folder it cannot write), else None."""
        if self.error is None or self.error.errno is None:
            return None
        return OSError(self.error.errno, self.error.message, self.error.filename)

    def saved_to(self, log: str) -> "RankFailed":
        """The same failure, its traceback saved in ``log``."""
        return RankFailed(self.rank, self.error, self.exitcode, log)


def under_launcher() -> bool:
    """Whether this process is one rank that ``torchrun`` (or :func:`launch`) started."""
    return is_distributed() and "MASTER_ADDR" in os.environ


def free_port() -> int:
    """A TCP port free on this machine now (the rendezvous of a local launch)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def check_process_count(nproc: int, device: str) -> None:
    """Refuse more local ranks than this machine can run (``ValueError`` naming ``--nproc``, the bound
    and why): on GPUs one per visible GPU; on CPUs :data:`MAX_RANKS_PER_CORE` per usable core, with an
    :class:`~ptgpo_algos.child_processes.OversubscribedWarning` beyond one a core."""
    if device == "cuda":
        gpus = torch.cuda.device_count()
        if nproc > gpus:
            raise ValueError(f"--nproc {nproc}: each rank takes a GPU of its own and this process sees {gpus} "
                             f"(CUDA_VISIBLE_DEVICES chooses which); give --nproc {gpus} or fewer")
        return
    cores = usable_cores()
    if nproc > MAX_RANKS_PER_CORE * cores:
        raise ValueError(f"--nproc {nproc}: at most {MAX_RANKS_PER_CORE * cores} CPU ranks on the {cores} cores this "
                         f"process may use (os.sched_getaffinity), {MAX_RANKS_PER_CORE} a core: each rank is a process "
                         f"with its own copy of the model, and more only use memory without running any sooner; "
                         f"give --nproc {cores} (one a core) or fewer")
    if nproc > cores:
        warnings.warn(f"--nproc {nproc} starts more ranks than the {cores} cores this process may use: they take "
                      f"turns on them, so the run is slower; --nproc {cores} runs one a core", OversubscribedWarning,
                      stacklevel=3)


def _run_rank(fn: Callable[..., Any], device: str, args: tuple[Any, ...],
              deliver: Callable[[Any], None] | None = None,
              report: Callable[[BaseException], None] | None = None) -> Any:
    info = init_process_group(device)
    try:
        result = fn(info, *args)
        if deliver is not None:
            # Before leaving the group: the rank's work is safe even if leaving it fails.
            deliver(result)
    except BaseException as error:
        if report is not None:
            # Before leaving the group: the launcher hears of this cause before the others' failures it causes.
            report(error)
        abandon()
        raise
    teardown()
    return result


def _spawned(index: int, fn: Callable[..., Any], nproc: int, port: int, device: str, args: tuple[Any, ...],
             sender: Any, parent: int) -> None:
    die_with_parent(parent)
    # Every variable torchrun sets, so that none is inherited from the parent: a vLLM engine built in
    # the parent leaves LOCAL_WORLD_SIZE=1 behind, for one.
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(nproc),
                       "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    sent = []

    def deliver(result: Any) -> None:
        sender.send(("result", result))
        sent.append(index)

    def report(error: BaseException) -> None:
        if not sent:
            sender.send(("error", RankError.of(error)))
            sent.append(index)

    try:
        _run_rank(fn, device, args, deliver, report)
    except BaseException as error:  # noqa: BLE001 - the launcher reports it, on one line
        with contextlib.suppress(OSError):  # the launcher may be gone
            report(error)
        end_rank_process(1)
    end_rank_process(0)


def launch(fn: Callable[..., Any], nproc: int, *args: Any, device: str = "cpu") -> list[Any]:
    """``fn(info: RankInfo, *args)`` on each of ``nproc`` ranks; their results in rank order.

    ``fn`` must be importable by name (a module-level function): spawned processes import it anew.
    Raises :class:`RankFailed` when a rank fails, once the others are stopped. Call it from the main
    thread (the ranks die with the thread that started them). Under ``torchrun`` the world is
    torchrun's, and ``nproc`` must equal it.
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"--nproc: expected a positive number of processes, got {nproc!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if under_launcher():
        world = int(os.environ["WORLD_SIZE"])
        if nproc != world:
            raise ValueError(f"--nproc {nproc}: this process is one of {world} that torchrun started; "
                             f"leave --nproc out under torchrun, or give --nproc {world}")
        return [_run_rank(fn, device, args)]
    check_process_count(nproc, device)
    context = mp.get_context("spawn")
    port = free_port()
    pipes = [context.Pipe(duplex=False) for _ in range(nproc)]
    processes = [context.Process(target=_spawned, name=f"rank {index}",
                                 args=(index, fn, nproc, port, device, args, pipes[index][1], os.getpid()))
                 for index in range(nproc)]
    with _terminated_as_exit():
        try:
            for process in processes:
                process.start()
            for _, sender in pipes:
                sender.close()  # the ranks hold the writing ends
            return _await_ranks(processes, [receiver for receiver, _ in pipes])
        except BaseException as error:
            # The ranks go the way the launcher goes: Ctrl-C as Ctrl-C, anything else as SIGTERM.
            stop_processes(processes, signal.SIGINT if isinstance(error, KeyboardInterrupt) else signal.SIGTERM)
            raise
        finally:
            for receiver, _ in pipes:
                receiver.close()


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` for the duration (Ctrl-C raises ``KeyboardInterrupt`` already),
    so that :func:`launch` stops its ranks before the launcher goes."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _await_ranks(processes: list[Any], receivers: list[Any]) -> list[Any]:
    """Each rank's result, read as it arrives (a result larger than the pipe's buffer blocks its sender
    until read); the first failure raised as :class:`RankFailed`."""
    results: dict[int, Any] = {}
    errors: dict[int, RankError] = {}
    open_receivers = dict(enumerate(receivers))
    while len(results) < len(processes):
        waiting = list(open_receivers.values()) + [p.sentinel for p in processes if p.exitcode is None]
        multiprocessing.connection.wait(waiting, timeout=1.0)
        # Exits first, then the pipes: whatever a rank sent before it exited is read in this round.
        exited = {index: p.exitcode for index, p in enumerate(processes) if p.exitcode is not None}
        _receive(open_receivers, results, errors)
        failure = _first_failure(exited, results, errors)
        if failure is not None:
            raise failure
    # Every rank delivered its result before leaving the process group; one may still die leaving it
    # (gloo may abort a process whose peer has already gone): the work is done.
    stop_processes(processes, signum=None, grace_s=_LEAVE_S)
    return [results[index] for index in range(len(processes))]


def _receive(receivers: dict[int, Any], results: dict[int, Any], errors: dict[int, RankError]) -> None:
    for index, receiver in list(receivers.items()):
        try:
            while receiver.poll():
                kind, value = receiver.recv()
                (results if kind == "result" else errors)[index] = value
        except (EOFError, OSError):  # the rank has exited and closed its end
            del receivers[index]


def _first_failure(exited: dict[int, int], results: dict[int, Any],
                   errors: dict[int, RankError]) -> RankFailed | None:
    """The failure that explains the others: an error a rank raised (the earliest), else a rank that
    died without a word (killed), else a collective that lost its peer."""
    raised = sorted((error.raised_at, index) for index, error in errors.items()
                    if index not in results and not error.lost_peer)
    if raised:
        return RankFailed(raised[0][1], errors[raised[0][1]])
    died = [index for index, code in sorted(exited.items()) if index not in results and index not in errors]
    if died:
        return RankFailed(died[0], exitcode=exited[died[0]])
    lost = sorted((error.raised_at, index) for index, error in errors.items() if index not in results)
    return RankFailed(lost[0][1], errors[lost[0][1]]) if lost else None
