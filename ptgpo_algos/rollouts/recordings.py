"""Recorded rollouts: an iteration's groups as rows of plain data, one row per decision.

With ``run.record_rollouts: N`` the trainer's :class:`~ptgpo_algos.training.callbacks.RolloutRecorder` writes
every Nth iteration's groups to ``rollouts/iteration-NNNNNN.jsonl`` in the run folder, one file per
iteration, written atomically; ``ptgpo export`` gathers them (:mod:`ptgpo_algos.export`).

A row is one *distinct* decision of a group: in a prefix tree a shared step is one decision, played
once and trained once, so it is one row, not one per trajectory through it. Its fields:

* where it is: ``iteration``, ``group`` (index in the iteration), ``node`` (index in the group, in
  the order the group's trajectories first reach it), ``parent`` (the node before it; None at an
  episode's first decision), ``step`` (its index in its trajectories), ``trajectories`` (the indices
  of the group's trajectories through it; one for a linear group) and ``ends`` (those that end here)
  with their ``outcomes`` (each one's ``Trajectory.meta``: seed, won, leaf...);
* what the policy saw: ``env_id``, ``task``, ``observation``, ``history`` (``[observation, action]``
  pairs), ``admissible_actions``;
* what it did and got: ``response`` (the raw text; None when not recorded), ``response_tokens`` (its
  length in tokens, 0 when none), ``entropy`` (the policy's at the decision; None when none),
  ``action`` (what the environment got), ``valid``, ``reward``, ``state_key`` and ``extras`` (the
  step's JSON-safe extras); the two figures are what estimators read besides the rewards (PlanPO's
  per-token credit, EMPG), so that ``ptgpo show`` computes any estimator on the recorded groups;
* what it was trained with: ``advantages`` (the estimator's, one per trajectory in ``trajectories``)
  and ``advantage``, their mean, which the loss used (:func:`~ptgpo_algos.updates.samples.flatten_batch`).

:func:`groups_from_rows` rebuilds the groups, a shared step once, as the same object in every
trajectory through it, so that recording and reading back give the groups the trainer held.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.records import Batch, Context, Group, Step, Trajectory
from ptgpo_algos.files import atomic_write_text, read_jsonl

__all__ = ["RECORDING", "group_rows", "groups_from_rows", "read_recordings", "recording_paths",
           "remove_recordings", "write_iteration"]

#: The name of an iteration's recording in ``rollouts/``.
RECORDING = "iteration-{:06d}.jsonl"
_RECORDING = re.compile(r"iteration-(\d{6,})\.jsonl")


def _json_safe(extras: dict[str, Any]) -> dict[str, Any]:
    """The extras that are plain data (what JSON keeps as it is); others are left out."""
    kept = {}
    for key, value in extras.items():
        try:
            if json.loads(json.dumps(value)) == value:
                kept[key] = value
        except (TypeError, ValueError):
            continue
    return kept


def _finite_or_none(value: float) -> float | None:
    """``value`` as a float, None where it is not finite (JSON has no NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def _context_fields(step: Step) -> dict[str, Any]:
    context = step.context
    if context is None:
        return {"task": None, "observation": None, "history": [], "admissible_actions": []}
    return {"task": context.task, "observation": context.observation,
            "history": [[observation, action] for observation, action in context.history],
            "admissible_actions": list(context.admissible_actions)}


def group_rows(iteration: int, index: int, env_id: str, group: Group,
               advantages: Sequence[Sequence[float]]) -> list[dict[str, Any]]:
    """The rows of one group (see the module docstring): one per distinct step, by identity."""
    rows: dict[int, dict[str, Any]] = {}
    for t, (trajectory, trajectory_adv) in enumerate(zip(group, advantages)):
        parent = None
        for position, (step, advantage) in enumerate(zip(trajectory.steps, trajectory_adv)):
            row = rows.get(id(step))
            if row is None:
                row = rows[id(step)] = {
                    "iteration": iteration, "group": index, "node": len(rows), "parent": parent, "step": position,
                    "trajectories": [], "advantages": [], "ends": [], "outcomes": [], "env_id": env_id,
                    **_context_fields(step),
                    "response": step.decision.text if step.decision is not None else None,
                    "response_tokens": len(step.response_ids) if step.response_ids is not None else 0,
                    "entropy": _finite_or_none(step.decision.entropy) if step.decision is not None else None,
                    "action": step.sent, "valid": step.valid, "reward": float(step.reward),
                    "state_key": step.state_key, "extras": _json_safe(step.extras),
                }
            row["trajectories"].append(t)
            row["advantages"].append(float(advantage))
            parent = row["node"]
        if trajectory.steps:
            last = rows[id(trajectory.steps[-1])]
            last["ends"].append(t)
            last["outcomes"].append(_json_safe(trajectory.meta))
    out = list(rows.values())
    for row in out:
        row["advantage"] = sum(row["advantages"]) / len(row["advantages"])
    return out


def groups_from_rows(rows: Iterable[dict[str, Any]]) -> tuple[Batch, list[list[list[float]]]]:
    """The groups (in ``(iteration, group)`` order) and their advantages that ``rows`` were made from;
    a step shared by trajectories is one :class:`~ptgpo_algos.records.Step` in all of them."""
    by_group: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in rows:
        by_group.setdefault((row["iteration"], row["group"]), []).append(row)
    batch: Batch = []
    advantages: list[list[list[float]]] = []
    for key in sorted(by_group):
        group_rows_ = sorted(by_group[key], key=lambda row: row["node"])
        size = 1 + max(t for row in group_rows_ for t in row["trajectories"])
        steps: list[list[Step]] = [[] for _ in range(size)]
        adv: list[list[float]] = [[] for _ in range(size)]
        metas: list[dict[str, Any]] = [{} for _ in range(size)]
        for row in group_rows_:
            step = _step(row)
            for t, advantage in zip(row["trajectories"], row["advantages"]):
                steps[t].append(step)
                adv[t].append(advantage)
            for t, meta in zip(row["ends"], row["outcomes"]):
                metas[t] = meta
        batch.append([Trajectory(steps=s, meta=m) for s, m in zip(steps, metas)])
        advantages.append(adv)
    return batch, advantages


def _step(row: dict[str, Any]) -> Step:
    context = None
    if row["task"] is not None:
        context = Context(row["task"], row["observation"], list(row["admissible_actions"]),
                          [(observation, action) for observation, action in row["history"]])
    return Step(state_key=row["state_key"], action=row["action"], reward=row["reward"], valid=row["valid"],
                context=context, extras=dict(row["extras"]))


def write_iteration(folder: Path, iteration: int, env_id: str, batch: Batch,
                    advantages: StepAdvantages | Sequence[Sequence[Sequence[float]]]) -> Path:
    """Write an iteration's groups with their advantages (one per step) to ``folder/iteration-NNNNNN.jsonl``,
    atomically; its path."""
    nested = StepAdvantages.of(batch, advantages).nested()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORDING.format(iteration)
    lines = [json.dumps(row) for index, (group, group_adv) in enumerate(zip(batch, nested))
             for row in group_rows(iteration, index, env_id, group, group_adv)]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path


def recording_paths(folder: Path) -> list[Path]:
    """The recordings in ``folder``, by iteration."""
    if not folder.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in folder.iterdir() if (match := _RECORDING.fullmatch(path.name))]
    return [path for _, path in sorted(found)]


def read_recordings(folder: Path) -> list[dict[str, Any]]:
    """Every row of the recordings in ``folder``, by iteration, then group and node."""
    return [row for path in recording_paths(folder) for row in read_jsonl(path)]


def remove_recordings(folder: Path, after: int) -> None:
    """Remove the recordings in ``folder`` of iterations after ``after``: a run resumed from an earlier
    checkpoint plays them again, and may stop before reaching them."""
    for path in recording_paths(folder):
        if int(_RECORDING.fullmatch(path.name).group(1)) > after:
            path.unlink()
