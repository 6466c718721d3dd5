"""Learning curves: success against each unit of cost, mean and standard-error band per method, one
PNG per environment and unit.

Each run's curve is a JSONL file (``ResultRecord.curve_path``) with rows holding at least
``{"decisions": int, "success": float}`` (success as a fraction); the trainer's rows also hold
``tokens`` (generated). The other units of cost (:data:`COST_UNITS`: episodes,
trained tokens, optimizer updates, training CPU seconds, GPU seconds...) are in the trainer's
``cost.jsonl`` beside the curve, whose evaluated rows (those with ``success``) are the same
evaluations with every cost (:func:`read_cost_curve`). Seeds evaluate at different points, so each
method's curves are linearly interpolated onto a common grid spanning what every seed covers (from
the latest first point to the earliest last point: no extrapolation) before the mean and SE are taken.

Why other units. A matched decision budget does not match compute: a tree plays more, shorter
episodes and trains on more tokens. ``curves-<env>-<unit>.png`` compares methods at equal cost in
that unit instead; ``train_cpu_s`` is the process CPU of rollouts and updates, evaluation excluded,
so a loaded machine does not inflate it as it does wall time. Runs without the unit (older runs,
baselines) are left out of that plot, without a problem reported.

Files are not trusted. A ``curve_path`` must be relative and lead, symbolic links followed, to a
place inside the record's own results folder (:func:`curve_file`); otherwise the record is listed as
a problem and nothing is opened. In a curve file each line is decoded and parsed on its own, so a
torn or garbage line (bad UTF-8, broken or too deeply nested JSON, numbers out of range) is reported
by file and line and the other lines still count.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leaderboard.board import Leaderboard
from leaderboard.plots import legend_beside, line_figure_size, new_figure, save_png
from leaderboard.records import InputFileError, RecordProblem, finite_number, read_input, slug

__all__ = [
    "AXES",
    "COST_UNITS",
    "GRID_POINTS",
    "Curve",
    "MeanCurve",
    "curve_file",
    "mean_curve",
    "method_curves",
    "plot_learning_curves",
    "read_cost_curve",
    "read_curve",
]

GRID_POINTS = 101
#: Every unit of cost a trainer run records (``ptgpo_algos.cost.COST_UNITS``: the names ``cost.jsonl``
#: spells) -> how it reads on an axis.
COST_UNITS = {
    "decisions": "policy decisions",
    "episodes": "training episodes",
    "tokens": "generated tokens",
    "trained_tokens": "trained tokens",
    "unique_tokens": "unique trained tokens",
    "optimizer_updates": "optimizer updates",
    "train_cpu_s": "training CPU seconds",
    "gpu_s": "GPU seconds",
}
#: The curves' x axes: the unit (a row key), its label, and the plot file's suffix.
AXES = {unit: (text, "" if unit == "decisions" else f"-{unit}") for unit, text in COST_UNITS.items()}
#: The units a curve file's own rows hold; the others are read from ``cost.jsonl`` beside it.
CURVE_UNITS = ("decisions", "tokens")
#: The trainer's cost log, beside its ``curve.jsonl`` (:mod:`ptgpo_algos.cost`).
COST_FILE = "cost.jsonl"


@dataclass(frozen=True)
class Curve:
    """One run's learning curve: held-out success (a fraction) against ``x`` (policy decisions or
    seconds, increasing)."""

    x: np.ndarray  # increasing
    success: np.ndarray  # fractions


@dataclass(frozen=True)
class MeanCurve:
    """A method's curve averaged over ``n`` seeds, with the standard error (None for one seed)."""

    x: np.ndarray
    mean: np.ndarray
    se: np.ndarray | None  # None for a single seed
    n: int


def _point(line: bytes, axis: str, evaluated_only: bool = False) -> tuple[float, float] | None:
    """``(x, success)`` from one JSONL line, ``x`` its ``axis`` key (None when ``evaluated_only`` and
    the row has no ``success``, an iteration without evaluation, or a null ``axis``, a unit the run
    does not count); raises ``ValueError`` saying what is wrong."""
    try:
        row = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text: {error.reason} at byte {error.start}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{error.msg} (column {error.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None
    except ValueError as error:  # e.g. an integer with more digits than Python converts
        raise ValueError(f"not a readable JSON value: {error}") from None
    if evaluated_only and isinstance(row, dict) and ("success" not in row or row.get(axis, 0) is None):
        return None
    if not isinstance(row, dict) or axis not in row or "success" not in row:
        raise ValueError(f"row needs {axis!r} and 'success', got {_short(row)}")
    x, success = finite_number(row[axis]), finite_number(row["success"])
    if x is None or x < 0 or success is None or not 0.0 <= success <= 1.0:
        raise ValueError(
            f"{axis!r} must be a non-negative number and 'success' a fraction in [0, 1], got "
            f"{_short(row[axis])}, {_short(row['success'])}"
        )
    return x, success


def _short(value: object, limit: int = 60) -> str:
    if isinstance(value, (dict, list)):  # a parsed container can be nested deep enough to break repr
        return "a JSON object" if isinstance(value, dict) else "a JSON array"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_curve(path: str | os.PathLike, axis: str = "decisions",
               evaluated_only: bool = False) -> tuple[Curve | None, list[RecordProblem]]:
    """The curve in a JSONL file against ``axis`` (a key of :data:`AXES`), skipping (and reporting by
    line) rows it cannot read, and rows without ``success`` when ``evaluated_only``.

    A run killed while appending leaves a truncated last line; the rows before it still count.
    Returns ``None`` for the curve when no row is usable.
    """
    path = Path(path)
    try:
        data = read_input(path)
    except InputFileError as error:
        why = str(error).removeprefix(f"{path}: ")
        return None, [RecordProblem(path, "curve", f"cannot read learning curve: {why}")]
    except FileNotFoundError:
        return None, [RecordProblem(path, "curve", "cannot read learning curve: missing")]
    except OSError as error:
        return None, [RecordProblem(path, "curve", f"cannot read learning curve: {error.strerror or error}")]
    problems: list[RecordProblem] = []
    points: list[tuple[float, float]] = []
    # Split on newlines only: str.splitlines() also breaks at form feeds and Unicode separators,
    # which would shift the line numbers that editors show.
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            point = _point(line, axis, evaluated_only)
        except ValueError as error:
            problems.append(RecordProblem(path, "curve", str(error), number))
            continue
        if point is not None:
            points.append(point)
    if not points:
        problems.append(RecordProblem(path, "curve", "no usable rows"))
        return None, problems
    points.sort(key=lambda point: point[0])
    return Curve(np.array([p[0] for p in points]), np.array([p[1] for p in points])), problems


def read_cost_curve(curve_path: Path, unit: str) -> tuple[Curve | None, list[RecordProblem]]:
    """A run's curve against ``unit`` (a key of :data:`AXES`): from the curve file itself for
    :data:`CURVE_UNITS`, else from the evaluated rows of the ``cost.jsonl`` beside it. None, without a
    problem, when the run did not record the unit (no ``cost.jsonl``: an older run or a baseline; no
    ``gpu_s``: a CPU run)."""
    if unit in CURVE_UNITS:
        return read_curve(curve_path, unit)
    cost_path = curve_path.parent / COST_FILE
    if curve_path.name != "curve.jsonl" or not cost_path.is_file():
        return None, []
    curve, problems = read_curve(cost_path, unit, evaluated_only=True)
    if curve is None and [p.message for p in problems] == ["no usable rows"]:
        return None, []  # e.g. a CPU run's gpu_s, null on every row
    return curve, problems


def mean_curve(curves: Sequence[Curve], points: int = GRID_POINTS) -> MeanCurve:
    """Mean and SE (ddof=1 / sqrt(n)) across ``curves`` on a common grid of their x axis.

    Raises ``ValueError`` when the curves share no range.
    """
    if not curves:
        raise ValueError("mean_curve needs at least one curve")
    low = max(float(c.x[0]) for c in curves)
    high = min(float(c.x[-1]) for c in curves)
    if low > high:
        raise ValueError(f"the curves share no range (latest start {low:g} > earliest end {high:g})")
    grid = np.linspace(low, high, points) if high > low else np.array([low])
    values = np.stack([np.interp(grid, c.x, c.success) for c in curves])
    n = len(curves)
    se = values.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else None
    return MeanCurve(grid, values.mean(axis=0), se, n)


def curve_file(record_path: Path, curve_path: str) -> tuple[Path | None, RecordProblem | None]:
    """Where the record at ``record_path`` keeps its curve, or the problem that stops it being read.

    ``curve_path`` is relative to the record's folder and must stay inside it once ``..`` and
    symbolic links are resolved: results folders are copied and shared, and a record must not
    make the leaderboard read files elsewhere.
    """
    folder = record_path.parent

    def refuse(why: str) -> tuple[None, RecordProblem]:
        message = (
            f"curve_path {curve_path!r} {why}; the curve was not read (keep curves inside the results "
            "folder and write the path relative to it, as ptgpo bench does: runs/<cell>/curve.jsonl)"
        )
        return None, RecordProblem(record_path, "curve", message)

    if Path(curve_path).is_absolute():
        # Even one pointing inside: the folder must stay readable when it is moved or copied.
        return refuse("is absolute")
    try:
        target = (folder / curve_path).resolve()
        inside = target.is_relative_to(folder.resolve())
    except (OSError, ValueError) as error:  # a symbolic-link loop, a NUL byte
        return refuse(f"cannot be resolved ({error})")
    if not inside:
        return refuse(f"leads to {target}, outside the results folder")
    # Named as the record's folder was given (relative stays relative), so that a page listing an
    # unreadable curve does not carry the path of the machine that built it.
    return (target if ".." in Path(curve_path).parts else folder / curve_path), None


def method_curves(board: Leaderboard, env_label: str, axis: str,
                  report: bool = True) -> dict[str, list[tuple[Path, Curve]]]:
    """Each method's readable curves of ``env_label`` against ``axis``, each beside its record's path;
    on the decisions axis what cannot be read goes to ``board.problems`` when ``report`` (the other axes
    skip runs that did not record their unit)."""
    by_method: dict[str, list[tuple[Path, Curve]]] = {}
    for record_path, record in board.records:
        if record.env_label != env_label or record.curve_path is None:
            continue
        path, refused = curve_file(record_path, record.curve_path)
        if path is None:
            if axis == "decisions" and report:
                board.problems.append(refused)
            continue
        curve, problems = read_cost_curve(path, axis)
        if axis == "decisions" and report:
            board.problems.extend(problems)
        if curve is not None:
            by_method.setdefault(record.method, []).append((record_path, curve))
    return by_method


def plot_learning_curves(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``curves-<env>.png`` (against policy decisions) and ``curves-<env>-<unit>.png`` (against
    each other unit of cost some run recorded) for each environment with at least one readable curve.

    Unreadable curves are appended to ``board.problems``. Returns the files written.
    """
    out_dir = Path(out_dir)
    written = []
    method_order = [row.method for row in board.rows]
    for env_label in dict.fromkeys(c.env_label for c in board.columns):
        for axis, (axis_label, suffix) in AXES.items():
            by_method = method_curves(board, env_label, axis)
            if not by_method:
                continue
            figure = new_figure(*line_figure_size(len(by_method)))
            axes = figure.add_subplot()
            references = _reference_lines(axes, board, env_label)
            for method in sorted(
                by_method, key=lambda m: (method_order.index(m) if m in method_order else len(method_order), m)
            ):
                _draw(board, axes, method, env_label, by_method[method])
            axes.set_title(f"{env_label}: success vs {axis_label} (mean ± SE over seeds)")
            axes.set_xlabel(axis_label)
            axes.set_ylabel("success (%)")
            axes.set_ylim(-2, 102)
            axes.grid(alpha=0.3)
            legend_beside(axes, len(by_method) + references)
            written.append(save_png(figure, out_dir / f"curves-{slug(env_label)}{suffix}.png"))
    return written


def _draw(board: Leaderboard, axes, method: str, env_label: str, runs: list[tuple[Path, Curve]]) -> None:
    """One method's mean curve with its SE band (a problem instead when its seeds share no range)."""
    records, curves = zip(*runs, strict=True)
    try:
        curve = mean_curve(curves)
    except ValueError as error:
        # Named by their records: every curve file is called curve.jsonl.
        others = ", ".join(p.name for p in records[1:])
        board.problems.append(RecordProblem(records[0], "curve", f"{method} on {env_label}, with {others}: {error}"))
        return
    line = axes.plot(curve.x, 100 * curve.mean, label=f"{method} (n={curve.n})",
                     marker="o" if len(curve.x) == 1 else None)[0]
    if curve.se is not None:
        axes.fill_between(curve.x, 100 * (curve.mean - curve.se), 100 * (curve.mean + curve.se),
                          color=line.get_color(), alpha=0.2, linewidth=0)


#: Methods drawn as horizontal reference lines under the curves, where an environment has their records.
REFERENCE_LINES = ("random", "expert")


def _reference_lines(axes: Any, board: Leaderboard, env_label: str) -> int:
    """Dashed lines at the mean final success of the :data:`REFERENCE_LINES` methods on ``env_label``
    (they train nothing, so they have no curve): what the curves start from and climb towards. Returns
    how many were drawn."""
    drawn = 0
    for style, method in zip(("dotted", "dashed"), REFERENCE_LINES, strict=True):
        scores = [r.final_success for _, r in board.records
                  if r.env_label == env_label and r.method == method and r.final_success is not None]
        if scores:
            mean = 100 * sum(scores) / len(scores)
            axes.axhline(mean, color="gray", linestyle=style, linewidth=1.2, label=f"{method} ({mean:.1f} %)")
            drawn += 1
    return drawn
