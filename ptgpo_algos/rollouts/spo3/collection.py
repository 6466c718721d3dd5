"""3SPO's rollouts, the ``3spo`` rollout strategy: a ranked backtracking search per task, re-entering
states through ``snapshot``/``restore``, steered by state scores kept across iterations.

Per task (a group), :func:`~ptgpo_algos.rollouts.spo3.search.backtracking_search` runs from the reset state.
Expanding a state restores its snapshot into ``n(s)`` slots of the task's vector environment, samples
one decision in each and steps them: each candidate is a real transition, so it costs one decision of
the budget, and its 3SPO reward ``R`` (novelty, score drop, success; from the state scores of that
moment) ranks it. The best candidate is followed, the others wait on the search's stack with the
snapshot of the state they lead to, and after each finished trajectory the search re-enters the
latest state with an untried candidate. The tasks' searches run side by side: each round, one policy
call decides for every candidate the waiting searches asked for (as linear rollouts decide for every
live episode at once). A group is the search's finished trajectories; those after the first share
their prefix (the same :class:`~ptgpo_algos.records.Step` objects) with the trajectory they branched
from, as prefix-tree rollouts do.

The state statistics (:class:`~ptgpo_algos.rollouts.spo3.search.StateStats`) are the strategy's memory: the trainer
keeps them across iterations and in its checkpoint, so a resumed run searches as the uninterrupted one
would. A state's key is its ``state_key`` within its start (:func:`start_key`: the start's
``info["layout"]`` and observation): the official code keys by the observation, which tells tasks
apart, where a ``state_key`` alone (FrozenLake's ``"row,column"``) would pool unrelated maps.

Each step records ``R`` in ``Step.extras["strategy_reward"]``; the ``3spo`` estimator
(:mod:`ptgpo_algos.advantages.spo3`) credits it against the other steps from the same state.
The budget is exact: a round grants the searches, in task order, no more candidates than decisions
are left; a search granted none stops there, its trajectory in progress left out (its decisions
count as spent).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Mapping, Sequence

import numpy as np

from ptgpo_algos.records import Batch, Step, Task, Trajectory
from ptgpo_algos.rollouts.episodes import Episode, EpisodeEngine
from ptgpo_algos.rollouts.collection import RolloutStats, expert_plans, mark_cut_off, sent_action, task_vectors
from ptgpo_algos.rollouts.spo3.search import Candidate, SearchResult, StateStats, backtracking_search, state_scores, step_rewards
from ptgpo_algos.rollouts.spo3.settings import EXPLORED_SCOPES, Spo3Config
from ptgpo_envs import layout_hash

__all__ = ["EXPLORED_SCOPES", "Point", "Search", "Spo3Config", "Spo3Stats", "collect_spo3_rollouts", "start_key"]


@dataclass
class Spo3Stats(RolloutStats):
    """:class:`~ptgpo_algos.rollouts.collection.RolloutStats` plus the search's counts (in the metrics row as ``spo3_*``)."""

    groups: int = 0
    expansions: int = 0
    cut: int = 0  # finished trajectories the search ended itself: n(s) = 0, or every candidate explored
    states: int = 0  # states with statistics after the collection

    def as_dict(self) -> dict[str, float]:
        """The rollout counts plus the search's: expansions, trajectories per group, cut trajectories, states."""
        return {
            **super().as_dict(),
            "spo3_expansions": self.expansions, "spo3_cut": self.cut, "spo3_states": self.states,
            "spo3_trajectories_per_group": self.episodes / self.groups if self.groups else 0.0,
        }


@dataclass(eq=False)
class Point:
    """A state the search can re-enter: what the agent saw there, its history, the environment's
    snapshot (None where the episode ended) and the step that led there (None at the start)."""

    observation: str
    info: dict[str, Any]
    history: tuple[tuple[str, str], ...]
    snapshot: Any
    step: Step | None = None


def start_key(observation: str, info: Mapping[str, Any]) -> str:
    """What tells one start from another: the hash of its ``info["layout"]`` and its observation (the
    layout alone may not: FrozenLake's is its task and start square, the same on every map)."""
    return layout_hash(f"{info.get('layout')}\n{observation}")


def collect_spo3_rollouts(
    policy: Any,
    tasks: Sequence[Task],
    settings: Spo3Config,
    memory: StateStats,
    *,
    generator: Any = None,
    env_backend: str = "in-process",
    env_workers: int | None = None,
    env_options: dict[str, Any] | None = None,
    max_decisions: int | None = None,
    expert: bool = False,
) -> tuple[Batch, Spo3Stats]:
    """3SPO's groups for ``tasks`` (the module docstring); ``memory`` (the statistics) is updated in
    place. The other arguments as :func:`~ptgpo_algos.rollouts.collection.collect_rollouts` takes them."""
    collection = Spo3Collection(policy, settings, memory, generator, max_decisions, expert)
    vectors = task_vectors(tasks, settings.g_max, env_backend, env_workers, env_options)
    try:
        batch = collection.run(tasks, vectors)
    finally:
        for vector in {id(v): v for v, _ in vectors}.values():
            vector.close()
    stats = collection.stats
    stats.groups, stats.states = len(batch), len(memory.total)
    stats.wall_time_s = time.perf_counter() - collection.started
    return batch, stats


@dataclass(eq=False)
class Search:
    """One task's search: its slots (``g_max`` from ``first`` in ``vector``), the key of its start,
    the search itself, what it asks for now (``(point, n)``; None once it is over) and its result."""

    task: Task
    vector: Any
    first: int
    start: str
    steps: Generator[tuple[Point, int], list[Candidate[Point]] | None, SearchResult[Point]]
    request: tuple[Point, int] | None = None
    result: SearchResult[Point] | None = None
    stopped: bool = False  # the budget ended it with a trajectory in progress
    reset_slots: set[int] = field(default_factory=set)

    def key(self, info: Mapping[str, Any]) -> str:
        """The key of a state's statistics: its start's and its ``state_key``."""
        return f"{self.start}\n{info['state_key']}"

    def send(self, candidates: list[Candidate[Point]] | None) -> None:
        """Answer the search's request (None: no decisions are left) and take its next one."""
        try:
            self.request = self.steps.send(candidates) if self.request is not None else next(self.steps)
        except StopIteration as done:
            self.request, self.result = None, done.value


class Spo3Collection:
    """One call's searches, stepped together: each round, one policy call decides for the candidates
    every waiting search asked for. Holds the statistics, the budget left and the counts."""

    def __init__(self, policy: Any, settings: Spo3Config, memory: StateStats, generator: Any,
                 max_decisions: int | None, expert: bool):
        self.policy, self.settings, self.memory, self.generator = policy, settings, memory, generator
        self.constants = settings.settings
        self.left = math.inf if max_decisions is None else max_decisions
        self.expert = expert
        self.stats = Spo3Stats()
        self.started = time.perf_counter()

    def run(self, tasks: Sequence[Task], vectors: list[tuple[Any, int]]) -> Batch:
        """Every task's search from reset, until each is over or the budget is spent; the groups that
        finished a trajectory, in task order."""
        if self.left <= 0:
            return []
        if self.settings.explored == "iteration":
            self.memory.explored.clear()
        searches = [self.search(task, vector, first) for task, (vector, first) in zip(tasks, vectors)]
        waiting = [search for search in searches if search.request is not None]
        while waiting:
            granted = []
            for search in waiting:  # the budget goes to the searches in task order
                n = int(min(search.request[1], self.left))
                self.left -= n
                granted.append(n)
            for search in (search for search, n in zip(waiting, granted) if n == 0):
                search.stopped = True
                search.send(None)
            expanding = [(search, n) for search, n in zip(waiting, granted) if n > 0]
            for (search, _), candidates in zip(expanding, self.expand(expanding)):
                search.send(candidates)
            waiting = [search for search in waiting if search.request is not None]
        return [group for search in searches if (group := self.group(search))]

    def search(self, task: Task, vector: Any, first: int) -> Search:
        """A task's search, started: reset in slot ``first``, the start snapshotted, its first request made."""
        [(observation, info)] = vector.reset([first], [task.seed])
        [snapshot] = vector.snapshot([first])
        search = Search(task, vector, first, start_key(observation, info), iter(()), reset_slots={first})
        # The environment's horizon ends every trajectory (a truncated step is done), so no depth cap of its own.
        search.steps = backtracking_search(Point(observation, info, (), snapshot), lambda p: search.key(p.info),
                                           self.memory, self.constants, max_trajectories=self.settings.trajectories,
                                           max_depth=sys.maxsize, min_start=self.settings.min_start)
        search.send(None)
        return search

    def expand(self, expanding: list[tuple[Search, int]]) -> list[list[Candidate[Point]]]:
        """For each ``(search, n)``: ``n`` candidates from the state it asked about, its snapshot
        restored in ``n`` of its slots; one policy call decides in all of them, each decision stepped."""
        episodes: list[Episode] = []
        for search, n in expanding:
            point = search.request[0]
            slots = list(range(search.first, search.first + n))
            fresh = [slot for slot in slots if slot not in search.reset_slots]
            if fresh:  # Gymnasium's wrappers refuse a step before the slot's first reset, whatever restore did.
                search.vector.reset(fresh, [search.task.seed] * len(fresh))
                search.reset_slots.update(fresh)
            episodes += [Episode(search.vector, slot, point.observation, point.info, list(point.history))
                         for slot in slots]
        EpisodeEngine.restore_all(episodes, [search.request[0].snapshot for search, n in expanding for _ in range(n)])
        contexts = [episode.context() for episode in episodes]
        plans = expert_plans(episodes) if self.expert else [None] * len(episodes)
        decisions = self.policy.decide(contexts, generator=self.generator)
        actions = [sent_action(decision) for decision in decisions]
        outcomes = EpisodeEngine.step(episodes, actions)
        going = [i for i, (_, _, terminated, truncated, _) in enumerate(outcomes) if not (terminated or truncated)]
        snapshots: list[Any] = [None] * len(episodes)
        for i, snapshot in zip(going, EpisodeEngine.snapshots([episodes[i] for i in going])):
            snapshots[i] = snapshot
        achieved = EpisodeEngine.call(episodes, "achieved_tasks")
        self.stats.expansions += len(expanding)
        answers, position = [], 0
        for search, n in expanding:
            point, mine = search.request[0], range(position, position + n)
            rewards = self.rewards(search, point, [outcomes[i] for i in mine])
            answers.append([self.candidate(point, contexts[i], decisions[i], actions[i], outcomes[i], snapshots[i],
                                           achieved[i], plans[i], float(reward)) for i, reward in zip(mine, rewards)])
            position += n
        return answers

    def rewards(self, search: Search, point: Point, outcomes: list[tuple]) -> np.ndarray:
        """3SPO's reward of each transition from ``point`` (Eq. 2), with the statistics as they are now."""
        here, after = search.key(point.info), [search.key(info) for *_, info in outcomes]
        total, wins = self.memory.counts([here, *after])
        scores = state_scores(total, wins, self.memory.t, self.constants)
        changed = np.array([key != here for key in after], dtype=np.float64)
        success = np.array([reward for _, reward, *_ in outcomes], dtype=np.float64)
        return step_rewards(np.full(len(after), scores[0]), scores[1:], changed, success,
                            np.full(len(after), total[0]), self.constants)

    def candidate(self, point: Point, context: Any, decision: Any, action: str, outcome: tuple, snapshot: Any,
                  achieved: Any, plan: list[str] | None, reward: float) -> Candidate[Point]:
        """Book one sampled transition: its step (with its 3SPO reward) and the candidate it makes."""
        observation, env_reward, terminated, truncated, info = outcome
        stats = self.stats
        stats.decisions += 1
        stats.tokens += len(decision.response_ids)
        valid = bool(info.get("action_valid", True)) and decision.format_error is None
        stats.invalid_steps += not valid
        extras: dict[str, Any] = {"strategy_reward": reward}
        if plan is not None:
            extras["expert_plan"] = plan
        step = Step(state_key=point.info["state_key"], action=decision.action if decision.action is not None
                    else decision.text, reward=float(env_reward), valid=valid, response_ids=decision.response_ids,
                    decision=decision, context=context, achieved=achieved, extras=extras)
        history = (*point.history, (point.observation, action))
        if truncated and not terminated:
            mark_cut_off(step, context.task, observation, info, history)
        following = Point(observation, info, history, snapshot, step)
        return Candidate(action, reward, following, done=bool(terminated or truncated), success=bool(info.get("won")))

    def group(self, search: Search) -> list[Trajectory]:
        """A search's finished trajectories as a group, counted: those after the first branch from the
        deepest step they share with an earlier one."""
        result, task = search.result, search.task
        stats, seen, group = self.stats, set(), []
        stats.started += len(result.trajectories) + search.stopped
        for index, (path, won) in enumerate(zip(result.trajectories, result.solved)):
            steps = [candidate.next.step for _, candidate in path]
            shared = next((t for t, step in enumerate(steps) if id(step) not in seen), len(steps))
            seen.update(id(step) for step in steps)
            last = path[-1][1]
            stats.episodes += 1
            stats.wins += won
            stats.cut += not last.done
            if index == 0:
                stats.reset_episodes += 1
                stats.reset_wins += won
            else:
                stats.decisions_saved += shared
                stats.tokens_saved += sum(len(step.response_ids or ()) for step in steps[:shared])
            meta = {"env_id": task.env_id, "seed": task.seed, "leaf": index, "won": won,
                    "task_type": last.next.info.get("task_type"), "branch_point": shared if index else None,
                    "layout": last.next.info.get("layout"), "spo3_cut": not last.done}
            group.append(Trajectory(steps=steps, meta=meta))
        return group
