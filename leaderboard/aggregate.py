"""From result records to a leaderboard: checks, per-cell statistics, ranks and best marks.

Table layout. Rows are methods; columns are ``(env_label, metric)`` pairs. An environment whose
records carry ``success_by_type`` gets one column per task type (ALFWorld's order Pick, Look, Clean,
Heat, Cool, Pick2 first, other types after in alphabetical order) and an ``All`` column (the overall
``final_success``); one whose records carry ``score`` gets ``score`` and ``success`` columns; any other
environment gets a single ``success`` column. Success values are shown in % (records store fractions).

Cells. A cell is the mean over seeds with its standard error ``SE = std(ddof=1) / sqrt(n)`` and the
seed count ``n``; with ``n = 1`` there is no SE. Only records with ``status == "ok"`` are averaged;
failed records are listed separately.

Ranking. A method's *mean success* is the unweighted mean, over the environments it has results for,
of its overall-success cell (``All`` or ``success``; task-type and score columns are not counted, so
every environment weighs the same). Methods covering more environments rank first; among those
covering the same number, higher mean success ranks first; equal keys share a rank (1, 2, 2, 4).
Reference methods (by default ``expert``, which reads the environment's privileged state) are shown
but neither ranked nor eligible for best marks. The best cell of each column is the highest mean
among ranked measured rows (all tied cells are marked).

Refusals (:class:`LeaderboardError`, naming the files): records written under another schema
version; RL records of one environment column with different budgets; one env label used with
different ``env_id``/``env_kwargs``; two records for the same (env label, method, seed); one method
recorded with different ``method_kind``. A table mixing these would compare unlike things silently.
Corrupt or invalid record files are not refusals: they are reported and the rest is aggregated.

Reported rows (from papers, :mod:`leaderboard.reported`, or records with ``method_kind ==
"reported"``) form a separate table with their own columns; they are never averaged with measured
records, ranked, or marked best.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leaderboard.records import RecordProblem, ResultRecord, read_records_with_paths
from leaderboard.reported import ReportedResults, ReportedSource

__all__ = [
    "ALFWORLD_TYPE_ORDER",
    "Cell",
    "Column",
    "Leaderboard",
    "LeaderboardError",
    "Row",
    "aggregate",
    "build_leaderboard",
    "check_records",
    "mean_se",
    "rank_keys",
]

ALFWORLD_TYPE_ORDER = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")
DEFAULT_REFERENCE_METHODS = ("expert",)
# Means closer than this are ties (floating-point noise from averaging, not a real difference).
_TIE = 1e-9


class LeaderboardError(ValueError):
    """The records cannot be put in one table; the message names the files and the fix."""


@dataclass(frozen=True)
class Column:
    env_label: str
    metric: str


@dataclass
class Cell:
    """``mean`` in % (or score units); ``se`` the standard error over ``n`` seeds (None when n = 1).

    For reported cells ``n`` is None and ``se`` holds the ± printed in the paper, if any.
    """

    mean: float
    se: float | None
    n: int | None
    best: bool = False


@dataclass
class Row:
    method: str
    kind: str  # "rl" | "baseline" | "reported"
    section: str  # "measured" | "reference" | "reported"
    cells: dict[Column, Cell] = field(default_factory=dict)
    mean_success: float | None = None
    envs_covered: int = 0
    rank: int | None = None
    best_mean_success: bool = False
    model: str | None = None
    source: str | None = None


@dataclass
class Leaderboard:
    columns: list[Column]
    rows: list[Row]  # measured rows in rank order, then reference rows
    reported_columns: list[Column] = field(default_factory=list)
    reported_rows: list[Row] = field(default_factory=list)
    failed: list[tuple[Path, ResultRecord]] = field(default_factory=list)
    problems: list[RecordProblem] = field(default_factory=list)
    budgets: dict[str, int | None] = field(default_factory=dict)  # env label -> RL budget
    sources: dict[str, ReportedSource] = field(default_factory=dict)
    caveat: str | None = None
    # The ok measured records with their files, for the learning curves.
    records: list[tuple[Path, ResultRecord]] = field(default_factory=list)
    results_dir: Path | None = None


def mean_se(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and standard error ``std(ddof=1) / sqrt(n)``; the SE is None for a single value."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_se needs at least one value")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)


def overall_metric(env_columns: Iterable[Column]) -> str:
    metrics = {c.metric for c in env_columns}
    return "All" if "All" in metrics else "success"


def _env_columns(env_label: str, records: list[ResultRecord]) -> list[Column]:
    types = {t for r in records for t in r.success_by_type}
    ordered = [t for t in ALFWORLD_TYPE_ORDER if t in types] + sorted(types - set(ALFWORLD_TYPE_ORDER))
    has_score = any(r.score is not None for r in records)
    if ordered:
        metrics = ordered + ["All"] + (["score"] if has_score else [])
    else:
        metrics = ["score", "success"] if has_score else ["success"]
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
    fraction = record.success_by_type.get(column.metric)
    return None if fraction is None else 100.0 * fraction


def _files(items: Iterable[tuple[Path, ResultRecord]]) -> str:
    return ", ".join(sorted(p.name for p, _ in items))


def check_records(records: list[tuple[Path, ResultRecord]], problems: Sequence[RecordProblem] = ()) -> None:
    """Raise :class:`LeaderboardError` listing every refusal found (see the module docstring)."""
    messages = []
    wrong_version = [p for p in problems if p.kind == "schema_version"]
    if wrong_version:
        messages.append(
            "records written under another schema version (re-run those cells or move the files "
            "out of the results directory):\n" + "\n".join(f"  {p}" for p in wrong_version)
        )
    by_env: dict[str, list[tuple[Path, ResultRecord]]] = defaultdict(list)
    for item in records:
        by_env[item[1].env_label].append(item)
    for env_label, items in sorted(by_env.items()):
        identities = defaultdict(list)
        for path, record in items:
            key = (record.env_id, repr(sorted(record.env_kwargs.items())))
            identities[key].append((path, record))
        if len(identities) > 1:
            lines = [
                f"  {env_id} {kwargs}: {_files(group)}" for (env_id, kwargs), group in identities.items()
            ]
            messages.append(
                f"env label {env_label!r} is used for different environments (give each its own "
                "label):\n" + "\n".join(lines)
            )
        budgets = defaultdict(list)
        for path, record in items:
            if record.method_kind == "rl" and record.status == "ok":
                budgets[record.budget].append((path, record))
        if len(budgets) > 1:
            lines = [f"  budget {b}: {_files(group)}" for b, group in sorted(budgets.items(), key=str)]
            messages.append(
                f"RL records for {env_label!r} have different budgets; a column compares methods at one "
                "budget (move the others to their own results directory):\n" + "\n".join(lines)
            )
    cells = defaultdict(list)
    kinds = defaultdict(lambda: defaultdict(list))
    for path, record in records:
        # Reported records live in their own table, so they may reuse a measured method's name.
        reported = record.method_kind == "reported"
        cells[(record.env_label, record.method, record.seed, reported)].append((path, record))
        if not reported:
            kinds[record.method][record.method_kind].append((path, record))
    for (env_label, method, seed, _), group in sorted(cells.items()):
        if len(group) > 1:
            messages.append(
                f"{len(group)} records for env {env_label!r}, method {method!r}, seed {seed} "
                f"(keep one): {_files(group)}"
            )
    for method, by_kind in sorted(kinds.items()):
        if len(by_kind) > 1:
            lines = [f"  {kind}: {_files(group)}" for kind, group in sorted(by_kind.items())]
            messages.append(f"method {method!r} is recorded with different method_kind:\n" + "\n".join(lines))
    if messages:
        raise LeaderboardError("refusing to build the leaderboard:\n" + "\n".join(messages))


def _rows_from_records(
    records: list[ResultRecord], columns: list[Column], reference_methods: Sequence[str]
) -> list[Row]:
    """One row per (method, source), each cell the mean and SE of that column's values."""
    overall = {
        env: overall_metric([c for c in columns if c.env_label == env])
        for env in {c.env_label for c in columns}
    }
    grouped: dict[tuple[str, str | None], list[ResultRecord]] = defaultdict(list)
    for record in records:
        grouped[(record.method, record.source if record.method_kind == "reported" else None)].append(record)
    rows = []
    for (method, source), group in grouped.items():
        kind = group[0].method_kind
        section = (
            "reported" if kind == "reported" else "reference" if method in reference_methods else "measured"
        )
        row = Row(method, kind, section, source=source)
        for column in columns:
            values = [
                v
                for r in group
                if r.env_label == column.env_label
                if (v := _value(r, column, overall[column.env_label])) is not None
            ]
            if values:
                mean, se = mean_se(values)
                row.cells[column] = Cell(mean, se, len(values))
        _set_mean_success(row, columns)
        rows.append(row)
    return rows


def _set_mean_success(row: Row, columns: list[Column]) -> None:
    envs = dict.fromkeys(c.env_label for c in columns)
    overall_cells = []
    for env in envs:
        metric = overall_metric([c for c in columns if c.env_label == env])
        cell = row.cells.get(Column(env, metric))
        if cell is not None:
            overall_cells.append(cell.mean)
    row.envs_covered = len(overall_cells)
    row.mean_success = math.fsum(overall_cells) / len(overall_cells) if overall_cells else None


def rank_keys(rows: Sequence[Row]) -> list[int]:
    """Competition ranks (1, 2, 2, 4) by (environments covered desc, mean success desc)."""
    keys = [
        (-row.envs_covered, -(row.mean_success if row.mean_success is not None else -math.inf))
        for row in rows
    ]
    ranks = []
    for key in keys:
        better = sum(
            1 for other in keys if other[0] < key[0] or (other[0] == key[0] and other[1] < key[1] - _TIE)
        )
        ranks.append(better + 1)
    return ranks


def _mark_best(rows: Sequence[Row], columns: Sequence[Column]) -> None:
    """Mark the top cell(s) of each column, and the rank-1 rows' mean success, among ``rows``."""
    for column in columns:
        cells = [row.cells[column] for row in rows if column in row.cells]
        if cells:
            top = max(cell.mean for cell in cells)
            for cell in cells:
                cell.best = cell.mean >= top - _TIE
    for row in rows:
        # Not the highest mean: a method with results on fewer environments may have that.
        row.best_mean_success = row.rank == 1 and row.mean_success is not None


def aggregate(
    records: list[tuple[Path, ResultRecord]],
    problems: Sequence[RecordProblem] = (),
    reported: ReportedResults | None = None,
    reference_methods: Sequence[str] = DEFAULT_REFERENCE_METHODS,
) -> Leaderboard:
    """Check ``records`` (refusing mixed budgets, versions, ...) and build the leaderboard."""
    check_records(records, problems)
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
    for row, rank in zip(ranked, rank_keys(ranked), strict=True):
        row.rank = rank
    _mark_best(ranked, columns)
    ranked.sort(key=lambda row: (row.rank, row.method))
    reference = sorted((row for row in rows if row.section == "reference"), key=lambda row: row.method)

    budgets = {}
    for env, env_records in by_env.items():
        rl_budgets = {r.budget for r in env_records if r.method_kind == "rl"}
        budgets[env] = rl_budgets.pop() if rl_budgets else None

    reported_by_env: dict[str, list[ResultRecord]] = defaultdict(list)
    for record in reported_records:
        reported_by_env[record.env_label].append(record)
    reported_columns = [c for env in sorted(reported_by_env) for c in _env_columns(env, reported_by_env[env])]
    reported_rows = _rows_from_records(reported_records, reported_columns, reference_methods)
    sources: dict[str, ReportedSource] = {}
    caveat = None
    if reported is not None:
        for paper_row in reported.rows:
            row = Row(
                paper_row.method, "reported", "reported", model=paper_row.model, source=paper_row.source
            )
            for env_label, metrics in paper_row.results.items():
                for metric, value in metrics.items():
                    column = Column(env_label, metric)
                    if column not in reported_columns:
                        reported_columns.append(column)
                    row.cells[column] = Cell(value.value, value.pm, None)
            reported_rows.append(row)
        sources = dict(reported.sources)
        caveat = reported.caveat
    reported_columns = _ordered(reported_columns)

    return Leaderboard(
        columns=columns,
        rows=ranked + reference,
        reported_columns=reported_columns,
        reported_rows=reported_rows,
        failed=failed,
        problems=[p for p in problems if p.kind != "schema_version"],
        budgets=budgets,
        sources=sources,
        caveat=caveat,
        records=[(p, r) for p, r in ok if r.method_kind != "reported"],
    )


def build_leaderboard(
    results_dir: str | os.PathLike,
    reported: ReportedResults | None = None,
    reference_methods: Sequence[str] = DEFAULT_REFERENCE_METHODS,
) -> Leaderboard:
    """Read ``results_dir`` (see :mod:`leaderboard.records`) and aggregate it."""
    records, problems = read_records_with_paths(results_dir)
    board = aggregate(records, problems, reported, reference_methods)
    board.results_dir = Path(results_dir)
    return board
