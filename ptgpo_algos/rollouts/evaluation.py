"""Evaluation of any agent on held-out seeds: success, return, length, invalid-action rate, per type.

Every evaluated thing (random and expert baselines, SB3, the zero-shot and trained LLM policies) is an
:class:`Agent`: it sees a batch of live episodes (:class:`~ptgpo_algos.rollouts.episodes.EpisodeView`) and
returns one action each. Episodes run in the same :class:`~ptgpo_algos.rollouts.episodes.EpisodeEngine` as
training rollouts (an evaluation episode is a group of one), so agents stay stateless and LLM
policies batch all their decisions of a step into one forward pass.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Sequence

import ptgpo_envs
from ptgpo_algos.rollouts.episodes import Episode, EpisodeEngine, EpisodeView, Transition, make_vector_env

__all__ = ["PROTOCOL_INFO", "Agent", "EpisodeView", "EpisodeResult", "EvalResult", "evaluate", "overlap"]


class Agent(Protocol):
    """What :func:`evaluate` plays: anything with a ``name`` that chooses one action for each live episode."""

    name: str

    def act(self, episodes: Sequence[EpisodeView]) -> list[str]:
        """One action (text) for each live episode, in order."""
        ...


@dataclass
class EpisodeResult:
    """One evaluation episode: its seed, outcome, return, length, invalid actions, and task type and score
    where the environment has them."""

    seed: int
    won: bool
    total_reward: float
    length: int
    invalid_actions: int
    task_type: str | None = None
    score: float | None = None
    #: The environment's ``info["layout"]``: a hash of how the episode started.
    layout: str | None = None


#: What an environment's ``info`` says about the texts and scoring an evaluation ran under (the
#: originals' pages or PTGPO's, WebShop's reward by spaCy or by the stand-in, the ALFWorld package's
#: version, the WebShop product set): part of its protocol.
PROTOCOL_INFO = ("observation_style", "reward_impl", "reward_model", "alfworld_version", "webshop_set")


@dataclass
class EvalResult:
    """The episodes of one evaluation, with their success rate, mean return and mean length."""

    episodes: list[EpisodeResult] = field(default_factory=list)
    #: The :data:`PROTOCOL_INFO` keys the environment reported, as it reported them.
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def success_rate(self) -> float:
        """The fraction of episodes won."""
        return _mean([float(e.won) for e in self.episodes])

    @property
    def mean_return(self) -> float:
        """The mean total reward."""
        return _mean([e.total_reward for e in self.episodes])

    @property
    def mean_length(self) -> float:
        """The mean episode length in steps."""
        return _mean([float(e.length) for e in self.episodes])

    @property
    def invalid_rate(self) -> float:
        """The fraction of steps whose action was not admissible."""
        steps = sum(e.length for e in self.episodes)
        return sum(e.invalid_actions for e in self.episodes) / steps if steps else 0.0

    @property
    def success_by_type(self) -> dict[str, float]:
        """The success rate of each task type (environments with types)."""
        by_type: dict[str, list[float]] = defaultdict(list)
        for e in self.episodes:
            if e.task_type is not None:
                by_type[e.task_type].append(float(e.won))
        return {t: _mean(v) for t, v in sorted(by_type.items())}

    @property
    def mean_score(self) -> float | None:
        """The mean score (WebShop), None where episodes have none."""
        scores = [e.score for e in self.episodes if e.score is not None]
        return _mean(scores) if scores else None

    def summary(self) -> dict[str, Any]:
        """The figures logged and stored in result records."""
        return {
            "episodes": len(self.episodes),
            "success": self.success_rate,
            "return": self.mean_return,
            "length": self.mean_length,
            "invalid_rate": self.invalid_rate,
            "success_by_type": self.success_by_type,
            "score": self.mean_score,
            "environment": dict(self.environment),
            "layouts": [e.layout for e in self.episodes],
        }

    def to_dict(self) -> dict[str, Any]:
        """The summary and every episode, as plain data."""
        return {**self.summary(), "per_episode": [asdict(e) for e in self.episodes]}


def overlap(layouts: Sequence[str | None], trained: set[str] | None) -> float | None:
    """The fraction of evaluation episodes (by their ``layouts``) that started in a layout of
    ``trained``: 0 for evaluation that is held out. None when it cannot be measured (the trained
    layouts are unknown, or an episode reported no layout)."""
    if trained is None or not layouts or any(layout is None for layout in layouts):
        return None
    return sum(layout in trained for layout in layouts) / len(layouts)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


@dataclass(eq=False)
class _Tally:
    reward: float = 0.0
    invalid: int = 0


def evaluate(
    agent: Agent,
    env_id: str,
    seeds: Sequence[int],
    env_kwargs: dict[str, Any] | None = None,
    *,
    max_steps: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
    env_backend: str = "in-process",
    env_workers: int | None = None,
    env_options: dict[str, Any] | None = None,
) -> EvalResult:
    """Play one episode per seed with ``agent``, ``batch_size`` episodes at a time."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ptgpo_envs.check_env_id(env_id)
    seeds = list(seeds)
    finished: list[tuple[int, EpisodeResult]] = []
    bar = None
    if progress:
        from ptgpo_envs.progress import progress_bar

        bar = progress_bar(total=len(seeds), desc=f"eval {agent.name} on {env_id}", leave=False)
    engine: EpisodeEngine[str] = EpisodeEngine()
    environment: dict[str, Any] = {}

    def on_transition(episode: Episode, action: str, transition: Transition) -> Episode | None:
        tally: _Tally = episode.state
        tally.reward += transition.reward
        tally.invalid += not transition.info.get("action_valid", True)
        episode.advance(action, transition)
        if not transition.done:
            return episode
        info = transition.info
        environment.update((key, info[key]) for key in PROTOCOL_INFO if key in info)
        finished.append((start + episode.index, EpisodeResult(
            seed=chunk[episode.index], won=bool(info["won"]), total_reward=tally.reward,
            length=len(episode.history), invalid_actions=tally.invalid, task_type=info.get("task_type"),
            score=info.get("score"), layout=info.get("layout"),
        )))
        if bar is not None:
            bar.update(1)
        return None

    for start in range(0, len(seeds), batch_size):
        chunk = seeds[start : start + batch_size]
        with make_vector_env(env_id, env_kwargs, len(chunk), max_steps=max_steps, backend=env_backend,
                             num_workers=env_workers, options=env_options) as vector:
            live = engine.reset(vector, range(len(chunk)), chunk)
            for episode in live:
                episode.state = _Tally()
            engine.run(live, agent.act, on_transition)
    if bar is not None:
        bar.close()
    # Episodes end in any order; results follow the order of the seeds given.
    return EvalResult([episode for _, episode in sorted(finished, key=lambda item: item[0])], environment)
