"""Running a function on N ranks: N processes spawned on this machine, or, under ``torchrun``, this
process as one of those it started.

``launch(fn, nproc)`` is what ``ptgpo train ... --nproc N`` runs: it picks a free local port,
spawns ``nproc`` processes with ``torchrun``'s variables (:data:`~ptgpo_algos.distributed.process_group.ENV_KEYS`),
starts the process group in each, calls ``fn(info, *args)`` and returns each rank's result in rank
order. A process that ``torchrun`` started already has those variables: ``launch`` then runs ``fn``
in it and returns its result alone, so one command line serves both. Several nodes go through
torchrun's rendezvous, one command per node::

    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HEAD:29500 \\
        -m ptgpo_algos.cli train --config CONFIG

(every node with the same install, config and data; ``RANK`` and ``LOCAL_RANK`` come from torchrun).
"""

from __future__ import annotations

import os
import socket
import traceback
from typing import Any, Callable

import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from ptgpo_algos.distributed.process_group import abandon, init_process_group, is_distributed, teardown

__all__ = ["free_port", "launch", "under_launcher"]


def under_launcher() -> bool:
    """Whether this process is one rank that ``torchrun`` (or :func:`launch`) started."""
    return is_distributed() and "MASTER_ADDR" in os.environ


def free_port() -> int:
    """A TCP port free on this machine now (the rendezvous of a local launch)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_rank(fn: Callable[..., Any], device: str, args: tuple[Any, ...],
              deliver: Callable[[Any], None] | None = None) -> Any:
    info = init_process_group(device)
    try:
        result = fn(info, *args)
        if deliver is not None:
            # Before leaving the group: the rank's work is safe even if leaving it fails.
            deliver(result)
    except BaseException:
        abandon()
        raise
    teardown()
    return result


def _spawned(index: int, fn: Callable[..., Any], nproc: int, port: int, device: str, args: tuple[Any, ...],
             results: Any) -> None:
    # Every variable torchrun sets, so that none is inherited from the parent: a vLLM engine built in
    # the parent leaves LOCAL_WORLD_SIZE=1 behind, for one.
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(nproc),
                       "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    delivered = []

    def deliver(result: Any) -> None:
        results.put((index, True, result))
        delivered.append(index)

    try:
        _run_rank(fn, device, args, deliver)
    except BaseException:
        if not delivered:
            results.put((index, False, traceback.format_exc()))
        raise


def launch(fn: Callable[..., Any], nproc: int, *args: Any, device: str = "cpu") -> list[Any]:
    """``fn(info: RankInfo, *args)`` on each of ``nproc`` ranks; their results in rank order.

    ``fn`` must be importable by name (a module-level function): spawned processes import it anew.
    Under ``torchrun`` the world is torchrun's, and ``nproc`` must equal it.
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
    results = mp.get_context("spawn").SimpleQueue()
    processes = mp.start_processes(_spawned, args=(fn, nproc, free_port(), device, args, results), nprocs=nproc,
                                   join=False, start_method="spawn")
    collected: dict[int, Any] = {}
    # Read while the ranks run: a result larger than the pipe's buffer blocks its sender until read.
    while True:
        _collect(results, collected, processes)
        try:
            if processes.join(timeout=0.05):
                break
        except ProcessException:
            _collect(results, collected, processes)
            if len(collected) < nproc:
                raise
            # Every rank delivered its result before leaving the process group; one then died
            # leaving it (gloo may abort a process whose peer has already gone): the work is done.
            break
    _collect(results, collected, processes)
    return [collected[i] for i in range(nproc)]


def _collect(results: Any, collected: dict[int, Any], processes: Any) -> None:
    """Move the delivered results into ``collected``; a rank's failure: wait for all, raise it."""
    while not results.empty():
        index, ok, value = results.get()
        if not ok:
            for process in processes.processes:
                process.join()
            raise RuntimeError(f"rank {index} failed:\n{value}")
        collected[index] = value
