"""The output folder of a training run: what it holds, how it is recognised, and when it may be resumed.

A run folder holds ``config.json`` (the run's :class:`~ptgpo_algos.config.TrainConfig`, written
first, and under ``machine`` the processor and kernel settings it ran with), ``metrics.jsonl``,
``curve.jsonl``, ``checkpoint.pt`` and, once finished, ``final_model/``.
One process writes into it at a time (:func:`ptgpo_algos.files.folder_lock`).

A resume continues *the same run*: a folder is resumed only with a config equal to the one it was
started with, except the fields that say when to stop (:data:`~ptgpo_algos.training.settings.RESUMABLE_FIELDS`)
and those a resume takes from the run itself (:data:`RUN_OWN_FIELDS`: how one process draws its
rollouts, ``shared`` for a folder older than the field), and a folder that is not a run folder (a saved model's folder, which also has a ``config.json``) is
never written into.

A resume never silently starts over: once a checkpoint was due (``metrics.jsonl`` records
``run.checkpoint_every`` iterations or more, or ``final_model/`` is there), a missing checkpoint, a
``checkpoint/`` without its ``manifest.json`` (emptied, or its writer cut short) or a checkpoint of the
wrong kind (``checkpoint`` a file, ``checkpoint.pt`` a folder) is refused, naming it. A run killed
before its first checkpoint was due kept nothing a resume could use, and starts over; so does, with a
warning, a run that deleted its checkpoint when it finished (``run.keep_checkpoint`` off, as a
benchmark's cells run). Whether a
checkpoint's files are intact is checked when it is loaded (:mod:`ptgpo_algos.training.checkpoint`,
:mod:`ptgpo_algos.distributed.sharded_checkpoint`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Sequence

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.settings import RESUMABLE_FIELDS
from ptgpo_algos.files import LOCK_FILE, FileFormatError, atomic_write_text, read_jsonl

__all__ = ["RANKS_LOG", "RUN_ARTEFACTS", "RUN_OWN_FIELDS", "SHARDED_CHECKPOINT", "continued_config", "is_run_folder",
           "load_run_config", "prepare_run_folder", "trim_logs"]

#: The folder of a checkpoint written shard by shard across ranks (``ptgpo train --nproc N``).
SHARDED_CHECKPOINT = "checkpoint"
#: The tracebacks of ranks that failed (``--nproc N``); a log of failures, not part of a run.
RANKS_LOG = "ranks.log"
#: The fields a resume takes from the run folder's config.json, whatever the config given says, and the
#: value of each that a config.json written before the field implies (how such a run played): a resumed
#: run continues as it began.
RUN_OWN_FIELDS = {"rollouts.seeding": "shared"}
#: Files only a training run writes; their presence makes a folder a run folder.
RUN_ARTEFACTS = ("metrics.jsonl", "curve.jsonl", "checkpoint.pt", SHARDED_CHECKPOINT, "final_model")


def _read_config_json(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{str(run_dir)!r} is not a training run folder (no config.json); pass the --out "
                         "folder of `ptgpo train`") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{path}: not a readable training config ({type(error).__name__}: {error}); the run "
                         "folder was damaged: restore config.json or start a new run") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a training config (a JSON {type(data).__name__}, not an object)")
    if "model_type" in data or "architectures" in data:
        raise ValueError(f"{str(run_dir)!r} is a saved model folder (its config.json describes a model), not a "
                         "training run folder; train into a new --out folder")
    data.pop("machine", None)  # where the run computed (ptgpo_algos.device.kernel_record), not a setting
    return data


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is the output folder of a training run, not a saved model folder."""
    path = Path(path)
    try:
        _read_config_json(path)
        return True
    except ValueError:
        return any((path / name).exists() for name in RUN_ARTEFACTS)


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The config a training run recorded in its ``config.json``, a field it predates at the value the run
    played with (:data:`RUN_OWN_FIELDS`); ``ValueError`` naming the file if bad."""
    run_dir = Path(run_dir)
    data = _read_config_json(run_dir)
    for path, value in RUN_OWN_FIELDS.items():
        section, name = path.split(".")
        if isinstance(data.get(section), dict) and name not in data[section]:
            data[section] = {**data[section], name: value}
    try:
        return TrainConfig.from_dict(data)
    except ValueError as error:
        raise ValueError(f"{run_dir / 'config.json'}: not a valid training config: {error}") from None


def prepare_run_folder(config: TrainConfig) -> bool:
    """Check that ``config.run_dir`` may be written by this run; True when a checkpoint is to be resumed.

    Call it holding the folder's lock. A missing or empty folder starts a new run. Otherwise the
    folder must be a run folder, ``config.run.resume`` must be set, and its saved config must equal
    ``config`` except for :data:`RESUMABLE_FIELDS`; every refusal is a ``ValueError`` saying why.
    """
    run_dir = config.run_dir
    entries = [p.name for p in run_dir.iterdir() if p.name not in (LOCK_FILE, RANKS_LOG)] if run_dir.is_dir() else []
    has_config = "config.json" in entries
    artefacts = [name for name in RUN_ARTEFACTS if name in entries]
    if has_config:
        saved = load_run_config(run_dir)  # refuses a model folder before anything is written
    elif artefacts:
        raise ValueError(f"{str(run_dir)!r} holds {', '.join(artefacts)} but no config.json: it is not a run "
                         "folder this version can continue; choose another out_dir")
    if not entries:
        return False
    if not config.run.resume:
        raise ValueError(f"out_dir {str(run_dir)!r} already holds a run or other files: pass resume=True "
                         "(--resume) to continue a run, or choose another out_dir")
    if not has_config:
        return False  # a folder that only holds unrelated files (a benchmark cell's log): a new run
    now, before = dict(config.flat_items()), dict(saved.flat_items())
    changed = [name for name in now if name not in RESUMABLE_FIELDS | RUN_OWN_FIELDS.keys()
               and now[name] != before.get(name)]
    if changed:
        details = "; ".join(f"{name}: {before.get(name)!r} in the run, {now[name]!r} now" for name in changed)
        raise ValueError(
            f"--resume: {str(run_dir)!r} holds a run with other settings ({details}); a resume continues the "
            f"same run, so only {', '.join(sorted(RESUMABLE_FIELDS - {'run.resume', 'run.out_dir'}))} may change: "
            "resume with the run's own "
            "settings, or train into another out_dir"
        )
    return _holds_checkpoint(config, saved.run.keep_checkpoint)


def continued_config(config: TrainConfig) -> TrainConfig:
    """``config`` with the fields a resume takes from the run (:data:`RUN_OWN_FIELDS`) as its
    ``config.json`` records them: the run continues as it began."""
    saved = dict(load_run_config(config.run_dir).flat_items())
    own = {path: saved[path] for path in RUN_OWN_FIELDS if saved[path] != dict(config.flat_items())[path]}
    return config.replace(**own) if own else config


def _holds_checkpoint(config: TrainConfig, kept: bool) -> bool:
    """Whether the run folder holds a checkpoint to resume (``kept``: the run kept its checkpoint once
    finished); ``ValueError`` naming what is wrong where it should hold one and does not, or holds one
    that cannot be whole."""
    run_dir = config.run_dir
    single, sharded = run_dir / "checkpoint.pt", run_dir / SHARDED_CHECKPOINT
    lost = "restore the checkpoint from a copy, or start the run over in a new out_dir"
    if single.exists() and not single.is_file():
        raise ValueError(f"{single} is a folder, not a checkpoint file: move it out of the run folder, then resume")
    if sharded.exists() and not sharded.is_dir():
        raise ValueError(f"{sharded} is a file, not the folder of a checkpoint written across ranks: move it out of "
                         "the run folder, then resume")
    if sharded.is_dir() and not (sharded / "manifest.json").is_file():
        raise ValueError(f"{sharded}: no manifest.json: the checkpoint is incomplete (its writer was cut short, or "
                         f"files were removed); {lost}")
    if single.is_file() or sharded.is_dir():
        return True
    finished = _finished_iterations(run_dir)
    if finished < config.run.checkpoint_every and not (run_dir / "final_model").exists():
        return False  # killed before its first checkpoint: nothing kept that a resume could continue
    metrics = run_dir / "metrics.jsonl"
    # save_sharded moves the checkpoint it replaces aside before renaming the new one into place.
    beside = [run_dir / f"{SHARDED_CHECKPOINT}.{suffix}" for suffix in ("partial", "old")]
    beside = [path for path in beside if (path / "manifest.json").is_file()]
    if beside:
        raise ValueError(f"--resume: {run_dir} has no {SHARDED_CHECKPOINT}/, but {beside[0]} holds one (its "
                         f"replacement was cut short): rename it to {SHARDED_CHECKPOINT}, then resume")
    if not kept:
        # Deleted by design when the run finished (a benchmark's cells keep no checkpoint): nothing was lost.
        warnings.warn(f"--resume: {metrics} records {finished} finished iterations, but the run kept no checkpoint "
                      "(run.keep_checkpoint off): starting it over", stacklevel=3)
        return False
    raise ValueError(f"--resume: {metrics} records {finished} finished iterations, but there is no checkpoint "
                     f"(checkpoint.pt or {SHARDED_CHECKPOINT}/) to continue from, and starting over would discard "
                     f"them; {lost}")


def _finished_iterations(run_dir: Path) -> int:
    """The last iteration ``metrics.jsonl`` records (0 without one)."""
    path = run_dir / "metrics.jsonl"
    rows = read_jsonl(path) if path.is_file() else []
    return max((row["iteration"] for row in rows if isinstance(row.get("iteration"), int)), default=0)


def trim_logs(paths: Sequence[Path], last_iteration: int) -> None:
    """Cut the run's logs (``paths``: metrics, curve, cost) back to the checkpoint's iteration: a resumed
    run writes the later rows again."""
    for path in paths:
        _trim_jsonl(path, last_iteration)


def _trim_jsonl(path: Path, last_iteration: int) -> None:
    """Keep the rows up to the checkpoint's iteration: a resumed run writes the later ones again."""
    if not path.exists():
        return
    rows = read_jsonl(path)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get("iteration"), int):
            raise FileFormatError(f"{path}: row {number} has no iteration number; the file was damaged: "
                                  "restore it or delete the row")
    kept = [row for row in rows if row["iteration"] <= last_iteration]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))
