"""Training checkpoints written shard by shard (``torch.distributed.checkpoint``), read back on the
same or another number of ranks, a single process included; nothing executable in any file.

DCP writes each rank's shards of the weights and of the optimiser's state to ``__RANK_0.distcp`` files
and describes them in a ``.metadata`` file that its reader unpickles: a crafted one would run code
when read. So this module writes that description as JSON instead (:data:`MANIFEST`), reads only
that, validated field by field, and never opens a ``.metadata`` file; the tensors are read by
DCP's own reader, with ``torch.load(weights_only=True)``. Only tensors go through DCP (a
non-tensor value would be pickled); the plain data -- the optimiser's hyperparameters, counters,
random states, the config -- goes to :data:`STATE_FILE`, written by rank 0 and read with
``weights_only=True``, as :mod:`ptgpo_algos.training.checkpoint` reads its single file.

Layout of a checkpoint folder::

    manifest.json      the shards' description: each tensor's dtype, size and chunks, where each chunk is;
                       each file's SHA-256 and size (``files``), and its own SHA-256 (``sha256``)
    __R_0.distcp       rank R's shards (tensors only)
    state.pt           {format, version, world_size, param_groups, extra}

A folder is written beside the last one and renamed into place once complete (every rank must see
the same folder: a shared disk across nodes).

**Integrity.** Rank 0 writes ``state.pt`` first; each rank hashes the shard files it wrote (SHA-256,
streamed), and the manifest, written last by rank 0, records every file's checksum and size and, under
``sha256``, the checksum of its own other fields (``json.dumps(..., sort_keys=True)``). The checksums
are inside the folder they cover, which is renamed into place whole, so they are never out of step
with the files. :func:`load_sharded` checks them all (rank 0, before any rank reads a tensor) and
refuses a missing, truncated or damaged file with one message naming it, on every rank. A manifest of
an older ptgpo (no checksums) loads with a warning that it is unverified.

Resuming on another world size reshards the weights and the optimiser's moments exactly; what is
per rank (each rank's random generators, kept in ``extra`` by the caller) maps one to one only on
the same world size.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch import nn
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from ptgpo_algos.training.checkpoint import RESTORE_ADVICE, CheckpointError
from ptgpo_algos.distributed.collectives import gather_objects
from ptgpo_algos.files import atomic_path, file_sha256

__all__ = ["MANIFEST", "SHARDED_FORMAT", "STATE_FILE", "load_sharded", "read_manifest", "save_sharded",
           "verify_sharded"]

MANIFEST = "manifest.json"
STATE_FILE = "state.pt"
SHARDED_FORMAT = "ptgpo-sharded-checkpoint"
SHARDED_VERSION = 1
#: The dtypes a manifest may name (those of weights, moments and step counters).
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32")
_DATA_FILE = re.compile(r"__\d+_\d+\.distcp")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class _Stored:
    """Where a chunk's bytes are: the fields DCP's reader reads of its own storage record."""

    relative_path: str
    offset: int
    length: int
    transform_descriptors: tuple[str, ...] | None = None


def _file_record(path: Path) -> dict[str, Any]:
    """What the manifest records of a file it covers: its SHA-256 and size."""
    return {"sha256": file_sha256(path), "bytes": path.stat().st_size}


def _manifest_checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _manifest(metadata: Metadata, storage: dict[MetadataIndex, Any],
              files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    tensors = {}
    for fqn, item in metadata.state_dict_metadata.items():
        if isinstance(item, BytesStorageMetadata):
            raise ValueError(f"{fqn}: not a tensor; a sharded checkpoint holds tensors only (plain data goes to "
                             "save_sharded's extra)")
        tensors[fqn] = {"dtype": str(item.properties.dtype).removeprefix("torch."), "size": list(item.size),
                        "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in item.chunks]}
    where = []
    for index, info in storage.items():
        if info.transform_descriptors:
            raise ValueError(f"{index.fqn}: stored with transforms {info.transform_descriptors}; not supported")
        where.append({"fqn": index.fqn, "offsets": list(index.offset), "index": index.index,
                      "path": info.relative_path, "start": info.offset, "length": info.length})
    planner = {key: list(value) for key, value in (metadata.planner_data or {}).items()}
    body = {"format": SHARDED_FORMAT, "version": SHARDED_VERSION, "tensors": tensors, "storage": where,
            "planner": planner, "files": files}
    return {**body, "sha256": _manifest_checksum(body)}


class _ManifestWriter(dcp.FileSystemWriter):
    """DCP's file writer, describing the checkpoint in JSON instead of a pickle, with each file's checksum:
    each rank hashes the files it wrote; ``written`` (rank 0's) adds files written before DCP's."""

    def __init__(self, path: Path, written: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(path)
        self.written = written or {}

    def write_data(self, plan: Any, planner: Any) -> Future:
        results = super().write_data(plan, planner).wait()
        records = {name: _file_record(Path(self.path) / name)
                   for name in sorted({result.storage_data.relative_path for result in results})}
        # A result's storage record is all that reaches rank 0's finish: the file's checksum rides on it.
        done: Future = Future()
        done.set_result([WriteResult(r.index, r.size_in_bytes, (r.storage_data, records[r.storage_data.relative_path]))
                         for r in results])
        return done

    def finish(self, metadata: Metadata, results: list[list[Any]]) -> None:
        pairs = [(result.index, result.storage_data) for part in results for result in part]
        storage = {index: info for index, (info, _) in pairs}
        files = {**self.written, **{info.relative_path: record for _, (info, record) in pairs}}
        with atomic_path(Path(self.path) / MANIFEST) as tmp:
            Path(tmp).write_text(json.dumps(_manifest(metadata, storage, files)))


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise ValueError(f"{where} is not a list of integers >= 0")
    return value


def _tensor_entry(fqn: str, entry: Any) -> TensorStorageMetadata:
    if not isinstance(entry, dict) or entry.get("dtype") not in TENSOR_DTYPES:
        raise ValueError(f"tensor {fqn!r} has no dtype among {', '.join(TENSOR_DTYPES)}")
    size = _ints(entry.get("size"), f"tensor {fqn!r}'s size")
    chunks = entry.get("chunks")
    if not isinstance(chunks, list):
        raise ValueError(f"tensor {fqn!r} has no chunks")
    parts = [ChunkStorageMetadata(torch.Size(_ints(c.get("offsets") if isinstance(c, dict) else None, f"{fqn} offsets")),
                                  torch.Size(_ints(c.get("sizes"), f"{fqn} sizes"))) for c in chunks]
    return TensorStorageMetadata(TensorProperties(dtype=getattr(torch, entry["dtype"])), torch.Size(size), parts)


def _storage_entry(entry: Any, tensors: dict[str, Any]) -> tuple[MetadataIndex, _Stored]:
    if not isinstance(entry, dict) or entry.get("fqn") not in tensors:
        raise ValueError("a storage entry names no tensor of the manifest")
    path = entry.get("path")
    # Only DCP's own file names, in the folder itself: no path leads elsewhere on the disk.
    if not isinstance(path, str) or not _DATA_FILE.fullmatch(path):
        raise ValueError(f"storage path {path!r} is not a shard file of this folder (__R_0.distcp)")
    start, length = _ints([entry.get("start"), entry.get("length")], f"{entry['fqn']}'s byte range")
    index = entry.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise ValueError(f"{entry['fqn']}'s chunk index is not an integer")
    offsets = torch.Size(_ints(entry.get("offsets"), f"{entry['fqn']}'s offsets"))
    return MetadataIndex(entry["fqn"], offsets, index), _Stored(path, start, length)


def _manifest_data(folder: Path) -> dict[str, Any]:
    """The manifest's fields, its own checksum checked (when it has one); :class:`CheckpointError` naming
    the file when it is missing, not JSON, or differs from its checksum."""
    path = folder / MANIFEST
    if not path.is_file():
        other = " (a .metadata file is there: DCP's own format, whose pickle is never read)" \
            if (folder / ".metadata").exists() else ""
        raise CheckpointError(f"{folder}: not a ptgpo sharded checkpoint: no {MANIFEST}{other}; point at a folder "
                              "that ptgpo wrote, or start the run over in a new out_dir")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as error:  # json.JSONDecodeError is a ValueError
        raise CheckpointError(f"{path}: refused: not JSON ({error}); it is damaged or was not written by ptgpo: "
                              f"{RESTORE_ADVICE}") from None
    if isinstance(data, dict) and "sha256" in data:
        recorded = data.pop("sha256")
        actual = _manifest_checksum(data)
        if actual != recorded:
            raise CheckpointError(f"{path}: damaged: its SHA-256 ({actual[:12]}...) differs from the one it recorded "
                                  f"({str(recorded)[:12]}...); {RESTORE_ADVICE}")
    return data


def read_manifest(folder: str | os.PathLike) -> Metadata:
    """DCP's :class:`Metadata` of a checkpoint folder, from its JSON manifest; :class:`CheckpointError`
    naming the folder for anything that is not a manifest this module wrote."""
    folder = Path(folder)
    data = _manifest_data(folder)
    path = folder / MANIFEST
    try:
        if not isinstance(data, dict) or data.get("format") != SHARDED_FORMAT:
            raise ValueError(f"format {data.get('format') if isinstance(data, dict) else data!r}")
        if data.get("version") != SHARDED_VERSION:
            raise ValueError(f"version {data.get('version')!r}; this ptgpo reads version {SHARDED_VERSION}")
        tensors = data.get("tensors")
        if not isinstance(tensors, dict) or not isinstance(data.get("storage"), list):
            raise ValueError("no tensors or storage lists")
        described = {fqn: _tensor_entry(fqn, entry) for fqn, entry in tensors.items()}
        storage = dict(_storage_entry(entry, tensors) for entry in data["storage"])
        planner = data.get("planner")
        if not isinstance(planner, dict) or not all(isinstance(v, list) and all(isinstance(p, (str, int)) for p in v)
                                                    for v in planner.values()):
            raise ValueError("malformed planner paths")
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{path}: refused: {error}; this file was not written by ptgpo (or is damaged): do not "
                              "use this checkpoint") from None
    return Metadata(described, planner_data={k: tuple(v) for k, v in planner.items()}, storage_data=storage)


class _ManifestReader(dcp.FileSystemReader):
    """DCP's file reader, reading the JSON manifest instead of unpickling ``.metadata``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        return read_manifest(self.path)

    def read_data(self, plan: Any, planner: Any) -> Any:
        if any(item.type.name == "BYTE_IO" for item in plan.items):
            raise CheckpointError(f"{self.path}: refused: it asks to unpickle a non-tensor value")
        return super().read_data(plan, planner)


def verify_sharded(folder: str | os.PathLike) -> bool:
    """Check every file of a checkpoint folder against the size and SHA-256 its manifest records: True
    when all match, False (with a warning) for a manifest without checksums (an older ptgpo's);
    :class:`CheckpointError` naming the first file that is missing, truncated or damaged."""
    folder = Path(folder)
    read_manifest(folder)  # a manifest this module wrote, its own checksum checked
    data = _manifest_data(folder)
    files = data.get("files")
    if files is None:
        warnings.warn(f"{folder}: no checksums in its {MANIFEST} (written by an older ptgpo): loading it unverified",
                      stacklevel=2)
        return False
    needed = {entry["path"] for entry in data["storage"]} | {STATE_FILE}
    if not isinstance(files, dict) or not needed <= set(files) or not all(
            (name == STATE_FILE or _DATA_FILE.fullmatch(name)) and isinstance(record, dict)
            and isinstance(record.get("sha256"), str) and _SHA256.fullmatch(record["sha256"])
            and isinstance(record.get("bytes"), int) and not isinstance(record["bytes"], bool)
            for name, record in files.items()):
        raise CheckpointError(f"{folder / MANIFEST}: refused: its files do not each have a SHA-256 and a size, "
                              f"or it names a file not among them; {RESTORE_ADVICE}")
    for name, record in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing: {MANIFEST} names it, and the checkpoint is incomplete without it; "
                                  f"{RESTORE_ADVICE}")
        size = path.stat().st_size
        if size < record["bytes"]:
            raise CheckpointError(f"{path}: truncated: {size} bytes of the {record['bytes']} written; {RESTORE_ADVICE}")
        actual = file_sha256(path)
        if size != record["bytes"] or actual != record["sha256"]:
            raise CheckpointError(f"{path}: damaged: its SHA-256 ({actual[:12]}...) differs from the one recorded when "
                                  f"it was written ({record['sha256'][:12]}...); {RESTORE_ADVICE}")
    return True


def _main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _replace(folder: Path, partial: Path) -> None:
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def save_sharded(folder: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                 extra: dict[str, Any] | None = None) -> None:
    """Write ``model``'s weights and ``optimizer``'s state, each rank its shards, to ``folder``, with
    ``extra`` (plain data: counters, random states, the config) from rank 0. Every rank calls it."""
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    optim_state = get_optimizer_state_dict(model, optimizer)
    written = {}
    if _main():
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        world = dist.get_world_size() if dist.is_initialized() else 1
        payload = {"format": SHARDED_FORMAT, "version": SHARDED_VERSION, "world_size": world,
                   "param_groups": optim_state["param_groups"], "extra": extra or {}}
        torch.save(payload, partial / STATE_FILE)
        written[STATE_FILE] = _file_record(partial / STATE_FILE)
    _barrier()
    tensors = {"model": get_model_state_dict(model), "optimizer": optim_state["state"]}
    try:
        dcp.save(tensors, storage_writer=_ManifestWriter(partial, written), no_dist=not dist.is_initialized())
    except CheckpointException as error:
        # DCP gathers every rank's failure into one exception on all ranks; a full disk is an OSError
        # without a file name (a write's): name the folder, the same on every rank.
        failed = [failure[0] for failure in error.failures.values() if isinstance(failure[0], OSError)]
        if failed:
            raise OSError(failed[0].errno, failed[0].strerror, str(partial)) from error
        raise
    if _main():
        _replace(folder, partial)
    _barrier()


def _read_state(folder: Path) -> dict[str, Any]:
    path = folder / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: not a ptgpo sharded checkpoint: no {STATE_FILE}") from None
    except Exception as error:  # noqa: BLE001 - torch raises many types for a crafted or damaged file
        reason = " ".join(str(error).split())[:200]
        raise CheckpointError(f"{path}: refused: it holds something other than tensors and plain data, or is "
                              f"damaged ({type(error).__name__}: {reason}); do not use this checkpoint") from None
    if not isinstance(state, dict) or state.get("format") != SHARDED_FORMAT \
            or state.get("version") != SHARDED_VERSION or not isinstance(state.get("param_groups"), list) \
            or not isinstance(state.get("extra"), dict) or not isinstance(state.get("world_size"), int):
        raise CheckpointError(f"{path}: not the state file of a ptgpo sharded checkpoint (version {SHARDED_VERSION})")
    return state


def load_sharded(folder: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Read a checkpoint of :func:`save_sharded` into ``model`` and ``optimizer`` (sharded on any number
    of ranks, or whole in one process); returns its ``extra`` with ``world_size``, the number of
    ranks that wrote it. Every rank calls it."""
    folder = Path(folder)
    read_manifest(folder)  # refused here, with the folder named, before DCP reads anything
    refusal = None
    if _main():  # one rank reads every file once; each rank then raises the same refusal
        try:
            verify_sharded(folder)
        except CheckpointError as error:
            refusal = str(error)
    refusal = next((message for message in gather_objects(refusal) if message is not None), None)
    if refusal is not None:
        raise CheckpointError(refusal)
    state = _read_state(folder)
    optim_state = get_optimizer_state_dict(model, optimizer)
    target = {"model": get_model_state_dict(model), "optimizer": optim_state["state"]}
    try:
        dcp.load(target, storage_reader=_ManifestReader(folder), no_dist=not dist.is_initialized())
    except CheckpointError:
        raise
    except (Exception, dcp.CheckpointException) as error:  # noqa: BLE001 - DCP wraps each rank's failure
        blocked = re.search(r"unsupported global:? (?:GLOBAL )?([\w.]+)", str(error), re.IGNORECASE)
        if blocked:
            raise CheckpointError(f"{folder}: refused: a shard file holds a Python object ({blocked.group(1)}) that "
                                  "loading would run as code; do not use this checkpoint") from None
        reason = " ".join(str(error).split())[-300:]
        raise CheckpointError(f"{folder}: cannot be read into this model ({type(error).__name__}: {reason}); it was "
                              "written for another model or is damaged") from None
    set_model_state_dict(model, target["model"])
    set_optimizer_state_dict(model, optimizer, {"state": target["optimizer"], "param_groups": state["param_groups"]})
    return {**state["extra"], "world_size": state["world_size"]}
