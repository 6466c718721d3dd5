"""A run's recorded rollouts as a data set: JSON lines, and a Hugging Face ``datasets`` folder.

``ptgpo export RUN`` reads the iterations a run recorded (``run.record_rollouts``,
:mod:`ptgpo_algos.rollouts.recordings`) and writes them as one ``rollouts.jsonl`` (the rows as recorded,
one per decision) and, where the ``datasets`` package is installed, a ``dataset/`` folder that
``datasets.load_from_disk`` reads. Arrow wants one type per column, so there ``extras`` and
``outcomes`` (mappings whose keys vary by rollout strategy) are JSON text.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptgpo_algos.files import atomic_folder, atomic_write_text
from ptgpo_algos.rollouts.recordings import read_recordings, recording_paths

__all__ = ["ExportSummary", "JSON_TEXT_COLUMNS", "dataset_rows", "export_run"]

#: Columns a ``datasets`` folder holds as JSON text.
JSON_TEXT_COLUMNS = ("extras", "outcomes")


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_run` wrote: the rows, the iterations they came from, the files."""

    rows: int
    iterations: int
    jsonl: Path
    dataset: Path | None


def dataset_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with :data:`JSON_TEXT_COLUMNS` as JSON text (one Arrow type per column)."""
    return [{**row, **{name: json.dumps(row[name]) for name in JSON_TEXT_COLUMNS}} for row in rows]


def export_run(run_dir: Path, out_dir: Path, with_dataset: bool | None = None) -> ExportSummary:
    """Write ``run_dir``'s recorded rollouts to ``out_dir`` (``rollouts.jsonl``, and ``dataset/`` when
    ``with_dataset``; None: when the datasets package is installed). ``ValueError`` when the run
    recorded none."""
    folder = run_dir / "rollouts"
    paths = recording_paths(folder)
    if not paths:
        raise ValueError(f"{run_dir}: no recorded rollouts in {folder}; train with run.record_rollouts: N "
                         "(--record-rollouts N) to keep every Nth iteration's groups")
    if with_dataset is None:
        with_dataset = importlib.util.find_spec("datasets") is not None
    rows = read_recordings(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / "rollouts.jsonl"
    atomic_write_text(jsonl, "".join(json.dumps(row) + "\n" for row in rows))
    dataset = None
    if with_dataset:
        import datasets

        dataset = out_dir / "dataset"
        with atomic_folder(dataset) as building:
            datasets.Dataset.from_list(dataset_rows(rows)).save_to_disk(str(building))
    return ExportSummary(len(rows), len(paths), jsonl, dataset)
