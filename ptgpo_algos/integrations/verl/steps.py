"""Step-level credit on verl's multi-turn rows: one row per episode, our advantages on each step's tokens.

verl's agent loops (``verl.experimental.agent_loop``, verl 0.9) return one row per episode: the
response holds every turn, the model's tokens (``response_mask`` 1) between the environment's
(``response_mask`` 0). An agent loop that plays one of our environments records, per decision, a
:class:`DecisionSpan` (the state key the step was taken in, the action, the environment's reward,
whether it was admissible, the node id and its parent's in the group's tree, and where the decision's
tokens lie in the response) and returns them in ``AgentLoopOutput.extra_fields[STEPS_KEY]``, beside
``extra_fields[TRAJECTORY_KEY]``; verl's ``AgentLoopWorker._postprocess`` turns every extra field into a
column of ``non_tensor_batch``, which verl keeps through its batch operations (concat, chunk,
reorder, repeat, saving to disk).

:func:`compute_step_advantage` then reads those columns with ``uid`` (the group), runs our estimator
on the group's trajectories (the steps of each row, in order: a PTGPO tree's shared prefixes are the
steps that rows of a group share, by state and action) and writes each step's advantage on the
tokens of its span that ``response_mask`` marks, so the environment's tokens between two turns and
the padding get none: the step-wise mask. A trainer calls it in place of verl's
``compute_advantage``, one line, as with :func:`ptgpo_algos.integrations.verl.compute_advantage`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ptgpo_algos.advantages import compute_advantages
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.integrations.verl import check_bridged

__all__ = ["DECISION_KEY", "DecisionSpan", "STEPS_KEY", "TRAJECTORY_KEY", "compute_decision_advantage",
           "compute_step_advantage", "decision_advantages", "decision_columns", "episodes_to_batch",
           "spans_to_token_advantages"]

#: ``extra_fields`` / ``non_tensor_batch`` key of a row's decisions (a list of :meth:`DecisionSpan.to_dict`).
STEPS_KEY = "ptgpo_steps"
#: ``extra_fields`` / ``non_tensor_batch`` key of a row's trajectory id.
TRAJECTORY_KEY = "ptgpo_trajectory"
#: ``extra_fields`` key of a one-decision row's fields (the per-decision agent loop's outputs).
DECISION_KEY = "ptgpo_decision"


@dataclass(frozen=True)
class DecisionSpan:
    """One decision of an episode row: our step's fields and its tokens ``[start, end)`` in the response."""

    state_key: str
    action: str
    reward: float
    valid: bool
    start: int
    end: int
    node: str
    parent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain values, as verl's ``extra_fields`` and its object columns hold them."""
        return asdict(self)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any], where: str) -> "DecisionSpan":
        """The span of ``value``; a missing key or a bad value raises ``ValueError`` naming ``where``."""
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping of a decision's fields, got {type(value).__name__}")
        missing = sorted({"state_key", "action", "reward", "valid", "start", "end", "node"} - set(value))
        if missing:
            raise ValueError(f"{where}: missing {missing}; an agent loop records DecisionSpan(...).to_dict()")
        start, end = value["start"], value["end"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)) or not 0 <= start < end:
            raise ValueError(f"{where}: start and end must be integers with 0 <= start < end, got {start}, {end}")
        return cls(state_key=str(value["state_key"]), action=str(value["action"]), reward=float(value["reward"]),
                   valid=bool(value["valid"]), start=start, end=end, node=str(value["node"]),
                   parent=None if value.get("parent") is None else str(value["parent"]))


def _row_spans(row: int, record: Any, width: int) -> list[DecisionSpan]:
    """Row ``row``'s spans, checked: in order, not overlapping, inside the response, a chain of nodes."""
    if record is None or isinstance(record, (str, bytes)) or not hasattr(record, "__len__"):
        raise ValueError(f"{STEPS_KEY}[{row}]: expected the row's list of decisions, got {type(record).__name__}")
    spans = [DecisionSpan.from_dict(value, f"{STEPS_KEY}[{row}][{k}]") for k, value in enumerate(record)]
    for k, span in enumerate(spans):
        if span.end > width:
            raise ValueError(f"{STEPS_KEY}[{row}][{k}]: tokens up to {span.end}, but responses are {width} long")
        if k and span.start < spans[k - 1].end:
            raise ValueError(f"{STEPS_KEY}[{row}][{k}]: overlaps the decision before it")
        if k and span.parent != spans[k - 1].node:
            raise ValueError(f"{STEPS_KEY}[{row}][{k}]: parent {span.parent!r} is not the node before it "
                             f"({spans[k - 1].node!r})")
    return spans


def episodes_to_batch(response_mask: torch.Tensor, index: Sequence[Any], steps: Sequence[Any],
                      trajectories: Sequence[Any] | None = None,
                      ) -> tuple[list[list[Trajectory]], list[list[tuple[int, int, int, int, int]]]]:
    """Episode rows as our groups of trajectories (one per row, groups by ``index``) and, per row, where
    each decision went: ``(group, trajectory, step, start, end)``."""
    rows, width = int(response_mask.shape[0]), int(response_mask.shape[-1])
    for name, column in {"index": index, STEPS_KEY: steps, TRAJECTORY_KEY: trajectories}.items():
        if column is not None and len(column) != rows:
            raise ValueError(f"{name}: {len(column)} rows, but response_mask has {rows}")
    groups: dict[str, list[Trajectory]] = {}
    placed: list[list[tuple[int, int, int, int, int]]] = []
    mask = response_mask.bool()
    for row in range(rows):
        spans = _row_spans(row, steps[row], width)
        group = groups.setdefault(str(index[row]), [])
        g, t = list(groups).index(str(index[row])), len(group)
        meta = {"trajectory": str(trajectories[row]) if trajectories is not None else f"row {row}",
                "nodes": [span.node for span in spans]}
        group.append(Trajectory([Step(span.state_key, span.action, span.reward, span.valid,
                                      response_ids=[0] * int(mask[row, span.start:span.end].sum()))
                                 for span in spans], meta))
        placed.append([(g, t, k, span.start, span.end) for k, span in enumerate(spans)])
    return list(groups.values()), placed


def spans_to_token_advantages(advantages: Sequence[Sequence[Sequence[float]]],
                              placed: Sequence[Sequence[tuple[int, int, int, int, int]]],
                              response_mask: torch.Tensor) -> torch.Tensor:
    """Each decision's advantage on its span's tokens that ``response_mask`` marks; zero elsewhere."""
    scores = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    for row, decisions in enumerate(placed):
        for g, t, k, start, end in decisions:
            scores[row, start:end] = float(advantages[g][t][k])
    return scores * response_mask.to(torch.float32)


def compute_step_advantage(data: Any, name: str, **config: Any) -> Any:
    """Our estimator ``name`` (with its ``config``) on a verl ``DataProto`` of episode rows: sets
    ``data.batch["advantages"]`` and ``["returns"]`` (equal, as in verl's GRPO) and returns ``data``."""
    check_bridged(name)
    extras = data.non_tensor_batch
    if STEPS_KEY not in extras:
        raise ValueError(f"non_tensor_batch has no {STEPS_KEY!r}: the agent loop must return each row's decisions in "
                         f"AgentLoopOutput.extra_fields[{STEPS_KEY!r}]")
    mask = data.batch["response_mask"]
    batch, placed = episodes_to_batch(mask, extras["uid"], extras[STEPS_KEY], extras.get(TRAJECTORY_KEY))
    with torch.no_grad():
        scores = spans_to_token_advantages(compute_advantages(name, batch, **config), placed, mask)
    data.batch["advantages"], data.batch["returns"] = scores, scores.clone()
    return data


def decision_columns(decisions: Sequence[Any]) -> dict[str, np.ndarray]:
    """verl's one-row-per-step columns (``traj_uid``, ``anchor_obs``, ``is_action_valid``) of rows
    that each hold one decision's fields (``extra_fields[DECISION_KEY]``), for
    :func:`ptgpo_algos.integrations.verl.compute_advantage`. A trajectory's rows must come in the
    order of its steps (their ``index``); a missing key raises naming the row."""
    columns: dict[str, list[Any]] = {"traj_uid": [], "anchor_obs": [], "is_action_valid": []}
    last: dict[str, int] = {}
    for row, decision in enumerate(decisions):
        if not isinstance(decision, Mapping) or not {"trajectory", "state_key", "valid", "index"} <= set(decision):
            raise ValueError(f"{DECISION_KEY}[{row}]: expected a decision's fields (trajectory, state_key, valid, "
                             f"index), as the ptgpo_env_steps agent loop records them; got {decision!r:.120}")
        trajectory = str(decision["trajectory"])
        if decision["index"] != last.get(trajectory, -1) + 1:
            raise ValueError(f"{DECISION_KEY}[{row}]: step {decision['index']} of trajectory {trajectory} after step "
                             f"{last.get(trajectory)}: sort the rows by trajectory and step first")
        last[trajectory] = int(decision["index"])
        columns["traj_uid"].append(trajectory)
        columns["anchor_obs"].append(str(decision["state_key"]))
        columns["is_action_valid"].append(bool(decision["valid"]))
    return {key: np.array(values, dtype=object) for key, values in columns.items()}


def _decision_rows(groups: Sequence[Any], decisions: Sequence[Any], lengths: Sequence[int] | None,
                   ) -> tuple[list[list[Trajectory]], list[list[tuple[int, int, int]]]]:
    """Decision rows as our groups of trajectories and, per row, the ``(group, trajectory, step)`` of
    every trajectory through it: a tree node's row lies on each leaf it ``leaves`` names (one
    :class:`Step` object shared by them, as in our own trees); a linear row on its ``trajectory``."""
    if len(groups) != len(decisions) or (lengths is not None and len(lengths) != len(decisions)):
        raise ValueError(f"uid, {DECISION_KEY} and the response lengths must have one entry per row; got "
                         f"{len(groups)}, {len(decisions)} and {len(lengths) if lengths is not None else '-'}")
    paths: dict[str, dict[str, dict[int, int]]] = {}  # group -> leaf -> step index -> row
    steps: list[Step] = []
    for row, decision in enumerate(decisions):
        if not isinstance(decision, Mapping) or not {"trajectory", "state_key", "action", "reward", "valid",
                                                     "index"} <= set(decision):
            raise ValueError(f"{DECISION_KEY}[{row}]: expected a decision's fields (trajectory, index, state_key, "
                             f"action, reward, valid), as the ptgpo_env_steps and ptgpo_tree agent loops record "
                             f"them; got {decision!r:.120}")
        group = f"{groups[row]}/{decision.get('tree', '')}"
        steps.append(Step(str(decision["state_key"]), str(decision["action"]), float(decision["reward"]),
                          bool(decision["valid"]), response_ids=[0] * int(lengths[row] if lengths is not None else 1)))
        for leaf in decision.get("leaves") or [decision["trajectory"]]:
            where = paths.setdefault(group, {}).setdefault(str(leaf), {})
            if int(decision["index"]) in where:
                raise ValueError(f"{DECISION_KEY}[{row}]: step {decision['index']} of trajectory {leaf} is also row "
                                 f"{where[int(decision['index'])]}; each decision must come once")
            where[int(decision["index"])] = row
    batch: list[list[Trajectory]] = []
    placed: list[list[tuple[int, int, int]]] = [[] for _ in decisions]
    for g, leaves in enumerate(paths.values()):
        batch.append([])
        for t, (leaf, rows) in enumerate(leaves.items()):
            if sorted(rows) != list(range(len(rows))):
                raise ValueError(f"{DECISION_KEY}: trajectory {leaf} has steps {sorted(rows)}, not 0..{len(rows) - 1}: "
                                 "keep every decision row of a group in the batch")
            batch[g].append(Trajectory([steps[rows[k]] for k in range(len(rows))], {"trajectory": leaf}))
            for k in range(len(rows)):
                placed[rows[k]].append((g, t, k))
    return batch, placed


def decision_advantages(groups: Sequence[Any], decisions: Sequence[Any], name: str,
                        lengths: Sequence[int] | None = None, **config: Any) -> list[float]:
    """Our estimator ``name`` on rows that each hold one decision (``extra_fields[DECISION_KEY]``):
    one advantage per row. ``groups`` is each row's group (verl's ``uid``; a tree's rows also carry
    their ``tree``). A node shared by several leaves of a prefix tree gets the mean of the advantages
    its leaves give it, as our trainer gives a shared step
    (:func:`~ptgpo_algos.updates.samples.flatten_batch`); ``lengths`` (response tokens per row) reach the
    estimators that weigh turns by their length. The rewards are the decisions' own (``reward``)."""
    batch, placed = _decision_rows(groups, decisions, lengths)
    advantages = compute_advantages(name, batch, **config)
    return [sum(advantages[g][t][k] for g, t, k in where) / len(where) for where in placed]


def compute_decision_advantage(data: Any, name: str, **config: Any) -> Any:
    """:func:`decision_advantages` on a verl ``DataProto`` of decision rows (``non_tensor_batch`` ``uid``
    and :data:`DECISION_KEY`, as verl's ``_postprocess`` makes a column of each extra field): each
    row's advantage on its ``response_mask`` tokens in ``data.batch["advantages"]`` and ``["returns"]``."""
    extras = data.non_tensor_batch
    if DECISION_KEY not in extras:
        raise ValueError(f"non_tensor_batch has no {DECISION_KEY!r}: the agent loop must return each row's decision in "
                         f"AgentLoopOutput.extra_fields[{DECISION_KEY!r}] (ptgpo_env_steps, ptgpo_tree)")
    mask = data.batch["response_mask"]
    values = decision_advantages(extras["uid"], extras[DECISION_KEY], name, mask.sum(dim=-1).tolist(), **config)
    scores = torch.tensor(values, dtype=torch.float32, device=mask.device).unsqueeze(-1) * mask.to(torch.float32)
    data.batch["advantages"], data.batch["returns"] = scores, scores.clone()
    return data
