"""BPO's rollouts (Branching Policy Optimization, arXiv 2607.14171), the ``bpo`` rollout strategy.

Per task (a group), on the episode engine, in ``trunks`` slots:

1. ``trunks`` episodes start from reset and play to their end, snapshotting every decision point.
2. When a trunk ends, its ``branch_points`` highest-entropy decisions are chosen
   (:func:`branch_points`: the policy's entropy there, recorded with the decision; ties go to the
   earlier step). The choice looks at the trunk only.
3. At each chosen decision ``forks`` (K) fresh continuations are restored from its snapshot, one after
   the other in the trunk's slot, each sampling its own action there and playing to termination. A
   fork reuses the trunk's prefix (the same :class:`~ptgpo_algos.records.Step` objects) and records
   ``Trajectory.meta["branch_point"]``; the ``bpo`` estimator (:mod:`ptgpo_algos.advantages.bpo`)
   credits its steps from its siblings' returns.

The trunk's own continuation is not one of the K siblings: the choice of the branch point saw the
trunk's later decisions, which depend on its action there, so that action is not a fresh sample given
the choice; the K restored ones are, which keeps the sibling baseline unbiased.

A group has ``trunks * (1 + branch_points * forks)`` leaves at most (fewer where a trunk has fewer
decisions than ``branch_points``); with ``max_decisions`` the leaves still running stop unfinished and
are left out, as in every strategy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ptgpo_algos.records import Batch, Task
from ptgpo_algos.rollouts.episodes import Episode
from ptgpo_algos.rollouts.bpo.settings import BpoConfig
from ptgpo_algos.rollouts.collection import Collection, Leaf, Node, RolloutStats, play, task_vectors

__all__ = ["BpoConfig", "BpoStats", "branch_points", "collect_bpo_rollouts"]


def branch_points(entropies: Sequence[float], count: int) -> list[int]:
    """The steps of the ``count`` highest entropies (NaN: lowest), highest first, ties to the earlier step."""
    values = [-math.inf if math.isnan(value) else float(value) for value in entropies]
    return sorted(range(len(values)), key=lambda t: (-values[t], t))[:count]


@dataclass(kw_only=True)
class BpoStats(RolloutStats):
    """:class:`~ptgpo_algos.rollouts.collection.RolloutStats` plus the branch points chosen and the mean policy
    entropy there (in the metrics row as ``bpo_*``)."""

    branch_points: int = 0
    branch_entropy: float = 0.0  # summed over the branch points

    def as_dict(self) -> dict[str, float]:
        """The rollout counts plus the branch points and their mean entropy."""
        mean = self.branch_entropy / self.branch_points if self.branch_points else 0.0
        return {**super().as_dict(), "bpo_branch_points": self.branch_points, "bpo_branch_entropy": mean}


def collect_bpo_rollouts(
    policy: Any,
    tasks: Sequence[Task],
    settings: BpoConfig,
    *,
    rng: np.random.Generator | None = None,
    generator: Any = None,
    env_backend: str = "in-process",
    env_workers: int | None = None,
    env_options: dict[str, Any] | None = None,
    max_decisions: int | None = None,
    expert: bool = False,
) -> tuple[Batch, BpoStats]:
    """BPO's groups for ``tasks`` (the module docstring); the other arguments as
    :func:`~ptgpo_algos.rollouts.collection.collect_rollouts` takes them (the choice of branch points draws nothing,
    so ``rng`` is unused)."""
    collection = BpoCollection(policy, tasks, settings, generator, expert)
    return play(collection, task_vectors(tasks, settings.trunks, env_backend, env_workers, env_options), max_decisions)


class BpoCollection(Collection):
    """The shared collection with BPO's forks: a finished trunk queues its forks in its own slot, and
    each leaf that ends in that slot hands it the next one."""

    def __init__(self, policy: Any, tasks: Sequence[Task], settings: BpoConfig, generator: Any, expert: bool):
        super().__init__(policy, tasks, settings.leaves, settings.trunks, True, "entropy", np.random.default_rng(0),
                         generator, expert=expert)
        self.settings = settings
        self.stats = BpoStats()
        self.pending: dict[tuple[int, int], list[tuple[Node, Leaf, int]]] = {}

    def after_episode(self, episode: Episode, leaf: Leaf) -> Episode | None:
        """At a leaf's end, queue a trunk's forks and start the slot's next one."""
        slot = (id(episode.vector), episode.slot)
        if leaf.branch_point is None:
            chosen = branch_points([node.entropy for node in leaf.nodes[: len(leaf.steps)]],
                                   self.settings.branch_points)
            self.stats.branch_points += len(chosen)
            self.stats.branch_entropy += sum(leaf.nodes[t].entropy for t in chosen)
            self.pending[slot] = [(leaf.nodes[t], leaf, t) for t in chosen for _ in range(self.settings.forks)]
        queue = self.pending.get(slot)
        if not queue:
            return None
        node, trunk, t = queue.pop(0)
        return self.fork(episode, node, trunk, t)

    def fork(self, finished: Episode, node: Node, trunk: Leaf, t: int) -> Episode:
        """A new leaf in ``finished``'s slot, restored to the trunk's decision point ``t``, sharing its steps before it."""
        node.branched += 1
        self.engine.restore(finished.vector, finished.slot, node.snapshot)
        prefix = trunk.steps[:t]
        self.stats.started += 1
        self.stats.decisions_saved += t
        self.stats.tokens_saved += sum(len(step.response_ids or ()) for step in prefix)
        self.groups[trunk.group].started += 1
        leaf = Leaf(trunk.group, trunk.nodes[: t + 1], list(prefix), branch_point=t)
        return Episode(finished.vector, finished.slot, node.observation, node.info, list(node.history),
                       index=finished.index, state=leaf)
