"""The leaderboard's data model: its columns, cells and rows, the pairwise comparisons and the
probabilities of improvement, and the board itself (:class:`Leaderboard`), with the constants they
are read by; :mod:`leaderboard.aggregate` builds one from result records."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leaderboard.inference import ALPHA
from leaderboard.records import RecordProblem, ResultRecord
from leaderboard.reported import ReportedSource
from leaderboard.stats import Estimate

__all__ = ["ALFWORLD_TYPE_ORDER", "DECISIONS_TOLERANCE", "DEFAULT_REFERENCE_METHODS", "SMOKE_MARKER", "SMOKE_NOTICE",
           "Cell", "Column", "Comparison", "Improvement", "Leaderboard", "LeaderboardError", "Row", "mean_se",
           "overall_metric", "task_columns", "trials_k"]

ALFWORLD_TYPE_ORDER = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2")
DEFAULT_REFERENCE_METHODS = ("expert",)
# RL runs stop after the iteration that reaches the budget, so spent decisions differ a little; more
# than this (a fraction of the smallest) and the column would compare unequal amounts of training.
DECISIONS_TOLERANCE = 0.02
#: A file a results folder holds when its cells are a smoke run (``ptgpo bench --quick``): every table
#: built from it then says so (:data:`SMOKE_NOTICE`).
SMOKE_MARKER = "SMOKE_RUN"
SMOKE_NOTICE = ("Smoke run (ptgpo bench --quick): a tiny budget that checks that every stage runs; its numbers "
                "do not compare the methods (run ptgpo bench without --quick for that).")


class LeaderboardError(ValueError):
    """The records cannot be put in one table; the message names the files and the fix."""


@dataclass(frozen=True)
class Column:
    """A leaderboard column: an environment label and a metric (a task type, ``All``, ``success`` or
    ``score``)."""

    env_label: str
    metric: str


@dataclass
class Cell:
    """``mean`` in % (or score units); ``se`` the standard error over ``n`` seeds (None when n = 1);
    ``low``/``high`` the 95 % interval over seeds and ``over`` what it resampled (None: no interval).

    For reported cells ``n`` is None and ``se`` holds the ± printed in the paper, if any.
    """

    mean: float
    se: float | None
    n: int | None
    best: bool = False
    low: float | None = None
    high: float | None = None
    over: str | None = None
    protocol_mark: bool = False  # measured under another protocol than a reported number of its column
    # The mean fraction of evaluation episodes that started in a trained layout (None: not measured).
    overlap: float | None = None
    # The mean fraction of held-out steps whose action was not admissible (None: not measured).
    invalid_rate: float | None = None

    @property
    def overlap_mark(self) -> bool:
        """Whether the cell's evaluation was not held out (some overlap with training)."""
        return self.overlap is not None and self.overlap > 0


@dataclass
class Row:
    """A leaderboard row: one method's cells, its mean success (with its interval and IQM), rank and, for
    reported rows, model and source."""

    method: str
    kind: str  # "rl" | "baseline" | "reported"
    section: str  # "measured" | "reference" | "reported"
    cells: dict[Column, Cell] = field(default_factory=dict)
    mean_success: float | None = None
    envs_covered: int = 0
    rank: int | None = None
    # Why a measured row has no rank (see the module docstring): UNRANKED_SINGLE_SEED or UNRANKED_NO_SPREAD.
    unranked: str | None = None
    best_mean_success: bool = False
    model: str | None = None
    source: str | None = None
    mean_success_estimate: Estimate | None = None
    iqm: Estimate | None = None
    # Per-seed values of each measured column, for the IQM, the probability of improvement and plots.
    values: dict[Column, list[float]] = field(default_factory=dict)
    # The protocol a row was measured under, per environment label (leaderboard.protocols); a
    # reported row's under the key "" (its source's or its own).
    protocols: dict[str, str] = field(default_factory=dict)
    # Per environment label, the mean compute of the row's records (leaderboard.audit.compute_means).
    compute: dict[str, dict[str, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """Welch's test of ``better`` against ``worse`` (``better`` has the higher mean) in one family:
    ``scope`` is ``"mean success"`` (over the environments both cover) or a column. ``difference`` is
    in points with its 95 % t interval; ``p`` the two-sided p-value and ``p_holm`` its Holm-adjusted
    value over the family (both None when a side has a single seed); ``separated`` when ``p_holm`` is
    below :data:`leaderboard.inference.ALPHA`."""

    scope: str
    column: Column | None
    better: str
    worse: str
    difference: float
    low: float | None
    high: float | None
    p: float | None
    p_holm: float | None

    @property
    def separated(self) -> bool:
        """Whether the family-wise corrected test separates the pair."""
        return self.p_holm is not None and self.p_holm < ALPHA


@dataclass(frozen=True)
class Improvement:
    """P(``better`` > ``worse``) over the ``tasks`` both methods have (see
    :func:`leaderboard.stats.improvement_probability`)."""

    better: str
    worse: str
    estimate: Estimate
    tasks: int


@dataclass
class Leaderboard:
    """The aggregated table: columns, ranked and reference rows, the reported table, failed and unreadable
    records, budgets and the records behind the curves."""

    columns: list[Column]
    rows: list[Row]  # measured rows in rank order, then reference rows
    reported_columns: list[Column] = field(default_factory=list)
    reported_rows: list[Row] = field(default_factory=list)
    failed: list[tuple[Path, ResultRecord]] = field(default_factory=list)
    problems: list[RecordProblem] = field(default_factory=list)
    budgets: dict[str, int | None] = field(default_factory=dict)  # env label -> RL budget
    budget_units: dict[str, str] = field(default_factory=dict)  # env label -> its budget's unit
    # One legend line per environment whose measured cells carry the protocol mark.
    protocol_notes: list[str] = field(default_factory=list)
    sources: dict[str, ReportedSource] = field(default_factory=dict)
    caveat: str | None = None
    # The ok measured records with their files, for the learning curves.
    records: list[tuple[Path, ResultRecord]] = field(default_factory=list)
    results_dir: Path | None = None
    #: The records come from a smoke run (a folder holds :data:`SMOKE_MARKER`).
    smoke_run: bool = False
    # Every ordered pair of ranked methods sharing a task, in rank order of ``better`` then ``worse``.
    improvements: list[Improvement] = field(default_factory=list)
    # Welch tests of the ranked methods, family by family: mean success first, then each column.
    comparisons: list[Comparison] = field(default_factory=list)
    # How many measured records each commit wrote (leaderboard.audit.commits), and the warning when
    # there is more than one.
    commits: dict[str, int] = field(default_factory=dict)
    commit_note: str | None = None
    # One legend line per environment with a cell whose evaluation was not held out.
    overlap_notes: list[str] = field(default_factory=list)
    # One line per environment with RL runs kept although they stopped before their budget.
    short_run_notes: list[str] = field(default_factory=list)
    # Where the numbers come from, as (item, text) pairs (leaderboard.audit.provenance), then each
    # results folder's benchmark config.
    provenance: list[tuple[str, str]] = field(default_factory=list)

    def ranked(self) -> list[Row]:
        """The measured rows, in rank order, the unranked ones last (reference rows left out)."""
        return [row for row in self.rows if row.section == "measured"]

    def task_scores(self, row: Row) -> list[tuple[Column, list[float]]]:
        """The row's per-seed values of each task column it has (see :func:`task_columns`)."""
        return [(c, row.values[c]) for c in task_columns(self.columns) if c in row.values]


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
    """The overall metric of an environment's columns: ``All`` where it has task types, else ``success``."""
    metrics = {c.metric for c in env_columns}
    return "All" if "All" in metrics else "success"


def task_columns(columns: Sequence[Column]) -> list[Column]:
    """Each environment's tasks: its task-type columns, or its ``success`` column without types."""
    tasks = []
    for env in dict.fromkeys(c.env_label for c in columns):
        env_columns = [c for c in columns if c.env_label == env]
        if overall_metric(env_columns) == "All":
            tasks += [c for c in env_columns if c.metric not in ("All", "score") and trials_k(c.metric) is None]
        else:
            tasks += [c for c in env_columns if c.metric == "success"]
    return tasks


def trials_k(metric: str) -> tuple[str, str] | None:
    """``("pass_at" or "pass_hat", k)`` for a ``pass@k`` or ``pass^k`` column's metric, else None."""
    for prefix, name in (("pass@", "pass_at"), ("pass^", "pass_hat")):
        if metric.startswith(prefix) and metric[len(prefix):].isdigit():
            return name, metric[len(prefix):]
    return None
