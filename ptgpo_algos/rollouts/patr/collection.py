"""PATR: process-scorer guided adaptive tree rollouts (arXiv 2607.15610), the ``patr`` rollout strategy.

PATR changes the rollout only; any estimator then runs over its leaves (the paper: plain GRPO). Per
task, on the episode engine:

1. ``initial_branches`` (B0) branches start from reset and play in lockstep, so all active branches
   of a group have taken the same number of turns.
2. Every ``every`` (K) turns (a *checkpoint*), the group's active branches are scored by a process
   scorer (:data:`SCORERS`; with a ``judge``, ``s = lam * s_judge + (1 - lam) * s_scorer``).
3. A branch scoring below ``median(s) - alpha`` is pruned (:func:`score_prunes`).
4. The ``top_k`` best of the others (ties in random order) are each replaced by ``children`` (M)
   branches forked from their state: the branch goes on as one child and M - 1 new ones are restored
   from its snapshot into free slots, sharing its steps (the same :class:`~ptgpo_algos.records.Step`
   objects, as prefix-tree rollouts do). Expansion stops once the group would exceed ``max_leaves``
   leaves (:func:`expansions`).
5. The others go on. After every turn, a branch whose last ``repeat_limit`` (Θ) actions were the same
   is pruned at once (:func:`repeats`): a degenerate loop stops costing decisions then, not at the next
   checkpoint.
6. The group is done when no branch is active. Pruned branches stay in the group as leaves, the
   negatives of the paper: a pruned leaf's return is what its steps earned plus ``pruned_reward`` on its
   last step (recorded in ``step.extras["pruned_reward"]``); ``Trajectory.meta["pruned"]`` says why
   (``score`` or ``repeat``).

Process scores choose where to branch and what to prune and never enter a reward. What the paper leaves
open is a key of :class:`PatrConfig` with a stated default: the pruned leaf's reward (0: a negative like
a failure), the group's largest size (10: B0 = 4 plus two leaves per expansion at checkpoints 13, 26
and 39 of a 50-turn cap, the paper's SWE setting), the blend's λ (0.5), and K where the paper gives
none (:data:`DEFAULT_EVERY`).

Scorers (:data:`SCORERS`, an open registry; entry-point group ``ptgpo.scorers``) are functions
``(branches, finished) -> scores``: ``branches`` the active :class:`Branch` es of a group, ``finished``
the step lists of the group's leaves so far. ``progress`` reads the environment's ``progress()``
(Household subgoals, Sokoban boxes on targets, FrozenLake and MiniGrid's DoorKey/MultiRoom distance to
the goal); ``value`` is the group's own Monte-Carlo value of each branch's state (:func:`value_scores`);
``auto`` (default) is ``progress`` where the environment reports it, else ``value``. A judge model (the
paper's Skywork PRM on the last 10 steps, or a 7B LLM judge) is a scorer registered the same way, that
reads each branch's task, steps and observation, and is named by ``scorer`` or ``judge``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ptgpo_algos.records import Batch, Step, Task
from ptgpo_algos.rollouts.episodes import Episode
from ptgpo_algos.rollouts.patr.settings import DEFAULT_EVERY, EVERY, SCORERS, PatrConfig
from ptgpo_algos.rollouts.collection import Collection, Leaf, RolloutStats, play, sent_action, task_vectors

__all__ = ["DEFAULT_EVERY", "SCORERS", "Branch", "PatrConfig", "PatrStats", "auto_scorer", "collect_patr_rollouts",
           "expansions", "process_scores", "progress_scorer", "repeats", "score_prunes", "value_scorer", "value_scores"]


# ----------------------------------------------------------------------------------------- the math
def score_prunes(scores: Sequence[float], alpha: float) -> np.ndarray:
    """Which branches a checkpoint prunes: those scoring below ``median(scores) - alpha``."""
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0:
        return np.zeros(0, dtype=bool)
    return scores < np.median(scores) - alpha


def expansions(scores: Sequence[float], eligible: Sequence[bool], top_k: int, room: int,
               order: Sequence[int]) -> list[int]:
    """The branches to expand: the ``min(top_k, room)`` best-scoring ``eligible`` ones, ties broken by
    ``order`` (a permutation: lower first), best first."""
    ranked = sorted((i for i in range(len(scores)) if eligible[i]), key=lambda i: (-scores[i], order[i]))
    return ranked[: max(0, min(top_k, room))]


def repeats(actions: Sequence[str], limit: int | None) -> bool:
    """Whether the last ``limit`` actions are all the same one (never with ``limit`` None)."""
    return limit is not None and len(actions) >= limit and len(set(actions[-limit:])) == 1


def value_scores(keys: Sequence[str], finished: Sequence[Sequence[Step]]) -> list[float]:
    """The group's Monte-Carlo value of each state: the mean return of the finished leaves that
    visited the state (``state_key``; each leaf once), else the mean return of all finished leaves
    (0 with none yet)."""
    returns = [sum(step.reward for step in leaf) for leaf in finished]
    visits: dict[str, list[float]] = {}
    for leaf, outcome in zip(finished, returns):
        for key in {step.state_key for step in leaf}:
            visits.setdefault(key, []).append(outcome)
    baseline = float(np.mean(returns)) if returns else 0.0
    return [float(np.mean(visits[key])) if key in visits else baseline for key in keys]


# ----------------------------------------------------------------------------------------- scorers
@dataclass(frozen=True)
class Branch:
    """An active branch at a checkpoint, as a process scorer sees it: the task, its steps from the
    episode's start (contexts, actions, rewards), where it is now, and the environment's
    ``progress()`` there (None where the environment does not report it)."""

    task: str
    steps: Sequence[Step]
    observation: str
    state_key: str
    progress: float | None


def progress_scorer(branches: Sequence[Branch], finished: Sequence[Sequence[Step]]) -> list[float]:
    """The environment's ``progress()`` of each branch's state."""
    if any(branch.progress is None for branch in branches):
        raise ValueError("PATR's progress scorer needs the environment's progress(), which this environment does "
                         "not report; use scorer: value or auto")
    return [float(branch.progress) for branch in branches]


def value_scorer(branches: Sequence[Branch], finished: Sequence[Sequence[Step]]) -> list[float]:
    """:func:`value_scores` of each branch's state."""
    return value_scores([branch.state_key for branch in branches], finished)


def auto_scorer(branches: Sequence[Branch], finished: Sequence[Sequence[Step]]) -> list[float]:
    """``progress`` where the environment reports it for every branch, else ``value``."""
    if all(branch.progress is not None for branch in branches):
        return progress_scorer(branches, finished)
    return value_scorer(branches, finished)


def process_scores(scorer: str, judge: str | None, lam: float, branches: Sequence[Branch],
                   finished: Sequence[Sequence[Step]]) -> np.ndarray:
    """The branches' scores by ``scorer`` or, with a ``judge``, ``lam * s_judge + (1 - lam) * s_scorer``."""
    scores = _scores(scorer, branches, finished)
    if judge is not None:
        scores = lam * _scores(judge, branches, finished) + (1 - lam) * scores
    return scores


def _scores(name: str, branches: Sequence[Branch], finished: Sequence[Sequence[Step]]) -> np.ndarray:
    scores = np.asarray(SCORERS.get(name)(branches, finished), dtype=float)
    if scores.shape != (len(branches),) or not np.all(np.isfinite(scores)):
        raise ValueError(f"process scorer {name!r} must return one finite score per branch ({len(branches)}), "
                         f"got {scores.tolist()!r:.200}")
    return scores


@dataclass
class PatrStats(RolloutStats):
    """:class:`~ptgpo_algos.rollouts.collection.RolloutStats` plus PATR's counts (in the metrics row as ``patr_*``)."""

    groups: int = 0
    leaves: int = 0
    checkpoints: int = 0  # (group, checkpoint) pairs scored
    expansions: int = 0
    pruned_score: int = 0
    pruned_repeat: int = 0

    def as_dict(self) -> dict[str, float]:
        """The rollout counts plus PATR's: branches, checkpoints, expansions, prunings and leaves per group."""
        return {
            **super().as_dict(),
            "patr_branches": self.started, "patr_checkpoints": self.checkpoints, "patr_expansions": self.expansions,
            "patr_pruned_score": self.pruned_score, "patr_pruned_repeat": self.pruned_repeat,
            "patr_leaves_per_group": self.leaves / self.groups if self.groups else 0.0,
        }


# ----------------------------------------------------------------------------------------- collection
def collect_patr_rollouts(
    policy: Any,
    tasks: Sequence[Task],
    settings: PatrConfig,
    *,
    rng: np.random.Generator | None = None,
    generator: Any = None,
    env_backend: str = "in-process",
    env_workers: int | None = None,
    env_options: dict[str, Any] | None = None,
    max_decisions: int | None = None,
    expert: bool = False,
) -> tuple[Batch, PatrStats]:
    """PATR's groups for ``tasks`` (the module docstring), the arguments as
    :func:`~ptgpo_algos.rollouts.collection.collect_rollouts` takes them; ``settings.every`` None means 5."""
    settings = settings if settings.every is not None else dataclasses.replace(settings, every=EVERY)
    collection = PatrCollection(policy, tasks, settings, rng if rng is not None else np.random.default_rng(0),
                                generator, expert=expert)
    return play(collection, task_vectors(tasks, settings.max_leaves, env_backend, env_workers, env_options),
                max_decisions)


class PatrCollection(Collection):
    """PATR's groups on the episode engine: each group owns ``max_leaves`` slots of its vector
    environment, B0 started and the others free for forks; checkpoints run between steps (``regroup``)."""

    def __init__(self, policy: Any, tasks: Sequence[Task], settings: PatrConfig, rng: np.random.Generator,
                 generator: Any, *, expert: bool = False):
        super().__init__(policy, tasks, settings.max_leaves, settings.initial_branches, False, "uniform", rng,
                         generator, expert=expert)
        self.settings = settings
        self.stats: PatrStats = PatrStats()
        self.free: list[list[int]] = []  # per group: its slots free for forks
        self.used: set[tuple[int, int]] = set()  # (id(vector), slot) of the slots reset once
        self.pruned: dict[int, str] = {}  # id(leaf) -> why it was pruned

    def start(self, vectors: list[tuple[Any, int]]) -> list[Episode]:
        """Start ``initial_branches`` branches a group; the group's other slots, up to ``max_leaves``, are kept free
        for forks."""
        live = super().start(vectors)
        first_free = self.settings.initial_branches
        self.free = [list(range(first + first_free, first + self.settings.max_leaves)) for _, first in vectors]
        self.used = {(id(e.vector), e.slot) for e in live}
        return live

    def run(self, vectors: list[tuple[Any, int]], max_decisions: int | None) -> None:
        """Play the groups in the episode engine until no branch is active, checkpointing between steps."""
        self.engine.run(self.start(vectors), self.act, self.on_transition, send=sent_action, achieved=True,
                        budget=max_decisions, regroup=self.regroup)

    def after_episode(self, episode: Episode, leaf: Leaf) -> Episode | None:
        """An ended branch frees its slot."""
        self.free[leaf.group].append(episode.slot)
        return None

    def going_on(self, episode: Episode, leaf: Leaf) -> Episode | None:
        """A branch whose last ``repeat_limit`` actions are equal is pruned."""
        limit = self.settings.repeat_limit
        if limit is not None and repeats([step.sent for step in leaf.steps[-limit:]], limit):
            self.prune(episode, "repeat")
            return None
        return episode

    def prune(self, episode: Episode, reason: str) -> None:
        """End ``episode``'s branch as a pruned leaf (its last step is its own: pruning follows a step)."""
        leaf: Leaf = episode.state
        reward = self.settings.pruned_reward
        if reward:
            last = leaf.steps[-1]
            last.reward += reward
            last.extras["pruned_reward"] = reward
        self.pruned[id(leaf)] = reason
        self.finish(leaf, episode.info)
        self.free[leaf.group].append(episode.slot)
        if reason == "score":
            self.stats.pruned_score += 1
        else:
            self.stats.pruned_repeat += 1

    def regroup(self, live: list[Episode]) -> list[Episode]:
        """Checkpoints of the groups whose branches have just taken a multiple of K turns: score, prune,
        expand; the live episodes in order, pruned ones left out and forks after their parent."""
        groups: dict[int, list[Episode]] = {}
        for episode in live:
            groups.setdefault(episode.state.group, []).append(episode)
        every = self.settings.every
        due = [g for g, episodes in groups.items()
               if len(episodes[0].state.steps) > 0 and len(episodes[0].state.steps) % every == 0]
        if not due:
            return live
        progress = iter(self.engine.call([e for g in due for e in groups[g]], "progress"))
        forks: dict[int, list[Episode]] = {}
        ended: set[int] = set()
        for g in due:
            episodes = groups[g]
            scores = self.score(g, episodes, [next(progress) for _ in episodes])
            ended |= self.checkpoint(g, episodes, scores, forks)
        out = []
        for episode in live:
            if id(episode) not in ended:
                out.append(episode)
                out += forks.get(id(episode), [])
        return out

    def score(self, g: int, episodes: list[Episode], progress: list[float | None]) -> np.ndarray:
        """The process scores of a group's active branches (with the judge blended in, if any)."""
        branches = [Branch(e.info["task"], tuple(e.state.steps), e.observation, e.info["state_key"], p)
                    for e, p in zip(episodes, progress)]
        finished = [leaf.steps for leaf in self.groups[g].finished]
        return process_scores(self.settings.scorer, self.settings.judge, self.settings.lam, branches, finished)

    def checkpoint(self, g: int, episodes: list[Episode], scores: np.ndarray,
                   forks: dict[int, list[Episode]]) -> set[int]:
        """Prune and expand one group's branches; returns the ids of the episodes pruned, and puts the
        new children of each expanded episode in ``forks``."""
        settings, stats = self.settings, self.stats
        stats.checkpoints += 1
        pruned = score_prunes(scores, settings.alpha)
        for episode in (e for e, p in zip(episodes, pruned) if p):
            self.prune(episode, "score")
        leaves = len(self.groups[g].finished) + int((~pruned).sum())
        room = (settings.max_leaves - leaves) // (settings.children - 1)
        chosen = expansions(scores, ~pruned, settings.top_k, room, self.rng.permutation(len(episodes)))
        parents = [episodes[i] for i in chosen]
        for parent, snapshot in zip(parents, self.engine.snapshots(parents)):
            forks[id(parent)] = [self.fork(parent, snapshot) for _ in range(settings.children - 1)]
            stats.expansions += 1
        return {id(e) for e, p in zip(episodes, pruned) if p}

    def fork(self, parent: Episode, snapshot: Any) -> Episode:
        """A child of ``parent`` in a free slot of its group, restored to its state and sharing its steps."""
        leaf: Leaf = parent.state
        slot = self.free[leaf.group].pop(0)
        if (id(parent.vector), slot) not in self.used:
            # Gymnasium's wrappers refuse a step before the slot's first reset, whatever restore did.
            self.engine.reset(parent.vector, [slot], [self.groups[leaf.group].task.seed])
            self.used.add((id(parent.vector), slot))
        self.engine.restore(parent.vector, slot, snapshot)
        depth = len(leaf.steps)
        self.stats.started += 1
        self.stats.decisions_saved += depth
        self.stats.tokens_saved += sum(len(step.response_ids or ()) for step in leaf.steps)
        child = Leaf(leaf.group, list(leaf.nodes), list(leaf.steps), branch_point=depth)
        return Episode(parent.vector, slot, parent.observation, parent.info, list(parent.history),
                       index=parent.index, state=child)

    def leaf_meta(self, group: Any, index: int, leaf: Leaf) -> dict[str, Any]:
        """A leaf's ``Trajectory.meta``, with why it was pruned (None: it finished)."""
        return {**super().leaf_meta(group, index, leaf), "pruned": self.pruned.get(id(leaf))}

    def batch(self) -> Batch:
        """The finished and pruned leaves of every group, counted in the stats."""
        batch = super().batch()
        self.stats.groups = len(batch)
        self.stats.leaves = sum(len(group) for group in batch)
        return batch

