"""A :class:`~leaderboard.aggregate.Leaderboard` as LaTeX (booktabs): the measured table, the mean-success
comparisons and the reported-in-papers table (:func:`to_latex`; :func:`leaderboard.render.write_outputs`
writes ``leaderboard.tex``)."""

from __future__ import annotations


from leaderboard.board import Cell, Column, Leaderboard, SMOKE_NOTICE
from leaderboard.formatting import (
    COMPARISONS,
    COMPARISON_HEADER,
    COMPUTE_NOTE,
    COMPUTE_TITLE,
    LEGEND,
    PROVENANCE_TITLE,
    Parts,
    REPORTED_TITLE,
    board_notes,
    comparison_cells,
    compute_cells,
    compute_columns,
    estimate_text,
    interval_text,
    mark_text,
    mean_success_text,
    one_line,
    rank_text,
    walk,
)

__all__ = ["tex_escape", "to_latex"]

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
    interval = tex_escape(interval_text(cell.low, cell.high, cell.over) + mark_text(cell))
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
    lines = ["", "% " + COMPARISONS, r"\begin{tabular}{llrrrl}", r"\toprule"]
    lines.append(" & ".join(tex_escape(h) for h in COMPARISON_HEADER) + r" \\")
    lines.append(r"\midrule")
    for c in overall:
        difference, p, p_holm, separated = comparison_cells(c)
        cells = [tex_escape(c.better), tex_escape(c.worse), tex_escape(difference), p, _tex_bold(p_holm, c.separated),
                 separated]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return lines


def _tex_measured(board: Leaderboard) -> list[str]:
    """The measured table's notes, the table, its compute table and the mean-success comparisons."""
    lines = [_tex_comment(note) for note in board_notes(board)]
    lines += [_tex_comment(f"{PROVENANCE_TITLE}: {item}: {text}") for item, text in board.provenance]
    body = [
        [rank_text(row), tex_escape(row.method), tex_escape(row.kind),
         _tex_bold(tex_escape(mean_success_text(board, row)), row.best_mean_success),
         tex_escape(estimate_text(row.iqm))]
        + [_tex_cell(row.cells.get(c)) for c in board.columns]
        for row in board.rows
    ]
    lines += _tex_tabular(["Rank", "Method", "Kind", "Mean", "IQM"], board.columns, body)
    lines += ["", f"% {COMPUTE_TITLE}: {COMPUTE_NOTE}"]
    lines += _tex_tabular(["Method"], compute_columns(board),
                          [[tex_escape(row.method), *map(tex_escape, compute_cells(board, row))]
                           for row in board.rows])
    return lines + _tex_comparisons(board)


def _tex_reported(board: Leaderboard) -> list[str]:
    lines = ["", _tex_comment(REPORTED_TITLE)]
    lines += [_tex_comment(f"{source.key}: {one_line(source.citation, 400)}") for source in board.sources.values()]
    if board.caveat:
        lines.append(_tex_comment(one_line(board.caveat, 1000)))
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
    head += [_tex_comment(text.replace("`", "")) for text in LEGEND]
    return walk(board, Parts(head=head, measured=_tex_measured, reported=_tex_reported))
