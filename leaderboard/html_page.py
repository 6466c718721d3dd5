"""A :class:`~leaderboard.aggregate.Leaderboard` as a standalone HTML page with sortable tables: the measured
table, the probability-of-improvement matrix, the pairwise comparisons, the plots written next to it, the
reported-in-papers table and the failed runs (:func:`to_html`; :func:`leaderboard.render.write_outputs`
writes ``leaderboard.html``)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from leaderboard.board import Cell, Leaderboard, SMOKE_NOTICE
from leaderboard.audit import OVERLAP_MARK
from leaderboard.formatting import (
    COMPARISONS,
    COMPARISON_HEADER,
    COMPUTE_NOTE,
    COMPUTE_TITLE,
    IMPROVEMENT,
    LEGEND,
    LEGEND_TITLE,
    MARK_TITLE,
    OVERLAP_TITLE,
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
    interval_text,
    one_line,
    rank_text,
    walk,
)
from leaderboard.protocols import MARK
from leaderboard.stats import Estimate

__all__ = ["to_html"]

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
    interval = interval_text(estimate.low, estimate.high, estimate.over, digits)
    return _html_value(estimate.point, interval, best, digits, suffix)


def _html_cell(cell: Cell | None) -> str:
    if cell is None:
        return '<td data-value="">–</td>'
    if cell.n is None:  # reported: as printed in the paper
        return f'<td data-value="{cell.mean:.6g}">{_esc(cell_number(cell))}</td>'
    count = f' <span class="n">(n={cell.n})</span>'
    if cell.overlap_mark:
        count = f'<span class="mark" title="{_esc(OVERLAP_TITLE)}">{OVERLAP_MARK}</span>' + count
    if cell.protocol_mark:
        count = f'<span class="mark" title="{_esc(MARK_TITLE)}">{MARK}</span>' + count
    return _html_value(cell.mean, interval_text(cell.low, cell.high, cell.over), cell.best, suffix=count)


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
    parts = ["<h2>Pairwise comparisons</h2>", f'<p class="note">{_esc(COMPARISONS)}</p>']
    for scope, comparisons in comparison_scopes(board).items():
        rows = [
            ("comparison", [_html_text(c.better), _html_text(c.worse)]
             + [f'<td data-value="{value}">{_esc(text)}</td>' for value, text in zip(
                 (f"{c.difference:.6g}", csv_float(c.p), csv_float(c.p_holm), int(c.separated)),
                 comparison_cells(c), strict=True)])
            for c in comparisons
        ]
        parts += [f"<h3>{_esc(scope)}</h3>", *_html_table(COMPARISON_HEADER, rows, text_columns=2)]
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
        f'<p class="note">{_esc(IMPROVEMENT)}</p>',
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
            f'<td data-value="{rank_value}">{_esc(rank_text(row))}</td>',
            _html_text(row.method),
            _html_text(row.kind),
            _html_estimate(row.mean_success_estimate, row.best_mean_success, suffix=coverage),
            _html_estimate(row.iqm, False),
        ] + [_html_cell(row.cells.get(c)) for c in board.columns]
        rows.append((row.section, cells))
    # The rank column holds numbers but is listed with the text columns so it is left-aligned.
    parts += _html_table(header, rows, text_columns=3)
    parts += [f'<p class="note protocol">{_esc(note)}</p>' for note in board_notes(board)]
    if board.provenance:
        parts += [f"<h2>{PROVENANCE_TITLE}</h2>", '<ul class="provenance">']
        parts += [f"<li><strong>{_esc(item)}</strong>: {_esc(text)}</li>" for item, text in board.provenance]
        parts.append("</ul>")
    parts.append(f"<h2>{LEGEND_TITLE}</h2>")
    parts += [f'<p class="note">{_esc(text.replace("`", ""))}</p>' for text in LEGEND]
    compute = compute_columns(board)
    parts += [f"<h2>{_esc(COMPUTE_TITLE)}</h2>", f'<p class="note">{_esc(COMPUTE_NOTE)}</p>']
    parts += _html_table(
        ["Method"] + [f"{c.env_label} · {c.metric}" for c in compute],
        [(row.section, [_html_text(row.method)] + [
            f'<td data-value="{text.replace(",", "") if text != "–" else ""}">{_esc(text)}</td>'
            for text in compute_cells(board, row)]) for row in board.rows],
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
    parts = [f"<h2>{_esc(REPORTED_TITLE)}</h2>", *_html_table(header, rows, text_columns=4), "<ul>"]
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
                    f'<td data-value="{r.seed}">{r.seed}</td>', _html_text(one_line(r.error or ""))])
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
    return walk(board, Parts(
        head=head, measured=_html_measured, no_measured=["<p>No measured results.</p>"], after_measured=plots,
        reported=_html_reported, failed=_html_failed,
        problems=lambda board: ["<h2>Unreadable files (skipped)</h2>",
                                "<ul>" + "".join(f"<li><code>{_esc(p)}</code></li>" for p in board.problems) + "</ul>"],
        tail=[f"<script>{_SCRIPT}</script>", "</body>", "</html>"],
    ))
