"""The process group: started once per process, ended once, and who this process is.

``torchrun`` (and :func:`ptgpo_algos.distributed.launch.launch`) describe a process by environment
variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``.
:func:`rank_info` reads them; :func:`init_process_group` starts the group with the backend that
fits the device (NCCL between GPUs, gloo between CPU processes) and binds a GPU process to its
local GPU, so that collectives and the model land on the same device.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["ENV_KEYS", "RankInfo", "abandon", "backend_for", "end_rank_process", "init_process_group",
           "is_distributed", "joined_a_group", "rank_info", "teardown"]

#: The environment variables a launched process is described by (``torchrun``'s).
ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
BACKENDS = ("gloo", "nccl")

#: Whether :func:`init_process_group` ran in this process: only such a process is ended by
#: :func:`end_rank_process` rather than returning to the interpreter's exit.
_joined = False


@dataclass(frozen=True)
class RankInfo:
    """Who this process is among ``world_size``: its global ``rank``, its ``local_rank`` on its node
    (its GPU's index), and the ``device`` it computes on."""

    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run folder's shared files and logs."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer; torchrun sets it, "
                         "or unset it to run as a single process") from None
    if number < 0:
        raise ValueError(f"environment variable {name}={number} is negative")
    return number


def is_distributed() -> bool:
    """Whether this process was launched as one rank of several (``WORLD_SIZE`` above 1)."""
    return _env_int("WORLD_SIZE", 1) > 1


def rank_info(device: str = "cpu") -> RankInfo:
    """This process's :class:`RankInfo` from the launcher's variables (a single process without them).

    ``device`` is ``cpu`` or ``cuda``: a GPU rank computes on ``cuda:LOCAL_RANK``.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank, local = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if world < 1 or rank >= world:
        raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world}: the launcher's variables disagree")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda' (each rank takes cuda:LOCAL_RANK), got {device!r}")
    return RankInfo(rank, world, local, "cpu" if device == "cpu" else f"cuda:{local}")


def backend_for(device: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.startswith("cuda") else "gloo"


def init_process_group(device: str = "cpu", timeout_s: float = 600.0) -> RankInfo:
    """Join the process group the launcher's variables describe and return this rank's info.

    A GPU rank is bound to ``cuda:LOCAL_RANK`` first (NCCL's collectives run on the current device).
    Starting an already started group is refused: a second start would hang on the rendezvous.
    """
    if dist.is_initialized():
        raise RuntimeError("the process group is already started in this process; call teardown() first")
    info = rank_info(device)
    missing = [key for key in ("MASTER_ADDR", "MASTER_PORT") if key not in os.environ]
    if missing:
        raise ValueError(f"environment variables {', '.join(missing)} are not set: start the ranks with torchrun, "
                         "or with ptgpo_algos.distributed.launch.launch")
    if info.device.startswith("cuda"):
        if info.local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={info.local_rank} but this node has {torch.cuda.device_count()} GPUs: "
                             "start at most one process per GPU (torchrun --nproc_per_node)")
        torch.cuda.set_device(info.local_rank)
    dist.init_process_group(backend_for(info.device), rank=info.rank, world_size=info.world_size,
                            timeout=timedelta(seconds=timeout_s))
    global _joined
    _joined = True
    return info


def teardown() -> None:
    """Leave the process group (after a barrier, so that no rank leaves while another still sends)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def abandon() -> None:
    """Leave the process group at once, without the barrier: this rank failed, and the others' next
    collective should fail too rather than wait for it until the group's timeout."""
    if dist.is_initialized():
        dist.destroy_process_group()


def joined_a_group() -> bool:
    """Whether this process started a process group (and so is a rank that :func:`end_rank_process` ends)."""
    return _joined


def end_rank_process(status: int) -> None:
    """End a rank's process with ``status`` once its work is written and its output flushed, without the
    interpreter's finalization.

    After the group is left, a gloo worker thread may still hold its last collectives (a barrier keeps
    the collectives queued before it), and freeing their tensors takes the GIL. Once the interpreter
    finalizes, a thread that asks for the GIL is ended inside that destructor and the process aborts
    (SIGABRT) though the run is complete, and ``torchrun`` reports the run failed. Ending the process
    here skips the finalization that thread races; files are written atomically and closed by then,
    and the operating system releases the folder locks.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or replaced by a caller
            pass
    logging.shutdown()
    os._exit(status)
