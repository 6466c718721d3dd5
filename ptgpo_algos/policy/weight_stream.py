"""Weights from the trainer to a rollout engine's workers, in messages of bounded size.

vLLM's engine channel pickles a call and its arguments into one message of at most 2^32 - 1 bytes:
a 7B model's weights in bf16 (15.2 GB) cannot go through it, and vLLM recommends it for control
messages only. So a weight sync sends one small control call (the worker's ``reload_weights``, with
an iterator that reads this stream) and the weights themselves over a local socket beside it, in
messages of at most ``limit`` bytes (1 GiB by default): the worker loads each tensor as it arrives,
through the model's own loader, and the trainer never holds more than one message's copy.

Wire format, per message: a JSON header, then one frame per piece::

    {"pieces": [[name, dtype, shape, tensor_bytes, offset, size], ...]}   frame, frame, ...
    {"end": true}                                                        (closes the stream)

A tensor larger than a message (a 7B model's embedding in bf16 is 1.09 GB) is cut into pieces
across consecutive messages; the receiver fills each tensor's bytes in place and yields it once
complete. The socket is a Unix socket in a private temporary folder, opened with a random key.

Tied weights (a tied-embedding model's ``lm_head.weight`` is its embedding) travel once: the sender
leaves the alias out and the worker hands the received tensor to the loader under both names
(:func:`with_aliases`), so the loader still processes the layer behind the alias (vLLM's CPU backend
keeps a packed copy of the LM head, which would otherwise stay stale).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

__all__ = ["Piece", "WeightSender", "assemble", "receive_weights", "weight_messages", "with_aliases"]


@dataclass(frozen=True)
class Piece:
    """``size`` bytes of tensor ``name`` (``dtype``, ``shape``, ``tensor_bytes`` in all) from ``offset``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    tensor_bytes: int
    offset: int
    size: int

    def header(self) -> list[Any]:
        """The piece's entry in a message header: name, dtype, shape, tensor bytes, offset and size."""
        return [self.name, self.dtype, list(self.shape), self.tensor_bytes, self.offset, self.size]


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor's storage as a flat uint8 tensor (no copy)."""
    flat = tensor.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


def weight_messages(weights: Iterable[tuple[str, torch.Tensor]], limit: int,
                    dtype: torch.dtype | None = None) -> Iterator[tuple[list[Piece], list[memoryview]]]:
    """The messages that carry ``weights`` (cast to ``dtype`` if given): each at most ``limit`` bytes of
    payload, as ``(pieces, frames)``. Tensors are read, cast and copied to the CPU one at a time, as
    the messages are consumed."""
    if limit < 1:
        raise ValueError(f"limit must be at least one byte, got {limit}")
    pieces: list[Piece] = []
    frames: list[memoryview] = []
    room = limit
    for name, tensor in weights:
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        data = _as_bytes(tensor.contiguous().cpu())
        kind = str(tensor.dtype).removeprefix("torch.")
        offset = 0
        while True:
            size = min(room, data.numel() - offset)
            pieces.append(Piece(name, kind, tuple(tensor.shape), data.numel(), offset, size))
            frames.append(memoryview(data[offset : offset + size].numpy()))
            offset += size
            room -= size
            if room == 0:
                yield pieces, frames
                pieces, frames, room = [], [], limit
            if offset >= data.numel():
                break
    if pieces:
        yield pieces, frames


@dataclass
class _Partial:
    data: torch.Tensor
    filled: int = 0


@dataclass
class _Assembler:
    """Collects pieces into tensors; :meth:`take` hands back the ones completed."""

    open: dict[str, _Partial] = field(default_factory=dict)

    def target(self, piece: Piece) -> memoryview:
        partial = self.open.get(piece.name)
        if partial is None:
            if piece.offset != 0:
                raise ValueError(f"weight stream: {piece.name} starts at byte {piece.offset}, not 0")
            partial = self.open[piece.name] = _Partial(torch.empty(piece.tensor_bytes, dtype=torch.uint8))
        if piece.offset != partial.filled:
            raise ValueError(f"weight stream: {piece.name} continues at byte {piece.offset}, expected {partial.filled}")
        partial.filled += piece.size
        return memoryview(partial.data.numpy())[piece.offset : piece.offset + piece.size]

    def take(self, piece: Piece) -> tuple[str, torch.Tensor] | None:
        partial = self.open[piece.name]
        if partial.filled < piece.tensor_bytes:
            return None
        del self.open[piece.name]
        dtype = getattr(torch, piece.dtype)
        data = partial.data if piece.tensor_bytes else torch.empty(0, dtype=torch.uint8)
        return piece.name, data.view(dtype).reshape(piece.shape)


def assemble(messages: Iterable[tuple[list[Piece], list[memoryview]]]) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors that ``messages`` (as :func:`weight_messages` makes them) carry, in order."""
    assembler = _Assembler()
    for pieces, frames in messages:
        for piece, frame in zip(pieces, frames, strict=True):
            assembler.target(piece)[:] = frame
            done = assembler.take(piece)
            if done is not None:
                yield done
    if assembler.open:
        raise ValueError(f"weight stream ended inside {sorted(assembler.open)}")


class WeightSender:
    """The trainer's end of a weight stream to ``receivers`` workers (a tensor-parallel engine has
    several, each reading all of it). :meth:`serve` runs in a thread while the workers read."""

    def __init__(self, receivers: int = 1):
        self.folder = tempfile.TemporaryDirectory(prefix="ptgpo-sync-")
        os.chmod(self.folder.name, 0o700)
        self.address = str(Path(self.folder.name) / "weights.sock")
        self.authkey = secrets.token_bytes(32)
        self.receivers = receivers
        self.listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self.messages = 0
        self.bytes = 0
        self.error: BaseException | None = None
        self._connections: list[Any] = []

    def serve(self, messages: Iterable[tuple[list[Piece], list[memoryview]]]) -> None:
        """Accept every receiver, then send each message to each; an error is kept in ``error``."""
        try:
            self._connections = [self.listener.accept() for _ in range(self.receivers)]
            for pieces, frames in messages:
                header = json.dumps({"pieces": [p.header() for p in pieces]}).encode()
                for connection in self._connections:
                    connection.send_bytes(header)
                    for frame in frames:
                        connection.send_bytes(frame)
                self.messages += 1
                self.bytes += sum(p.size for p in pieces)
            for connection in self._connections:
                connection.send_bytes(b'{"end": true}')
        except BaseException as error:  # noqa: BLE001 - handed to the caller, which re-raises it
            self.error = error
        finally:
            for connection in self._connections:
                connection.close()

    def start(self, messages: Iterable[tuple[list[Piece], list[memoryview]]]) -> threading.Thread:
        """Serve ``messages`` to the receivers on a daemon thread, and return the thread."""
        thread = threading.Thread(target=self.serve, args=(messages,), name="ptgpo-weight-sync", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop waiting for receivers (a worker that failed before connecting) and remove the socket."""
        self.listener.close()
        for connection in self._connections:
            connection.close()
        self.folder.cleanup()


def with_aliases(weights: Iterable[tuple[str, torch.Tensor]], aliases: dict[str, str]) -> Iterator[tuple[str, torch.Tensor]]:
    """``weights``, each followed by the aliases (``{alias: name}``) of its name, as the same tensor."""
    by_source: dict[str, list[str]] = {}
    for alias, source in aliases.items():
        by_source.setdefault(source, []).append(alias)
    for name, tensor in weights:
        yield name, tensor
        for alias in by_source.get(name, ()):
            yield alias, tensor


def receive_weights(address: str, authkey: bytes) -> Iterator[tuple[str, torch.Tensor]]:
    """The worker's end: ``(name, tensor)`` pairs as they complete, read straight into their buffers."""
    assembler = _Assembler()
    with Client(address, family="AF_UNIX", authkey=authkey) as connection:
        while True:
            header = json.loads(connection.recv_bytes())
            if header.get("end"):
                break
            for entry in header["pieces"]:
                piece = Piece(entry[0], entry[1], tuple(entry[2]), *entry[3:])
                if piece.size:
                    connection.recv_bytes_into(assembler.target(piece))
                else:
                    assembler.target(piece)
                    connection.recv_bytes()
                done = assembler.take(piece)
                if done is not None:
                    yield done
    if assembler.open:
        raise ValueError(f"weight stream ended inside {sorted(assembler.open)}")
