"""The refusals of records that cannot share one leaderboard (:func:`check_records`): another schema
version, unequal budgets or training in one environment column, one label for two environments, a
cell recorded twice, a method of two kinds. Each message names the files and the fix.

Runs that stopped before their budget (:func:`short_runs`: a guard such as ``run.iterations`` stopped
a run of a cost budget, or a run of an iteration budget trained fewer) are refused unless the caller
keeps them knowingly (``keep_short_runs``); the leaderboard then lists them under its table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from leaderboard.board import DECISIONS_TOLERANCE, LeaderboardError
from leaderboard.records import RecordProblem, ResultRecord

__all__ = ["check_records", "short_runs", "spent_text"]

def _files(items: Iterable[tuple[Path, ResultRecord]]) -> str:
    return ", ".join(sorted(p.name for p, _ in items))


def _spent_decisions_message(
    env_label: str, items: list[tuple[Path, ResultRecord]], tolerance: float
) -> str | None:
    """The refusal for RL runs of one column whose spent decisions differ by more than ``tolerance``
    of the smallest, or None."""
    spent = defaultdict(list)
    for path, record in items:
        spent[record.decisions].append((path, record))
    if not spent:
        return None
    low, high = min(spent), max(spent)
    if high - low <= tolerance * low or tolerance == math.inf:  # inf * 0 is NaN
        return None
    lines = [f"  {decisions} decisions: {_files(group)}" for decisions, group in sorted(spent.items())]
    return (
        f"RL records for {env_label!r} spent different numbers of policy decisions ({low} to {high}, "
        f"more than {tolerance:.0%} apart), so the column would compare unequal amounts of training "
        "(re-run the cells to a matched budget, move the outliers to their own results directory, or "
        "accept the spread knowingly with a larger decisions tolerance):\n" + "\n".join(lines)
    )


def _is_short(record: ResultRecord) -> bool:
    """Whether an RL run of an iteration or cost budget stopped before that budget stopped it (an
    iteration budget: another number of iterations trained; a cost budget: no ``budget_overshoot``, so
    an iteration cap or a time limit stopped it). A decision budget is checked by its spread instead."""
    if record.budget_unit == "iterations":
        return record.iterations is not None and record.iterations != record.budget
    if record.budget_unit == "decisions":
        return False
    return record.budget_overshoot is None or getattr(record, record.budget_unit) is None


def short_runs(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """The ok RL runs of ``records`` that stopped before their budget (see :func:`_is_short`)."""
    return [r for r in records if r.method_kind == "rl" and r.status == "ok" and _is_short(r)]


def spent_text(record: ResultRecord) -> str:
    """What a short run spent of its budget, as "SPENT of BUDGET UNIT"."""
    spent = record.iterations if record.budget_unit == "iterations" else getattr(record, record.budget_unit)
    return f"{spent} of {record.budget} {record.budget_unit}"


def _short_runs_message(env_label: str, items: list[tuple[Path, ResultRecord]]) -> str | None:
    """The refusal for RL runs of an iteration or cost budget that stopped before it, or None. Their
    spent decisions differ by design: the matched unit is the iterations or the cost."""
    short = [(p, r) for p, r in items if _is_short(r)]
    what = ("did not train their budget's iterations" if items[0][1].budget_unit == "iterations"
            else f"stopped before their budget of {items[0][1].budget_unit} stopped them")
    return _unequal_training(env_label, what, short, spent_text)


def _unequal_training(env_label: str, what: str, short: list[tuple[Path, ResultRecord]],
                      spent: Callable[[ResultRecord], str]) -> str | None:
    """The refusal naming each of the ``short`` records with what it ``spent``, or None when there is none."""
    if not short:
        return None
    lines = [f"  {spent(r)}: {p.name}" for p, r in sorted(short, key=lambda item: item[0])]
    return (
        f"RL records for {env_label!r} {what}, so the column would compare unequal amounts of training (re-run "
        "the cells, move them to their own results directory, or keep them knowingly with --keep-short-runs: "
        "they are then listed under the table):\n" + "\n".join(lines)
    )


def _environment_refusals(env_label: str, items: list[tuple[Path, ResultRecord]],
                          decisions_tolerance: float, keep_short_runs: bool) -> list[str]:
    """What refuses one environment's records: one label for two environments, mixed RL budgets, or
    spent budgets that differ (runs stopped before their budget unless ``keep_short_runs``)."""
    messages = []
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
    rl = [(p, r) for p, r in items if r.method_kind == "rl" and r.status == "ok"]
    budgets = defaultdict(list)
    for path, record in rl:
        budgets[record.budget, record.budget_unit].append((path, record))
    if len(budgets) > 1:
        lines = [f"  budget {b} {unit}: {_files(group)}" for (b, unit), group in sorted(budgets.items(), key=str)]
        messages.append(
            f"RL records for {env_label!r} have different budgets; a column compares methods at one "
            "budget (move the others to their own results directory):\n" + "\n".join(lines)
        )
    elif rl and rl[0][1].budget_unit != "decisions":
        if not keep_short_runs and (message := _short_runs_message(env_label, rl)) is not None:
            messages.append(message)
    elif (message := _spent_decisions_message(env_label, rl, decisions_tolerance)) is not None:
        messages.append(message)
    return messages


def _cell_refusals(records: list[tuple[Path, ResultRecord]]) -> list[str]:
    """Two records of one cell (environment, method, seed), and a method recorded as two kinds."""
    messages = []
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
    return messages


def check_records(
    records: list[tuple[Path, ResultRecord]],
    problems: Sequence[RecordProblem] = (),
    decisions_tolerance: float = DECISIONS_TOLERANCE,
    keep_short_runs: bool = False,
) -> None:
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
        messages += _environment_refusals(env_label, items, decisions_tolerance, keep_short_runs)
    messages += _cell_refusals(records)
    if messages:
        raise LeaderboardError("refusing to build the leaderboard:\n" + "\n".join(messages))
