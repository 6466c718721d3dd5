"""From result records to a leaderboard: checks, per-cell statistics, ranks and best marks.

Table layout. Rows are methods; columns are ``(env_label, metric)`` pairs. An environment whose
records carry ``success_by_type`` of two or more types gets one column per task type (ALFWorld's order
Pick, Look, Clean, Heat, Cool, Pick2 first, other types after in alphabetical order) and an ``All``
column (the overall ``final_success``); one whose records carry ``score`` gets ``score`` and ``success`` columns; any other
environment gets a single ``success`` column. Success values are shown in % (records store fractions).

Cells. A cell is the mean over seeds with its 95 % Student-t interval over seeds, clipped to
[0, 100] (:mod:`leaderboard.inference`), its standard error ``SE = std(ddof=1) / sqrt(n)`` and the seed
count ``n``; with ``n = 1`` there is neither interval nor SE. Only records with ``status == "ok"`` are
averaged; failed records are listed separately.

Tasks. An environment's tasks are its task-type columns, or its ``success`` column when it has no
task types; its ``All`` (or WebShop's ``score``) is not a task of its own. The interquartile mean
(IQM) and the probability of improvement are computed over a method's (seed, task) scores.

Aggregates. A method's *mean success* is the unweighted mean, over the environments it has results
for, of its overall-success cell (``All`` or ``success``), so every environment weighs the same; its
interval is a t interval with Welch-Satterthwaite degrees of freedom (none when an environment has a
single seed). Its *IQM* is the interquartile mean of its (seed, task) scores, with the bootstrap
interval of :func:`leaderboard.stats.iqm_estimate` (seeds within tasks; over tasks with a single seed).

Comparisons (:class:`Comparison`). Every pair of ranked methods is compared by Welch's test on the
seeds: on mean success over the environments both cover (one family), and in each column (one family
per column). Each family's p-values are Holm-adjusted; a pair is *separated* when the adjusted p-value
is below 0.05.

Ranking. Methods covering more environments rank first; among those covering the same number, a
method's rank is 1 + the number of methods separated above it on mean success, raised where needed so
that ranks never decrease in the order of the means (:func:`leaderboard.inference.ranks_from_tests`):
methods no test separates share a rank. A method is ranked only by a test it can take: one whose
mean success has no interval (a single seed on an environment) or a degenerate one (the same result on
every seed of every environment: no spread over seeds, which says nothing of how far another seed
would land) is not ranked (``Row.unranked`` says why). It is listed after the ranked methods in the
order of its coverage and mean, its interval shown as measured, and its mean-success comparisons carry
no p: no test separates it, and it takes no part in another method's rank. Reference methods (by
default ``expert``, which reads the environment's privileged state) are shown but neither ranked nor
eligible for best marks. A column's best cell is marked only when the column's corrected tests separate it from every other ranked cell
(:func:`leaderboard.inference.separated_best`), and so is the best mean success among the methods
covering the most environments: never a tie, never a cell with a single seed.

Refusals (:class:`LeaderboardError`, naming the files): records written under another schema
version; RL records of one environment column with different budgets (value or unit), whose spent
``decisions`` differ by more than ``decisions_tolerance`` (2 %) of the smallest (decision budgets),
or that stopped before their budget (iteration and cost budgets: a guard such as ``run.iterations``
stopped them; kept, and listed under the table, with ``keep_short_runs``); one env label used with different
``env_id``/``env_kwargs``; two records for the same (env label, method, seed); one method recorded
with different ``method_kind``. A table mixing these would compare unlike things silently. Corrupt
or invalid record files are not refusals: they are reported and the rest is aggregated.

Reported rows (from papers, :mod:`leaderboard.reported`, or records with ``method_kind ==
"reported"``) form a separate table with their own columns; they are never averaged with measured
records, ranked, or marked best.

Audit (:mod:`leaderboard.audit`). Each measured row carries its mean compute per environment
(decisions, training episodes, trained tokens, CPU seconds) and each cell the mean fraction of its
evaluation episodes that started in a layout the run trained on; a cell above 0 is marked ``§`` and
its environment gets a legend line. A table whose records were written by more than one commit says
so (``Leaderboard.commit_note``).

Protocols (:mod:`leaderboard.protocols`). A measured cell whose column (same environment, any
spelling, same metric) holds a reported number of another protocol than the cell's records is marked
(``Cell.protocol_mark``), and ``Leaderboard.protocol_notes`` says, per environment, which protocols
met there: a reader never meets such a pair unmarked.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from leaderboard.board import (
    ALFWORLD_TYPE_ORDER,
    DECISIONS_TOLERANCE,
    DEFAULT_REFERENCE_METHODS,
    SMOKE_MARKER,
    SMOKE_NOTICE,
    Cell,
    Column,
    Comparison,
    Improvement,
    Leaderboard,
    LeaderboardError,
    Row,
    mean_se,
    overall_metric,
    task_columns,
    trials_k,
)
from leaderboard.checks import check_records, short_runs, spent_text
from leaderboard.protocols import MARK, column_key, measured_protocol, reported_protocol
from leaderboard.records import RecordProblem, ResultRecord, read_input, read_records_with_paths
from leaderboard.reported import ReportedResults, ReportedSource
from leaderboard.audit import OVERLAP_MARK, commit_note, commits, compute_means, field_mean, provenance
from leaderboard.inference import (
    Welch,
    holm,
    mean_of_means_interval,
    ranks_from_tests,
    separated_best,
    welch,
)
from leaderboard.stats import improvement_probabilities, iqm_estimate
from ptgpo_algos.yaml_safe import load_yaml

__all__ = [
    "ALFWORLD_TYPE_ORDER",
    "MARK",
    "DECISIONS_TOLERANCE",
    "Cell",
    "Column",
    "Comparison",
    "Improvement",
    "Leaderboard",
    "LeaderboardError",
    "Row",
    "SMOKE_MARKER",
    "SMOKE_NOTICE",
    "UNRANKED_NO_SPREAD",
    "UNRANKED_SINGLE_SEED",
    "aggregate",
    "build_leaderboard",
    "check_records",
    "mean_se",
    "task_columns",
]

def _env_columns(env_label: str, records: list[ResultRecord]) -> list[Column]:
    types = {t for r in records for t in r.success_by_type}
    ordered = [t for t in ALFWORLD_TYPE_ORDER if t in types] + sorted(types - set(ALFWORLD_TYPE_ORDER))
    has_score = any(r.score is not None for r in records)
    # One type (a BabyAI level, a Household run on one task type) is the environment itself: its
    # column would repeat the overall one.
    if len(ordered) > 1:
        metrics = ordered + ["All"] + (["score"] if has_score else [])
    else:
        metrics = ["score", "success"] if has_score else ["success"]
    # Repeated trials (records' ``trials``): pass@k and pass^k at the largest k every such record has.
    measured = [r.trials["trials"] for r in records if r.trials is not None]
    if measured:
        metrics += [f"pass@{min(measured)}", f"pass^{min(measured)}"]
    return [Column(env_label, m) for m in metrics]


def _ordered(columns: list[Column]) -> list[Column]:
    """Each environment's columns together (environments in order of first appearance), ALFWorld's
    task types first in their usual order, then ``All``, then other metrics as they first appear."""
    envs = list(dict.fromkeys(c.env_label for c in columns))
    canonical = ALFWORLD_TYPE_ORDER + ("All",)

    def key(item: tuple[int, Column]) -> tuple[int, int, int]:
        position, column = item
        metric_rank = canonical.index(column.metric) if column.metric in canonical else len(canonical)
        return envs.index(column.env_label), metric_rank, position

    return [column for _, column in sorted(enumerate(columns), key=key)]


def _value(record: ResultRecord, column: Column, overall: str) -> float | None:
    if column.metric == overall:
        return None if record.final_success is None else 100.0 * record.final_success
    if column.metric == "score":
        return record.score
    passk = trials_k(column.metric)
    if passk is not None:
        return None if record.trials is None else 100.0 * record.trials[passk[0]][passk[1]]
    fraction = record.success_by_type.get(column.metric)
    return None if fraction is None else 100.0 * fraction


# Success and scores are in % (WebShop's score too): an interval is clipped to what a mean can be.
_LIMITS = (0.0, 100.0)


def _cell(values: list[float]) -> Cell:
    mean, se = mean_se(values)
    estimate = mean_of_means_interval([values], limits=_LIMITS)
    return Cell(mean, se, len(values), low=estimate.low, high=estimate.high, over=estimate.over)


def _rows_from_records(
    records: list[ResultRecord], columns: list[Column], reference_methods: Sequence[str]
) -> list[Row]:
    """One row per (method, source): each cell the mean, SE and interval of that column's values."""
    overall = {
        env: overall_metric([c for c in columns if c.env_label == env])
        for env in {c.env_label for c in columns}
    }
    grouped: dict[tuple[str, str | None], list[ResultRecord]] = defaultdict(list)
    for record in records:
        grouped[(record.method, record.source if record.method_kind == "reported" else None)].append(record)
    rows = []
    for (method, source), group in grouped.items():
        group.sort(key=lambda r: r.seed)
        kind = group[0].method_kind
        section = (
            "reported" if kind == "reported" else "reference" if method in reference_methods else "measured"
        )
        row = Row(method, kind, section, source=source)
        if kind == "reported":
            row.protocols[""] = reported_protocol((group[0].protocol or {}).get("recipe"))
        for column in columns:
            values = [
                v
                for r in group
                if r.env_label == column.env_label
                if (v := _value(r, column, overall[column.env_label])) is not None
            ]
            if values:
                row.values[column] = values
                row.cells[column] = _cell(values)
        if kind != "reported":
            _set_audit(row, group)
        _set_aggregates(row, columns)
        rows.append(row)
    return rows


def _set_audit(row: Row, records: list[ResultRecord]) -> None:
    """The row's compute per environment and each cell's overlap with training and invalid-step rate."""
    for env in dict.fromkeys(r.env_label for r in records):
        mine = [r for r in records if r.env_label == env]
        row.compute[env] = compute_means(mine)
        overlap, invalid_rate = field_mean(mine, "eval_overlap"), field_mean(mine, "eval_invalid_rate")
        for column, cell in row.cells.items():
            if column.env_label == env:
                cell.overlap, cell.invalid_rate = overlap, invalid_rate


def _short_run_notes(records: Sequence[ResultRecord]) -> list[str]:
    """Per environment, the RL runs kept although they stopped before their budget."""
    found: dict[str, list[ResultRecord]] = defaultdict(list)
    for record in short_runs(records):
        found[record.env_label].append(record)
    return [
        f"{env}: stopped before their budget (kept with --keep-short-runs): "
        + ", ".join(f"{r.method} seed {r.seed} ({spent_text(r)})" for r in sorted(runs, key=lambda r: (r.method, r.seed)))
        + "; their success is at less training than the budget, and a hypothesis on this column is read on the "
        "learning curves at a cost every run reached."
        for env, runs in sorted(found.items())
    ]


def _overlap_notes(rows: Sequence[Row]) -> list[str]:
    """Per environment, the methods whose evaluation episodes started in layouts they trained on."""
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        for column, cell in row.cells.items():
            if cell.overlap_mark:
                found[column.env_label][row.method] = cell.overlap
    return [
        f"{OVERLAP_MARK} {env}: not held out: a share of the evaluation episodes started in a layout the run "
        "had trained on (" + ", ".join(f"{method} {100 * share:.0f} %" for method, share in by_method.items())
        + "); such a cell measures memory as well as skill."
        for env, by_method in sorted(found.items())
    ]


#: Why a measured row is not ranked: its mean success has no interval, or a degenerate one.
UNRANKED_SINGLE_SEED = "a single seed"
UNRANKED_NO_SPREAD = "no spread over seeds"


def _unranked(row: Row) -> str | None:
    """Why ``row``'s mean success cannot be tested (so cannot rank it), or None when it can."""
    estimate = row.mean_success_estimate
    if estimate is None:
        return None
    if not estimate.has_interval:  # a stratum with one value
        return UNRANKED_SINGLE_SEED
    # Clipping to [0, 100] cannot close an interval of some spread: only no variance at all makes a point.
    return UNRANKED_NO_SPREAD if estimate.low == estimate.high else None


def _set_aggregates(row: Row, columns: list[Column]) -> None:
    """The row's mean success (over environments) and IQM (over seed x task scores)."""
    envs = dict.fromkeys(c.env_label for c in columns)
    overall = [Column(env, overall_metric([c for c in columns if c.env_label == env])) for env in envs]
    strata = [row.values[c] for c in overall if c in row.values]
    row.envs_covered = len(strata)
    if strata:
        row.mean_success_estimate = mean_of_means_interval(strata, limits=_LIMITS)
        row.mean_success = math.fsum(row.cells[c].mean for c in overall if c in row.cells) / len(strata)
    tasks = [row.values[c] for c in task_columns(columns) if c in row.values]
    if tasks:
        row.iqm = iqm_estimate(tasks, key=("iqm", row.method, row.source))


def _family(scope: str, column: Column | None, pairs: list[tuple[Row, Row, list, list]],
            untested: frozenset[str] = frozenset()) -> list[Comparison]:
    """Welch's test of each pair ``(x, y, x's strata, y's strata)``, Holm-adjusted over the pairs; a pair
    with a method of ``untested`` gets its difference only, and does not count in the correction."""
    tests = [
        Welch(_mean_of_means(xs) - _mean_of_means(ys), None, None, None, None)
        if x.method in untested or y.method in untested else welch(xs, ys)
        for x, y, xs, ys in pairs
    ]
    found = []
    for (x, y, _, _), test, p_holm in zip(pairs, tests, holm([t.p for t in tests]), strict=True):
        low, high = test.low, test.high
        if test.difference < 0:
            x, y = y, x
            low, high = (None, None) if low is None or high is None else (-high, -low)
        found.append(Comparison(scope, column, x.method, y.method, abs(test.difference), low, high, test.p, p_holm))
    return found


def _mean_of_means(strata: list[list[float]]) -> float:
    return math.fsum(math.fsum(values) / len(values) for values in strata) / len(strata)


def _comparisons(rows: Sequence[Row], columns: Sequence[Column]) -> list[Comparison]:
    """Every family of Welch tests among ``rows``: mean success over the environments each pair
    covers (untested where a row is unranked), then each column over the pairs that have it."""
    envs = dict.fromkeys(c.env_label for c in columns)
    overall = [Column(env, overall_metric([c for c in columns if c.env_label == env])) for env in envs]
    pairs = []
    for i, x in enumerate(rows):
        for y in rows[i + 1 :]:
            shared = [c for c in overall if c in x.values and c in y.values]
            if shared:
                pairs.append((x, y, [x.values[c] for c in shared], [y.values[c] for c in shared]))
    found = _family("mean success", None, pairs, frozenset(row.method for row in rows if row.unranked))
    for column in columns:
        having = [row for row in rows if column in row.values]
        pairs = [(x, y, [x.values[column]], [y.values[column]]) for i, x in enumerate(having) for y in having[i + 1 :]]
        found += _family(f"{column.env_label} · {column.metric}", column, pairs)
    return found


def _separated(comparisons: Sequence[Comparison], rows: Sequence[Row]) -> set[tuple[int, int]]:
    """``(i, j)`` for each comparison separating ``rows[i]`` above ``rows[j]``."""
    index = {row.method: i for i, row in enumerate(rows)}
    return {
        (index[c.better], index[c.worse])
        for c in comparisons
        if c.separated and c.better in index and c.worse in index
    }


def _rank_and_mark(rows: Sequence[Row], columns: Sequence[Column], comparisons: list[Comparison]) -> None:
    """Rank ``rows`` from the corrected mean-success tests and mark each column's and the mean
    success's separated best (see the module docstring)."""
    overall = [c for c in comparisons if c.column is None]
    testable = [row for row in rows if row.unranked is None]
    ranks = ranks_from_tests(
        [row.mean_success for row in testable], _separated(overall, testable),
        [row.envs_covered for row in testable],
    )
    for row, rank in zip(testable, ranks, strict=True):
        row.rank = rank
    for column in columns:
        having = [row for row in rows if column in row.cells]
        family = [c for c in comparisons if c.column == column]
        best = separated_best([row.cells[column].mean for row in having], _separated(family, having))
        if best is not None:
            having[best].cells[column].best = True
    most = max((row.envs_covered for row in rows), default=0)
    full = [row for row in rows if row.envs_covered == most and row.mean_success is not None]
    best = separated_best([row.mean_success for row in full], _separated(overall, full))
    if best is not None:
        full[best].best_mean_success = True


def _improvements(board: Leaderboard) -> list[Improvement]:
    """P(X > Y) for every ordered pair of ranked methods with a task in common, in rank order."""
    rows = board.ranked()
    scores = {row.method: dict(board.task_scores(row)) for row in rows}
    found = improvement_probabilities(scores, key=("improvement",))
    return [
        Improvement(x.method, y.method, *found[x.method, y.method])
        for x in rows
        for y in rows
        if (x.method, y.method) in found
    ]


def measured_environments(records: Iterable[ResultRecord]) -> set[str]:
    """The environments ``records`` measured, as a paper may spell them (case aside): each label, and
    each environment id's name (``ptgpo/ALFWorld-v0``: ``alfworld``)."""
    names = set()
    for record in records:
        names.add(column_key(record.env_label, "")[0])
        names.add(column_key(record.env_id.rpartition("/")[2].rpartition("-v")[0] or record.env_id, "")[0])
    return names


def _paper_rows(reported: ReportedResults, measured: Sequence[ResultRecord], columns: list[Column]) -> list[Row]:
    """The papers' rows, each with its numbers on the environments ``measured`` covers only (the full
    table is ``leaderboard/reported.yaml``, and a page of the docs); their new columns are added to
    ``columns``. A row with no such number is left out."""
    wanted = measured_environments(measured)
    rows = []
    for paper_row in reported.rows:
        row = Row(
            paper_row.method, "reported", "reported", model=paper_row.model, source=paper_row.source,
            protocols={"": reported_protocol(paper_row.protocol, paper_row.conditions)},
        )
        for env_label, metrics in paper_row.results.items():
            if column_key(env_label, "")[0] not in wanted:
                continue
            for metric, value in metrics.items():
                column = Column(env_label, metric)
                if column not in columns:
                    columns.append(column)
                row.cells[column] = Cell(value.value, value.pm, None)
        if row.cells:
            rows.append(row)
    return rows


def _reported_table(
    reported_records: list[ResultRecord], reported: ReportedResults | None, measured: list[ResultRecord],
    reference_methods: Sequence[str],
) -> tuple[list[Column], list[Row], dict[str, ReportedSource], str | None]:
    """The reported table: its columns and rows (reported records, then the papers' numbers for the
    measured environments), the sources those rows cite and the papers' caveat."""
    reported_by_env: dict[str, list[ResultRecord]] = defaultdict(list)
    for record in reported_records:
        reported_by_env[record.env_label].append(record)
    reported_columns = [c for env in sorted(reported_by_env) for c in _env_columns(env, reported_by_env[env])]
    reported_rows = _rows_from_records(reported_records, reported_columns, reference_methods)
    sources: dict[str, ReportedSource] = {}
    caveat = None
    if reported is not None:
        paper_rows = _paper_rows(reported, measured, reported_columns)
        reported_rows += paper_rows
        sources = {key: source for key, source in reported.sources.items()
                   if any(row.source == key for row in paper_rows)}
        caveat = reported.caveat if paper_rows else None
    return _ordered(reported_columns), reported_rows, sources, caveat


def aggregate(
    records: list[tuple[Path, ResultRecord]],
    problems: Sequence[RecordProblem] = (),
    reported: ReportedResults | None = None,
    reference_methods: Sequence[str] = DEFAULT_REFERENCE_METHODS,
    decisions_tolerance: float = DECISIONS_TOLERANCE,
    keep_short_runs: bool = False,
) -> Leaderboard:
    """Check ``records`` (refusing mixed budgets, versions, ...) and build the leaderboard."""
    check_records(records, problems, decisions_tolerance, keep_short_runs)
    ok = [(p, r) for p, r in records if r.status == "ok"]
    failed = [(p, r) for p, r in records if r.status == "failed"]
    measured = [r for _, r in ok if r.method_kind != "reported"]
    reported_records = [r for _, r in ok if r.method_kind == "reported"]

    by_env: dict[str, list[ResultRecord]] = defaultdict(list)
    for record in measured:
        by_env[record.env_label].append(record)
    columns = [c for env in sorted(by_env) for c in _env_columns(env, by_env[env])]
    rows = _rows_from_records(measured, columns, reference_methods)
    ranked = [row for row in rows if row.section == "measured"]
    for row in ranked:
        row.unranked = _unranked(row)
    comparisons = _comparisons(ranked, columns)
    _rank_and_mark(ranked, columns, comparisons)
    ranked.sort(key=lambda row: (row.rank is None, row.rank or 0, -row.envs_covered if row.rank is None else 0,
                                 -(row.mean_success or 0.0), row.method))
    position = {row.method: i for i, row in enumerate(ranked)}
    scopes = list(dict.fromkeys(c.scope for c in comparisons))
    comparisons.sort(key=lambda c: (scopes.index(c.scope), position[c.better], position[c.worse]))
    reference = sorted((row for row in rows if row.section == "reference"), key=lambda row: row.method)

    budgets, budget_units = {}, {}
    for env, env_records in by_env.items():
        rl_budgets = {(r.budget, r.budget_unit) for r in env_records if r.method_kind == "rl"}
        budgets[env], budget_units[env] = rl_budgets.pop() if rl_budgets else (None, "decisions")
    reported_columns, reported_rows, sources, caveat = _reported_table(reported_records, reported, measured,
                                                                       reference_methods)

    board = Leaderboard(
        columns=columns,
        rows=ranked + reference,
        reported_columns=reported_columns,
        reported_rows=reported_rows,
        failed=failed,
        problems=[p for p in problems if p.kind != "schema_version"],
        budgets=budgets,
        budget_units=budget_units,
        sources=sources,
        caveat=caveat,
        records=[(p, r) for p, r in ok if r.method_kind != "reported"],
    )
    board.comparisons = comparisons
    board.commits = commits([record for _, record in board.records])
    board.commit_note = commit_note(board.commits)
    board.overlap_notes = _overlap_notes(board.rows)
    board.short_run_notes = _short_run_notes(measured)
    board.provenance = provenance([record for _, record in board.records])
    board.improvements = _improvements(board)
    board.protocol_notes = _mark_protocols(board, measured)
    return board


def _mark_protocols(board: Leaderboard, measured: list[ResultRecord]) -> list[str]:
    """Mark each measured cell whose column holds a reported number of another protocol, and say per
    environment which protocols met (see the module docstring)."""
    protocols: dict[tuple[str, str], set[str]] = defaultdict(set)
    for record in measured:
        protocols[record.method, record.env_label].add(measured_protocol(record.protocol))
    reported: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in board.reported_rows:
        for column in row.cells:
            reported[column_key(column.env_label, column.metric)][row.protocols[""]].add(row.source or row.method)
    marked: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in board.rows:
        for env in {c.env_label for c in row.cells}:
            row.protocols[env] = ", ".join(sorted(protocols[row.method, env]))
        for column, cell in row.cells.items():
            theirs = reported.get(column_key(column.env_label, column.metric), {})
            ours = protocols[row.method, column.env_label]
            if any(mine != other for mine in ours for other in theirs):
                cell.protocol_mark = True
                for mine in ours:
                    marked[column.env_label][mine].add(row.method)
    notes = []
    for env, by_protocol in sorted(marked.items()):
        theirs = defaultdict(set)
        for column in board.reported_columns:
            if column.env_label.casefold() == env.casefold():
                for protocol, sources in reported.get(column_key(column.env_label, column.metric), {}).items():
                    theirs[protocol] |= sources
        ours_text = "; ".join(f"{p} ({', '.join(sorted(m))})" for p, m in sorted(by_protocol.items()))
        theirs_text = "; ".join(f"{p} ({', '.join(sorted(s))})" for p, s in sorted(theirs.items()))
        notes.append(
            f"{MARK} {env}: measured under {ours_text}; reported in the same columns under {theirs_text}. A "
            f"marked cell does not share the protocol of every number reported in its column."
        )
    return notes


#: The benchmark config a results folder keeps (``ptgpo bench`` writes it: the config its cells ran with).
CONFIG_FILE = "config.yaml"


def _config(folder: Path, problems: list[RecordProblem]) -> str | None:
    """``folder``'s benchmark config as its name and the first 12 hex digits of its SHA-256 (which
    tells two configs of one name apart); None when there is none, a problem when it cannot be read."""
    path = folder / CONFIG_FILE
    if not os.path.lexists(path):
        return None
    try:
        data = read_input(path)
    except (OSError, ValueError) as error:
        problems.append(RecordProblem(path, "unreadable", str(error).removeprefix(f"{path}: ")))
        return None
    try:
        name = load_yaml(data.decode("utf-8"), name=str(path)).get("name")
    except (ValueError, AttributeError, yaml.YAMLError):  # not UTF-8, not YAML, not a mapping
        name = None
    named = f"{name} " if isinstance(name, str) and name.strip() else ""
    return f"{named}({path}, sha256 {hashlib.sha256(data).hexdigest()[:12]})"


def build_leaderboard(
    results_dir: str | os.PathLike | Sequence[str | os.PathLike],
    reported: ReportedResults | None = None,
    reference_methods: Sequence[str] = DEFAULT_REFERENCE_METHODS,
    decisions_tolerance: float = DECISIONS_TOLERANCE,
    keep_short_runs: bool = False,
) -> Leaderboard:
    """Read ``results_dir`` (see :mod:`leaderboard.records`), or several results folders as one, and
    aggregate it; a cell (environment, method, seed) found in two folders is refused, naming both files."""
    folders = [results_dir] if isinstance(results_dir, (str, os.PathLike)) else list(results_dir)
    records: list[tuple[Path, ResultRecord]] = []
    problems: list[RecordProblem] = []
    seen: dict[tuple[str, str, int], Path] = {}  # a cell -> its record in an earlier folder
    for folder in folders:
        found, unusable = read_records_with_paths(folder)
        for path, record in found:
            cell = (record.env_label, record.method, record.seed)
            if cell in seen:
                raise LeaderboardError(f"{path} and {seen[cell]} are both {record.method} on {record.env_label}, "
                                       f"seed {record.seed}; leave one of the folders out, or delete one record")
        seen.update(((r.env_label, r.method, r.seed), path) for path, r in found)
        records += found
        problems += unusable
    board = aggregate(records, problems, reported, reference_methods, decisions_tolerance, keep_short_runs)
    configs = [_config(Path(folder), board.problems) for folder in folders]
    if any(configs):
        board.provenance.append(("Config", "; ".join(config for config in configs if config)))
    board.results_dir = Path(folders[0])
    board.smoke_run = any((Path(folder) / SMOKE_MARKER).is_file() for folder in folders)
    return board
