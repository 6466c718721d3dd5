"""Files the suite writes and reads back: atomic writes, one writer per folder, JSON lines that survive a crash.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_path`: a file is written
  under a unique temporary name in its own folder, flushed to disk, given ordinary permissions
  (``0666`` less the umask: ``0644`` by default; ``mkstemp`` alone would leave ``0600``) and moved
  into place with ``os.replace``, so a reader sees the old file or the new one, never half of one.
* :func:`folder_lock`: an exclusive ``flock`` on ``<folder>/.ptgpo.lock``. The kernel releases it
  when the holder exits, however it exits (``kill -9`` included), so a stale lock never blocks a
  re-run; a second writer is refused with the holder's pid. Re-entrant within one process. A folder
  that holds a symbolic link anywhere inside it is refused (:func:`refuse_links`): a writer would
  follow it and truncate, append to or replace a file outside the folder. Temporary files that a
  killed writer left at the top of the folder are removed once the lock is held.
* :func:`file_sha256`: a file's SHA-256, read in blocks (a checkpoint of many GiB is never held in
  memory), so that a reader can prove a file is the one its writer recorded.
* :func:`read_jsonl`: the rows of a JSON-lines log. A crash can tear the last line (the writer was
  killed mid-line): it is dropped with a warning. A bad line anywhere else means the file was damaged
  and raises :class:`FileFormatError` naming the file and line.

Layering: this module imports nothing of the suite, so every layer (trainer, harness, leaderboard,
baselines) writes its files the same way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "LOCK_FILE",
    "FileFormatError",
    "FolderBusyError",
    "atomic_folder",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "build_lock",
    "check_writable",
    "file_sha256",
    "folder_lock",
    "read_jsonl",
    "refuse_links",
]

#: The lock file a writer holds in its folder (a dot file: not a result, not a run artefact).
LOCK_FILE = ".ptgpo.lock"


class FileFormatError(ValueError):
    """A file the suite wrote cannot be read back; the message names the file (and line) and what to do."""


class FolderBusyError(RuntimeError):
    """Another process is writing into this folder; the message names its pid."""


def _umask() -> int:
    # The umask can only be read by setting it; set it straight back.
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary path beside ``path``: write it inside the ``with``; on success it replaces ``path``.

    For writers that want a path rather than bytes (``torch.save``). On an exception the temporary
    file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The leading dot and .tmp suffix keep half-written files out of readers' globs (*.json, *.pt).
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None and error.errno is not None:
            # A failed write or flush (a full disk) names no file: name the one being written.
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, replace: bool = True) -> Iterator[Path]:
    """A unique temporary folder beside ``path``: fill it inside the ``with``; on success it becomes ``path``.

    An existing ``path`` is replaced when ``replace`` is true; otherwise the new folder is dropped if
    another process created ``path`` first (the same build finished twice). The folder and what it
    holds get ordinary permissions (``0777``/``0666`` less the umask), not the ``0700``/``0600`` of
    ``mkdtemp`` and of writers that go through a temporary file of their own (safetensors).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _ordinary_permissions(tmp)
        if path.exists() and replace:
            shutil.rmtree(path)
        try:
            os.replace(tmp, path)
        except OSError:
            if replace or not path.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def build_lock(path: str | os.PathLike) -> Iterator[None]:
    """Wait for, then hold, an exclusive lock on the file ``path`` for the ``with`` block: processes that
    would build the same cached artefact (benchmark cells, seeds in parallel) build it once, the others
    wait and read it."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ordinary_permissions(folder: Path) -> None:
    umask = _umask()
    os.chmod(folder, 0o777 & ~umask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(Path(root) / name, 0o777 & ~umask, follow_symlinks=False)
        for name in files:
            if not (Path(root) / name).is_symlink():
                os.chmod(Path(root) / name, 0o666 & ~umask)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def check_writable(path: str | os.PathLike, where: str, *, folder: bool = False) -> None:
    """Raise ``ValueError`` naming ``where`` unless ``path`` can be written as a file (or, with
    ``folder``, as a folder): checked before any work, so a long run does not fail at its last step."""
    path = Path(path)
    kind = "folder" if folder else "file"
    if path.exists() and path.is_dir() != folder:
        raise ValueError(f"{where}: {str(path)!r} is a {'file' if folder else 'folder'}; give a {kind} path")
    target = path if folder and path.exists() else path.parent
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir() or not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{where}: cannot write {str(path)!r} ({str(target)!r} is not writable); choose a "
                         f"{kind} you can write to")


def file_sha256(path: str | os.PathLike, length: int | None = None) -> str:
    """The SHA-256 (hex) of ``path``'s first ``length`` bytes (all of it by default), read 1 MiB at a time."""
    digest = hashlib.sha256()
    left = os.path.getsize(path) if length is None else length
    with open(path, "rb") as handle:
        while left > 0:
            block = handle.read(min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def refuse_links(folder: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming the first symbolic link inside ``folder`` (``folder`` itself may be
    one: it was given). The suite's result and run folders hold none, and a writer would follow one
    out of the folder."""
    for root, dirs, files in os.walk(folder):  # a linked folder is listed in dirs, never entered
        for name in sorted(dirs + files):
            path = Path(root) / name
            if path.is_symlink():
                raise ValueError(f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}): writing through it "
                                 f"would change files outside {str(folder)!r}; remove the link, or choose another "
                                 "folder")


def _remove_leftovers(folder: Path) -> None:
    """The temporary files and folders (``.<name>.*.tmp``) a writer killed mid-write left in ``folder``;
    call it holding the folder's lock, when nobody else writes there."""
    for path in folder.glob(".*.tmp"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ locks
_HELD: dict[Path, list[int]] = {}  # folder -> [fd, depth], for re-entrant locking within a process


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, purpose: str) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (created if missing) for the ``with`` block.

    ``purpose`` says what the holder does ("training run", "benchmark"); it is written into the lock
    file so that a refused writer can say who holds the folder. Raises :class:`FolderBusyError` when
    another process holds it, and ``ValueError`` when the folder cannot be created or written or
    holds a symbolic link (:func:`refuse_links`).
    """
    folder = Path(folder)
    key = folder.resolve()
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield folder
        finally:
            held[1] -= 1
        return
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{str(folder)!r} is a file, not a folder: choose another output folder")
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)  # the umask applies
    except OSError as error:
        if error.errno == errno.ELOOP:
            refuse_links(folder)
        raise ValueError(f"cannot write in {str(folder)!r} ({error.strerror}): choose a folder you can "
                         "write to, or fix its permissions") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = _read_holder(fd)
        os.close(fd)
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise FolderBusyError(f"{str(folder)!r} is in use by {holder}: two writers would mix their results; "
                              "wait for it to finish, stop it, or choose another folder") from None
    try:
        refuse_links(folder)
    except ValueError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "purpose": purpose}).encode(), 0)
    _remove_leftovers(folder)
    _HELD[key] = [fd, 1]
    try:
        yield folder
    finally:
        _HELD.pop(key, None)
        os.close(fd)  # releases the lock


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"{holder.get('purpose', 'another process')} (pid {int(holder['pid'])})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (pid unknown)"


# ------------------------------------------------------------------------------------------ JSONL
def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file written by the suite (one JSON object per line).

    A torn last line (no newline at the end: the writer was killed mid-write) is dropped with a
    warning; any other line that is not a JSON object raises :class:`FileFormatError` with the file
    and line number.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: not UTF-8 text; the file was damaged: restore it or delete it") from None
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except (ValueError, RecursionError) as error:
            if number == len(lines):  # no newline after it: the last write was cut short
                warnings.warn(f"{path}:{number}: dropping a torn last line ({error})", stacklevel=2)
                break
            raise FileFormatError(f"{path}:{number}: not a JSON object ({error}); the file was damaged: "
                                  "restore it or delete the line") from None
        rows.append(row)
    return rows
