"""The array form of a batch: one row per step, with states, actions and histories interned to ints.

Every estimator reads a :class:`StepTable` instead of Python objects, so the math is numpy group-bys
(``np.bincount`` / ``np.unique``) over integer keys. Strings are hashed once here, in a single pass.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ptgpo_algos.records import Step, Trajectory

__all__ = ["StepTable", "compact_ids"]


def compact_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Map arbitrary integer keys to ``0 .. n - 1`` (equal keys, equal ids); return ``(ids, n)``."""
    unique, ids = np.unique(keys, return_inverse=True)
    return ids.reshape(-1), int(unique.shape[0])


@dataclass(frozen=True, eq=False)
class StepTable:
    """A batch as flat per-step arrays, ordered by group, then trajectory, then time.

    Ids are interned *per group*: two steps share a ``state`` id iff they are in the same group and
    have equal ``state_key``; the same for ``action``. ``node`` is the prefix-tree node of a step:
    two steps share it iff they are in the same group and their histories
    ``(s_0, a_0, ..., s_{t-1}, a_{t-1}, s_t)`` are equal by content (shared ``Step`` objects and equal
    copies give the same ids). All id ranges are compact: ``0 .. n_states - 1`` and so on.
    """

    group: np.ndarray  # (n_steps,) int64: index of the step's group in the batch
    trajectory: np.ndarray  # (n_steps,) int64: batch-wide index of the step's trajectory
    time: np.ndarray  # (n_steps,) int64: t, the step's position in its trajectory
    state: np.ndarray  # (n_steps,) int64: id of (group, state_key)
    action: np.ndarray  # (n_steps,) int64: id of (group, action)
    node: np.ndarray  # (n_steps,) int64: id of (group, history up to s_t)
    reward: np.ndarray  # (n_steps,) float64: the environment's reward
    valid: np.ndarray  # (n_steps,) bool: the action was admissible
    response_tokens: np.ndarray  # (n_steps,) int64: len(response_ids), 0 where none was recorded
    entropy: np.ndarray  # (n_steps,) float64: the policy's entropy at the step's decision, NaN where none
    #: (n_steps,) float64: the rollout strategy's own reward of the step (``Step.extras["strategy_reward"]``,
    #: 3SPO's composite reward), NaN where none was recorded
    strategy_reward: np.ndarray
    #: (n_steps,) float64: the critic's value of the state the step's decision was taken in
    #: (``Step.extras["value"]``, :mod:`ptgpo_algos.critic`), NaN where none was recorded
    value: np.ndarray
    #: (n_steps,) float64: the turn's advantage a trainer component computed before the estimator ran
    #: (``Step.extras["credit"]``: HiPER's low level, :mod:`ptgpo_algos.hiper.critic`), NaN where none
    credit: np.ndarray
    trajectory_group: np.ndarray  # (n_trajectories,) int64: group of each trajectory
    #: (n_trajectories,) int64: the step at which a trajectory forked from another's prefix
    #: (``Trajectory.meta["branch_point"]``), -1 for one played from reset or given as a step list
    branch_point: np.ndarray
    trajectory_length: np.ndarray  # (n_trajectories,) int64: steps of each trajectory (may be 0)
    #: (n_trajectories,) float64: the critic's value after a trajectory's last step
    #: (``Trajectory.meta["bootstrap_value"]``): 0 where none was recorded (an episode that terminated)
    bootstrap_value: np.ndarray
    group_size: np.ndarray  # (n_groups,) int64: trajectories per group, empty ones included
    n_states: int
    n_actions: int
    n_nodes: int

    @property
    def n_steps(self) -> int:
        """Steps in the batch."""
        return int(self.group.shape[0])

    @property
    def n_trajectories(self) -> int:
        """Trajectories in the batch."""
        return int(self.trajectory_group.shape[0])

    @property
    def n_groups(self) -> int:
        """Groups in the batch."""
        return int(self.group_size.shape[0])

    @classmethod
    def from_batch(cls, batch: Sequence[Sequence[Trajectory]]) -> "StepTable":
        """Flatten ``batch`` (a list of groups, each a list of :class:`Trajectory` or of step lists).

        Raises ``ValueError`` for a malformed batch or a reward that is not a finite number.
        """
        steps, trajectory_group, trajectory_length, group_size, branch_point, bootstrap = _flatten(batch)
        state_keys, actions, reward, valid, response_tokens = _step_columns(steps)
        entropy = np.fromiter(
            (np.nan if step.decision is None else step.decision.entropy for step in steps), dtype=np.float64,
            count=len(steps),
        )
        strategy_reward = np.fromiter((step.extras.get("strategy_reward", np.nan) for step in steps),
                                      dtype=np.float64, count=len(steps))
        value = np.fromiter((step.extras.get("value", np.nan) for step in steps), dtype=np.float64, count=len(steps))
        credit = np.fromiter((step.extras.get("credit", np.nan) for step in steps), dtype=np.float64, count=len(steps))

        lengths = np.asarray(trajectory_length, dtype=np.int64)
        n_trajectories = lengths.shape[0]
        trajectory = np.repeat(np.arange(n_trajectories, dtype=np.int64), lengths)
        group = np.repeat(np.asarray(trajectory_group, dtype=np.int64), lengths)
        time = np.arange(len(steps), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        bad = np.flatnonzero(~np.isfinite(reward))
        if bad.size:
            p = int(bad[0])
            index_in_group = trajectory[p] - trajectory_group.index(int(group[p]))
            raise ValueError(
                f"reward {reward[p]} at batch[{group[p]}][{index_in_group}] step {time[p]} is not "
                f"finite ({bad.size} such rewards); rewards must be finite numbers"
            )
        state, n_states = _intern_per_group(state_keys, group)
        action, n_actions = _intern_per_group(actions, group)
        node, n_nodes = _prefix_tree_nodes(state, n_states, action, n_actions, time)
        return cls(
            group=group,
            trajectory=trajectory,
            time=time,
            state=state,
            action=action,
            node=node,
            reward=reward,
            valid=valid,
            response_tokens=response_tokens,
            entropy=entropy,
            strategy_reward=strategy_reward,
            value=value,
            credit=credit,
            trajectory_group=np.asarray(trajectory_group, dtype=np.int64),
            branch_point=np.asarray(branch_point, dtype=np.int64),
            trajectory_length=lengths,
            bootstrap_value=np.asarray(bootstrap, dtype=np.float64),
            group_size=np.asarray(group_size, dtype=np.int64),
            n_states=n_states,
            n_actions=n_actions,
            n_nodes=n_nodes,
        )

    def to_nested(self, values: np.ndarray) -> list[list[list[float]]]:
        """Split a per-step array into the batch's shape: groups of trajectories of float lists."""
        flat = np.asarray(values, dtype=np.float64).tolist()
        ends = np.cumsum(self.trajectory_length).tolist()
        starts = [0] + ends[:-1]
        per_trajectory = [flat[start:end] for start, end in zip(starts, ends)]
        group_ends = np.cumsum(self.group_size).tolist()
        group_starts = [0] + group_ends[:-1]
        return [per_trajectory[start:end] for start, end in zip(group_starts, group_ends)]


def _flatten(batch: Sequence[Sequence[Trajectory]]) -> tuple[list[Step], list[int], list[int], list[int], list[int],
                                                               list[float]]:
    """The batch's steps in order, each trajectory's group and length, each group's size, each
    trajectory's branch point (-1: none) and its bootstrap value (0: none)."""
    if not _is_list_of(batch):
        raise ValueError(f"batch must be a list of groups, each a list of Trajectory; got {type(batch).__name__}")
    steps: list[Step] = []
    trajectory_group, trajectory_length, group_size, branch_point, bootstrap = [], [], [], [], []
    for g, group in enumerate(batch):
        if not _is_list_of(group):
            raise ValueError(
                f"batch[{g}] must be a group (a list of Trajectory), got {type(group).__name__}; "
                "wrap a single group as [group]"
            )
        for i, trajectory in enumerate(group):
            trajectory_steps = trajectory.steps if isinstance(trajectory, Trajectory) else trajectory
            meta = trajectory.meta if isinstance(trajectory, Trajectory) else {}
            point = meta.get("branch_point")
            if point is not None and (isinstance(point, bool) or not isinstance(point, numbers.Integral) or point < 0):
                raise ValueError(f"batch[{g}][{i}].meta['branch_point'] must be a step index (an integer >= 0) or "
                                 f"None, got {point!r}")
            if not _is_list_of(trajectory_steps):
                raise ValueError(f"batch[{g}][{i}] must be a Trajectory or a list of Step")
            steps.extend(trajectory_steps)
            trajectory_group.append(g)
            trajectory_length.append(len(trajectory_steps))
            branch_point.append(-1 if point is None else int(point))
            bootstrap.append(float(meta.get("bootstrap_value", 0.0)))
        group_size.append(len(group))
    return steps, trajectory_group, trajectory_length, group_size, branch_point, bootstrap


def _step_columns(steps: list[Step]) -> tuple[list, list, np.ndarray, np.ndarray, np.ndarray]:
    """State keys, actions, rewards (float64), validity and response lengths of ``steps``."""
    try:
        state_keys = [step.state_key for step in steps]
        actions = [step.action for step in steps]
        rewards = [step.reward for step in steps]
        valid = np.array([bool(step.valid) for step in steps], dtype=bool)
        response_tokens = np.fromiter(
            (0 if step.response_ids is None else len(step.response_ids) for step in steps),
            dtype=np.int64,
            count=len(steps),
        )
    except AttributeError:
        raise ValueError("every trajectory must be a Trajectory or a list of Step") from None
    try:
        reward = np.asarray(rewards, dtype=np.float64)
        if reward.shape != (len(steps),):
            raise ValueError("a reward is not a scalar")
    except (TypeError, ValueError) as error:
        raise ValueError(f"every Step.reward must be a number: {error}") from None
    return state_keys, actions, reward, valid, response_tokens


def _is_list_of(value: object) -> bool:
    """A list/tuple-like container, not one of the data objects or a string mistaken for one."""
    return isinstance(value, Sequence) and not isinstance(value, (str, Step, Trajectory))


def _intern_per_group(values: list, group: np.ndarray) -> tuple[np.ndarray, int]:
    """Compact ids of ``(group, value)``: two C-speed dict passes over the values, one ``np.unique``."""
    ids = dict.fromkeys(values)
    for index, value in enumerate(ids):  # loops over the distinct values only
        ids[value] = index
    raw = np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))
    return compact_ids(group * max(len(ids), 1) + raw)


def _prefix_tree_nodes(
    state: np.ndarray, n_states: int, action: np.ndarray, n_actions: int, time: np.ndarray
) -> tuple[np.ndarray, int]:
    """Compact ids of the histories ``(group, s_0, a_0, ..., s_t)``, depth by depth.

    The node at depth 0 is the (group-unique) state id; at depth t it is the pair
    ``(edge, s_t)`` with ``edge = (node at t-1, a_{t-1})``. Each depth is two ``np.unique`` calls,
    and every key stays below ``n_steps**2``, so int64 never overflows.
    """
    node = np.empty(time.shape[0], dtype=np.int64)
    order = np.argsort(time, kind="stable")
    bounds = np.searchsorted(time[order], np.arange(int(time.max(initial=-1)) + 2))
    n_nodes = 0
    for depth in range(bounds.shape[0] - 1):
        steps = order[bounds[depth] : bounds[depth + 1]]
        if depth == 0:
            key = state[steps]
        else:
            previous = steps - 1
            edge, _ = compact_ids(node[previous] * max(n_actions, 1) + action[previous])
            key = edge * max(n_states, 1) + state[steps]
        ids, n_new = compact_ids(key)
        node[steps] = ids + n_nodes
        n_nodes += n_new
    return node, n_nodes
