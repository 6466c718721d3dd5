"""One recorded iteration as a self-contained HTML page: every group drawn as its prefix tree or as
side-by-side linear trajectories, each decision's observation and response behind a ``<details>``, its
reward and the advantage it got under the run's estimator and, picked at the top, under every other
registered estimator; forks, back-off, coverage credit and invalid actions marked; and a summary of
the groups where credit was zero.

The page is inert: it has no script at all (the estimator picker is radio buttons and CSS), every
piece of recorded text is escaped, no attribute is built from recorded text, and its
Content-Security-Policy forbids loading anything (styles are inline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from typing import Any, Sequence

from ptgpo_algos.viewer.credit import Credit, decision_credit

__all__ = ["CSP", "IterationView", "iteration_page"]

#: Nothing is loaded from anywhere; the page's own style element is the only thing it applies.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{padding:12px 20px;background:#fff;border-bottom:1px solid #dde1e7;position:sticky;top:0;z-index:1}
h1{font-size:18px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}
main{padding:0 20px 40px}.pick{position:absolute;opacity:0;pointer-events:none}
nav label{display:inline-block;padding:2px 8px;margin:2px;border:1px solid #c5ccd6;border-radius:12px;cursor:pointer}
nav label.off{color:#8a93a1;border-style:dashed}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #dde1e7;padding:2px 8px;text-align:left}
th{background:#f0f2f5}.group{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:4px 14px 12px;margin:14px 0}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:18px}ul.tree{padding-left:0}
ul.tree li{border-left:1px solid #c5ccd6;padding-left:8px;margin:2px 0}
.trajectories{display:flex;flex-wrap:wrap;gap:12px}.trajectories ol{margin:0;padding-left:0;list-style:none;min-width:260px}
details{display:inline-block;vertical-align:top}summary{cursor:pointer;white-space:nowrap}
details[open]{display:block;background:#f5f7fa;border:1px solid #dde1e7;border-radius:4px;padding:4px 8px;margin:2px 0}
pre{white-space:pre-wrap;margin:2px 0 6px;background:#fff;border:1px solid #e4e7ec;padding:4px 6px;max-width:90ch}
code.action{background:#eef1f5;padding:0 4px;border-radius:3px}
.pos{color:#0a7a2f}.neg{color:#b3261e}.zero{color:#8a93a1}
.badge{display:inline-block;font-size:11px;padding:0 5px;border-radius:8px;margin-left:4px;border:1px solid}
.invalid{background:#fde8e7;border-color:#e0a39f;color:#8c1d18}.fork{background:#e8f0fe;border-color:#9fb8e8}
.backoff{background:#fff4d6;border-color:#e2c777}.coverage{background:#efe6fb;border-color:#b9a1e0}
.end{background:#e6f4ea;border-color:#9ccaa8}.lost{background:#f1f3f4;border-color:#c5ccd6}
.note{color:#5b6472}
.a{display:none;font-variant-numeric:tabular-nums;margin-left:4px}
"""


@dataclass(frozen=True)
class IterationView:
    """What one page shows: the run, the iteration's recorded rows, every estimator's credit (the
    run's first, its advantages as recorded), and which steps are at forks (``[group][trajectory][step]``)."""

    run: str
    env_id: str
    strategy: str
    iteration: int
    rows: Sequence[dict[str, Any]]
    credits: Sequence[Credit]
    forks: list[list[list[bool]]]
    notes: Sequence[str] = ()


def _text(value: Any) -> str:
    return escape(str(value), quote=True)


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:+.3f}" if value else "0"


def _sign(value: float | None) -> str:
    return "zero" if not value else ("pos" if value > 0 else "neg")


def _advantages(row: dict[str, Any], credits: Sequence[Credit]) -> str:
    """The decision's advantage under each estimator, one span each; CSS shows the picked one."""
    spans = []
    for index, credit in enumerate(credits):
        value = row["advantage"] if index == 0 else decision_credit(row, credit)
        spans.append(f'<span class="a e{index} {_sign(value)}">A {_number(value)}</span>')
    return "".join(spans)


def _badges(row: dict[str, Any], fork: bool, credits: Sequence[Credit]) -> str:
    badges = []
    if not row["valid"]:
        badges.append('<span class="badge invalid">invalid</span>')
    if fork:
        badges.append('<span class="badge fork">fork</span>')
    else:
        badges += [f'<span class="badge backoff a e{i}">back-off</span>' for i, c in enumerate(credits) if c.backoff]
    if len(row["trajectories"]) > 1:
        badges.append(f'<span class="badge lost">×{len(row["trajectories"])}</span>')
    for t, outcome in zip(row["ends"], row["outcomes"]):
        won = outcome.get("won")
        label = "" if won is None else (" won" if won else " lost")
        badges.append(f'<span class="badge {"end" if won else "lost"}">τ{t} ends{label}</span>')
    return "".join(badges)


def _credit_table(row: dict[str, Any], credits: Sequence[Credit]) -> str:
    """Every estimator's advantage of the decision, per trajectory through it and their mean."""
    head = "".join(f"<th>τ{t}</th>" for t in row["trajectories"])
    lines = []
    for index, credit in enumerate(credits):
        if credit.advantages is None:
            continue
        if index == 0:
            values, mean = row["advantages"], row["advantage"]
        else:
            group = credit.advantages[row["group"]]
            values, mean = [group[t][row["step"]] for t in row["trajectories"]], decision_credit(row, credit)
        cells = "".join(f'<td class="{_sign(v)}">{_number(v)}</td>' for v in values)
        name = _text(credit.name) + (" (the run's, as recorded)" if index == 0 else "")
        lines.append(f'<tr><th>{name}</th><td class="{_sign(mean)}">{_number(mean)}</td>{cells}</tr>')
    return f"<table><tr><th>estimator</th><th>trained</th>{head}</tr>{''.join(lines)}</table>"


def _node(row: dict[str, Any], fork: bool, credits: Sequence[Credit]) -> str:
    """One decision: a summary line, and behind it what the policy saw and did, and every credit."""
    summary = (f'<summary>t{row["step"]} <code class="action">{_text(row["action"]) or "(nothing)"}</code> '
               f'r {row["reward"]:g} {_advantages(row, credits)}{_badges(row, fork, credits)}</summary>')
    fields = [("Observation", row["observation"]), ("Response", row["response"]),
              ("Action sent", row["action"]),
              ("Admissible actions", "\n".join(str(a) for a in row["admissible_actions"]))]
    body = "".join(f"<b>{name}</b><pre>{_text(value)}</pre>" for name, value in fields if value not in (None, ""))
    body += f'<p class="note">state {_text(row["state_key"])} · trajectories {_text(row["trajectories"])}</p>'
    if row["extras"]:
        body += f'<b>Extras</b><pre>{_text(json.dumps(row["extras"], indent=1, sort_keys=True))}</pre>'
    return f"<details>{summary}{body}{_credit_table(row, credits)}</details>"


def _tree(rows: Sequence[dict[str, Any]], view: IterationView) -> str:
    """A tree group: nested lists by parent links, children in node order."""
    children: dict[int | None, list[dict[str, Any]]] = {}
    for row in rows:
        children.setdefault(row["parent"], []).append(row)

    def items(parent: int | None) -> str:
        out = []
        for row in children.get(parent, []):
            fork = view.forks[row["group"]][row["trajectories"][0]][row["step"]]
            below = f'<ul>{items(row["node"])}</ul>' if row["node"] in children else ""
            out.append(f"<li>{_node(row, fork, view.credits)}{below}</li>")
        return "".join(out)

    return f'<ul class="tree">{items(None)}</ul>'


def _linear(rows: Sequence[dict[str, Any]], view: IterationView) -> str:
    """A linear group: its trajectories side by side, each a numbered list of its decisions."""
    by_trajectory: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        for t in row["trajectories"]:
            by_trajectory.setdefault(t, []).append(row)
    columns = []
    for t in sorted(by_trajectory):
        steps = sorted(by_trajectory[t], key=lambda row: row["step"])
        items = "".join(f'<li>{_node(row, view.forks[row["group"]][t][row["step"]], view.credits)}</li>'
                        for row in steps)
        columns.append(f'<div><b>τ{t}</b> return {sum(r["reward"] for r in steps):g}<ol>{items}</ol></div>')
    return f'<div class="trajectories">{"".join(columns)}</div>'


def _zero(rows: Sequence[dict[str, Any]], index: int, credit: Credit) -> bool:
    """Whether every decision of the group got a zero advantage under ``credit``."""
    values = [row["advantage"] if index == 0 else decision_credit(row, credit) for row in rows]
    return all(value == 0 for value in values)


def _why_zero(rows: Sequence[dict[str, Any]], credit: Credit) -> str:
    diagnostics = credit.diagnostics[rows[0]["group"]] if credit.diagnostics else None
    if diagnostics is None:
        return "zero"
    if len({t for row in rows for t in row["trajectories"]}) < 2:
        return "one trajectory: nothing to compare it with"
    if diagnostics.outcome_all_equal and not diagnostics.coverage_applied:
        return "every trajectory's return was equal, and no coverage credit applied"
    return "the estimator gave every decision zero"


def _group_table(rows: Sequence[dict[str, Any]], credits: Sequence[Credit]) -> str:
    """The group under each estimator: decisions credited, all-equal outcome, coverage credit, counts."""
    lines = []
    for index, credit in enumerate(credits):
        if credit.diagnostics is None:
            continue
        d = credit.diagnostics[rows[0]["group"]]
        nonzero = sum(1 for row in rows if (row["advantage"] if index == 0 else decision_credit(row, credit)))
        counts = ", ".join(f"{_text(k)} {v}" for k, v in d.counts.items())
        zero = f"zero: {_why_zero(rows, credit)}" if _zero(rows, index, credit) else ""
        lines.append(f"<tr><th>{_text(credit.name)}</th><td>{nonzero}/{len(rows)}</td>"
                     f"<td>{'yes' if d.outcome_all_equal else ''}</td><td>{'yes' if d.coverage_applied else ''}</td>"
                     f"<td>{counts}</td><td>{zero}</td></tr>")
    head = ("<tr><th>estimator</th><th>decisions credited</th><th>all-equal returns</th><th>coverage credit</th>"
            "<th>counts</th><th></th></tr>")
    return f"<details><summary>Under every estimator</summary><table>{head}{''.join(lines)}</table></details>"


def _group(index: int, rows: Sequence[dict[str, Any]], view: IterationView) -> str:
    """One group's section: its heading with marks for the picked estimator, its table, its drawing."""
    tree = any(len(row["trajectories"]) > 1 for row in rows)
    trajectories = len({t for row in rows for t in row["trajectories"]})
    marks = ""
    for i, credit in enumerate(view.credits):
        if credit.diagnostics is not None and credit.diagnostics[index].coverage_applied:
            marks += f'<span class="badge coverage a e{i}">coverage credit</span>'
        if credit.advantages is not None and _zero(rows, i, credit):
            marks += f'<span class="badge lost a e{i}">zero credit</span>'
    drawing = _tree(rows, view) if tree else _linear(rows, view)
    return (f'<section class="group" id="group-{index}"><h2>Group {index}: {"tree" if tree else "linear"}, '
            f"{trajectories} trajectories, {len(rows)} decisions{marks}</h2>"
            f'<p class="note">{_text(rows[0]["task"])}</p>{_group_table(rows, view.credits)}{drawing}</section>')


def _summary(groups: dict[int, list[dict[str, Any]]], view: IterationView) -> str:
    """Where credit was zero: per estimator, and the run's zero groups with the reason."""
    lines = []
    for index, credit in enumerate(view.credits):
        if credit.advantages is None:
            lines.append(f"<tr><th>{_text(credit.name)}</th><td colspan=4>not computed: {_text(credit.error)}</td></tr>")
            continue
        zero = sum(_zero(rows, index, credit) for rows in groups.values())
        equal = sum(d.outcome_all_equal for d in credit.diagnostics)
        coverage = sum(d.coverage_applied for d in credit.diagnostics)
        decisions = sum(1 for rows in groups.values() for row in rows
                        if (row["advantage"] if index == 0 else decision_credit(row, credit)))
        lines.append(f"<tr><th>{_text(credit.name)}</th><td>{zero}/{len(groups)}</td><td>{equal}</td>"
                     f"<td>{coverage}</td><td>{decisions}/{len(view.rows)}</td></tr>")
    run = view.credits[0]
    zero_groups = "".join(f'<li><a href="#group-{g}">group {g}</a>: {_text(_why_zero(rows, run))}</li>'
                          for g, rows in groups.items() if _zero(rows, 0, run))
    listed = f"<ul>{zero_groups}</ul>" if zero_groups else "<p>none: every group credited some decision.</p>"
    return (f'<section id="summary"><h2>Where credit was zero</h2><table><tr><th>estimator</th><th>groups with zero '
            f"credit</th><th>all-equal returns</th><th>coverage credit</th><th>decisions credited</th></tr>"
            f"{''.join(lines)}</table><p>Under {_text(run.name)}, the run's estimator:</p>{listed}</section>")


def _picker(credits: Sequence[Credit]) -> tuple[str, str, str]:
    """The radio buttons (before ``main``, so CSS can read them), their labels and the CSS that shows the
    picked estimator's advantages."""
    radios = "".join(f'<input type="radio" name="estimator" class="pick" id="e{i}"{" checked" if i == 0 else ""}>'
                     for i in range(len(credits)))
    labels = "".join(f'<label for="e{i}"{"" if c.advantages is not None else " class=off"}>{_text(c.name)}'
                     f'{" (the run&#x27;s)" if i == 0 else ""}</label>' for i, c in enumerate(credits))
    css = "".join(f"#e{i}:checked~main .e{i}{{display:inline-block}}"
                  f"#e{i}:checked~header label[for=e{i}]{{background:#1d2330;color:#fff}}" for i in range(len(credits)))
    return radios, labels, css


def iteration_page(view: IterationView) -> str:
    """The page of one recorded iteration (see the module docstring)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in sorted(view.rows, key=lambda row: (row["group"], row["node"])):
        groups.setdefault(row["group"], []).append(row)
    radios, labels, css = _picker(view.credits)
    title = f"{view.run} · iteration {view.iteration}"
    notes = "".join(f'<p class="note">{_text(note)}</p>' for note in view.notes)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_text(title)}</title>'
            f"<style>{_STYLE}{css}</style></head><body>{radios}<header><h1>{_text(title)}</h1>"
            f'<p class="note">{_text(view.env_id)} · {_text(view.strategy)} rollouts · {len(groups)} groups · '
            f"{len(view.rows)} decisions · click a decision to see what the policy saw and did</p>"
            f"<nav>Advantage under: {labels}</nav></header><main>{notes}{_summary(groups, view)}"
            f"{''.join(_group(g, rows, view) for g, rows in groups.items())}</main></body></html>\n")
