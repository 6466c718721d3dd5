"""Learning curves: success vs policy decisions, mean and standard-error band per method, one PNG
per environment.

Each run's curve is a JSONL file (``ResultRecord.curve_path``) with rows holding at least
``{"decisions": int, "success": float}`` (success as a fraction). Seeds evaluate at different
decision counts, so each method's curves are linearly interpolated onto a common grid spanning the
decisions every seed covers (from the latest first point to the earliest last point: no
extrapolation) before the mean and SE are taken.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leaderboard.aggregate import Leaderboard
from leaderboard.records import RecordProblem, atomic_write_bytes, slug

__all__ = ["Curve", "MeanCurve", "read_curve", "mean_curve", "plot_learning_curves", "GRID_POINTS"]

GRID_POINTS = 101


@dataclass(frozen=True)
class Curve:
    decisions: np.ndarray  # increasing
    success: np.ndarray  # fractions


@dataclass(frozen=True)
class MeanCurve:
    decisions: np.ndarray
    mean: np.ndarray
    se: np.ndarray | None  # None for a single seed
    n: int


def read_curve(path: str | os.PathLike) -> tuple[Curve | None, list[RecordProblem]]:
    """The curve in a JSONL file, skipping (and reporting by line) rows it cannot read.

    A run killed while appending leaves a truncated last line; the rows before it still count.
    Returns ``None`` for the curve when no row is usable.
    """
    path = Path(path)
    problems: list[RecordProblem] = []
    points: list[tuple[float, float]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        return None, [RecordProblem(path, "curve", f"cannot read learning curve: {error}")]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            decisions, success = row["decisions"], row["success"]
            if not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in (decisions, success)
            ):
                raise ValueError(
                    f"'decisions' and 'success' must be finite numbers, got {decisions!r}, {success!r}"
                )
        except json.JSONDecodeError as error:
            problems.append(RecordProblem(path, "curve", f"{error.msg} (column {error.colno})", number))
        except (KeyError, TypeError) as error:
            problems.append(
                RecordProblem(path, "curve", f"row needs 'decisions' and 'success' ({error!r})", number)
            )
        except ValueError as error:
            problems.append(RecordProblem(path, "curve", str(error), number))
        else:
            points.append((float(decisions), float(success)))
    if not points:
        problems.append(RecordProblem(path, "curve", "no usable rows"))
        return None, problems
    points.sort(key=lambda point: point[0])
    return Curve(np.array([p[0] for p in points]), np.array([p[1] for p in points])), problems


def mean_curve(curves: Sequence[Curve], points: int = GRID_POINTS) -> MeanCurve:
    """Mean and SE (ddof=1 / sqrt(n)) across ``curves`` on a common grid of decisions.

    Raises ``ValueError`` when the curves share no range of decisions.
    """
    if not curves:
        raise ValueError("mean_curve needs at least one curve")
    low = max(float(c.decisions[0]) for c in curves)
    high = min(float(c.decisions[-1]) for c in curves)
    if low > high:
        raise ValueError(
            f"the curves share no range of decisions (latest start {low:g} > earliest end {high:g})"
        )
    grid = np.linspace(low, high, points) if high > low else np.array([low])
    values = np.stack([np.interp(grid, c.decisions, c.success) for c in curves])
    n = len(curves)
    se = values.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else None
    return MeanCurve(grid, values.mean(axis=0), se, n)


def _resolve(curve_path: str, results_dir: Path | None) -> Path:
    path = Path(curve_path)
    return path if path.is_absolute() or results_dir is None else results_dir / path


def plot_learning_curves(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``curves-<env>.png`` for each environment with at least one readable curve.

    Unreadable curves are appended to ``board.problems``. Returns the files written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out_dir = Path(out_dir)
    written = []
    method_order = [row.method for row in board.rows]
    for env_label in dict.fromkeys(c.env_label for c in board.columns):
        by_method: dict[str, list[tuple[Path, Curve]]] = {}
        for _, record in board.records:
            if record.env_label != env_label or record.curve_path is None:
                continue
            path = _resolve(record.curve_path, board.results_dir)
            curve, problems = read_curve(path)
            board.problems.extend(problems)
            if curve is not None:
                by_method.setdefault(record.method, []).append((path, curve))
        if not by_method:
            continue
        # Figure + Agg canvas instead of pyplot: no global backend switch, nothing left open.
        figure = Figure(figsize=(6.4, 4.0), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for method in sorted(
            by_method, key=lambda m: (method_order.index(m) if m in method_order else len(method_order), m)
        ):
            paths, curves = zip(*by_method[method], strict=True)
            try:
                curve = mean_curve(curves)
            except ValueError as error:
                others = ", ".join(p.name for p in paths[1:])
                board.problems.append(
                    RecordProblem(paths[0], "curve", f"{method} on {env_label}, with {others}: {error}")
                )
                continue
            label = f"{method} (n={curve.n})"
            line = axes.plot(
                curve.decisions,
                100 * curve.mean,
                label=label,
                marker="o" if len(curve.decisions) == 1 else None,
            )[0]
            if curve.se is not None:
                axes.fill_between(
                    curve.decisions,
                    100 * (curve.mean - curve.se),
                    100 * (curve.mean + curve.se),
                    color=line.get_color(),
                    alpha=0.2,
                    linewidth=0,
                )
        axes.set_title(f"{env_label}: success vs policy decisions (mean ± SE over seeds)")
        axes.set_xlabel("policy decisions")
        axes.set_ylabel("success (%)")
        axes.set_ylim(-2, 102)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=120)
        path = out_dir / f"curves-{slug(env_label)}.png"
        atomic_write_bytes(path, buffer.getvalue())
        written.append(path)
    return written
