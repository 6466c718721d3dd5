"""Render a :class:`~leaderboard.aggregate.Leaderboard` as Markdown, CSV, LaTeX (booktabs) and a
standalone HTML page with sortable tables, and write the files atomically.

Every format keeps the three parts apart: the measured table (ranked methods, then reference rows),
the reported-in-papers table, and the failed runs / unreadable files. Measured cells read
``mean [low, high] (n)`` with the 95 % interval of :mod:`leaderboard.inference`; a column's best cell,
when the column's corrected tests separate it from every other, is bold (Markdown, LaTeX, HTML) or
flagged ``best = 1`` (CSV). A cell measured under another
protocol than a reported number of its column carries ``‡`` and its environment a legend line (CSV:
``protocol_mark = 1`` and the row's ``protocol``); the reported table names each row's protocol. The
probability-of-improvement matrix of the ranked methods has its own files (``improvement.md``,
``improvement.csv``) and is part of the HTML page, which also shows the plots written next to it;
so are the pairwise Welch tests with their Holm-corrected p-values (``comparisons.md``,
``comparisons.csv``; the LaTeX file has the mean-success family).
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaderboard.aggregate import SMOKE_NOTICE, Cell, Column, Comparison, Leaderboard, Row
from leaderboard.audit import COMPUTE_FIELDS, OVERLAP_MARK
from leaderboard.inference import ALPHA
from leaderboard.protocols import MARK
from ptgpo_algos.files import atomic_write_text
from leaderboard.stats import CONFIDENCE, REPS, Estimate

__all__ = [
    "FORMATS",
    "column_label",
    "comparisons_csv",
    "comparisons_markdown",
    "csv_text",
    "improvement_csv",
    "improvement_markdown",
    "markdown_code",
    "markdown_text",
    "to_csv",
    "to_html",
    "to_latex",
    "to_markdown",
    "write_outputs",
]

FORMATS = ("md", "csv", "tex", "html", "png")

CSV_FIELDS = (
    "section",
    "rank",
    "method",
    "kind",
    "model",
    "source",
    "env_label",
    "metric",
    "mean",
    "se",
    "n",
    "best",
    "budget",
    "ci_low",
    "ci_high",
    "ci_over",
    "budget_unit",
    "protocol",
    "protocol_mark",
    "eval_overlap",
    "overlap_mark",
    *COMPUTE_FIELDS,
    "smoke_run",
)
COMPARISON_FIELDS = ("scope", "better", "worse", "difference", "ci_low", "ci_high", "p", "p_holm", "separated")
IMPROVEMENT_FIELDS = ("method_x", "method_y", "probability", "ci_low", "ci_high", "ci_over", "tasks", "smoke_run")

_LEVEL = f"{CONFIDENCE * 100:.0f} %"
_UNITS = (
    "Success in % at the final evaluation (`final_success`). A cell is the mean over seeds and its "
    f"{_LEVEL} confidence interval [low, high] (Student t over seeds, clipped to [0, 100]); n = number "
    "of seeds. A cell from a single seed has no interval (none is made up)."
)
_AGGREGATES = (
    "Mean success: mean over environments of the overall column (`All`/`success`), each environment "
    "weighing the same; interval: Student t with Welch-Satterthwaite degrees of freedom, none if an "
    "environment has a single seed. IQM: interquartile mean (25 % trimmed mean) of all seed × task "
    "scores, the tasks being an environment's task-type columns, or its `success` without types; "
    f"interval: percentile bootstrap ({REPS:,} resamples from a fixed seed) of the seeds within each "
    "task or, marked †, of the tasks when a task has a single seed; none with a single seed of a "
    "single task."
)
_RANKING = (
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
_IMPROVEMENT = (
    "P(X > Y): the probability that a seed of the row method X scores above a seed of the column method "
    "Y on a task (ties count one half), averaged over the tasks both have (tasks as for the IQM); "
    f"{_LEVEL} interval: each method's seeds resampled within each task or, marked †, the tasks "
    "resampled when a task has a single seed; none with a single seed of a single task. Above 0.5: X "
    "tends to score higher than Y."
)
_COMPARISONS = (
    "Each pair of ranked methods, in rank order: Better has the higher mean; Difference is Better − "
    f"Worse in points with its {_LEVEL} Welch interval; p is Welch's two-sided test on the seeds (for "
    "Mean success, the difference of the means over the environments both cover, the variances of "
    "every environment pooled with Welch-Satterthwaite degrees of freedom); Holm p is p adjusted by "
    "Holm's step-down rule over the pairs of the same scope. Separated: Holm p < "
    f"{ALPHA}. No p where a method has a single seed, nor, for Mean success, where a method is not ranked "
    "(no spread over seeds: see the leaderboard's Rank)."
)
_LEGEND = (_UNITS, _AGGREGATES, _RANKING)
_MARK_TITLE = "measured under another protocol than a reported number of this column"
_OVERLAP_TITLE = "not held out: some evaluation episodes started in a layout the run trained on"
_REPORTED_TITLE = "Reported in papers (not measured here, not ranked, never averaged with measured rows)"


def column_label(column: Column, columns: Sequence[Column]) -> str:
    """``env`` when the environment has one column, else ``env · metric``."""
    if sum(1 for c in columns if c.env_label == column.env_label) == 1 and column.metric == "success":
        return column.env_label
    return f"{column.env_label} · {column.metric}"


def _interval(low: float | None, high: float | None, over: str | None, digits: str = ".1f") -> str:
    if low is None or high is None:
        return ""
    return f" [{low:{digits}}, {high:{digits}}]" + ("†" if over == "tasks" else "")


def _estimate(estimate: Estimate | None, digits: str = ".1f") -> str:
    if estimate is None:
        return "–"
    return f"{estimate.point:{digits}}{_interval(estimate.low, estimate.high, estimate.over, digits)}"


def _number(cell: Cell) -> str:
    # Reported numbers (n is None) keep the precision and the ± the paper printed.
    if cell.n is None:
        return f"{cell.mean:.10g}" if cell.se is None else f"{cell.mean:.10g} ± {cell.se:.10g}"
    return f"{cell.mean:.1f}{_interval(cell.low, cell.high, cell.over)}"


def _rank(row: Row) -> str:
    return "ref" if row.section == "reference" else "–" if row.rank is None else str(row.rank)


def _mean_success(board: Leaderboard, row: Row) -> str:
    """A row's mean success, with its coverage when partial and why it is not ranked."""
    if row.mean_success_estimate is None:
        return "–"
    envs = len({c.env_label for c in board.columns})
    flags = ([] if row.envs_covered == envs else [f"{row.envs_covered}/{envs} envs"]) + (
        [f"not ranked: {row.unranked}"] if row.unranked else [])
    return _estimate(row.mean_success_estimate) + (f" ({'; '.join(flags)})" if flags else "")


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _budget_line(board: Leaderboard) -> str:
    budgets = {env: budget for env, budget in sorted(board.budgets.items()) if budget is not None}
    units = {board.budget_units.get(env, "decisions") for env in budgets}
    if units <= {"decisions"}:
        parts = [f"{env}: {budget}" for env, budget in budgets.items()]
        return "Budget (policy decisions per RL run): " + ", ".join(parts) + "." if parts else ""
    parts = [f"{env}: {_amount(budget)} {board.budget_units.get(env, 'decisions')}" for env, budget in budgets.items()]
    if units & {"decisions", "iterations"}:
        return ("Budget per RL run (policy decisions, or training iterations of every method alike): "
                + ", ".join(parts) + ".")
    return ("Budget per RL run, in a cost every method spent alike (each run stops at an iteration boundary at "
            "or near it; budget_overshoot in the records says how far off): " + ", ".join(parts) + ".")


def _mark(cell: Cell) -> str:
    return (MARK if cell.protocol_mark else "") + (OVERLAP_MARK if cell.overlap_mark else "")


def _notes(board: Leaderboard) -> list[str]:
    """The lines under the table on its data: the budget, protocols met, evaluations not held out,
    mixed code."""
    budget = _budget_line(board)
    return [*([budget] if budget else []), *board.protocol_notes, *board.overlap_notes,
            *([board.commit_note] if board.commit_note else [])]


_PROVENANCE_TITLE = "Provenance"
_LEGEND_TITLE = "How to read the table"


_COMPUTE_TITLE = "Compute (means over seeds)"
_COMPUTE_NOTE = (
    "Per environment, the means over a method's seeds of its policy decisions (each one environment "
    "step), training episodes, trained tokens (prompt and response tokens through the loss, every "
    "epoch) and CPU seconds of its run (training and evaluation); – where a record does not carry the "
    "figure. A matched decision budget does not match the others."
)
_COMPUTE_LABELS = {"decisions": "decisions", "episodes": "episodes", "trained_tokens": "trained tokens",
                   "cpu_time_s": "CPU s"}


def _compute_columns(board: Leaderboard) -> list[Column]:
    envs = dict.fromkeys(c.env_label for c in board.columns)
    return [Column(env, _COMPUTE_LABELS[name]) for env in envs for name in COMPUTE_FIELDS]


def _compute_cells(board: Leaderboard, row: Row) -> list[str]:
    """The row's compute figures as text, in :func:`_compute_columns`' order."""
    cells = []
    for env in dict.fromkeys(c.env_label for c in board.columns):
        figures = row.compute.get(env, {})
        for name in COMPUTE_FIELDS:
            value = figures.get(name)
            cells.append("–" if value is None else f"{value:,.1f}" if name == "cpu_time_s" else f"{value:,.0f}")
    return cells


@dataclass(frozen=True)
class _Parts:
    """How one page format (Markdown, LaTeX, HTML) writes each part of a board; :func:`_walk` sets their
    order once. A part left None is not in that format."""

    head: list[str]
    measured: Callable[[Leaderboard], list[str]]
    reported: Callable[[Leaderboard], list[str]]
    no_measured: list[str] = field(default_factory=list)
    after_measured: list[str] = field(default_factory=list)
    failed: Callable[[Leaderboard], list[str]] | None = None
    problems: Callable[[Leaderboard], list[str]] | None = None
    tail: list[str] = field(default_factory=list)


def _walk(board: Leaderboard, parts: _Parts) -> str:
    """The page's lines, part by part: the head, the measured table (or the line saying there is none),
    what follows it, the reported table, the failed runs, the unreadable files, the tail."""
    lines = [*parts.head, *(parts.measured(board) if board.rows else parts.no_measured), *parts.after_measured]
    lines += parts.reported(board) if board.reported_rows else []
    lines += parts.failed(board) if board.failed and parts.failed else []
    lines += parts.problems(board) if board.problems and parts.problems else []
    return "\n".join(lines + parts.tail) + "\n"


# Markdown ---------------------------------------------------------------------------------------


# Markdown renderers pass raw HTML through (the docs site includes leaderboard.md), so a name is made
# inert: HTML's three characters become entities, Markdown's link, code and emphasis punctuation is
# backslash-escaped (an underscore inside a word, as in sb3_ppo, emphasises nothing), and a
# line break, which would end the table row and let the rest open an HTML block, becomes a space.
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# A backslash escapes only the punctuation after it; before a space it is a plain backslash (X \ Y).
_MD_SPECIAL = re.compile(r"[`*\[\]|]|\\(?=\S)")


def markdown_text(text: str) -> str:
    """``text`` on one line, inert in Markdown and in the HTML it passes through (see above)."""
    text = "".join(_MD_ENTITIES.get(char, char) for char in " ".join(str(text).split()))
    return _MD_SPECIAL.sub(lambda match: "\\" + match.group(), text)


def markdown_code(text: str) -> str:
    """``text`` on one line as a Markdown code span that neither its content nor a table row can end."""
    # Inside a code span HTML and Markdown are inert; only the span's own delimiter and the row's are not.
    return "`" + " ".join(str(text).split()).replace("`", "'").replace("|", "\\|") + "`"


def _md_cell(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    number = (f"**{_number(cell)}**" if cell.best else _number(cell)) + _mark(cell)
    return number if cell.n is None else f"{number} (n={cell.n})"


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    lines = ["| " + " | ".join(markdown_text(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _md_measured(board: Leaderboard) -> list[str]:
    """The measured table, the notes on its data, its provenance, the legend and the compute table."""
    header = ["Rank", "Method", "Kind", "Mean success", "IQM"] + [column_label(c, board.columns) for c in board.columns]
    body = []
    for row in board.rows:
        mean, iqm = _mean_success(board, row), _estimate(row.iqm)
        body.append([_rank(row), markdown_text(row.method), row.kind, f"**{mean}**" if row.best_mean_success else mean,
                     iqm] + [_md_cell(row.cells.get(c)) for c in board.columns])
    lines = _md_table(header, body, ["---:", "---", "---", "---:", "---:"] + ["---:"] * len(board.columns))
    for note in _notes(board):
        lines += ["", markdown_text(note)]
    if board.provenance:
        lines += ["", f"## {_PROVENANCE_TITLE}", ""]
        lines += [f"- **{item}**: {markdown_text(text)}" for item, text in board.provenance]
    lines += ["", f"## {_LEGEND_TITLE}"]
    for text in _LEGEND:
        lines += ["", text]
    compute = _compute_columns(board)
    lines += ["", f"## {_COMPUTE_TITLE}", "", _COMPUTE_NOTE, ""]
    lines += _md_table(["Method"] + [f"{c.env_label} · {c.metric}" for c in compute],
                       [[markdown_text(row.method), *_compute_cells(board, row)] for row in board.rows],
                       ["---"] + ["---:"] * len(compute))
    return lines


def _md_reported(board: Leaderboard) -> list[str]:
    """The reported table, its sources and its caveat."""
    lines = ["", f"## {_REPORTED_TITLE}", ""]
    header = ["Method", "Model", "Source", "Protocol"] + [
        column_label(c, board.reported_columns) for c in board.reported_columns
    ]
    body = [
        [markdown_text(row.method), markdown_text(row.model or ""), markdown_text(row.source or ""),
         markdown_text(row.protocols.get("", ""))]
        + [_md_cell(row.cells.get(c)) for c in board.reported_columns]
        for row in board.reported_rows
    ]
    lines += _md_table(header, body, ["---"] * 4 + ["---:"] * len(board.reported_columns))
    lines.append("")
    for source in board.sources.values():
        setup = f" Setup: {markdown_text(_one_line(source.setup, 400))}" if source.setup else ""
        lines.append(f"- {markdown_code(source.key)}: {markdown_text(source.citation)}.{setup}")
    if board.caveat:
        lines += ["", markdown_text(_one_line(board.caveat, 1000))]
    return lines


def _md_failed(board: Leaderboard) -> list[str]:
    body = [
        [markdown_code(path.name), markdown_text(r.method), markdown_text(r.env_label), str(r.seed),
         markdown_text(_one_line(r.error or ""))]
        for path, r in board.failed
    ]
    return ["", "## Failed runs (not averaged)", ""] + _md_table(
        ["File", "Method", "Env", "Seed", "Error"], body, ["---", "---", "---", "---:", "---"])


def to_markdown(board: Leaderboard) -> str:
    """The leaderboard as Markdown: the legend, the measured table, the reported table and the failed or
    unreadable records."""
    return _walk(board, _Parts(
        head=["# Leaderboard", ""] + ([f"> **{SMOKE_NOTICE}**", ""] if board.smoke_run else []),
        measured=_md_measured, no_measured=["No measured results."], reported=_md_reported, failed=_md_failed,
        problems=lambda board: ["", "## Unreadable files (skipped)", "",
                                *(f"- {markdown_code(p)}" for p in board.problems)],
    ))


def _improvement_matrix(board: Leaderboard) -> tuple[list[str], list[list[str]]]:
    """Method names in rank order and, row X by column Y, the text of P(X > Y) ("–" where none)."""
    methods = [row.method for row in board.ranked()]
    found = {(imp.better, imp.worse): _estimate(imp.estimate, ".2f") for imp in board.improvements}
    return methods, [[found.get((x, y), "–") for y in methods] for x in methods]


def improvement_markdown(board: Leaderboard) -> str:
    """The probability-of-improvement matrix of the ranked methods (row X over column Y)."""
    lines = ["# Probability of improvement", ""] + ([f"> **{SMOKE_NOTICE}**", ""] if board.smoke_run else [])
    lines += [_IMPROVEMENT, ""]
    methods, matrix = _improvement_matrix(board)
    if len(methods) < 2:
        return "\n".join(lines + ["Fewer than two ranked methods."]) + "\n"
    header = ["X \\ Y"] + methods
    body = [[markdown_text(x)] + cells for x, cells in zip(methods, matrix, strict=True)]
    lines += _md_table(header, body, ["---"] + ["---:"] * len(methods))
    return "\n".join(lines) + "\n"


def improvement_csv(board: Leaderboard) -> str:
    """One line per ordered pair of ranked methods with a task in common: P(method_x > method_y)."""
    out = io.StringIO()
    writer = _CsvWriter(out, fieldnames=IMPROVEMENT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for imp in board.improvements:
        writer.writerow(
            {
                "method_x": imp.better,
                "method_y": imp.worse,
                "probability": _csv_float(imp.estimate.point),
                "ci_low": _csv_float(imp.estimate.low),
                "ci_high": _csv_float(imp.estimate.high),
                "ci_over": imp.estimate.over or "",
                "tasks": imp.tasks,
                "smoke_run": "1" if board.smoke_run else "",
            }
        )
    return out.getvalue()


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _difference(comparison: Comparison) -> str:
    return f"{comparison.difference:.1f}{_interval(comparison.low, comparison.high, None)}"


def _comparison_cells(comparison: Comparison) -> tuple[str, str, str, str]:
    """Difference with its interval, p, Holm p and yes/no, as text."""
    return (_difference(comparison), _p(comparison.p), _p(comparison.p_holm),
            "yes" if comparison.separated else "no")


def _scopes(board: Leaderboard) -> dict[str, list[Comparison]]:
    scopes: dict[str, list[Comparison]] = {}
    for comparison in board.comparisons:
        scopes.setdefault(comparison.scope, []).append(comparison)
    return scopes


_COMPARISON_HEADER = ["Better", "Worse", "Difference", "p", "Holm p", "Separated"]


def comparisons_markdown(board: Leaderboard) -> str:
    """Welch's tests of the ranked methods, one table per scope (mean success, then each column)."""
    lines = ["# Pairwise comparisons", "", _COMPARISONS]
    if not board.comparisons:
        return "\n".join(lines + ["", "Fewer than two ranked methods."]) + "\n"
    for scope, comparisons in _scopes(board).items():
        body = [[markdown_text(c.better), markdown_text(c.worse), *_comparison_cells(c)] for c in comparisons]
        lines += ["", f"## {markdown_text(scope)}", ""]
        lines += _md_table(_COMPARISON_HEADER, body, ["---", "---", "---:", "---:", "---:", "---"])
    return "\n".join(lines) + "\n"


def comparisons_csv(board: Leaderboard) -> str:
    """One line per compared pair: scope, better, worse, difference and its interval, p, Holm p and
    ``separated`` (1 or 0)."""
    out = io.StringIO()
    writer = _CsvWriter(out, fieldnames=COMPARISON_FIELDS, lineterminator="\n")
    writer.writeheader()
    for c in board.comparisons:
        writer.writerow(
            {
                "scope": c.scope, "better": c.better, "worse": c.worse, "difference": _csv_float(c.difference),
                "ci_low": _csv_float(c.low), "ci_high": _csv_float(c.high), "p": _csv_float(c.p),
                "p_holm": _csv_float(c.p_holm), "separated": int(c.separated),
            }
        )
    return out.getvalue()


# CSV --------------------------------------------------------------------------------------------


#: The text fields (names, labels, sources) of the CSV files; the other fields are numbers written here.
_CSV_TEXT = {"section", "method", "kind", "model", "source", "env_label", "metric", "protocol", "method_x", "method_y",
             "scope", "better", "worse"}


class _CsvWriter(csv.DictWriter):
    """``csv.DictWriter`` whose text fields cannot start a spreadsheet formula: OWASP's rule for CSV
    injection, a text beginning with ``= + - @``, a tab or a carriage return gets a leading ``'``."""

    def writerow(self, rowdict: Mapping[str, object]) -> Any:
        return super().writerow({key: csv_text(value) if key in _CSV_TEXT else value
                                 for key, value in rowdict.items()})


def csv_text(value: object) -> object:
    """``value`` made safe for a CSV text cell (see :class:`_CsvWriter`)."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _csv_float(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _csv_estimate(estimate: Estimate | None) -> dict[str, str]:
    if estimate is None:
        return {"mean": "", "ci_low": "", "ci_high": "", "ci_over": ""}
    return {
        "mean": _csv_float(estimate.point),
        "ci_low": _csv_float(estimate.low),
        "ci_high": _csv_float(estimate.high),
        "ci_over": estimate.over or "",
    }


def _csv_audit(row: Row, column: Column, cell: Cell) -> dict[str, str]:
    """A measured cell's overlap with training, its mark and its environment's compute means."""
    if row.section == "reported":
        return {}
    compute = row.compute.get(column.env_label, {})
    return {"eval_overlap": _csv_float(cell.overlap), "overlap_mark": str(int(cell.overlap_mark)),
            **{name: _csv_float(compute.get(name)) for name in COMPUTE_FIELDS}}


def to_csv(board: Leaderboard) -> str:
    """Tidy CSV: one line per (row, column) cell, plus ``mean_success`` and ``iqm`` lines per
    measured row (``n`` there is the number of environments covered).

    ``se`` is the standard error over seeds for measured rows and the ± printed in the paper for
    reported rows; ``best`` is 1 for the separated best ranked measured cell of a column;
    ``ci_low``/``ci_high`` the 95 % interval, ``ci_over`` what it resampled (``seeds`` or ``tasks``;
    empty: no interval).
    """
    out = io.StringIO()
    writer = _CsvWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in board.rows + board.reported_rows:
        for line in _csv_rows(board, row):  # writerow: DictWriter.writerows would pass by its escaping
            writer.writerow(line)
    return out.getvalue()


def _csv_rows(board: Leaderboard, row: Row) -> list[dict[str, object]]:
    """A row's CSV lines: its ``mean_success`` and ``iqm`` (measured rows), then one per cell."""
    common = {
        "section": row.section, "rank": "" if row.rank is None else row.rank, "method": row.method,
        "kind": row.kind, "model": row.model or "", "source": row.source or "", "budget_unit": "",
        "protocol_mark": "", "eval_overlap": "", "overlap_mark": "", **dict.fromkeys(COMPUTE_FIELDS, ""),
        "smoke_run": "1" if board.smoke_run else "",
    }
    lines = []
    if row.section != "reported":
        for metric, estimate, best in (("mean_success", row.mean_success_estimate, row.best_mean_success),
                                       ("iqm", row.iqm, False)):
            lines.append(common | _csv_estimate(estimate) | {"env_label": "", "metric": metric, "se": "",
                                                             "n": row.envs_covered, "best": int(best),
                                                             "budget": "", "protocol": ""})
    columns = board.reported_columns if row.section == "reported" else board.columns
    for column in columns:
        cell = row.cells.get(column)
        if cell is None:
            continue
        budget = board.budgets.get(column.env_label) if row.kind == "rl" else None
        lines.append(common | {
            "budget_unit": "" if budget is None else board.budget_units.get(column.env_label, "decisions"),
            "protocol": row.protocols.get("" if row.section == "reported" else column.env_label, ""),
            "protocol_mark": "" if row.section == "reported" else int(cell.protocol_mark),
            **_csv_audit(row, column, cell),
            "env_label": column.env_label, "metric": column.metric, "mean": _csv_float(cell.mean),
            "se": _csv_float(cell.se), "n": "" if cell.n is None else cell.n, "best": int(cell.best),
            "budget": "" if budget is None else budget, "ci_low": _csv_float(cell.low),
            "ci_high": _csv_float(cell.high), "ci_over": cell.over or "",
        })
    return lines


# LaTeX ------------------------------------------------------------------------------------------

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "†": r"\dag{}",
    "‡": r"\ddag{}",
    "§": r"\S{}",
}


def tex_escape(text: str) -> str:
    """``text`` on one line with LaTeX's special characters escaped (a line break inside a name would
    end a comment or a row early and let the rest run as LaTeX)."""
    return "".join(" " if char.isspace() else _TEX_SPECIAL.get(char, char) for char in str(text))


def _tex_comment(text: str) -> str:
    # A comment ends at the line's end: whatever followed a line break in a name would be LaTeX.
    return "% " + " ".join(str(text).split())


def _tex_cell(cell: Cell | None) -> str:
    if cell is None:
        return "--"
    if cell.n is None:
        mean = f"{cell.mean:.10g}"
        return mean if cell.se is None else rf"{mean} $\pm$ {cell.se:.10g}"
    mean = f"{cell.mean:.1f}"
    text = rf"\textbf{{{mean}}}" if cell.best else mean
    interval = tex_escape(_interval(cell.low, cell.high, cell.over) + _mark(cell))
    return text + interval + rf" {{\scriptsize({cell.n})}}"


def _tex_bold(text: str, bold: bool) -> str:
    return rf"\textbf{{{text}}}" if bold else text


def _tex_tabular(lead: list[str], columns: list[Column], rows: list[list[str]]) -> list[str]:
    """A booktabs tabular: an environment header row (multicolumn over its metrics), a metric row."""
    envs = list(dict.fromkeys(c.env_label for c in columns))
    spans = [sum(1 for c in columns if c.env_label == env) for env in envs]
    lines = [r"\begin{tabular}{" + "l" * len(lead) + "r" * len(columns) + "}", r"\toprule"]
    top = [rf"\multicolumn{{{len(lead)}}}{{l}}{{}}"] if lead else []
    top += [
        rf"\multicolumn{{{span}}}{{c}}{{{tex_escape(env)}}}" for env, span in zip(envs, spans, strict=True)
    ]
    lines.append(" & ".join(top) + r" \\")
    rules, start = [], len(lead) + 1
    for span in spans:
        rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
        start += span
    lines.append(" ".join(rules))
    lines.append(" & ".join([tex_escape(h) for h in lead] + [tex_escape(c.metric) for c in columns]) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return lines


def _tex_comparisons(board: Leaderboard) -> list[str]:
    """The mean-success comparisons as a booktabs tabular (the columns' are in comparisons.csv)."""
    overall = [c for c in board.comparisons if c.column is None]
    if not overall:
        return []
    lines = ["", "% " + _COMPARISONS, r"\begin{tabular}{llrrrl}", r"\toprule"]
    lines.append(" & ".join(tex_escape(h) for h in _COMPARISON_HEADER) + r" \\")
    lines.append(r"\midrule")
    for c in overall:
        difference, p, p_holm, separated = _comparison_cells(c)
        cells = [tex_escape(c.better), tex_escape(c.worse), tex_escape(difference), p, _tex_bold(p_holm, c.separated),
                 separated]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return lines


def _tex_measured(board: Leaderboard) -> list[str]:
    """The measured table's notes, the table, its compute table and the mean-success comparisons."""
    lines = [_tex_comment(note) for note in _notes(board)]
    lines += [_tex_comment(f"{_PROVENANCE_TITLE}: {item}: {text}") for item, text in board.provenance]
    body = [
        [_rank(row), tex_escape(row.method), tex_escape(row.kind),
         _tex_bold(tex_escape(_mean_success(board, row)), row.best_mean_success), tex_escape(_estimate(row.iqm))]
        + [_tex_cell(row.cells.get(c)) for c in board.columns]
        for row in board.rows
    ]
    lines += _tex_tabular(["Rank", "Method", "Kind", "Mean", "IQM"], board.columns, body)
    lines += ["", f"% {_COMPUTE_TITLE}: {_COMPUTE_NOTE}"]
    lines += _tex_tabular(["Method"], _compute_columns(board),
                          [[tex_escape(row.method), *map(tex_escape, _compute_cells(board, row))]
                           for row in board.rows])
    return lines + _tex_comparisons(board)


def _tex_reported(board: Leaderboard) -> list[str]:
    lines = ["", _tex_comment(_REPORTED_TITLE)]
    lines += [_tex_comment(f"{source.key}: {_one_line(source.citation, 400)}") for source in board.sources.values()]
    if board.caveat:
        lines.append(_tex_comment(_one_line(board.caveat, 1000)))
    body = [
        [tex_escape(row.method), tex_escape(row.model or ""), tex_escape(row.source or ""),
         tex_escape(row.protocols.get("", ""))]
        + [_tex_cell(row.cells.get(c)) for c in board.reported_columns]
        for row in board.reported_rows
    ]
    return lines + _tex_tabular(["Method", "Model", "Source", "Protocol"], board.reported_columns, body)


def to_latex(board: Leaderboard) -> str:
    """Booktabs tabulars (needs ``\\usepackage{booktabs}``): measured, then reported (the failed and
    unreadable records are the other formats')."""
    head = [r"% Generated by `ptgpo leaderboard`; needs \usepackage{booktabs}."]
    head += [_tex_comment(SMOKE_NOTICE.upper())] if board.smoke_run else []
    head += [_tex_comment(text.replace("`", "")) for text in _LEGEND]
    return _walk(board, _Parts(head=head, measured=_tex_measured, reported=_tex_reported))


# HTML -------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
.smoke { background: #fff3cd; border: 1px solid #e0c36a; padding: 0.6em 1em; }
.scroll { max-width: 100%; overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.3em 0.6em; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th.wrap { white-space: normal; min-width: 5em; }
th { border-bottom: 2px solid #444; cursor: pointer; user-select: none; }
td.text, th.text { text-align: left; }
th[data-dir=asc]::after { content: " \\25B2"; } th[data-dir=desc]::after { content: " \\25BC"; }
.best { font-weight: bold; } .n { color: #888; font-size: 0.85em; } tr.reference { color: #666; }
.flag { display: block; white-space: normal; }
.ci { color: #555; } p.note { max-width: 70em; color: #444; font-size: 0.85em; }
figure { display: inline-block; margin: 0.5em 1em 0.5em 0; } img { max-width: 100%; }
"""

# Sorts a table's body by the clicked column: numbers by their data-value, text otherwise; empty
# cells always last. Clicking again reverses the order.
_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], index = th.cellIndex;
    var dir = th.dataset.dir === "asc" ? "desc" : "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.dir; });
    th.dataset.dir = dir;
    function key(row) {
      var cell = row.cells[index];
      if (cell.dataset.value === undefined) return cell.textContent.trim();
      return cell.dataset.value === "" ? null : parseFloat(cell.dataset.value);
    }
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) return (x === null) - (y === null);
      var order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return dir === "asc" ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_value(point: float, interval: str, best: bool, digits: str = ".1f", suffix: str = "") -> str:
    """A numeric cell sorted by ``point``: the point (bold when best), then its interval."""
    number = _esc(f"{point:{digits}}")
    number = f'<span class="best">{number}</span>' if best else number
    interval = f'<span class="ci">{_esc(interval)}</span>' if interval else ""
    return f'<td data-value="{point:.6g}">{number}{interval}{suffix}</td>'


def _html_estimate(estimate: Estimate | None, best: bool, digits: str = ".1f", suffix: str = "") -> str:
    if estimate is None:
        return '<td data-value="">–</td>'
    interval = _interval(estimate.low, estimate.high, estimate.over, digits)
    return _html_value(estimate.point, interval, best, digits, suffix)


def _html_cell(cell: Cell | None) -> str:
    if cell is None:
        return '<td data-value="">–</td>'
    if cell.n is None:  # reported: as printed in the paper
        return f'<td data-value="{cell.mean:.6g}">{_esc(_number(cell))}</td>'
    count = f' <span class="n">(n={cell.n})</span>'
    if cell.overlap_mark:
        count = f'<span class="mark" title="{_esc(_OVERLAP_TITLE)}">{OVERLAP_MARK}</span>' + count
    if cell.protocol_mark:
        count = f'<span class="mark" title="{_esc(_MARK_TITLE)}">{MARK}</span>' + count
    return _html_value(cell.mean, _interval(cell.low, cell.high, cell.over), cell.best, suffix=count)


def _html_text(text: object) -> str:
    return f'<td class="text">{_esc(text)}</td>'


def _html_table(header: list[str], rows: list[tuple[str, list[str]]], text_columns: int,
                wrap_headers: bool = False) -> list[str]:
    """A sortable table in a box that scrolls sideways when the table is wider than the page (the page
    itself never does); ``wrap_headers`` lets the headers break between words."""
    numeric = '<th class="wrap">' if wrap_headers else "<th>"
    heads = [
        f'<th class="text">{_esc(h)}</th>' if i < text_columns else f"{numeric}{_esc(h)}</th>"
        for i, h in enumerate(header)
    ]
    lines = ['<div class="scroll">', '<table class="sortable">', "<thead><tr>" + "".join(heads) + "</tr></thead>",
             "<tbody>"]
    lines += [f'<tr class="{css}">' + "".join(cells) + "</tr>" for css, cells in rows]
    lines += ["</tbody>", "</table>", "</div>"]
    return lines


def _html_comparisons(board: Leaderboard) -> list[str]:
    if not board.comparisons:
        return []
    parts = ["<h2>Pairwise comparisons</h2>", f'<p class="note">{_esc(_COMPARISONS)}</p>']
    for scope, comparisons in _scopes(board).items():
        rows = [
            ("comparison", [_html_text(c.better), _html_text(c.worse)]
             + [f'<td data-value="{value}">{_esc(text)}</td>' for value, text in zip(
                 (f"{c.difference:.6g}", _csv_float(c.p), _csv_float(c.p_holm), int(c.separated)),
                 _comparison_cells(c), strict=True)])
            for c in comparisons
        ]
        parts += [f"<h3>{_esc(scope)}</h3>", *_html_table(_COMPARISON_HEADER, rows, text_columns=2)]
    return parts


def _html_improvement(board: Leaderboard) -> list[str]:
    methods = [row.method for row in board.ranked()]
    if len(methods) < 2:
        return []
    found = {(imp.better, imp.worse): imp.estimate for imp in board.improvements}
    rows = [
        ("improvement", [_html_text(x)] + [_html_estimate(found.get((x, y)), False, ".2f") for y in methods])
        for x in methods
    ]
    return [
        "<h2>Probability of improvement</h2>",
        f'<p class="note">{_esc(_IMPROVEMENT)}</p>',
        *_html_table(["X \\ Y", *methods], rows, text_columns=1),
    ]


def _html_measured(board: Leaderboard) -> list[str]:
    """The measured table, the notes on its data, its provenance, the legend, the compute table, the
    comparisons and the improvement matrix."""
    parts: list[str] = []
    header = ["Rank", "Method", "Kind", "Mean success", "IQM"] + [column_label(c, board.columns) for c in board.columns]
    envs = len({c.env_label for c in board.columns})
    rows = []
    for row in board.rows:
        rank_value = "" if row.rank is None else str(row.rank)
        coverage = "" if row.envs_covered == envs else f' <span class="n">({row.envs_covered}/{envs} envs)</span>'
        if row.unranked:
            coverage += f'<span class="n flag">not ranked: {_esc(row.unranked)}</span>'
        cells = [
            f'<td data-value="{rank_value}">{_esc(_rank(row))}</td>',
            _html_text(row.method),
            _html_text(row.kind),
            _html_estimate(row.mean_success_estimate, row.best_mean_success, suffix=coverage),
            _html_estimate(row.iqm, False),
        ] + [_html_cell(row.cells.get(c)) for c in board.columns]
        rows.append((row.section, cells))
    # The rank column holds numbers but is listed with the text columns so it is left-aligned.
    parts += _html_table(header, rows, text_columns=3)
    parts += [f'<p class="note protocol">{_esc(note)}</p>' for note in _notes(board)]
    if board.provenance:
        parts += [f"<h2>{_PROVENANCE_TITLE}</h2>", '<ul class="provenance">']
        parts += [f"<li><strong>{_esc(item)}</strong>: {_esc(text)}</li>" for item, text in board.provenance]
        parts.append("</ul>")
    parts.append(f"<h2>{_LEGEND_TITLE}</h2>")
    parts += [f'<p class="note">{_esc(text.replace("`", ""))}</p>' for text in _LEGEND]
    compute = _compute_columns(board)
    parts += [f"<h2>{_esc(_COMPUTE_TITLE)}</h2>", f'<p class="note">{_esc(_COMPUTE_NOTE)}</p>']
    parts += _html_table(
        ["Method"] + [f"{c.env_label} · {c.metric}" for c in compute],
        [(row.section, [_html_text(row.method)] + [
            f'<td data-value="{text.replace(",", "") if text != "–" else ""}">{_esc(text)}</td>'
            for text in _compute_cells(board, row)]) for row in board.rows],
        text_columns=1, wrap_headers=True,
    )
    return parts + _html_comparisons(board) + _html_improvement(board)


def _html_reported(board: Leaderboard) -> list[str]:
    """The reported table, its sources and its caveat."""
    header = ["Method", "Model", "Source", "Protocol"] + [
        column_label(c, board.reported_columns) for c in board.reported_columns
    ]
    rows = [
        ("reported", [_html_text(row.method), _html_text(row.model or ""), _html_text(row.source or ""),
                      _html_text(row.protocols.get("", ""))]
         + [_html_cell(row.cells.get(c)) for c in board.reported_columns])
        for row in board.reported_rows
    ]
    parts = [f"<h2>{_esc(_REPORTED_TITLE)}</h2>", *_html_table(header, rows, text_columns=4), "<ul>"]
    for source in board.sources.values():
        setup = f" Setup: {_esc(source.setup)}" if source.setup else ""
        parts.append(f"<li><code>{_esc(source.key)}</code>: {_esc(source.citation)}.{setup}</li>")
    parts.append("</ul>")
    if board.caveat:
        parts.append(f'<p class="note"><em>{_esc(board.caveat)}</em></p>')
    return parts


def _html_failed(board: Leaderboard) -> list[str]:
    rows = [
        ("failed", [_html_text(path.name), _html_text(r.method), _html_text(r.env_label),
                    f'<td data-value="{r.seed}">{r.seed}</td>', _html_text(_one_line(r.error or ""))])
        for path, r in board.failed
    ]
    return ["<h2>Failed runs (not averaged)</h2>",
            *_html_table(["File", "Method", "Env", "Seed", "Error"], rows, text_columns=3)]


def to_html(board: Leaderboard, images: Sequence[str] = ()) -> str:
    """A page with inline CSS and JS (click a header to sort); ``images`` are file names in the
    page's own folder (the plots written with it), shown below the measured tables."""
    head = ["<!DOCTYPE html>", '<html lang="en">', '<head><meta charset="utf-8"><title>PTGPO leaderboard</title>',
            f"<style>{_STYLE}</style></head>", "<body>", "<h1>Leaderboard</h1>"]
    head += [f'<p class="smoke"><strong>{_esc(SMOKE_NOTICE)}</strong></p>'] if board.smoke_run else []
    plots = ["<h2>Plots</h2>"] + [
        f'<figure><img src="{_esc(name)}" alt="{_esc(name)}"><figcaption>{_esc(name)}</figcaption></figure>'
        for name in images
    ] if images else []
    return _walk(board, _Parts(
        head=head, measured=_html_measured, no_measured=["<p>No measured results.</p>"], after_measured=plots,
        reported=_html_reported, failed=_html_failed,
        problems=lambda board: ["<h2>Unreadable files (skipped)</h2>",
                                "<ul>" + "".join(f"<li><code>{_esc(p)}</code></li>" for p in board.problems) + "</ul>"],
        tail=[f"<script>{_SCRIPT}</script>", "</body>", "</html>"],
    ))


# Files ------------------------------------------------------------------------------------------


def write_outputs(
    board: Leaderboard, out_dir: str | os.PathLike, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Write the requested formats atomically and return the files written.

    ``md``: ``leaderboard.md``, ``improvement.md`` and ``comparisons.md``; ``csv``: ``leaderboard.csv``,
    ``improvement.csv`` and ``comparisons.csv``; ``tex``: ``leaderboard.tex``; ``html``:
    ``leaderboard.html``, showing the plots written in the same call; ``png``: ``curves-<env>.png``,
    ``curves-<env>-<unit>.png`` for each other cost unit the runs recorded, ``intervals.png``,
    ``improvement.png`` and ``profiles.png``. Curve files that cannot be read are added to
    ``board.problems``.
    """
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if "png" in formats:
        # Curves first: unreadable curve files become problems that the text outputs then list.
        from leaderboard.curves import plot_learning_curves
        from leaderboard.plots import plot_statistics

        written += plot_learning_curves(board, out_dir) + plot_statistics(board, out_dir)
    images = [path.name for path in written]
    renderers = {
        "leaderboard.md": to_markdown,
        "improvement.md": improvement_markdown,
        "comparisons.md": comparisons_markdown,
        "leaderboard.csv": to_csv,
        "improvement.csv": improvement_csv,
        "comparisons.csv": comparisons_csv,
        "leaderboard.tex": to_latex,
        "leaderboard.html": lambda board: to_html(board, images),
    }
    for name, render in renderers.items():
        if name.rsplit(".", 1)[1] in formats:
            path = out_dir / name
            atomic_write_text(path, render(board))
            written.append(path)
    return written
