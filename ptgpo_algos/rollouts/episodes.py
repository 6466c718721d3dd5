"""The episode engine: many episodes side by side, one batched decision per step, for rollouts and evaluation.

Training rollouts (:mod:`ptgpo_algos.rollouts.collection`) and held-out evaluation (:mod:`ptgpo_algos.rollouts.evaluation`)
play episodes the same way, here: environments live in vector environments
(:class:`~ptgpo_envs.vector.InProcessVectorTextEnv`, or for slow engines
:class:`~ptgpo_envs.vector.ProcessVectorTextEnv` and :class:`~ptgpo_envs.ray_vector.RayVectorTextEnv`), each made by ``gymnasium.make`` with its wrappers (a reward wrapper applies to
both), and every step of the live episodes is

1. one call of the caller's ``act`` on all live :class:`Episode` objects (one forward pass of a policy);
2. one ``step`` call per vector environment, then (when asked) one ``snapshot`` and one
   ``achieved_tasks`` call for the stepped slots;
3. one call of the caller's ``on_transition`` per episode, in order, which returns the episode to go
   on with (the same one, advanced; or another one in its slot, a branch of a tree) or None;
4. when the caller gives one, its ``regroup`` on the episodes going on, which may end some and fork
   others into free slots (PATR's checkpoints).

An :class:`Episode` is also what an evaluation agent sees (``EpisodeView``): the current observation and
``info``, the earlier ``(observation, action)`` pairs, and ``env``, the unwrapped environment (or a
proxy of it in a worker process) for agents that legitimately read it (the expert).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from ptgpo_algos.records import Context

__all__ = ["Episode", "EpisodeView", "Transition", "EpisodeEngine", "make_vector_env"]

D = TypeVar("D")


@dataclass(eq=False)
class Episode:
    """One live episode: where it runs (a vector environment's slot) and what the agent has seen.

    ``index`` and ``state`` belong to the caller (a seed's position, a rollout's group and steps).
    """

    vector: Any
    slot: int
    observation: str
    info: dict[str, Any]
    history: list[tuple[str, str]] = field(default_factory=list)
    index: int = 0
    state: Any = None

    @property
    def env(self) -> Any:
        """The unwrapped environment of this slot (a proxy when it lives in another process)."""
        return self.vector.unwrapped(self.slot)

    def context(self) -> Context:
        """What a policy decides on: the task, the observation, the admissible actions, the history."""
        return Context(self.info["task"], self.observation, list(self.info["admissible_actions"]),
                       list(self.history))

    def advance(self, action: str, transition: Transition) -> Episode:
        """Move on past ``transition`` (the step ``action`` made) and return self."""
        self.history.append((self.observation, action))
        self.observation, self.info = transition.observation, transition.info
        return self


#: What an evaluation agent is shown for each live episode.
EpisodeView = Episode


@dataclass(frozen=True)
class Transition:
    """One environment step's outcome; ``snapshot`` and ``achieved`` are filled when the run asks."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    snapshot: Any = None
    achieved: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        """Whether the episode ended (terminated or truncated)."""
        return self.terminated or self.truncated


class EpisodeEngine(Generic[D]):
    """Runs episodes to their end (see the module docstring)."""

    def reset(self, vector: Any, slots: Sequence[int], seeds: Sequence[int | None]) -> list[Episode]:
        """New episodes in ``slots`` of ``vector`` (one ``reset`` call); ``index`` is their position."""
        starts = vector.reset(list(slots), list(seeds))
        return [Episode(vector, slot, observation, info, index=i)
                for i, (slot, (observation, info)) in enumerate(zip(slots, starts))]

    @staticmethod
    def snapshots(episodes: Sequence[Episode]) -> list[Any]:
        """The current state of each episode's environment, one ``snapshot`` call per vector environment."""
        return _by_vector(episodes, lambda vector, slots: vector.snapshot(slots))

    @staticmethod
    def restore(vector: Any, slot: int, snapshot: Any) -> None:
        """Restore ``slot`` of ``vector`` to ``snapshot``."""
        vector.restore([slot], [snapshot])

    @staticmethod
    def restore_all(episodes: Sequence[Episode], snapshots: Sequence[Any]) -> None:
        """Restore each episode's slot to its snapshot, one ``restore`` call per vector environment."""
        _by_vector(episodes, lambda vector, slots, items: vector.restore(slots, items), snapshots)

    @staticmethod
    def step(episodes: Sequence[Episode], actions: Sequence[str]) -> list[tuple]:
        """Each episode's ``(observation, reward, terminated, truncated, info)`` after its action, one
        ``step`` call per vector environment."""
        return _by_vector(episodes, lambda vector, slots, items: vector.step(slots, items), actions)

    @staticmethod
    def call(episodes: Sequence[Episode], method: str) -> list[Any]:
        """``method()`` of each episode's unwrapped environment, one ``call`` per vector environment."""
        return _by_vector(episodes, lambda vector, slots: vector.call(method, slots))

    def run(
        self,
        live: list[Episode],
        act: Callable[[list[Episode]], Sequence[D]],
        on_transition: Callable[[Episode, D, Transition], Episode | None],
        *,
        send: Callable[[D], str] = str,
        snapshots: bool = False,
        achieved: bool = False,
        budget: int | None = None,
        regroup: Callable[[list[Episode]], list[Episode]] | None = None,
    ) -> int:
        """Step every live episode until none is left, or ``budget`` decisions are spent; returns the
        decisions spent.

        ``act`` returns one decision per live episode; ``send`` turns a decision into the action text
        the environment gets. With ``snapshots`` each transition of a continuing episode carries the
        environment's snapshot after the step; with ``achieved``, what ``achieved_tasks()`` said.
        With a ``budget``, a step that would exceed it takes only the first episodes that fit, and the
        others stop where they are, unfinished (their ``on_transition`` is not called again).
        ``regroup``, when given, is called with the live episodes before every step and returns the
        episodes to step: it may leave some out (they end there) and add others (forks in free slots).
        """
        spent = 0
        while live:
            if regroup is not None:
                live = regroup(live)
            if budget is not None:
                live = live[: max(0, budget - spent)]
            if not live:
                break
            spent += len(live)
            decisions = list(act(live))
            if len(decisions) != len(live):
                raise RuntimeError(f"act returned {len(decisions)} decisions for {len(live)} episodes")
            actions = [send(d) for d in decisions]
            steps = self.step(live, actions)
            done = [terminated or truncated for _, _, terminated, truncated, _ in steps]
            taken = [None] * len(live)
            if snapshots:
                going = [i for i, d in enumerate(done) if not d]
                for i, snapshot in zip(going, self.snapshots([live[i] for i in going])):
                    taken[i] = snapshot
            completed = self.call(live, "achieved_tasks") if achieved else [None] * len(live)
            following = []
            for episode, decision, action, step, snapshot, tasks in zip(live, decisions, actions, steps, taken, completed):
                transition = Transition(*step, snapshot=snapshot, achieved=tasks)
                nxt = on_transition(episode, decision, transition)
                if nxt is not None:
                    following.append(nxt)
            live = following
        return spent


def _by_vector(episodes: Sequence[Episode], call: Callable, items: Sequence[Any] | None = None) -> list[Any]:
    """``call(vector, slots[, items])`` once per vector environment, results back in episode order."""
    order: dict[int, tuple[Any, list[int]]] = {}
    for i, episode in enumerate(episodes):
        order.setdefault(id(episode.vector), (episode.vector, []))[1].append(i)
    results: list[Any] = [None] * len(episodes)
    for vector, positions in order.values():
        slots = [episodes[i].slot for i in positions]
        out = call(vector, slots) if items is None else call(vector, slots, [items[i] for i in positions])
        for i, value in zip(positions, out):
            results[i] = value
    return results


def make_vector_env(env_id: str, env_kwargs: dict[str, Any] | None, num_envs: int, *,
                    max_steps: int | None = None, backend: str = "in-process", num_workers: int | None = None,
                    options: dict[str, Any] | None = None):
    """``num_envs`` environments of ``env_id`` behind the vector interface (``backend``: ``in-process``,
    ``processes`` or ``ray``); ``max_steps`` is the environment's own horizon keyword. ``options`` are
    the Ray backend's ``address`` and ``num_cpus`` (per actor)."""
    from ptgpo_envs.vector import InProcessVectorTextEnv, ProcessVectorTextEnv

    kwargs = dict(env_kwargs or {})
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if backend == "in-process":
        return InProcessVectorTextEnv(env_id, num_envs, env_kwargs=kwargs)
    if backend == "processes":
        import os

        workers = min(num_envs, num_workers or len(os.sched_getaffinity(0)))
        return ProcessVectorTextEnv(env_id, num_envs, num_workers=workers, env_kwargs=kwargs)
    if backend == "ray":
        from ptgpo_envs.ray_vector import RayVectorTextEnv, connect_ray

        options = dict(options or {})
        ray = connect_ray(options.get("address"))
        # Default: one actor per CPU the cluster has for them, never more actors than slots.
        cpus = float(options.get("num_cpus") or 1.0)
        workers = min(num_envs, num_workers or max(1, int(ray.cluster_resources().get("CPU", 1) // cpus)))
        return RayVectorTextEnv(env_id, num_envs, num_workers=workers, env_kwargs=kwargs, num_cpus=cpus)
    raise ValueError(f"env_workers.backend: {backend!r} is not valid; choose in-process, processes or ray")
