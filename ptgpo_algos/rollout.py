"""Rollout collection: ``group_size`` episodes per task, many environments at once, one policy call
per step for all live episodes.

Two modes (:data:`ROLLOUT_MODES`):

``linear``
    ``group_size`` independent episodes from the start (GRPO, GiGPO and HGPO as published).
``tree``
    PTGPO's prefix tree. ``initial_rollouts`` independent episodes start; each time an episode of a
    group ends and the group has fewer than ``group_size`` leaves, a new leaf branches from a decision
    point already visited by the group's finished episodes (``branch``: ``uniform`` over the distinct
    decision points, ``entropy`` -- the highest policy entropy among points not yet branched from,
    ``novel`` -- uniform over points whose state was first seen in the group at that point). The
    environment is restored there with ``snapshot``/``restore`` and the new leaf *reuses* the prefix:
    its first steps are the very same :class:`~ptgpo_algos.data.Step` objects (actions, tokens and
    log-probabilities), and only the continuation is sampled.

The result is a :class:`~ptgpo_algos.data.Batch` (one group per task, in task order, leaves in the
order they finished) plus :class:`RolloutStats`, which counts the decisions and generated tokens
spent and those that prefix reuse saved. Each step keeps, for the trainer, the policy's
:class:`Decision` in ``step.extras["decision"]``, the :class:`Context` it decided in
(``extras["context"]``) and what the environment's :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks`
said after it (``extras["achieved"]``, for hindsight relabelling).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ptgpo_algos.data import Batch, Step, Trajectory
from ptgpo_algos.evaluation import make_env
from ptgpo_algos.policy.base import Context, RolloutPolicy

__all__ = ["ROLLOUT_MODES", "BRANCH_STRATEGIES", "Task", "RolloutStats", "collect_rollouts"]

ROLLOUT_MODES = ("linear", "tree")
BRANCH_STRATEGIES = ("uniform", "entropy", "novel")


@dataclass(frozen=True)
class Task:
    """A task instance: the environment and the seed of its episode."""

    env_id: str
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None


@dataclass
class RolloutStats:
    decisions: int = 0
    tokens: int = 0
    decisions_saved: int = 0
    tokens_saved: int = 0
    episodes: int = 0
    wins: int = 0
    invalid_steps: int = 0
    wall_time_s: float = 0.0

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "decisions": self.decisions,
            "tokens": self.tokens,
            "decisions_saved": self.decisions_saved,
            "tokens_saved": self.tokens_saved,
            "episodes": self.episodes,
            "rollout_success": self.wins / self.episodes if self.episodes else 0.0,
            "invalid_rate": self.invalid_steps / self.decisions if self.decisions else 0.0,
            "rollout_time_s": self.wall_time_s,
            "decisions_per_s": self.decisions_per_s,
        }


@dataclass(eq=False)
class _Node:
    """A decision point: the state before a step (kept to branch from it)."""

    observation: str
    info: dict[str, Any]
    history: tuple[tuple[str, str], ...]
    snapshot: Any
    novel: bool
    entropy: float = 0.0
    branched: int = 0


@dataclass(eq=False)
class _Episode:
    group: int
    env: Any
    nodes: list[_Node]
    steps: list[Step]
    branch_point: int | None = None
    done: bool = False
    won: bool = False
    task_type: str | None = None


@dataclass(eq=False)
class _GroupState:
    task: Task
    started: int = 0
    seen: set = field(default_factory=set)
    finished: list[_Episode] = field(default_factory=list)


def collect_rollouts(
    policy: RolloutPolicy,
    tasks: Sequence[Task],
    *,
    group_size: int = 8,
    mode: str = "linear",
    initial_rollouts: int | None = None,
    branch: str = "uniform",
    rng: np.random.Generator | None = None,
    generator: Any = None,
) -> tuple[Batch, RolloutStats]:
    """Play a group of ``group_size`` episodes for each task (see the module docstring)."""
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
    rng = rng if rng is not None else np.random.default_rng(0)
    tree = mode == "tree"
    stats = RolloutStats()
    start_time = time.perf_counter()
    groups = [_GroupState(task) for task in tasks]
    live: list[_Episode] = []

    def new_node(group: _GroupState, observation: str, info: dict, history, env) -> _Node:
        key = info["state_key"]
        novel = key not in group.seen
        group.seen.add(key)
        return _Node(observation, info, tuple(history), env.snapshot() if tree else None, novel)

    for g, group in enumerate(groups):
        for _ in range(initial_rollouts):
            env = make_env(group.task.env_id, group.task.env_kwargs, group.task.max_steps).unwrapped
            observation, info = env.reset(seed=group.task.seed)
            live.append(_Episode(g, env, [new_node(group, observation, info, (), env)], []))
            group.started += 1

    while live:
        nodes = [episode.nodes[-1] for episode in live]
        contexts = [
            Context(n.info["task"], n.observation, list(n.info["admissible_actions"]), list(n.history))
            for n in nodes
        ]
        decisions = policy.decide(contexts, generator=generator)
        still: list[_Episode] = []
        for episode, node, context, decision in zip(live, nodes, contexts, decisions):
            group = groups[episode.group]
            node.entropy = decision.entropy
            sent = decision.action if decision.action is not None else ""
            observation, reward, terminated, truncated, info = episode.env.step(sent)
            stats.decisions += 1
            stats.tokens += len(decision.response_ids)
            valid = bool(info.get("action_valid", True))
            stats.invalid_steps += not valid
            episode.steps.append(
                Step(
                    state_key=node.info["state_key"],
                    action=decision.action if decision.action is not None else decision.text,
                    reward=float(reward),
                    valid=valid,
                    prompt_ids=decision.prompt_ids,
                    response_ids=decision.response_ids,
                    logprobs=decision.logprobs,
                    extras={"decision": decision, "entropy": decision.entropy, "sent": sent, "context": context,
                            "achieved": episode.env.achieved_tasks()},
                )
            )
            if terminated or truncated:
                episode.done, episode.won = True, bool(info.get("won", False))
                episode.task_type = info.get("task_type", node.info.get("task_type"))
                group.finished.append(episode)
                stats.episodes += 1
                stats.wins += episode.won
                if tree and group.started < group_size:
                    still.append(_branch(episode, group, branch, rng, stats))
                    group.started += 1
            else:
                history = node.history + ((node.observation, sent),)
                episode.nodes.append(new_node(group, observation, info, history, episode.env))
                still.append(episode)
        live = still

    batch: Batch = []
    for group in groups:
        trajectories = []
        for leaf, episode in enumerate(group.finished):
            meta = {
                "env_id": group.task.env_id,
                "seed": group.task.seed,
                "leaf": leaf,
                "won": episode.won,
                "task_type": episode.task_type,
                "branch_point": episode.branch_point,
            }
            trajectories.append(Trajectory(steps=episode.steps, meta=meta))
            episode.env.close()
        batch.append(trajectories)
    stats.wall_time_s = time.perf_counter() - start_time
    return batch, stats


def _branch(finished: _Episode, group: _GroupState, strategy: str, rng, stats: RolloutStats) -> _Episode:
    """Start a new leaf from a decision point of the group's finished episodes, reusing ``finished``'s
    environment object (same class and kwargs), restored to that point."""
    points: dict[int, tuple[_Node, _Episode, int]] = {}
    for episode in group.finished:
        for t, node in enumerate(episode.nodes):
            points.setdefault(id(node), (node, episode, t))
    options = list(points.values())
    if strategy == "entropy":
        fresh = [o for o in options if o[0].branched == 0] or options
        best = max(o[0].entropy for o in fresh)
        options = [o for o in fresh if o[0].entropy == best]
    elif strategy == "novel":
        options = [o for o in options if o[0].novel] or options
    node, source, t = options[int(rng.integers(len(options)))]
    node.branched += 1
    finished.env.restore(node.snapshot)
    prefix = source.steps[:t]
    stats.decisions_saved += t
    stats.tokens_saved += sum(len(step.response_ids or ()) for step in prefix)
    return _Episode(finished.group, finished.env, source.nodes[: t + 1], list(prefix), branch_point=t)
