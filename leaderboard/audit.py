"""What the records say about how far their numbers can be compared: the compute each method spent,
whether its evaluation was held out, and which code wrote them.

* Compute (:data:`COMPUTE_FIELDS`): the mean over a method's records of one environment of the
  decisions (environment steps), training episodes, trained tokens and CPU seconds; None where a
  record does not carry the figure (records written before it existed). A matched decision budget
  does not match the rest: a tree rollout plays more, shorter episodes.
* Held-out evaluation: the mean ``eval_overlap`` (the fraction of evaluation episodes that started in
  a layout the run trained on) of a method's records of one environment; a cell above 0 is marked
  :data:`OVERLAP_MARK`, as its "held-out" success partly measures memory. None: not measured.
  Likewise the mean ``eval_invalid_rate``, the fraction of held-out steps whose action was not
  admissible (the tidy CSV's column of that name).
* Code: the records' commits (``provenance.commit``, ``+dirty`` when the code differed from it); a
  table built from more than one, or from records without provenance beside records with it, says so.
* Provenance (:func:`provenance`): what a page says of where its numbers come from, as the records
  say it: the commits, when the runs were written (``created_at``, in UTC), the machines (``cpu``,
  ``cores``, ``platform``) and the software (``python``, ``versions``), each value with
  how many records carry it when they differ.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone

from leaderboard.records import ResultRecord

__all__ = ["COMPUTE_FIELDS", "OVERLAP_MARK", "commit_note", "commits", "compute_means", "field_mean", "provenance"]

COMPUTE_FIELDS = ("decisions", "episodes", "trained_tokens", "cpu_time_s")
OVERLAP_MARK = "§"
#: How a record without provenance is counted among the commits.
UNRECORDED = "not recorded"


def field_mean(records: Sequence[ResultRecord], name: str) -> float | None:
    """The mean of the record field ``name`` over ``records`` (None unless every record has it)."""
    values = [getattr(record, name) for record in records]
    return math.fsum(values) / len(values) if values and None not in values else None


def compute_means(records: Sequence[ResultRecord]) -> dict[str, float | None]:
    """Each :data:`COMPUTE_FIELDS` figure's mean over ``records`` (None unless every record has it)."""
    return {name: field_mean(records, name) for name in COMPUTE_FIELDS}


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


#: At most this many distinct values of one provenance item are listed; the rest are counted.
_LISTED = 4


def _counted(values: Sequence[str], total: int) -> str:
    """One value, or the distinct values with how many records carry each, most first."""
    counts = Counter(values).most_common()
    if len(counts) == 1 and counts[0][1] == total:
        return counts[0][0]
    listed = [f"{value} ({count} records)" for value, count in counts[:_LISTED]]
    rest = len(counts) - _LISTED
    return "; ".join(listed) + (f"; {rest} other value(s)" if rest > 0 else "")


def _machine(provenance: dict) -> str:
    # Threads are a run's setting, not the machine's: they would split one machine in two.
    parts = [str(provenance.get("cpu") or "CPU not recorded")]
    if isinstance(provenance.get("cores"), int):
        parts.append(f"{provenance['cores']} cores")
    if provenance.get("platform"):
        parts.append(str(provenance["platform"]))
    return ", ".join(parts)


def _software(provenance: dict) -> str:
    versions = provenance.get("versions") if isinstance(provenance.get("versions"), dict) else {}
    parts = [f"Python {provenance['python']}"] if provenance.get("python") else []
    return ", ".join(parts + [f"{name} {version}" for name, version in versions.items()]) or "not recorded"


def _period(records: Sequence[ResultRecord]) -> str:
    times = sorted(datetime.fromisoformat(record.created_at) for record in records)
    # A time written without its zone is taken as UTC, the zone every writer of the suite uses.
    first, last = (t.astimezone(timezone.utc) if t.tzinfo else t.replace(tzinfo=timezone.utc)
                   for t in (times[0], times[-1]))
    start = f"{first:%Y-%m-%d %H:%M}"
    end = last.strftime("%H:%M" if last.date() == first.date() else "%Y-%m-%d %H:%M")
    return f"{start} UTC" if f"{last:%Y-%m-%d %H:%M}" == start else f"{start} to {end} UTC"


def provenance(records: Sequence[ResultRecord]) -> list[tuple[str, str]]:
    """Where ``records``' numbers come from, as ``(item, text)`` pairs: the code, when they were
    written, the machine and the software (see the module docstring); nothing for no records."""
    if not records:
        return []
    total = len(records)
    described = [record.provenance for record in records if record.provenance]
    unrecorded = [UNRECORDED] * (total - len(described))
    return [
        ("Commit", _counted([_commit(record) for record in records], total)),
        ("Written", f"{_period(records)}, {total} records"),
        ("Machine", _counted([_machine(p) for p in described] + unrecorded, total)),
        ("Software", _counted([_software(p) for p in described] + unrecorded, total)),
    ]
