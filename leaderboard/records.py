"""The result record: what one benchmark run (one method, one environment, one seed) leaves behind.

Storage contract, shared by the benchmark harness (writer) and the leaderboard (reader):

* A results directory holds one JSON file per run, named ``<cell_name>.json`` where
  :func:`cell_name` builds the name from ``(env_label, method, seed)``. A harness skips a cell when
  :func:`record_exists` says its file is there, and re-running a cell replaces only that cell's file.
* Files are written atomically by :func:`write_record` (temporary file in the same directory, then
  ``os.replace``), so a crash leaves either the old file or the new one, never half of one.
* Success rates (``final_success``, ``best_success``, ``success_by_type``, curve ``success``) are
  fractions in [0, 1]; ``score`` is already on the ×100 scale (WebShop's mean reward ×100).
* ``curve_path`` is a JSONL file, one row per evaluation with at least ``{"decisions": int,
  "success": float}``; a relative path is relative to the results directory.
* A record with status ``ok`` carries its result in ``final_success``; a run without one is
  ``failed``, with the reason in ``error``.
* ``budget`` is counted in ``budget_unit``: policy ``decisions`` (the default, and the unit of every
  record written before the field existed), training ``iterations`` (``iterations`` is the number an
  RL run trained), or a cost an RL run stopped at (``trained_tokens``, ``optimizer_updates``,
  ``train_cpu_s``, ``gpu_s``: it stops at an iteration boundary at or near the budget, and
  ``budget_overshoot`` says how far past it, in the unit, negative when short; None when something
  else stopped it).
* ``protocol`` says what a run was measured under (None: not recorded, as in records written before
  the field existed): ``recipe`` (:mod:`ptgpo_algos.policy.recipes`; None for PTGPO's own prompt and
  protocol), and what the evaluation environment reported of itself: ``observation_style`` (the
  originals' pages or PTGPO's), for WebShop ``reward_impl``, ``reward_model`` and ``webshop_set`` (its
  product set and goals), for ALFWorld ``alfworld_version`` (the installed package's). Records
  without the fields added since schema version 1 began still read, with these defaults.
* Compute spent, besides ``decisions`` (each one environment step: a prefix tree's shared steps are
  restored from snapshots, not replayed) and ``tokens`` (generated): ``episodes`` (training
  episodes), ``trained_tokens`` (prompt and response tokens through the loss, over every epoch),
  ``unique_tokens`` (the distinct tokens the update computed: ``trained_tokens`` until an update shares
  prefixes), ``optimizer_updates``, ``cpu_time_s`` (the cell process's CPU seconds, all its threads,
  everything included; a resumed cell's last session only), ``train_cpu_s`` (CPU seconds of rollouts
  and updates), ``eval_cpu_s`` (of held-out evaluations), ``setup_cpu_s`` (of building the models, the
  tiny model's pretraining included when it was not cached: in neither of the two before) and
  ``gpu_s`` (GPU seconds; None on a CPU) (:mod:`ptgpo_algos.cost`). None: not recorded (older records,
  or a baseline that does not count it).
* Held-out evaluation: ``eval_layouts``, how many distinct start layouts (``info["layout"]``) the
  evaluation episodes had, and ``eval_overlap``, the fraction of evaluation episodes whose start
  layout some training episode also had (0: truly held out; None: not measured);
  ``eval_invalid_rate``, the fraction of its steps whose action was not admissible (``generate``
  mode's unparsable answers and answers naming no admissible action; 0 in ``choose`` mode, which plays
  only admissible actions; None: not recorded, as in records written before the field existed).
* ``provenance`` (None: not recorded): ``commit`` and ``dirty`` of the code, ``python`` and
  ``versions`` of the libraries, ``cpu``, ``cores``, ``threads``, ``platform``, ``device`` (the torch
  device an RL cell's policy computed on, resolved; None for a baseline and in older records) and
  ``gpu`` (its name; None on a CPU), and ``config``, the run's full resolved configuration (:func:`ptgpo_algos.provenance.provenance`).
* ``trials`` (None: not measured, as in records written before the field existed): the final policy
  played the held-out panel ``trials`` times (``ptgpo evaluate RUN --trials K --record RECORD``):
  ``{"trials": K, "tasks": T, "pass_at": {"1": f, ..., "K": f}, "pass_hat": {...}}``, pass@k and
  pass^k for each k as fractions in [0, 1] (:mod:`leaderboard.passk`).
* :func:`read_records` reads every ``*.json`` file directly in the directory (not in subdirectories,
  so curves and other artefacts can live next to the records in subfolders) and reports each file it
  cannot use as a :class:`RecordProblem` with the file name and, for a JSON syntax error, the line,
  while still returning every other record. Nothing in a file can stop it: not a directory or FIFO
  named ``x.json``, JSON nested too deeply for the parser, nor numbers beyond what a float holds.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ptgpo_algos.files import atomic_write_bytes, atomic_write_text

__all__ = [
    "SCHEMA_VERSION",
    "BUDGET_UNITS",
    "METHOD_KINDS",
    "PROTOCOL_KEYS",
    "STATUSES",
    "ResultRecord",
    "RecordError",
    "SchemaVersionError",
    "RecordProblem",
    "cell_name",
    "slug",
    "record_path",
    "record_exists",
    "write_record",
    "read_record",
    "read_records",
    "read_records_with_paths",
    "InputFileError",
    "MAX_INPUT_BYTES",
    "read_input",
    "finite_number",
    "not_a_file",
    "now_iso",
]

SCHEMA_VERSION = 1
METHOD_KINDS = ("rl", "baseline", "reported")
STATUSES = ("ok", "failed")
#: Decisions, iterations, and the costs a run can be stopped at (:data:`ptgpo_algos.cost.BUDGET_UNITS`).
BUDGET_UNITS = ("decisions", "iterations", "trained_tokens", "optimizer_updates", "train_cpu_s", "gpu_s")
PROTOCOL_KEYS = ("recipe", "observation_style", "reward_impl", "reward_model", "alfworld_version", "webshop_set")


class RecordError(ValueError):
    """A record (dict or file) does not follow the schema; the message says which field and why."""


class SchemaVersionError(RecordError):
    """A record was written under a different ``schema_version`` than this code reads."""

    def __init__(self, message: str, version: Any):
        super().__init__(message)
        self.version = version


def now_iso() -> str:
    """The current UTC time as an ISO-8601 string, the format of ``ResultRecord.created_at``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(kw_only=True)
class ResultRecord:
    """One run's outcome (keyword-only construction; validated on creation).

    See the module docstring for units and the storage contract. Required: ``method``,
    ``method_kind``, ``env_id``, ``env_label``, ``seed``, ``status``; the rest have neutral defaults.
    """

    schema_version: int = SCHEMA_VERSION
    method: str
    method_kind: str
    env_id: str
    env_label: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int
    budget: float | None = None
    budget_unit: str = "decisions"
    budget_overshoot: float | None = None
    status: str
    error: str | None = None
    decisions: int = 0
    tokens: int = 0
    episodes: int | None = None
    trained_tokens: int | None = None
    unique_tokens: int | None = None
    optimizer_updates: int | None = None
    cpu_time_s: float | None = None
    train_cpu_s: float | None = None
    eval_cpu_s: float | None = None
    setup_cpu_s: float | None = None
    gpu_s: float | None = None
    iterations: int | None = None
    final_success: float | None = None
    best_success: float | None = None
    eval_episodes: int = 0
    eval_layouts: int | None = None
    eval_overlap: float | None = None
    eval_invalid_rate: float | None = None
    success_by_type: dict[str, float] = field(default_factory=dict)
    score: float | None = None
    final_return: float | None = None
    wall_time_s: float = 0.0
    curve_path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    protocol: dict[str, str | None] | None = None
    provenance: dict[str, Any] | None = None
    trials: dict[str, Any] | None = None
    created_at: str = field(default_factory=now_iso)

    def __post_init__(self) -> None:
        _validate(asdict(self))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every field, in schema order."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ResultRecord:
        """Build a record from a dict, raising :class:`RecordError` that names the offending field.

        A different ``schema_version`` raises :class:`SchemaVersionError` before anything else is
        checked, because the other fields may legitimately differ under another version.
        """
        if not isinstance(data, dict):
            raise RecordError(f"a result record must be a JSON object, got {type(data).__name__}")
        if "schema_version" not in data:
            raise RecordError("missing field 'schema_version'")
        version = data["schema_version"]
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise SchemaVersionError(
                f"schema_version {version!r} is not the version this code reads ({SCHEMA_VERSION}); "
                "re-run the cell or convert the record",
                version,
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RecordError(f"unknown field(s) {unknown}; known fields: {sorted(known)}")
        missing = sorted(name for name in _REQUIRED if name not in data)
        if missing:
            raise RecordError(f"missing field(s) {missing}")
        return cls(**data)


# Fields a reader needs to place a record in the table; the rest have neutral defaults.
_REQUIRED = ("schema_version", "method", "method_kind", "env_id", "env_label", "seed", "status")


# Integers beyond 64 bits are no count or seed any writer makes, and overflow float arithmetic.
_INT_LIMIT = 2**63


# No score (x100) or return comes near; beyond it the sums and squares of a mean over seeds overflow.
_MAX_SCORE = 1e12


# ``ptgpo evaluate --trials`` plays at most 1,000 trials.
_MAX_TRIALS = 1000


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT_LIMIT < value < _INT_LIMIT


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool, not beyond the float
    range), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    # Finite only: NaN and infinity are not valid JSON and would poison every mean they enter.
    return number if math.isfinite(number) else None


def _is_number(value: Any) -> bool:
    return finite_number(value) is not None


def _fail(data: dict[str, Any], name: str, expected: str) -> None:
    raise RecordError(f"field {name!r} must be {expected}, got {data[name]!r}")


def _validate(data: dict[str, Any]) -> None:
    """Refuse a record whose fields do not hold what the schema says, naming the first such field:
    what the record is, then its counts, then its results."""
    if data["schema_version"] != SCHEMA_VERSION or not _is_int(data["schema_version"]):
        raise SchemaVersionError(
            f"schema_version {data['schema_version']!r} is not {SCHEMA_VERSION}", data["schema_version"]
        )
    for name in ("method", "env_id", "env_label", "created_at"):
        if not isinstance(data[name], str) or not data[name].strip():
            _fail(data, name, "a non-empty string")
    if data["method_kind"] not in METHOD_KINDS:
        _fail(data, "method_kind", f"one of {METHOD_KINDS}")
    if data["status"] not in STATUSES:
        _fail(data, "status", f"one of {STATUSES}")
    if data["status"] == "failed" and not data["error"]:
        raise RecordError("a record with status 'failed' must say why in field 'error'")
    if data["status"] == "ok" and data["final_success"] is None:
        raise RecordError(
            "a record with status 'ok' must carry its result in field 'final_success' (a fraction in "
            "[0, 1]); a run that produced none is status 'failed' with the reason in 'error'"
        )
    _validate_counts(data)
    _validate_results(data)


def _validate_counts(data: dict[str, Any]) -> None:
    for name in ("seed",):
        if not _is_int(data[name]):
            _fail(data, name, "an integer")
    for name in ("decisions", "tokens", "eval_episodes"):
        if not _is_int(data[name]) or data[name] < 0:
            _fail(data, name, "a non-negative integer")
    if data["budget_unit"] not in BUDGET_UNITS:
        _fail(data, "budget_unit", f"one of {BUDGET_UNITS}")
    whole = data["budget_unit"] in ("decisions", "iterations")
    if data["budget"] is not None and (not (_is_int if whole else _is_number)(data["budget"]) or data["budget"] <= 0):
        _fail(data, "budget", f"a positive {'integer' if whole else 'number'} or null")
    if data["budget_overshoot"] is not None and not _is_number(data["budget_overshoot"]):
        _fail(data, "budget_overshoot", "a number or null")
    for name in ("iterations", "episodes", "trained_tokens", "unique_tokens", "optimizer_updates", "eval_layouts"):
        if data[name] is not None and (not _is_int(data[name]) or data[name] < 0):
            _fail(data, name, "a non-negative integer or null")
    for name in ("cpu_time_s", "train_cpu_s", "eval_cpu_s", "setup_cpu_s", "gpu_s"):
        if data[name] is not None and not (_is_number(data[name]) and data[name] >= 0):
            _fail(data, name, "a non-negative number or null")


def _validate_results(data: dict[str, Any]) -> None:
    if data["provenance"] is not None and not isinstance(data["provenance"], dict):
        _fail(data, "provenance",
              "null or an object (commit, dirty, python, versions, cpu, cores, threads, platform, config)")
    protocol = data["protocol"]
    if protocol is not None and (
        not isinstance(protocol, dict)
        or set(protocol) - set(PROTOCOL_KEYS)
        or not all(value is None or isinstance(value, str) for value in protocol.values())
    ):
        _fail(data, "protocol", f"null or an object of {', '.join(PROTOCOL_KEYS)} (strings or null)")
    for name in ("final_success", "best_success", "eval_overlap", "eval_invalid_rate"):
        if data[name] is not None and not (_is_number(data[name]) and 0.0 <= data[name] <= 1.0):
            _fail(data, name, "a fraction in [0, 1] or null")
    for name in ("score", "final_return"):
        if data[name] is not None and not (_is_number(data[name]) and abs(data[name]) <= _MAX_SCORE):
            _fail(data, name, f"a number of magnitude at most {_MAX_SCORE:.0e}, or null")
    if not _is_number(data["wall_time_s"]) or data["wall_time_s"] < 0:
        _fail(data, "wall_time_s", "a non-negative number")
    for name in ("env_kwargs", "config", "success_by_type"):
        if not isinstance(data[name], dict):
            _fail(data, name, "an object")
    for task_type, value in data["success_by_type"].items():
        if not isinstance(task_type, str) or not (_is_number(value) and 0.0 <= value <= 1.0):
            _fail(data, "success_by_type", "an object mapping task-type names to fractions in [0, 1]")
    for name in ("error", "curve_path", "source"):
        if data[name] is not None and not isinstance(data[name], str):
            _fail(data, name, "a string or null")
    if data["trials"] is not None and not _valid_trials(data["trials"]):
        _fail(data, "trials", "null or {trials: K >= 2, tasks: T >= 1, pass_at and pass_hat: {\"1\".. \"K\": "
                              "fractions in [0, 1]}}")
    try:
        datetime.fromisoformat(data["created_at"])
    except ValueError:
        _fail(data, "created_at", "an ISO-8601 time such as 2026-01-31T12:00:00+00:00")


def _valid_trials(trials: Any) -> bool:
    """Whether ``trials`` is the ``trials`` field's object (see the module docstring)."""
    if not isinstance(trials, dict) or set(trials) != {"trials", "tasks", "pass_at", "pass_hat"}:
        return False
    k, tasks = trials["trials"], trials["tasks"]
    # The count bounds the keys checked: a file's k cannot make this build a set of a billion names.
    if not (_is_int(k) and 2 <= k <= _MAX_TRIALS and _is_int(tasks) and 1 <= tasks < _INT_LIMIT):
        return False
    keys = {str(i) for i in range(1, k + 1)}
    return all(isinstance(trials[name], dict) and set(trials[name]) == keys
               and all(_is_number(v) and 0.0 <= v <= 1.0 for v in trials[name].values())
               for name in ("pass_at", "pass_hat"))


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def slug(text: str) -> str:
    """``text`` with each run of characters outside ``[A-Za-z0-9._+-]`` replaced by ``-``."""
    return _UNSAFE.sub("-", text).strip("-.") or "x"


def cell_name(env_label: str, method: str, seed: int) -> str:
    """The file stem for one run: ``<env_label>__<method>__seed<seed>`` with unsafe characters -> ``-``.

    Distinct labels that differ only in characters outside ``[A-Za-z0-9._+-]`` map to the same name;
    pick labels that differ in safe characters.
    """
    if not _is_int(seed):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    return f"{slug(env_label)}__{slug(method)}__seed{seed}"


def record_path(results_dir: str | os.PathLike, name: str) -> Path:
    """The file of the result record ``name`` in ``results_dir``."""
    return Path(results_dir) / f"{name}.json"


def record_exists(results_dir: str | os.PathLike, name: str) -> bool:
    """Whether the cell ``name`` (see :func:`cell_name`) already has a result file, ok or failed.

    Existence is enough: files are only ever replaced whole, so one that exists is complete unless it
    was damaged outside this code (:func:`read_records` reports those).
    """
    return record_path(results_dir, name).is_file()


def write_record(path: str | os.PathLike, record: ResultRecord) -> Path:
    """Write ``record`` as JSON to ``path`` atomically; a directory ``path`` gets ``<cell_name>.json``.

    Returns the file written.
    """
    path = Path(path)
    if path.is_dir():
        path = record_path(path, cell_name(record.env_label, record.method, record.seed))
    _validate(record.to_dict())  # the fields may have been changed since construction
    text = json.dumps(record.to_dict(), indent=2, sort_keys=False) + "\n"
    atomic_write_text(path, text)
    return path


@dataclass(frozen=True)
class RecordProblem:
    """A file that could not be used: ``kind`` is ``"corrupt"`` (not valid JSON, e.g. truncated),
    ``"invalid"`` (valid JSON that breaks the schema), ``"schema_version"``, ``"unreadable"`` (not a
    regular file, or the system refused to read it), or ``"curve"`` (a learning-curve file or line
    the leaderboard could not read, or a record's ``curve_path`` it would not follow)."""

    path: Path
    kind: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.kind}: {self.message}"


#: The most bytes the leaderboard reads from one input file (a record, a learning curve, a YAML file):
#: far above any the suite writes, and a bound on the memory a file sent with a results folder can take.
MAX_INPUT_BYTES = 64 * 2**20


class InputFileError(ValueError):
    """An input file the leaderboard does not read: a symbolic link out of its folder, not a regular
    file, or larger than :data:`MAX_INPUT_BYTES`; the message names the file."""


def _file_kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a plain file")


def read_input(path: str | os.PathLike) -> bytes:
    """The bytes of the input file ``path``. Refused with :class:`InputFileError`: a symbolic link whose
    target lies outside the link's own folder (results folders are copied and shared, and a file in
    one must not make the leaderboard read files elsewhere), anything but a regular file (a FIFO
    would block, a device such as ``/dev/zero`` never ends), and a file beyond
    :data:`MAX_INPUT_BYTES`. ``OSError`` when the system refuses to open or read it."""
    path = Path(path)
    if path.is_symlink():
        try:
            inside = path.resolve().is_relative_to(path.parent.resolve())
        except (OSError, RuntimeError):  # a loop of links
            inside = False
        if not inside:
            raise InputFileError(f"{path}: a symbolic link (to {os.readlink(path)!r}) out of its folder; the "
                                 "leaderboard reads no file through it: copy the file into the folder instead")
    # Non-blocking, so that opening a FIFO returns at once; the descriptor's own type is then checked,
    # not the name's a moment before.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as handle:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"{path}: not a regular file ({_file_kind(mode)}); give a file")
        data = handle.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputFileError(f"{path}: larger than {MAX_INPUT_BYTES:,} bytes, more than any input of the "
                             "leaderboard holds; give the right file")
    return data


def read_yaml_input(path: str | os.PathLike) -> Any:
    """The YAML document of the input file ``path`` (:func:`read_input`, parsed strictly by
    :func:`ptgpo_algos.yaml_safe.load_yaml`); every reason it cannot be had is an
    :class:`InputFileError` whose one-line message names the file."""
    import yaml

    from ptgpo_algos.yaml_safe import load_yaml

    try:
        return load_yaml(read_input(path).decode("utf-8"), name=str(path))
    except OSError as error:
        raise InputFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise InputFileError(f"{path}: not UTF-8 text ({error.reason}); give a YAML file") from None
    except yaml.YAMLError as error:
        raise InputFileError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None


def read_record(path: str | os.PathLike) -> ResultRecord:
    """Read one record file; raises :class:`InputFileError` (see :func:`read_input`),
    :class:`RecordError` (``SchemaVersionError`` for other versions) or ``json.JSONDecodeError`` (which
    carries the line) for a corrupt file."""
    return ResultRecord.from_dict(json.loads(read_input(path).decode("utf-8")))


def read_records_with_paths(
    results_dir: str | os.PathLike,
) -> tuple[list[tuple[Path, ResultRecord]], list[RecordProblem]]:
    """Every readable record in ``results_dir`` with its file, plus one problem per unusable file."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results directory {results_dir} does not exist")
    records: list[tuple[Path, ResultRecord]] = []
    problems: list[RecordProblem] = []
    for path in sorted(results_dir.glob("*.json")):
        if path.name.startswith("."):
            continue
        if path.is_symlink():
            # It may point at any file outside the folder: a record is only what the folder holds.
            problems.append(RecordProblem(path, "unreadable", f"a symbolic link (to {os.readlink(path)!r}), not a "
                                          "record file: copy the record into the folder instead"))
            continue
        if not path.is_file():
            # Opening a FIFO would block, and a directory cannot be read: neither is a record.
            problems.append(RecordProblem(path, "unreadable", f"{not_a_file(path)}, not a record file"))
            continue
        try:
            records.append((path, read_record(path)))
        except InputFileError as error:
            problems.append(RecordProblem(path, "unreadable", str(error).removeprefix(f"{path}: ")))
        except json.JSONDecodeError as error:
            problems.append(
                RecordProblem(path, "corrupt", f"{error.msg} (column {error.colno})", error.lineno)
            )
        except UnicodeDecodeError as error:
            problems.append(RecordProblem(path, "corrupt", f"not UTF-8 text: {error.reason}"))
        except RecursionError:
            problems.append(RecordProblem(path, "corrupt", "JSON nested too deeply to parse"))
        except SchemaVersionError as error:
            problems.append(RecordProblem(path, "schema_version", str(error)))
        except (RecordError, TypeError) as error:
            problems.append(RecordProblem(path, "invalid", str(error)))
        except ValueError as error:  # e.g. an integer with more digits than Python converts
            problems.append(RecordProblem(path, "corrupt", f"not a readable JSON value: {error}"))
        except OSError as error:
            problems.append(RecordProblem(path, "unreadable", f"cannot read: {error.strerror or error}"))
    return records, problems


def not_a_file(path: Path) -> str:
    """What ``path``, which is not a regular file, is instead (for messages)."""
    if path.is_symlink() and not path.exists():
        return "a broken symbolic link"
    if path.is_dir():
        return "a directory"
    return "not a regular file" if path.exists() else "missing"


def read_records(results_dir: str | os.PathLike) -> tuple[list[ResultRecord], list[RecordProblem]]:
    """Every readable record in ``results_dir`` (sorted by file name) and the files that were not."""
    records, problems = read_records_with_paths(results_dir)
    return [record for _, record in records], problems
