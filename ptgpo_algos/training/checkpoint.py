"""The training checkpoint on disk: tensors and plain data only, so that loading one never runs code.

``torch.load`` without ``weights_only=True`` unpickles arbitrary objects, and a crafted file then runs
whatever its author wanted. Checkpoints are shared between researchers, so this module writes only
tensors, numbers, strings, lists, tuples and dicts, and reads with ``weights_only=True``: a file that
holds anything else is refused with a message naming it. The trainer's components store their own
objects (the tasks of a rollout request in flight, the hindsight buffer's decisions) as plain dicts and
rebuild them when the trainer hands the state back.

Layout (``format: "ptgpo-checkpoint"``, ``version: 1``)::

    weights          {name: tensor}      trainable weights (LoRA adapters, or the whole model)
    optimizer        optimizer.state_dict()
    rng              {python, numpy, torch, sampler}   every random state the run draws from
    counters         {iteration, decisions, tokens, ...}
    last_eval        the last evaluation's summary
    config           the run's TrainConfig as a dict
    pending_rollout  {weights, tasks: [{env_id, seed, env_kwargs, max_steps}], seed, updates} | None
    hindsight_buffer [Decision fields as a dict, ...] | None
    objectives       {objective name: its state (I-SDPO: the EMA teacher's weights)} | None
    rollout_memory   the rollout strategy's state across iterations (3SPO's statistics) | None
    sealed           True: the file ends with its SHA-256 (below)

A checkpoint written before the format was versioned loads when it holds plain data only.

**Integrity.** ``torch.save`` writes a zip archive, whose last record may carry a comment that
readers skip. :func:`save_checkpoint` writes there the SHA-256 of every byte before it
(``ptgpo-sha256:<hex>``) and records ``sealed: True`` in the payload; :func:`load_checkpoint`
recomputes it, streaming the file, before a byte is unpickled, and refuses a file that differs,
naming it. The checksum travels inside the file it covers: the two are written to one temporary
file and moved into place together, so no crash leaves a good checkpoint beside a stale checksum,
and a copied checkpoint keeps its proof. A checkpoint of an older ptgpo (no checksum) loads with a
warning that it is unverified; one whose payload says it was sealed but whose checksum is gone is
refused.
"""

from __future__ import annotations

import errno
import math
import os
import re
import struct
import warnings
from pathlib import Path
from typing import Any

import torch

from ptgpo_algos.files import atomic_path, file_sha256

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "COUNTERS", "RESTORE_ADVICE", "CheckpointError",
           "load_checkpoint", "save_checkpoint", "verify_checkpoint"]

CHECKPOINT_FORMAT = "ptgpo-checkpoint"
CHECKPOINT_VERSION = 1
_REQUIRED = {"weights": dict, "optimizer": dict, "rng": dict, "counters": dict, "config": dict}
_RNG_KEYS = ("python", "numpy", "torch", "sampler")
#: The counters a checkpoint keeps (the keys of ``checkpoint["counters"]``, all numbers).
COUNTERS = ("iteration", "decisions", "tokens", "decisions_saved", "tokens_saved", "wall_time_s", "best_success",
            "last_eval_iteration")
_SEAL = b"ptgpo-sha256:"
_SEAL_SIZE = len(_SEAL) + 64  # the zip comment: the marker and the hex digest
_END_RECORD = b"PK\x05\x06"  # a zip archive's last record, 22 bytes; its last 2: the comment's length
#: What to do with a checkpoint that cannot be used: resuming without it would discard the finished work.
RESTORE_ADVICE = "restore the checkpoint from a copy, or start the run over in a new out_dir"


class CheckpointError(ValueError):
    """A checkpoint file cannot be used; the message names it and says what to do."""


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` (the layout above, plain data and tensors only) atomically to ``path``."""
    payload = {**state, "format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "sealed": True}
    with atomic_path(path) as tmp:
        try:
            torch.save(payload, tmp)
        except RuntimeError as error:  # how torch's zip writer reports a failed write, a full disk included
            reason = " ".join(str(error).split())[:200]
            raise OSError(errno.EIO, f"writing the checkpoint failed ({reason}); is the disk full?",
                          str(path)) from None
        _seal(tmp)


def _seal(path: Path) -> None:
    """Write the SHA-256 of the archive ``torch.save`` wrote, up to its comment's length, as that comment."""
    with open(path, "r+b") as handle:
        handle.seek(-22, os.SEEK_END)
        end = handle.read(22)
        if end[:4] != _END_RECORD or end[-2:] != b"\0\0":
            raise RuntimeError(f"{path}: torch.save did not end the archive with a zip end record without a comment; "
                               "this torch writes checkpoints that ptgpo cannot seal")
        size = handle.tell()
        digest = file_sha256(path, size - 2)
        handle.seek(size - 2)
        handle.write(struct.pack("<H", _SEAL_SIZE) + _SEAL + digest.encode("ascii"))


def verify_checkpoint(path: str | os.PathLike) -> bool:
    """Check ``path`` against the checksum it carries: True when it matches, False (with a warning) for a
    checkpoint without one; :class:`CheckpointError` naming the file when it differs."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(size - _SEAL_SIZE - 2, 0))
        tail = handle.read()
    if len(tail) < _SEAL_SIZE + 2 or tail[:2] != struct.pack("<H", _SEAL_SIZE) or not tail[2:].startswith(_SEAL):
        warnings.warn(f"{path}: no checksum (written by an older ptgpo, or its end was cut off): loading it "
                      "unverified", stacklevel=2)
        return False
    recorded = tail[2 + len(_SEAL):].decode("ascii", errors="replace")
    actual = file_sha256(path, size - _SEAL_SIZE - 2)
    if actual != recorded:
        raise CheckpointError(f"{path}: damaged: its SHA-256 ({actual[:12]}...) differs from the one recorded when "
                              f"it was written ({recorded[:12]}...); {RESTORE_ADVICE}")
    return True


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`; raise :class:`CheckpointError` for anything else."""
    path = Path(path)
    if not path.is_file():
        what = "a folder, not a checkpoint file" if path.is_dir() else "no such file"
        raise CheckpointError(f"{path}: {what}; point at the checkpoint.pt that `ptgpo train` wrote")
    sealed = verify_checkpoint(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many types for a truncated or random file
        blocked = re.search(r"unsupported global:? (?:GLOBAL )?([\w.]+)", str(error), re.IGNORECASE)
        if blocked:
            older = (" (numpy objects: a checkpoint of an older ptgpo holds them; start that run over in a new "
                     "out_dir)") if blocked.group(1).startswith("numpy") else ""
            raise CheckpointError(
                f"{path}: refused: it holds a Python object ({blocked.group(1)}) that loading would run as "
                f"code{older}; checkpoints written by ptgpo hold only tensors and plain data: do not use this file"
            ) from None
        reason = " ".join(str(error).split())[-200:] or type(error).__name__
        raise CheckpointError(
            f"{path}: cannot be read as a checkpoint ({type(error).__name__}: {reason}); it is truncated or "
            f"damaged: {RESTORE_ADVICE}"
        ) from None
    _check_layout(path, state)
    if state.get("sealed") and not sealed:
        raise CheckpointError(f"{path}: damaged: it was written with a checksum, which is gone from its end; "
                              f"{RESTORE_ADVICE}")
    return state


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_layout(path: Path, state: Any) -> None:
    def fail(what: str) -> None:
        raise CheckpointError(f"{path}: not a ptgpo training checkpoint ({what}); point at the checkpoint.pt "
                              "that `ptgpo train` wrote, or start the run over in a new out_dir")

    if not isinstance(state, dict):
        fail(f"it holds a {type(state).__name__}, not a mapping")
    if state.get("format", CHECKPOINT_FORMAT) != CHECKPOINT_FORMAT:
        fail(f"format {state.get('format')!r}")
    if state.get("version", CHECKPOINT_VERSION) != CHECKPOINT_VERSION:
        fail(f"version {state.get('version')!r}; this ptgpo reads version {CHECKPOINT_VERSION}")
    missing = [key for key in _REQUIRED if key not in state]
    if missing:
        fail(f"missing {', '.join(map(repr, missing))}")
    for key, kind in _REQUIRED.items():
        if not isinstance(state[key], kind):
            fail(f"{key!r} is a {type(state[key]).__name__}")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state["weights"].items()):
        fail("'weights' must map names to tensors")
    if any(key not in state["rng"] for key in _RNG_KEYS):
        fail(f"'rng' must hold {', '.join(_RNG_KEYS)}")
    iteration = state["counters"].get("iteration")
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        fail("'counters' has no iteration")
    missing = [key for key in COUNTERS if not _is_number(state["counters"].get(key))]
    if missing:
        fail(f"'counters' lacks a number for {', '.join(missing)}")
    damaged = [name for name, tensor in state["weights"].items()
               if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if damaged:
        fail(f"weights {', '.join(damaged[:3])}{' ...' if len(damaged) > 3 else ''} hold NaN or infinite values")
    pending = state.get("pending_rollout")
    if pending is not None and not (isinstance(pending, dict) and isinstance(pending.get("tasks"), list)
                                    and all(isinstance(t, dict) for t in pending["tasks"])):
        fail("'pending_rollout' is malformed")
    buffer = state.get("hindsight_buffer")
    if buffer is not None and not (isinstance(buffer, list) and all(isinstance(d, dict) for d in buffer)):
        fail("'hindsight_buffer' is malformed")
