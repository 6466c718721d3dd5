"""Render a :class:`~leaderboard.aggregate.Leaderboard` as Markdown, CSV, LaTeX (booktabs) and a
standalone HTML page with sortable tables, and write the files atomically.

Every format keeps the three parts apart: the measured table (ranked methods, then reference rows),
the reported-in-papers table, and the failed runs / unreadable files. Cells read ``mean ± SE (n)``;
the best measured cell of each column is bold (Markdown, LaTeX, HTML) or flagged ``best = 1`` (CSV).
"""

from __future__ import annotations

import csv
import html
import io
import os
from collections.abc import Sequence
from pathlib import Path

from leaderboard.aggregate import Cell, Column, Leaderboard, Row
from leaderboard.records import atomic_write_text

__all__ = ["FORMATS", "to_markdown", "to_csv", "to_latex", "to_html", "write_outputs", "column_label"]

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
)

_UNITS = (
    "Success in % at the final evaluation (`final_success`), mean ± standard error over seeds "
    "(SE = sample std / sqrt(n); no ± when n = 1), n = number of seeds."
)
_RANKING = (
    "Rank: by mean over environments of the overall success (`All`/`success` columns); methods with "
    "results on more environments rank first. Bold: best ranked method in the column. Reference rows "
    "(privileged methods such as `expert`) are shown but not ranked."
)
_REPORTED_TITLE = "Reported in papers (not measured here, not ranked, never averaged with measured rows)"


def column_label(column: Column, columns: Sequence[Column]) -> str:
    """``env`` when the environment has one column, else ``env · metric``."""
    if sum(1 for c in columns if c.env_label == column.env_label) == 1 and column.metric == "success":
        return column.env_label
    return f"{column.env_label} · {column.metric}"


def _number(cell: Cell) -> str:
    # Reported numbers (n is None) keep the precision the paper printed; measured ones get one decimal.
    digits = ".10g" if cell.n is None else ".1f"
    return f"{cell.mean:{digits}}" if cell.se is None else f"{cell.mean:{digits}} ± {cell.se:{digits}}"


def _rank(row: Row) -> str:
    return "ref" if row.section == "reference" else str(row.rank)


def _mean_success(board: Leaderboard, row: Row) -> str:
    if row.mean_success is None:
        return "–"
    envs = len({c.env_label for c in board.columns})
    coverage = "" if row.envs_covered == envs else f" ({row.envs_covered}/{envs} envs)"
    return f"{row.mean_success:.1f}{coverage}"


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _budget_line(board: Leaderboard) -> str:
    parts = [f"{env}: {budget}" for env, budget in sorted(board.budgets.items()) if budget is not None]
    return "Budget (policy decisions per RL run): " + ", ".join(parts) + "." if parts else ""


# Markdown ---------------------------------------------------------------------------------------


def _md(text: str) -> str:
    # Only what breaks a table row or opens emphasis; the printed Markdown stays readable as text.
    return "".join("\\" + char if char in "|*" else char for char in str(text))


def _code(text: str) -> str:
    return "`" + str(text).replace("`", "'").replace("|", "\\|") + "`"


def _md_cell(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    number = f"**{_number(cell)}**" if cell.best else _number(cell)
    return number if cell.n is None else f"{number} (n={cell.n})"


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def to_markdown(board: Leaderboard) -> str:
    lines = ["# Leaderboard", ""]
    if board.rows:
        lines += [_UNITS, _RANKING]
        budget = _budget_line(board)
        lines += [budget, ""] if budget else [""]
        header = ["Rank", "Method", "Kind", "Mean success"] + [
            column_label(c, board.columns) for c in board.columns
        ]
        body = []
        for row in board.rows:
            mean = _mean_success(board, row)
            body.append(
                [_rank(row), _md(row.method), row.kind, f"**{mean}**" if row.best_mean_success else mean]
                + [_md_cell(row.cells.get(c)) for c in board.columns]
            )
        lines += _md_table(header, body, ["---:", "---", "---", "---:"] + ["---:"] * len(board.columns))
    else:
        lines.append("No measured results.")
    if board.reported_rows:
        lines += ["", f"## {_REPORTED_TITLE}", ""]
        header = ["Method", "Model", "Source"] + [
            column_label(c, board.reported_columns) for c in board.reported_columns
        ]
        body = [
            [_md(row.method), _md(row.model or ""), _md(row.source or "")]
            + [_md_cell(row.cells.get(c)) for c in board.reported_columns]
            for row in board.reported_rows
        ]
        lines += _md_table(header, body, ["---"] * 3 + ["---:"] * len(board.reported_columns))
        lines.append("")
        for source in board.sources.values():
            setup = f" Setup: {_one_line(source.setup, 400)}" if source.setup else ""
            lines.append(f"- `{source.key}`: {_md(source.citation)}.{setup}")
        if board.caveat:
            lines += ["", _md(_one_line(board.caveat, 1000))]
    if board.failed:
        lines += ["", "## Failed runs (not averaged)", ""]
        body = [
            [_code(path.name), _md(r.method), _md(r.env_label), str(r.seed), _md(_one_line(r.error or ""))]
            for path, r in board.failed
        ]
        lines += _md_table(
            ["File", "Method", "Env", "Seed", "Error"], body, ["---", "---", "---", "---:", "---"]
        )
    if board.problems:
        lines += ["", "## Unreadable files (skipped)", ""]
        lines += [f"- {_code(problem)}" for problem in board.problems]
    return "\n".join(lines) + "\n"


# CSV --------------------------------------------------------------------------------------------


def _csv_float(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def to_csv(board: Leaderboard) -> str:
    """Tidy CSV: one line per (row, column) cell, plus one ``mean_success`` line per measured row.

    ``se`` is the standard error over seeds for measured rows and the ± printed in the paper for
    reported rows; ``best`` is 1 for the best ranked measured cell of a column.
    """
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in board.rows + board.reported_rows:
        columns = board.reported_columns if row.section == "reported" else board.columns
        common = {
            "section": row.section,
            "rank": "" if row.rank is None else row.rank,
            "method": row.method,
            "kind": row.kind,
            "model": row.model or "",
            "source": row.source or "",
        }
        if row.section != "reported":
            writer.writerow(
                common
                | {
                    "env_label": "",
                    "metric": "mean_success",
                    "mean": _csv_float(row.mean_success),
                    "se": "",
                    "n": row.envs_covered,
                    "best": int(row.best_mean_success),
                    "budget": "",
                }
            )
        for column in columns:
            cell = row.cells.get(column)
            if cell is None:
                continue
            budget = board.budgets.get(column.env_label) if row.kind == "rl" else None
            writer.writerow(
                common
                | {
                    "env_label": column.env_label,
                    "metric": column.metric,
                    "mean": _csv_float(cell.mean),
                    "se": _csv_float(cell.se),
                    "n": "" if cell.n is None else cell.n,
                    "best": int(cell.best),
                    "budget": "" if budget is None else budget,
                }
            )
    return out.getvalue()


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
}


def tex_escape(text: str) -> str:
    return "".join(_TEX_SPECIAL.get(char, char) for char in str(text))


def _tex_cell(cell: Cell | None) -> str:
    if cell is None:
        return "--"
    digits = ".10g" if cell.n is None else ".1f"
    mean = f"{cell.mean:{digits}}"
    text = rf"\textbf{{{mean}}}" if cell.best else mean
    if cell.se is not None:
        text += rf" $\pm$ {cell.se:{digits}}"
    if cell.n is not None:
        text += rf" {{\scriptsize({cell.n})}}"
    return text


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


def to_latex(board: Leaderboard) -> str:
    """Booktabs tabulars (needs ``\\usepackage{booktabs}``): measured, then reported."""
    lines = [
        r"% Generated by `ptgpo leaderboard`; needs \usepackage{booktabs}.",
        "% " + _UNITS.replace("`", ""),
        "% " + _RANKING.replace("`", ""),
    ]
    if board.rows:
        budget = _budget_line(board)
        if budget:
            lines.append("% " + budget)
        body = []
        for row in board.rows:
            mean = tex_escape(_mean_success(board, row))
            body.append(
                [
                    _rank(row),
                    tex_escape(row.method),
                    tex_escape(row.kind),
                    rf"\textbf{{{mean}}}" if row.best_mean_success else mean,
                ]
                + [_tex_cell(row.cells.get(c)) for c in board.columns]
            )
        lines += _tex_tabular(["Rank", "Method", "Kind", "Mean"], board.columns, body)
    if board.reported_rows:
        lines += ["", f"% {_REPORTED_TITLE}"]
        lines += [f"% {source.key}: {_one_line(source.citation, 400)}" for source in board.sources.values()]
        if board.caveat:
            lines.append("% " + _one_line(board.caveat, 1000))
        body = [
            [tex_escape(row.method), tex_escape(row.model or ""), tex_escape(row.source or "")]
            + [_tex_cell(row.cells.get(c)) for c in board.reported_columns]
            for row in board.reported_rows
        ]
        lines += _tex_tabular(["Method", "Model", "Source"], board.reported_columns, body)
    return "\n".join(lines) + "\n"


# HTML -------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { padding: 0.3em 0.6em; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th { border-bottom: 2px solid #444; cursor: pointer; user-select: none; }
td.text, th.text { text-align: left; }
th[data-dir=asc]::after { content: " \\25B2"; } th[data-dir=desc]::after { content: " \\25BC"; }
.best { font-weight: bold; } .n { color: #888; font-size: 0.85em; } tr.reference { color: #666; }
p.note { max-width: 60em; color: #444; }
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


def _html_cell(cell: Cell | None) -> str:
    if cell is None:
        return '<td data-value="">–</td>'
    number = _esc(_number(cell))
    number = f'<span class="best">{number}</span>' if cell.best else number
    count = "" if cell.n is None else f' <span class="n">(n={cell.n})</span>'
    return f'<td data-value="{cell.mean:.6g}">{number}{count}</td>'


def _html_text(text: object) -> str:
    return f'<td class="text">{_esc(text)}</td>'


def _html_table(header: list[str], rows: list[tuple[str, list[str]]], text_columns: int) -> list[str]:
    heads = [
        f'<th class="text">{_esc(h)}</th>' if i < text_columns else f"<th>{_esc(h)}</th>"
        for i, h in enumerate(header)
    ]
    lines = ['<table class="sortable">', "<thead><tr>" + "".join(heads) + "</tr></thead>", "<tbody>"]
    lines += [f'<tr class="{css}">' + "".join(cells) + "</tr>" for css, cells in rows]
    lines += ["</tbody>", "</table>"]
    return lines


def to_html(board: Leaderboard) -> str:
    """A standalone page (inline CSS and JS, no external resources); click a header to sort."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8"><title>PTGPO leaderboard</title>',
        f"<style>{_STYLE}</style></head>",
        "<body>",
        "<h1>Leaderboard</h1>",
    ]
    if board.rows:
        parts += [f'<p class="note">{_esc(_UNITS.replace("`", ""))} {_esc(_RANKING.replace("`", ""))}</p>']
        budget = _budget_line(board)
        if budget:
            parts.append(f'<p class="note">{_esc(budget)}</p>')
        header = ["Rank", "Method", "Kind", "Mean success"] + [
            column_label(c, board.columns) for c in board.columns
        ]
        rows = []
        for row in board.rows:
            rank_value = "" if row.rank is None else str(row.rank)
            mean = _esc(_mean_success(board, row))
            mean_value = "" if row.mean_success is None else f"{row.mean_success:.6g}"
            cells = [
                f'<td data-value="{rank_value}">{_esc(_rank(row))}</td>',
                _html_text(row.method),
                _html_text(row.kind),
                f'<td data-value="{mean_value}">'
                + (f'<span class="best">{mean}</span>' if row.best_mean_success else mean)
                + "</td>",
            ] + [_html_cell(row.cells.get(c)) for c in board.columns]
            rows.append((row.section, cells))
        # The rank column holds numbers but is listed with the text columns so it is left-aligned.
        parts += _html_table(header, rows, text_columns=3)
    else:
        parts.append("<p>No measured results.</p>")
    if board.reported_rows:
        parts.append(f"<h2>{_esc(_REPORTED_TITLE)}</h2>")
        header = ["Method", "Model", "Source"] + [
            column_label(c, board.reported_columns) for c in board.reported_columns
        ]
        rows = [
            (
                "reported",
                [_html_text(row.method), _html_text(row.model or ""), _html_text(row.source or "")]
                + [_html_cell(row.cells.get(c)) for c in board.reported_columns],
            )
            for row in board.reported_rows
        ]
        parts += _html_table(header, rows, text_columns=3)
        parts.append("<ul>")
        for source in board.sources.values():
            setup = f" Setup: {_esc(source.setup)}" if source.setup else ""
            parts.append(f"<li><code>{_esc(source.key)}</code>: {_esc(source.citation)}.{setup}</li>")
        parts.append("</ul>")
        if board.caveat:
            parts.append(f'<p class="note"><em>{_esc(board.caveat)}</em></p>')
    if board.failed:
        parts.append("<h2>Failed runs (not averaged)</h2>")
        rows = [
            (
                "failed",
                [
                    _html_text(path.name),
                    _html_text(r.method),
                    _html_text(r.env_label),
                    f'<td data-value="{r.seed}">{r.seed}</td>',
                    _html_text(_one_line(r.error or "")),
                ],
            )
            for path, r in board.failed
        ]
        parts += _html_table(["File", "Method", "Env", "Seed", "Error"], rows, text_columns=3)
    if board.problems:
        parts.append("<h2>Unreadable files (skipped)</h2>")
        parts.append("<ul>" + "".join(f"<li><code>{_esc(p)}</code></li>" for p in board.problems) + "</ul>")
    parts += [f"<script>{_SCRIPT}</script>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


# Files ------------------------------------------------------------------------------------------


def write_outputs(
    board: Leaderboard, out_dir: str | os.PathLike, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Write ``leaderboard.{md,csv,tex,html}`` and, for ``png``, ``curves-<env>.png`` atomically.

    Returns the files written. Curve files that cannot be read are added to ``board.problems``.
    """
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if "png" in formats:
        # Curves first: unreadable curve files become problems that the text outputs then list.
        from leaderboard.curves import plot_learning_curves

        written += plot_learning_curves(board, out_dir)
    renderers = {"md": to_markdown, "csv": to_csv, "tex": to_latex, "html": to_html}
    for fmt in ("md", "csv", "tex", "html"):
        if fmt in formats:
            path = out_dir / f"leaderboard.{fmt}"
            atomic_write_text(path, renderers[fmt](board))
            written.append(path)
    return written
