"""Rollout collection: ``group_size`` episodes per task, all live episodes decided in one policy call a step.

Two strategies (:data:`ROLLOUT_MODES`):

``linear``
    ``group_size`` independent episodes from the start (GRPO, GiGPO and HGPO as published).
``tree``
    PTGPO's prefix tree. ``initial_rollouts`` independent episodes start; each time an episode of a
    group ends and the group has fewer than ``group_size`` leaves, a new leaf branches from a decision
    point already visited by the group's finished episodes (``branch``: ``uniform`` over the distinct
    decision points, ``entropy`` -- the highest policy entropy among points not yet branched from,
    ``novel`` -- uniform over points whose state was first seen in the group at that point). The
    environment is restored there with ``snapshot``/``restore`` and the new leaf *reuses* the prefix:
    its first steps are the very same :class:`~ptgpo_algos.records.Step` objects (actions, tokens and
    log-probabilities), and only the continuation is sampled.

A third strategy, PATR's process-scored tree (``patr``), lives in :mod:`ptgpo_algos.rollouts.patr.collection` and extends
this module's :class:`Collection` (the same leaves, steps, counts and batch).

Episodes run in the :class:`~ptgpo_algos.rollouts.episodes.EpisodeEngine`. The result is a
:class:`~ptgpo_algos.records.Batch` (one group per task, in task order, leaves in the order they
finished) plus :class:`RolloutStats`, which counts the decisions and generated tokens spent and those
that prefix reuse saved. Each step records the policy's decision, the context it decided in and what
the environment's :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks` said after it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np

from ptgpo_algos.records import Batch, Context, Decision, Step, Task, Trajectory
from ptgpo_algos.rollouts.branching import BRANCH_STRATEGIES
from ptgpo_algos.rollouts.episodes import Episode, EpisodeEngine, Transition, make_vector_env
from ptgpo_algos.hiper.plan_format import PlanContext

__all__ = ["FINAL_CONTEXT", "ROLLOUT_MODES", "Task", "RolloutStats", "Spend", "collect_rollouts",
           "expert_plans", "mark_cut_off"]

ROLLOUT_MODES = ("linear", "tree")
#: ``Step.extras`` key of an episode's last step when the horizon cut it off (truncated, not terminated):
#: the :class:`Context` of the state it ended in, from which a critic bootstraps (:mod:`ptgpo_algos.critic`).
FINAL_CONTEXT = "final_context"


@dataclass(kw_only=True)
class Spend:
    """What acting cost: policy decisions and generated tokens, and those a prefix tree's shared
    prefixes saved. One collection's (:class:`RolloutStats`) and a run's, their sum
    (:class:`~ptgpo_algos.training.state.TrainState`), count the same things, declared once here."""

    decisions: int = 0
    tokens: int = 0
    decisions_saved: int = 0
    tokens_saved: int = 0

    def spend(self) -> dict[str, int]:
        """The four counts by name."""
        return {f.name: getattr(self, f.name) for f in fields(Spend)}

    def add_spend(self, other: Spend) -> None:
        """Add ``other``'s counts to these."""
        for name, value in other.spend().items():
            setattr(self, name, getattr(self, name) + value)


@dataclass(kw_only=True)
class RolloutStats(Spend):
    """Counts of one collection: decisions and tokens generated, those a prefix tree saved, episodes
    (leaves) started and finished, wins, invalid steps and wall time.

    Success is counted two ways. ``reset_episodes``/``reset_wins``: the finished episodes that started
    from reset, independent samples of the acting policy on the training tasks (every episode of a
    linear group). ``episodes``/``wins``: every finished leaf, those branched from another's prefix
    too: a branch from late in a won episode shares most of its path and nearly always wins again, so
    a tree's leaves count a successful prefix several times over. Episodes the decision budget
    stopped unfinished (``started - episodes``) count in neither: the shorter ones finish first.
    """

    started: int = 0
    episodes: int = 0
    wins: int = 0
    reset_episodes: int = 0
    reset_wins: int = 0
    invalid_steps: int = 0
    wall_time_s: float = 0.0
    #: CPU seconds of a process other than the trainer's that played them (an asynchronous rollout
    #: worker); 0 when the trainer's own process played them, whose CPU the trainer measures itself.
    worker_cpu_s: float = 0.0

    @property
    def decisions_per_s(self) -> float:
        """Decisions per second of wall time."""
        return self.decisions / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        """The counts as the metrics row's ``rollout`` section (:mod:`ptgpo_algos.metrics`)."""
        return {
            **self.spend(),
            "episodes": self.episodes,
            "episodes_cut": self.started - self.episodes,
            "reset_episodes": self.reset_episodes,
            "success": self.reset_wins / self.reset_episodes if self.reset_episodes else 0.0,
            "leaf_success": self.wins / self.episodes if self.episodes else 0.0,
            "invalid_rate": self.invalid_steps / self.decisions if self.decisions else 0.0,
            "time_s": self.wall_time_s,
            "decisions_per_s": self.decisions_per_s,
        }


@dataclass(eq=False)
class Node:
    """A decision point: the state before a step (kept to branch from it)."""

    observation: str
    info: dict[str, Any]
    history: tuple[tuple[str, str], ...]
    snapshot: Any
    novel: bool
    entropy: float = 0.0
    branched: int = 0


@dataclass(eq=False)
class Leaf:
    """A rollout in progress: its group, the decision points it went through and its steps."""

    group: int
    nodes: list[Node]
    steps: list[Step]
    branch_point: int | None = None
    won: bool = False
    task_type: str | None = None
    context: Context | None = None  # of the decision being taken
    plan: list[str] | None = None  # the expert's next actions there, when recorded


@dataclass(eq=False)
class TreeGroup:
    """One task's group: the task, the leaves started, the state keys seen and the finished leaves."""
    task: Task
    started: int = 0
    seen: set = field(default_factory=set)
    finished: list[Leaf] = field(default_factory=list)


def collect_rollouts(
    policy: Any,
    tasks: Sequence[Task],
    *,
    group_size: int = 8,
    mode: str = "linear",
    initial_rollouts: int | None = None,
    branch: str = "uniform",
    rng: np.random.Generator | None = None,
    generator: Any = None,
    env_backend: str = "in-process",
    env_workers: int | None = None,
    env_options: dict[str, Any] | None = None,
    max_decisions: int | None = None,
    expert: bool = False,
) -> tuple[Batch, RolloutStats]:
    """Play a group of ``group_size`` episodes for each task (see the module docstring).

    ``policy`` is a rollout policy (``decide``); ``env_backend``/``env_workers``/``env_options`` say
    where the environments step (:func:`~ptgpo_algos.rollouts.episodes.make_vector_env`). ``max_decisions`` caps the
    decisions spent (a matched budget's last iteration): once it is reached, the episodes still
    running stop unfinished and are left out of the batch (their decisions count as spent), and so
    are groups left without a finished episode. With ``expert``, each step also records the
    environment expert's next actions in ``Step.extras["expert_plan"]`` (ALFWorld's ``expert_plan``
    when the environment reports one, else ``[expert_action()]``): privileged information for
    objectives that use it, asked of the environment only then.
    """
    if mode not in ROLLOUT_MODES:
        raise ValueError(f"rollout mode must be one of {ROLLOUT_MODES}, got {mode!r}")
    if branch not in BRANCH_STRATEGIES:
        raise ValueError(f"branch must be one of {BRANCH_STRATEGIES}, got {branch!r}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if initial_rollouts is None:
        initial_rollouts = max(1, group_size // 2)
    if mode == "linear":
        initial_rollouts = group_size
    if not 1 <= initial_rollouts <= group_size:
        raise ValueError(f"initial_rollouts must be in [1, group_size={group_size}], got {initial_rollouts}")
    collection = Collection(policy, tasks, group_size, initial_rollouts, mode == "tree", branch,
                            rng if rng is not None else np.random.default_rng(0), generator, expert=expert)
    return play(collection, task_vectors(tasks, initial_rollouts, env_backend, env_workers, env_options),
                max_decisions)


def play(collection: Collection, vectors: list[tuple[Any, int]], max_decisions: int | None) -> tuple[Batch, Any]:
    """Run ``collection`` on ``vectors`` (each task's vector environment and first slot), close them,
    and return its batch and stats."""
    try:
        collection.run(vectors, max_decisions)
    finally:
        for vector in {id(v): v for v, _ in vectors}.values():
            vector.close()
    return collection.batch(), collection.stats


class Collection:
    """One call's groups, played in the episode engine: starts, the per-step bookkeeping, branching.

    PATR's collection (:mod:`ptgpo_algos.rollouts.patr.collection`) extends it: the same starts, steps, leaves and batch,
    with its own checkpoints between steps.
    """

    def __init__(self, policy: Any, tasks: Sequence[Task], group_size: int, initial: int, tree: bool, branch: str,
                 rng: np.random.Generator, generator: Any, *, expert: bool = False):
        self.policy, self.generator, self.rng, self.expert = policy, generator, rng, expert
        self.group_size, self.initial, self.tree, self.strategy = group_size, initial, tree, branch
        self.groups = [TreeGroup(task) for task in tasks]
        self.engine: EpisodeEngine[Decision] = EpisodeEngine()
        self.stats = RolloutStats()
        self.started = time.perf_counter()

    def start(self, vectors: list[tuple[Any, int]]) -> list[Episode]:
        """``initial`` episodes of each group from reset, in its first slots, each a leaf at its first
        decision point."""
        live: list[Episode] = []
        for g, group in enumerate(self.groups):
            vector, first = vectors[g]
            started = self.engine.reset(vector, range(first, first + self.initial), [group.task.seed] * self.initial)
            for episode in started:
                episode.state = g
            live += started
            group.started = self.initial
        self.stats.started += len(live)
        snapshots = self.engine.snapshots(live) if self.tree else [None] * len(live)
        for episode, snapshot in zip(live, snapshots):
            episode.state = Leaf(episode.state, [decision_point(self.groups[episode.state], episode, snapshot)], [])
        return live

    def run(self, vectors: list[tuple[Any, int]], max_decisions: int | None) -> None:
        """Play every group in the episode engine until each has its leaves, or ``max_decisions`` are spent."""
        self.engine.run(self.start(vectors), self.act, self.on_transition, send=sent_action, snapshots=self.tree,
                        achieved=True, budget=max_decisions)

    def act(self, episodes: list[Episode]) -> list[Decision]:
        """Decide for every live episode in one policy call (recording the expert's plan when asked)."""
        for episode in episodes:
            episode.state.context = episode.context()
            if getattr(self.policy, "plan_format", False):
                leaf = episode.state
                leaf.context = PlanContext.after(leaf.context, [s.decision.text for s in leaf.steps])
        if self.expert:
            for episode, plan in zip(episodes, expert_plans(episodes)):
                episode.state.plan = plan
        return self.policy.decide([e.state.context for e in episodes], generator=self.generator)

    def record(self, episode: Episode, decision: Decision, transition: Transition) -> Leaf:
        """Book a transition: its step on the episode's leaf and the counts; an episode that goes on
        moves to its next decision point."""
        leaf: Leaf = episode.state
        group, node, stats = self.groups[leaf.group], leaf.nodes[-1], self.stats
        node.entropy = decision.entropy
        stats.decisions += 1
        stats.tokens += len(decision.response_ids)
        # A response that breaks the response rules is invalid even where the environment took its action.
        valid = bool(transition.info.get("action_valid", True)) and decision.format_error is None
        stats.invalid_steps += not valid
        leaf.steps.append(Step(
            state_key=node.info["state_key"], action=decision.action if decision.action is not None else decision.text,
            reward=float(transition.reward), valid=valid, response_ids=decision.response_ids, decision=decision,
            context=leaf.context, achieved=transition.achieved,
            extras={"expert_plan": leaf.plan} if leaf.plan is not None else {},
        ))
        if transition.truncated and not transition.terminated:
            mark_cut_off(leaf.steps[-1], episode.info["task"], transition.observation, transition.info,
                         [*episode.history, (episode.observation, sent_action(decision))])
        if not transition.done:
            episode.advance(sent_action(decision), transition)
            leaf.nodes.append(decision_point(group, episode, transition.snapshot))
        return leaf

    def finish(self, leaf: Leaf, info: dict[str, Any]) -> None:
        """``leaf`` ends here (``info``: the last step's): its outcome, and it joins its group's leaves."""
        leaf.won = bool(info.get("won", False))
        leaf.task_type = info.get("task_type", leaf.nodes[-1].info.get("task_type"))
        self.groups[leaf.group].finished.append(leaf)
        self.stats.episodes += 1
        self.stats.wins += leaf.won
        if leaf.branch_point is None:
            self.stats.reset_episodes += 1
            self.stats.reset_wins += leaf.won

    def on_transition(self, episode: Episode, decision: Decision, transition: Transition) -> Episode | None:
        """Book a transition (:meth:`record`); an episode that goes on plays on unless :meth:`going_on`
        ends it, one that ended is finished (:meth:`finish`) and its slot plays what :meth:`after_episode`
        starts there. Every strategy on this collection ends its episodes here."""
        leaf = self.record(episode, decision, transition)
        if not transition.done:
            return self.going_on(episode, leaf)
        self.finish(leaf, transition.info)
        return self.after_episode(episode, leaf)

    def going_on(self, episode: Episode, leaf: Leaf) -> Episode | None:
        """``episode``, which did not end: it plays on (None: the strategy ended it)."""
        return episode

    def after_episode(self, episode: Episode, leaf: Leaf) -> Episode | None:
        """What plays next in the slot of ``episode``, whose ``leaf`` has just finished: a tree group's
        next leaf, branched (None: nothing)."""
        group = self.groups[leaf.group]
        if self.tree and group.started < self.group_size:
            group.started += 1
            return _branch(self.engine, episode, group, self.strategy, self.rng, self.stats)
        return None

    def leaf_meta(self, group: TreeGroup, index: int, leaf: Leaf) -> dict[str, Any]:
        """A finished leaf's ``Trajectory.meta``."""
        return {"env_id": group.task.env_id, "seed": group.task.seed, "leaf": index, "won": leaf.won,
                "task_type": leaf.task_type, "branch_point": leaf.branch_point,
                "layout": leaf.nodes[0].info.get("layout")}

    def batch(self) -> Batch:
        """The finished leaves of every group that has one, in the order they finished."""
        batch: Batch = []
        for group in self.groups:
            trajectories = [Trajectory(steps=leaf.steps, meta=self.leaf_meta(group, index, leaf))
                            for index, leaf in enumerate(group.finished)]
            if trajectories:
                batch.append(trajectories)
        self.stats.wall_time_s = time.perf_counter() - self.started
        return batch


def mark_cut_off(step: Step, task: str, observation: str, info: Mapping[str, Any],
                 history: Sequence[tuple[str, str]]) -> None:
    """Record on the last step of an episode the horizon cut off (truncated, not terminated) the context
    of the state it ended in (``observation``, the environment's ``info``, the ``history`` that led
    there), under :data:`FINAL_CONTEXT`: what a policy would have decided on next, from which a critic
    bootstraps. Every rollout strategy that plays episodes to the horizon records it so."""
    step.extras[FINAL_CONTEXT] = Context(info.get("task", task), observation, list(info.get("admissible_actions", [])),
                                         list(history))


def expert_plans(episodes: list[Episode]) -> list[list[str]]:
    """The expert's next actions in each episode: its reported plan, else one ``expert_action`` call
    per vector environment."""
    plans: list[list[str] | None] = [list(e.info["expert_plan"]) if e.info.get("expert_plan") else None
                                     for e in episodes]
    by_vector: dict[int, list[int]] = {}
    for i, plan in enumerate(plans):
        if plan is None:
            by_vector.setdefault(id(episodes[i].vector), []).append(i)
    for positions in by_vector.values():
        vector = episodes[positions[0]].vector
        for i, action in zip(positions, vector.call("expert_action", [episodes[i].slot for i in positions])):
            plans[i] = [action]
    return plans  # type: ignore[return-value]


def sent_action(decision: Decision) -> str:
    """The action text the environment gets: an unparsable response is sent as an empty (invalid) action."""
    return decision.action if decision.action is not None else ""


def decision_point(group: TreeGroup, episode: Episode, snapshot: Any) -> Node:
    """The episode's current decision point, novel when its state key is new to the group."""
    key = episode.info["state_key"]
    novel = key not in group.seen
    group.seen.add(key)
    return Node(episode.observation, episode.info, tuple(episode.history), snapshot, novel)


def task_vectors(tasks: Sequence[Task], per_task: int, backend: str, workers: int | None,
                 options: dict[str, Any] | None = None) -> list[tuple[Any, int]]:
    """Each task's vector environment and first slot: tasks of one environment spec share a vector."""
    specs: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        specs.setdefault(repr((task.env_id, sorted(task.env_kwargs.items()), task.max_steps)), []).append(i)
    placed: list[tuple[Any, int]] = [None] * len(tasks)  # type: ignore[list-item]
    for indices in specs.values():
        task = tasks[indices[0]]
        vector = make_vector_env(task.env_id, task.env_kwargs, per_task * len(indices), max_steps=task.max_steps,
                                 backend=backend, num_workers=workers, options=options)
        for position, i in enumerate(indices):
            placed[i] = (vector, position * per_task)
    return placed


def _branch(engine: EpisodeEngine, finished: Episode, group: TreeGroup, strategy: str, rng, stats: RolloutStats) -> Episode:
    """A new leaf from a decision point of the group's finished episodes, in ``finished``'s slot
    (same environment class and kwargs), restored to that point."""
    points: dict[int, tuple[Node, Leaf, int]] = {}
    for leaf in group.finished:
        for t, node in enumerate(leaf.nodes):
            points.setdefault(id(node), (node, leaf, t))
    options = list(points.values())
    if strategy == "entropy":
        fresh = [o for o in options if o[0].branched == 0] or options
        best = max(o[0].entropy for o in fresh)
        options = [o for o in fresh if o[0].entropy == best]
    elif strategy == "novel":
        options = [o for o in options if o[0].novel] or options
    node, source, t = options[int(rng.integers(len(options)))]
    node.branched += 1
    engine.restore(finished.vector, finished.slot, node.snapshot)
    prefix = source.steps[:t]
    stats.started += 1
    stats.decisions_saved += t
    stats.tokens_saved += sum(len(step.response_ids or ()) for step in prefix)
    leaf = Leaf(finished.state.group, source.nodes[: t + 1], list(prefix), branch_point=t)
    return Episode(finished.vector, finished.slot, node.observation, node.info, list(node.history),
                   index=finished.index, state=leaf)
