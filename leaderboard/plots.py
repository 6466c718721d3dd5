"""Figures of the leaderboard's statistics, after rliable's: each ranked method's mean success and IQM
with their intervals (``intervals.png``), the probability-of-improvement matrix (``improvement.png``)
and performance profiles (``profiles.png``). The numbers are those of the tables
(:mod:`leaderboard.aggregate`, :mod:`leaderboard.stats`).

Figures are drawn on a ``Figure`` with the Agg canvas rather than through pyplot: no global backend
switch, nothing left open between builds.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from leaderboard.board import Leaderboard
from ptgpo_algos.files import atomic_write_bytes
from leaderboard.stats import CONFIDENCE, Estimate, performance_profile

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "PROFILE_THRESHOLDS",
    "legend_beside",
    "line_figure_size",
    "new_figure",
    "plot_improvement",
    "plot_intervals",
    "plot_profiles",
    "plot_statistics",
    "save_png",
]

PROFILE_THRESHOLDS = np.linspace(0.0, 100.0, 101)


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib figure of ``width`` × ``height`` inches on the Agg canvas (no display, no global pyplot
    state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_png(figure: Figure, path: Path) -> Path:
    """Write ``figure`` to ``path`` as a PNG, atomically; ``path``."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def line_figure_size(lines: int) -> tuple[float, float]:
    """A line plot's size, widened for the legend of :func:`legend_beside`."""
    return 6.4 + (3.0 if lines > 12 else 1.6), 4.0


def legend_beside(axes: Axes, lines: int) -> None:
    """The legend to the right of the axes: inside, a legend of many methods hides the lines it
    names, and placing it at the "best" spot tests every vertex of every line against it."""
    axes.legend(
        fontsize="x-small", ncols=2 if lines > 12 else 1, loc="center left", bbox_to_anchor=(1.01, 0.5)
    )


def _label(board: Leaderboard, method: str) -> str:
    row = next(row for row in board.ranked() if row.method == method)
    envs = len({c.env_label for c in board.columns})
    flags = ([] if row.envs_covered == envs else [f"{row.envs_covered}/{envs} envs"]) + (
        [row.unranked] if row.unranked else [])
    rank = "–" if row.rank is None else f"{row.rank}."
    return f"{rank} {method}" + (f" ({'; '.join(flags)})" if flags else "")


def plot_intervals(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """``intervals.png``: mean success and IQM of each ranked method, rank 1 at the top (the unranked
    after), with their intervals: solid over seeds (Student t, or a bootstrap of the seeds), dashed
    where a bootstrap resampled the tasks; a lone marker: no interval, or one without spread."""
    rows = board.ranked()
    if not rows:
        return []
    figure = new_figure(9.0, 1.2 + 0.35 * len(rows))
    panels = figure.subplots(1, 2, sharey=True)
    positions = np.arange(len(rows))[::-1]
    for axes, title, estimates in (
        (panels[0], "Mean success (over environments)", [row.mean_success_estimate for row in rows]),
        (panels[1], "IQM (over seed × task scores)", [row.iqm for row in rows]),
    ):
        # One collection per line style and one for the points: a few artists, whatever the count.
        for kinds, style in ((("t", "seeds"), "solid"), (("tasks",), "dashed")):
            shown = [
                (y, e) for y, e in zip(positions, estimates, strict=True)
                if e is not None and e.has_interval and e.over in kinds
            ]
            if shown:
                axes.hlines(
                    [y for y, _ in shown],
                    [e.low for _, e in shown],
                    [e.high for _, e in shown],
                    colors="tab:blue",
                    linestyles=style,
                    linewidth=4,
                    alpha=0.5,
                )
        points = [(y, e.point) for y, e in zip(positions, estimates, strict=True) if e is not None]
        axes.plot([p for _, p in points], [y for y, _ in points], "o", color="black", markersize=4)
        axes.set_title(title, fontsize="medium")
        axes.set_xlabel(f"success (%), {CONFIDENCE:.0%} interval")
        axes.set_xlim(-2, 102)
        axes.grid(axis="x", alpha=0.3)
    panels[0].set_yticks(positions, [_label(board, row.method) for row in rows])
    panels[0].set_ylim(-0.7, len(rows) - 0.3)
    return [save_png(figure, Path(out_dir) / "intervals.png")]


def plot_improvement(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """``improvement.png``: P(row method > column method) as a heat map, ranked methods in rank order."""
    methods = [row.method for row in board.ranked()]
    if len(methods) < 2:
        return []
    found: dict[tuple[str, str], Estimate] = {(i.better, i.worse): i.estimate for i in board.improvements}
    matrix = np.full((len(methods), len(methods)), np.nan)
    for i, x in enumerate(methods):
        for j, y in enumerate(methods):
            if (x, y) in found:
                matrix[i, j] = found[x, y].point
    side = 2.5 + 0.45 * len(methods)
    figure = new_figure(side + 1.2, side)
    axes = figure.add_subplot()
    image = axes.imshow(matrix, cmap="RdBu", vmin=0.0, vmax=1.0)
    labels = [_label(board, m) for m in methods]
    axes.set_xticks(range(len(methods)), labels, rotation=60, ha="right", fontsize="small")
    axes.set_yticks(range(len(methods)), labels, fontsize="small")
    axes.set_xlabel("Y")
    axes.set_ylabel("X")
    if len(methods) <= 12:
        for (i, j), value in np.ndenumerate(matrix):
            if not np.isnan(value):
                # RdBu is dark at both ends: white digits there, black ones on the pale middle.
                color = "white" if abs(value - 0.5) > 0.3 else "black"
                axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize="x-small", color=color)
    axes.set_title("P(X > Y), averaged over shared tasks", fontsize="medium")
    figure.colorbar(image, ax=axes, shrink=0.8)
    return [save_png(figure, Path(out_dir) / "improvement.png")]


def plot_profiles(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """``profiles.png``: for each ranked method, the fraction of its (seed, task) scores above each
    success level, with pointwise intervals (rliable's performance profile)."""
    rows = [row for row in board.ranked() if board.task_scores(row)]
    if not rows:
        return []
    figure = new_figure(*line_figure_size(len(rows)))
    axes = figure.add_subplot()
    for row in rows:
        strata = [values for _, values in board.task_scores(row)]
        point, low, high = performance_profile(strata, PROFILE_THRESHOLDS, key=("profile", row.method))
        line = axes.plot(PROFILE_THRESHOLDS, point, label=_label(board, row.method))[0]
        if low is not None and high is not None:
            axes.fill_between(PROFILE_THRESHOLDS, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    axes.set_title("Performance profiles (seed × task scores)", fontsize="medium")
    axes.set_xlabel("success level τ (%)")
    axes.set_ylabel("fraction of scores > τ")
    axes.set_xlim(0, 100)
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    legend_beside(axes, len(rows))
    return [save_png(figure, Path(out_dir) / "profiles.png")]


def plot_statistics(board: Leaderboard, out_dir: str | os.PathLike) -> list[Path]:
    """Every figure of this module; returns the files written."""
    return plot_intervals(board, out_dir) + plot_improvement(board, out_dir) + plot_profiles(board, out_dir)
