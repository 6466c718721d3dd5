"""The words and numbers of a leaderboard that every output format shares: intervals, ranks, the
protocol and held-out marks, the notes under a table, the legend, the compute columns, the cells of
the pairwise comparisons, and the walk over a board's parts (:mod:`leaderboard.render` and the LaTeX
and HTML pages, :mod:`leaderboard.latex` and :mod:`leaderboard.html_page`, write them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from leaderboard.board import Cell, Column, Comparison, Leaderboard, Row
from leaderboard.audit import COMPUTE_FIELDS, OVERLAP_MARK
from leaderboard.inference import ALPHA
from leaderboard.protocols import MARK
from leaderboard.stats import CONFIDENCE, Estimate, REPS

__all__ = [
    "AGGREGATES",
    "COMPARISONS",
    "COMPARISON_HEADER",
    "COMPUTE_NOTE",
    "COMPUTE_TITLE",
    "IMPROVEMENT",
    "LEGEND",
    "LEGEND_TITLE",
    "LEVEL",
    "MARK_TITLE",
    "OVERLAP_TITLE",
    "PROVENANCE_TITLE",
    "Parts",
    "RANKING",
    "REPORTED_TITLE",
    "UNITS",
    "board_notes",
    "cell_number",
    "comparison_cells",
    "comparison_scopes",
    "compute_cells",
    "compute_columns",
    "csv_float",
    "estimate_text",
    "interval_text",
    "mark_text",
    "mean_success_text",
    "one_line",
    "rank_text",
    "walk",
]

LEVEL = f"{CONFIDENCE * 100:.0f} %"
UNITS = (
    "Success in % at the final evaluation (`final_success`). A cell is the mean over seeds and its "
    f"{LEVEL} confidence interval [low, high] (Student t over seeds, clipped to [0, 100]); n = number "
    "of seeds. A cell from a single seed has no interval (none is made up)."
)
AGGREGATES = (
    "Mean success: mean over environments of the overall column (`All`/`success`), each environment "
    "weighing the same; interval: Student t with Welch-Satterthwaite degrees of freedom, none if an "
    "environment has a single seed. IQM: interquartile mean (25 % trimmed mean) of all seed × task "
    "scores, the tasks being an environment's task-type columns, or its `success` without types; "
    f"interval: percentile bootstrap ({REPS:,} resamples from a fixed seed) of the seeds within each "
    "task or, marked †, of the tasks when a task has a single seed; none with a single seed of a "
    "single task."
)
RANKING = (
    "Rank: methods with results on more environments rank first; among those covering as many, rank = "
    "1 + the number of methods separated above this one on Mean success (Welch's test on the seeds, "
    f"Holm-corrected over every pair, adjusted p < {ALPHA}), raised where needed so that a method never "
    "ranks above one with a higher mean; methods no test separates share a rank. A method whose Mean "
    "success has no interval (a single seed on an environment) or a degenerate one (no spread over "
    "seeds: every seed scored the same on every environment, which says nothing of another seed) "
    "cannot be tested: it is not ranked (–), but listed after the ranked methods by its mean, its "
    "interval shown as measured and flagged, and its comparisons carry no p. Bold: a column's "
    "highest value, only when the column's corrected tests separate it from every other ranked method "
    "(for Mean success: every other method covering as many environments); IQM is never bold. The "
    "pairs' differences and corrected p-values are in comparisons.md and comparisons.csv. Reference rows "
    "(privileged methods such as `expert`) are shown but not ranked."
)
IMPROVEMENT = (
    "P(X > Y): the probability that a seed of the row method X scores above a seed of the column method "
    "Y on a task (ties count one half), averaged over the tasks both have (tasks as for the IQM); "
    f"{LEVEL} interval: each method's seeds resampled within each task or, marked †, the tasks "
    "resampled when a task has a single seed; none with a single seed of a single task. Above 0.5: X "
    "tends to score higher than Y."
)
COMPARISONS = (
    "Each pair of ranked methods, in rank order: Better has the higher mean; Difference is Better − "
    f"Worse in points with its {LEVEL} Welch interval; p is Welch's two-sided test on the seeds (for "
    "Mean success, the difference of the means over the environments both cover, the variances of "
    "every environment pooled with Welch-Satterthwaite degrees of freedom); Holm p is p adjusted by "
    "Holm's step-down rule over the pairs of the same scope. Separated: Holm p < "
    f"{ALPHA}. No p where a method has a single seed, nor, for Mean success, where a method is not ranked "
    "(no spread over seeds: see the leaderboard's Rank)."
)
LEGEND = (UNITS, AGGREGATES, RANKING)
MARK_TITLE = "measured under another protocol than a reported number of this column"
OVERLAP_TITLE = "not held out: some evaluation episodes started in a layout the run trained on"
REPORTED_TITLE = "Reported in papers (not measured here, not ranked, never averaged with measured rows)"


def column_label(column: Column, columns: Sequence[Column]) -> str:
    """``env`` when the environment has one column, else ``env · metric``."""
    if sum(1 for c in columns if c.env_label == column.env_label) == 1 and column.metric == "success":
        return column.env_label
    return f"{column.env_label} · {column.metric}"


def interval_text(low: float | None, high: float | None, over: str | None, digits: str = ".1f") -> str:
    """`` [low, high]``, marked ``†`` when the interval is over tasks; empty without one."""
    if low is None or high is None:
        return ""
    return f" [{low:{digits}}, {high:{digits}}]" + ("†" if over == "tasks" else "")


def estimate_text(estimate: Estimate | None, digits: str = ".1f") -> str:
    """An estimate as ``point [low, high]``; ``–`` for none."""
    if estimate is None:
        return "–"
    return f"{estimate.point:{digits}}{interval_text(estimate.low, estimate.high, estimate.over, digits)}"


def cell_number(cell: Cell) -> str:
    """A cell's number as a table shows it: a measured mean with its interval, or a reported one as printed."""
    # Reported numbers (n is None) keep the precision and the ± the paper printed.
    if cell.n is None:
        return f"{cell.mean:.10g}" if cell.se is None else f"{cell.mean:.10g} ± {cell.se:.10g}"
    return f"{cell.mean:.1f}{interval_text(cell.low, cell.high, cell.over)}"


def rank_text(row: Row) -> str:
    """A row's rank: its number, ``ref`` for a reference row, ``–`` for an unranked one."""
    return "ref" if row.section == "reference" else "–" if row.rank is None else str(row.rank)


def mean_success_text(board: Leaderboard, row: Row) -> str:
    """A row's mean success, with its coverage when partial and why it is not ranked."""
    if row.mean_success_estimate is None:
        return "–"
    envs = len({c.env_label for c in board.columns})
    flags = ([] if row.envs_covered == envs else [f"{row.envs_covered}/{envs} envs"]) + (
        [f"not ranked: {row.unranked}"] if row.unranked else [])
    return estimate_text(row.mean_success_estimate) + (f" ({'; '.join(flags)})" if flags else "")


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def amount_text(value: float) -> str:
    """A budget's amount: an integer without its ``.0``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def budget_line(board: Leaderboard) -> str:
    """The line that names each environment's budget and its unit (empty without budgets)."""
    budgets = {env: budget for env, budget in sorted(board.budgets.items()) if budget is not None}
    units = {board.budget_units.get(env, "decisions") for env in budgets}
    if units <= {"decisions"}:
        parts = [f"{env}: {budget}" for env, budget in budgets.items()]
        return "Budget (policy decisions per RL run): " + ", ".join(parts) + "." if parts else ""
    parts = [f"{env}: {amount_text(budget)} {board.budget_units.get(env, 'decisions')}"
             for env, budget in budgets.items()]
    if units & {"decisions", "iterations"}:
        return ("Budget per RL run (policy decisions, or training iterations of every method alike): "
                + ", ".join(parts) + ".")
    return ("Budget per RL run, in a cost every method spent alike (each run stops at an iteration boundary at "
            "or near it; budget_overshoot in the records says how far off): " + ", ".join(parts) + ".")


def mark_text(cell: Cell) -> str:
    """A cell's marks: another protocol than a reported number (``‡``), not held out."""
    return (MARK if cell.protocol_mark else "") + (OVERLAP_MARK if cell.overlap_mark else "")


def board_notes(board: Leaderboard) -> list[str]:
    """The lines under the table on its data: the budget, runs stopped before it, protocols met,
    evaluations not held out, mixed code."""
    budget = budget_line(board)
    return [*([budget] if budget else []), *board.short_run_notes, *board.protocol_notes, *board.overlap_notes,
            *([board.commit_note] if board.commit_note else [])]


PROVENANCE_TITLE = "Provenance"
LEGEND_TITLE = "How to read the table"


COMPUTE_TITLE = "Compute (means over seeds)"
COMPUTE_NOTE = (
    "Per environment, the means over a method's seeds of its policy decisions (each one environment "
    "step), training episodes, trained tokens (prompt and response tokens through the loss, every "
    "epoch) and CPU seconds of its run (training and evaluation); – where a record does not carry the "
    "figure. A matched decision budget does not match the others."
)
COMPUTE_LABELS = {"decisions": "decisions", "episodes": "episodes", "trained_tokens": "trained tokens",
                   "cpu_time_s": "CPU s"}


def compute_columns(board: Leaderboard) -> list[Column]:
    """The compute table's columns: each environment's compute fields."""
    envs = dict.fromkeys(c.env_label for c in board.columns)
    return [Column(env, COMPUTE_LABELS[name]) for env in envs for name in COMPUTE_FIELDS]


def compute_cells(board: Leaderboard, row: Row) -> list[str]:
    """The row's compute figures as text, in :func:`compute_columns`' order."""
    cells = []
    for env in dict.fromkeys(c.env_label for c in board.columns):
        figures = row.compute.get(env, {})
        for name in COMPUTE_FIELDS:
            value = figures.get(name)
            cells.append("–" if value is None else f"{value:,.1f}" if name == "cpu_time_s" else f"{value:,.0f}")
    return cells


@dataclass(frozen=True)
class Parts:
    """How one page format (Markdown, LaTeX, HTML) writes each part of a board; :func:`walk` sets their
    order once. A part left None is not in that format."""

    head: list[str]
    measured: Callable[[Leaderboard], list[str]]
    reported: Callable[[Leaderboard], list[str]]
    no_measured: list[str] = field(default_factory=list)
    after_measured: list[str] = field(default_factory=list)
    failed: Callable[[Leaderboard], list[str]] | None = None
    problems: Callable[[Leaderboard], list[str]] | None = None
    tail: list[str] = field(default_factory=list)


def walk(board: Leaderboard, parts: Parts) -> str:
    """The page's lines, part by part: the head, the measured table (or the line saying there is none),
    what follows it, the reported table, the failed runs, the unreadable files, the tail."""
    lines = [*parts.head, *(parts.measured(board) if board.rows else parts.no_measured), *parts.after_measured]
    lines += parts.reported(board) if board.reported_rows else []
    lines += parts.failed(board) if board.failed and parts.failed else []
    lines += parts.problems(board) if board.problems and parts.problems else []
    return "\n".join(lines + parts.tail) + "\n"


# Markdown ---------------------------------------------------------------------------------------


def p_text(value: float | None) -> str:
    """A p-value to three significant digits; ``–`` for none."""
    return "–" if value is None else f"{value:.3g}"


def difference_text(comparison: Comparison) -> str:
    """A comparison's difference with its interval."""
    return f"{comparison.difference:.1f}{interval_text(comparison.low, comparison.high, None)}"


def comparison_cells(comparison: Comparison) -> tuple[str, str, str, str]:
    """Difference with its interval, p, Holm p and yes/no, as text."""
    return (difference_text(comparison), p_text(comparison.p), p_text(comparison.p_holm),
            "yes" if comparison.separated else "no")


def comparison_scopes(board: Leaderboard) -> dict[str, list[Comparison]]:
    """The board's comparisons by scope (mean success, then each column), in order."""
    scopes: dict[str, list[Comparison]] = {}
    for comparison in board.comparisons:
        scopes.setdefault(comparison.scope, []).append(comparison)
    return scopes


COMPARISON_HEADER = ["Better", "Worse", "Difference", "p", "Holm p", "Separated"]


def csv_float(value: float | None) -> str:
    """A number for a CSV cell, to six significant digits; empty for none."""
    return "" if value is None else f"{value:.6g}"
