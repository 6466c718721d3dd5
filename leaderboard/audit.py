"""What the records say about how far their numbers can be compared: the compute each method spent,
whether its evaluation was held out, and which code wrote them.

* Compute (:data:`COMPUTE_FIELDS`): the mean over a method's records of one environment of the
  decisions (environment steps), training episodes, trained tokens and CPU seconds; None where a
  record does not carry the figure (records written before it existed). A matched decision budget
  does not match the rest: a tree rollout plays more, shorter episodes.
* Held-out evaluation: the mean ``eval_overlap`` (the fraction of evaluation episodes that started in
  a layout the run trained on) of a method's records of one environment; a cell above 0 is marked
  :data:`OVERLAP_MARK`, as its "held-out" success partly measures memory. None: not measured.
* Code: the records' commits (``provenance.commit``, ``+dirty`` when the code differed from it); a
  table built from more than one, or from records without provenance beside records with it, says so.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from leaderboard.records import ResultRecord

__all__ = ["COMPUTE_FIELDS", "OVERLAP_MARK", "commit_note", "commits", "compute_means", "overlap_mean"]

COMPUTE_FIELDS = ("decisions", "episodes", "trained_tokens", "cpu_time_s")
OVERLAP_MARK = "§"
#: How a record without provenance is counted among the commits.
UNRECORDED = "not recorded"


def compute_means(records: Sequence[ResultRecord]) -> dict[str, float | None]:
    """Each :data:`COMPUTE_FIELDS` figure's mean over ``records`` (None unless every record has it)."""
    means: dict[str, float | None] = {}
    for name in COMPUTE_FIELDS:
        values = [getattr(record, name) for record in records]
        means[name] = math.fsum(values) / len(values) if values and None not in values else None
    return means


def overlap_mean(records: Sequence[ResultRecord]) -> float | None:
    """The mean ``eval_overlap`` of ``records`` (None unless every record measured it)."""
    values = [record.eval_overlap for record in records]
    return math.fsum(values) / len(values) if values and None not in values else None


def _commit(record: ResultRecord) -> str:
    provenance = record.provenance or {}
    commit = provenance.get("commit")
    if not isinstance(commit, str):
        return UNRECORDED
    return commit[:12] + ("+dirty" if provenance.get("dirty") else "")


def commits(records: Sequence[ResultRecord]) -> dict[str, int]:
    """How many of ``records`` each commit wrote (:data:`UNRECORDED` for those without provenance),
    most first."""
    return dict(Counter(_commit(record) for record in records).most_common())


def commit_note(counts: dict[str, int]) -> str | None:
    """The table's warning when its records come from more than one commit (or some carry none)."""
    if len(counts) < 2:
        return None
    listed = ", ".join(f"{commit} ({count})" for commit, count in counts.items())
    return (f"Mixed code: these records were written by {len(counts)} commits, {listed} records each; "
            "a method's meaning or its numbers may differ between them.")
