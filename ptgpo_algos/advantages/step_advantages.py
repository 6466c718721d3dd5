"""A batch's advantages as one float array indexed by step, from the estimator to the loss.

The estimator computes one advantage per step of :class:`~ptgpo_algos.advantages.table.StepTable`
(groups, then trajectories, then time); :class:`StepAdvantages` keeps that array with the offsets
that locate each step, so that whitening across ranks, the placebo's permutation, an objective's
routing, the metrics row and the training samples all read and write the same array instead of
re-flattening nested lists. The nested form (groups of trajectories of float lists) is only made at
an edge that needs it: the public ``compute_advantages`` and the rollout recordings' JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ptgpo_algos.records import Trajectory

__all__ = ["StepAdvantages"]


@dataclass(frozen=True, eq=False)
class StepAdvantages:
    """``values[i]`` is the advantage of the batch's step ``i`` in group, trajectory, time order.

    ``trajectory_length`` (one per trajectory, batch-wide, empty ones included) and ``group_size``
    (trajectories per group) are the index: trajectory ``j``'s steps are
    ``values[trajectory_start[j]:trajectory_start[j] + trajectory_length[j]]`` and group ``g``'s
    trajectories are ``group_start[g] .. group_start[g] + group_size[g] - 1``.
    """

    values: np.ndarray  # (n_steps,) float64
    trajectory_length: np.ndarray  # (n_trajectories,) int64
    group_size: np.ndarray  # (n_groups,) int64

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=np.float64).reshape(-1)
        lengths = np.asarray(self.trajectory_length, dtype=np.int64).reshape(-1)
        sizes = np.asarray(self.group_size, dtype=np.int64).reshape(-1)
        if int(lengths.sum()) != values.shape[0] or int(sizes.sum()) != lengths.shape[0]:
            raise ValueError(f"advantages: {values.shape[0]} values for trajectories of {int(lengths.sum())} steps, "
                             f"{lengths.shape[0]} trajectories for groups of {int(sizes.sum())}; the index must "
                             "describe the values")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "trajectory_length", lengths)
        object.__setattr__(self, "group_size", sizes)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_nested(cls, nested: Sequence[Sequence[Sequence[float]]]) -> StepAdvantages:
        """From groups of trajectories of per-step floats (``compute_advantages``' form)."""
        lengths = [len(trajectory) for group in nested for trajectory in group]
        values = [float(a) for group in nested for trajectory in group for a in trajectory]
        return cls(np.asarray(values, dtype=np.float64), np.asarray(lengths, dtype=np.int64),
                   np.asarray([len(group) for group in nested], dtype=np.int64))

    @classmethod
    def of(cls, batch: Sequence[Sequence[Trajectory]],
           advantages: StepAdvantages | Sequence[Sequence[Sequence[float]]]) -> StepAdvantages:
        """``advantages`` as a :class:`StepAdvantages` (nested lists are converted), checked against
        ``batch``'s shape: one value per step of each trajectory."""
        out = advantages if isinstance(advantages, StepAdvantages) else cls.from_nested(advantages)
        lengths = [len(t.steps) if isinstance(t, Trajectory) else len(t) for group in batch for t in group]
        if [len(group) for group in batch] != out.group_size.tolist() or lengths != out.trajectory_length.tolist():
            raise ValueError(f"advantages: shaped {out.group_size.tolist()} groups / {out.n_steps} steps, but the "
                             f"batch has {[len(group) for group in batch]} / {sum(lengths)} steps; give one "
                             "advantage per step of every trajectory")
        return out

    def with_values(self, values: np.ndarray) -> StepAdvantages:
        """The same index with other per-step ``values`` (whitened, permuted, routed)."""
        return StepAdvantages(values, self.trajectory_length, self.group_size)

    # ------------------------------------------------------------------ the index
    @property
    def n_steps(self) -> int:
        """Steps in the batch."""
        return int(self.values.shape[0])

    @property
    def n_groups(self) -> int:
        """Groups in the batch."""
        return int(self.group_size.shape[0])

    @property
    def trajectory_start(self) -> np.ndarray:
        """(n_trajectories,) the index of each trajectory's first step in :attr:`values`."""
        return np.cumsum(self.trajectory_length) - self.trajectory_length

    @property
    def group_start(self) -> np.ndarray:
        """(n_groups,) the batch-wide index of each group's first trajectory."""
        return np.cumsum(self.group_size) - self.group_size

    @property
    def step_group(self) -> np.ndarray:
        """(n_steps,) the group of each step."""
        trajectory_group = np.repeat(np.arange(self.n_groups, dtype=np.int64), self.group_size)
        return np.repeat(trajectory_group, self.trajectory_length)

    # ------------------------------------------------------------------ per group
    def nonzero_per_group(self) -> np.ndarray:
        """(n_groups,) how many of each group's steps have a non-zero advantage."""
        return np.bincount(self.step_group[self.values != 0.0], minlength=self.n_groups)

    def zeroed_groups(self, groups: Sequence[bool]) -> StepAdvantages:
        """These advantages with every step of the groups ``groups`` marks set to 0."""
        mask = np.asarray(groups, dtype=bool)
        if mask.shape != (self.n_groups,):
            raise ValueError(f"advantages: {mask.shape[0]} group marks for {self.n_groups} groups")
        return self.with_values(np.where(mask[self.step_group], 0.0, self.values))

    def nested(self) -> list[list[list[float]]]:
        """Groups of trajectories of float lists (the JSON of a rollout recording, ``compute_advantages``)."""
        flat = self.values.tolist()
        starts = self.trajectory_start.tolist()
        per_trajectory = [flat[s:s + n] for s, n in zip(starts, self.trajectory_length.tolist())]
        return [per_trajectory[s:s + n] for s, n in zip(self.group_start.tolist(), self.group_size.tolist())]
