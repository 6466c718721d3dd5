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
import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leaderboard.board import Cell, Column, Leaderboard, Row, SMOKE_NOTICE
from leaderboard.audit import COMPUTE_FIELDS
from leaderboard.formatting import (
    COMPARISONS,
    COMPARISON_HEADER,
    COMPUTE_NOTE,
    COMPUTE_TITLE,
    IMPROVEMENT,
    LEGEND,
    LEGEND_TITLE,
    PROVENANCE_TITLE,
    Parts,
    REPORTED_TITLE,
    board_notes,
    cell_number,
    column_label,
    comparison_cells,
    comparison_scopes,
    compute_cells,
    compute_columns,
    csv_float,
    estimate_text,
    mark_text,
    mean_success_text,
    one_line,
    rank_text,
    walk,
)
from leaderboard.html_page import to_html
from leaderboard.latex import to_latex
from leaderboard.stats import Estimate
from ptgpo_algos.files import atomic_write_text

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
    "eval_invalid_rate",
    *COMPUTE_FIELDS,
    "smoke_run",
)
COMPARISON_FIELDS = ("scope", "better", "worse", "difference", "ci_low", "ci_high", "p", "p_holm", "separated")
IMPROVEMENT_FIELDS = ("method_x", "method_y", "probability", "ci_low", "ci_high", "ci_over", "tasks", "smoke_run")


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
    number = (f"**{cell_number(cell)}**" if cell.best else cell_number(cell)) + mark_text(cell)
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
        mean, iqm = mean_success_text(board, row), estimate_text(row.iqm)
        body.append([rank_text(row), markdown_text(row.method), row.kind,
                     f"**{mean}**" if row.best_mean_success else mean, iqm]
                    + [_md_cell(row.cells.get(c)) for c in board.columns])
    lines = _md_table(header, body, ["---:", "---", "---", "---:", "---:"] + ["---:"] * len(board.columns))
    for note in board_notes(board):
        lines += ["", markdown_text(note)]
    if board.provenance:
        lines += ["", f"## {PROVENANCE_TITLE}", ""]
        lines += [f"- **{item}**: {markdown_text(text)}" for item, text in board.provenance]
    lines += ["", f"## {LEGEND_TITLE}"]
    for text in LEGEND:
        lines += ["", text]
    compute = compute_columns(board)
    lines += ["", f"## {COMPUTE_TITLE}", "", COMPUTE_NOTE, ""]
    lines += _md_table(["Method"] + [f"{c.env_label} · {c.metric}" for c in compute],
                       [[markdown_text(row.method), *compute_cells(board, row)] for row in board.rows],
                       ["---"] + ["---:"] * len(compute))
    return lines


def _md_reported(board: Leaderboard) -> list[str]:
    """The reported table, its sources and its caveat."""
    lines = ["", f"## {REPORTED_TITLE}", ""]
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
        setup = f" Setup: {markdown_text(one_line(source.setup, 400))}" if source.setup else ""
        lines.append(f"- {markdown_code(source.key)}: {markdown_text(source.citation)}.{setup}")
    if board.caveat:
        lines += ["", markdown_text(one_line(board.caveat, 1000))]
    return lines


def _md_failed(board: Leaderboard) -> list[str]:
    body = [
        [markdown_code(path.name), markdown_text(r.method), markdown_text(r.env_label), str(r.seed),
         markdown_text(one_line(r.error or ""))]
        for path, r in board.failed
    ]
    return ["", "## Failed runs (not averaged)", ""] + _md_table(
        ["File", "Method", "Env", "Seed", "Error"], body, ["---", "---", "---", "---:", "---"])


def to_markdown(board: Leaderboard) -> str:
    """The leaderboard as Markdown: the legend, the measured table, the reported table and the failed or
    unreadable records."""
    return walk(board, Parts(
        head=["# Leaderboard", ""] + ([f"> **{SMOKE_NOTICE}**", ""] if board.smoke_run else []),
        measured=_md_measured, no_measured=["No measured results."], reported=_md_reported, failed=_md_failed,
        problems=lambda board: ["", "## Unreadable files (skipped)", "",
                                *(f"- {markdown_code(p)}" for p in board.problems)],
    ))


def _improvement_matrix(board: Leaderboard) -> tuple[list[str], list[list[str]]]:
    """Method names in rank order and, row X by column Y, the text of P(X > Y) ("–" where none)."""
    methods = [row.method for row in board.ranked()]
    found = {(imp.better, imp.worse): estimate_text(imp.estimate, ".2f") for imp in board.improvements}
    return methods, [[found.get((x, y), "–") for y in methods] for x in methods]


def improvement_markdown(board: Leaderboard) -> str:
    """The probability-of-improvement matrix of the ranked methods (row X over column Y)."""
    lines = ["# Probability of improvement", ""] + ([f"> **{SMOKE_NOTICE}**", ""] if board.smoke_run else [])
    lines += [IMPROVEMENT, ""]
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
                "probability": csv_float(imp.estimate.point),
                "ci_low": csv_float(imp.estimate.low),
                "ci_high": csv_float(imp.estimate.high),
                "ci_over": imp.estimate.over or "",
                "tasks": imp.tasks,
                "smoke_run": "1" if board.smoke_run else "",
            }
        )
    return out.getvalue()


def comparisons_markdown(board: Leaderboard) -> str:
    """Welch's tests of the ranked methods, one table per scope (mean success, then each column)."""
    lines = ["# Pairwise comparisons", "", COMPARISONS]
    if not board.comparisons:
        return "\n".join(lines + ["", "Fewer than two ranked methods."]) + "\n"
    for scope, comparisons in comparison_scopes(board).items():
        body = [[markdown_text(c.better), markdown_text(c.worse), *comparison_cells(c)] for c in comparisons]
        lines += ["", f"## {markdown_text(scope)}", ""]
        lines += _md_table(COMPARISON_HEADER, body, ["---", "---", "---:", "---:", "---:", "---"])
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
                "scope": c.scope, "better": c.better, "worse": c.worse, "difference": csv_float(c.difference),
                "ci_low": csv_float(c.low), "ci_high": csv_float(c.high), "p": csv_float(c.p),
                "p_holm": csv_float(c.p_holm), "separated": int(c.separated),
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


def _csv_estimate(estimate: Estimate | None) -> dict[str, str]:
    if estimate is None:
        return {"mean": "", "ci_low": "", "ci_high": "", "ci_over": ""}
    return {
        "mean": csv_float(estimate.point),
        "ci_low": csv_float(estimate.low),
        "ci_high": csv_float(estimate.high),
        "ci_over": estimate.over or "",
    }


def _csv_audit(row: Row, column: Column, cell: Cell) -> dict[str, str]:
    """A measured cell's overlap with training, its mark and its environment's compute means."""
    if row.section == "reported":
        return {}
    compute = row.compute.get(column.env_label, {})
    return {"eval_overlap": csv_float(cell.overlap), "overlap_mark": str(int(cell.overlap_mark)),
            "eval_invalid_rate": csv_float(cell.invalid_rate),
            **{name: csv_float(compute.get(name)) for name in COMPUTE_FIELDS}}


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
        "protocol_mark": "", "eval_overlap": "", "overlap_mark": "",
        "eval_invalid_rate": "", **dict.fromkeys(COMPUTE_FIELDS, ""),
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
            "env_label": column.env_label, "metric": column.metric, "mean": csv_float(cell.mean),
            "se": csv_float(cell.se), "n": "" if cell.n is None else cell.n, "best": int(cell.best),
            "budget": "" if budget is None else budget, "ci_low": csv_float(cell.low),
            "ci_high": csv_float(cell.high), "ci_over": cell.over or "",
        })
    return lines


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
