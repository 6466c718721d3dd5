"""3SPO's state scores, rollout allocation, step rewards and ranked backtracking, as pure parts.

State-Score-Supervised Policy Optimization (arXiv 2606.09961; code github.com/genalyu/3SPO, read at
commit 0920ceec35234bcef989b123e6176ec73ce27b49: ``gigpo/core_3spo.py``, ``gigpo/trainer_3spo_extension.py``,
``gigpo/main_3spo.py``, ``README.md``):

* every state keeps, across iterations, how many trajectories visited it and how many of those
  succeeded (:class:`StateStats`); its score ``S(s)`` (:func:`state_scores`) is high where success is
  rare but not hopeless, 1 where never seen, 0 where many failures and a low success rate say the
  state is not worth more rollouts;
* a state gets ``n(s) = ceil(G_max S(s))`` rollouts (:func:`rollout_allocation`): 0 ends the
  trajectory there, 1 goes on without a comparison;
* a transition earns ``R = w(N) R_novel + (0.5 - w(N)) (S(s_t) - S(s_{t+1})) + 0.5 R_success``
  (:func:`step_rewards`), compared among the steps taken from the same state (:func:`step_credit`);
* rollouts search by ranked backtracking (:func:`ranked_backtracking`): from each state, the
  candidate transitions ranked by their reward, the best followed first, and after each finished
  trajectory the search returns to the latest state with an untried candidate.

The search is written over a caller's ``expand`` function, so it needs nothing of the environment
but a way back into a state: in this suite, the environments' ``snapshot``/``restore``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from ptgpo_algos.advantages.ops import pooled_norm

__all__ = [
    "Candidate",
    "SearchResult",
    "Spo3Settings",
    "StateStats",
    "backtracking_search",
    "novelty_weight",
    "ranked_backtracking",
    "rollout_allocation",
    "state_scores",
    "step_credit",
    "step_rewards",
]

Node = TypeVar("Node")


@dataclass(frozen=True)
class Spo3Settings:
    """3SPO's constants, with the official defaults (``main_3spo.py`` and the README's table).

    ``alpha``: annealing rate of ``lambda(t) = alpha log t``; ``xi``: failures before a state with a
    low success rate is dropped; ``zeta``: the success rate that keeps it anyway; ``omega_k``: decay of
    the novelty weight with visits; ``g_max``: most rollouts from one state; ``epsilon``: the guard
    in the success rate.
    """

    alpha: float = 50.0
    xi: float = 10.0
    zeta: float = 0.1
    omega_k: float = 0.1
    g_max: int = 8
    epsilon: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("alpha", "xi", "zeta", "omega_k", "epsilon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"spo3.{name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.g_max, bool) or not isinstance(self.g_max, int) or self.g_max < 1:
            raise ValueError(f"spo3.g_max must be an integer >= 1, got {self.g_max!r}")


@dataclass
class StateStats:
    """Visits and successes per state key over every trajectory recorded so far, the explored
    ``(state, action)`` pairs, and ``t``, the annealing clock (1 + trajectories recorded)."""

    total: dict[Hashable, int] = field(default_factory=dict)
    success: dict[Hashable, int] = field(default_factory=dict)
    explored: set[tuple[Hashable, str]] = field(default_factory=set)
    t: int = 1

    def record(self, states: Sequence[Hashable], succeeded: bool) -> None:
        """Count one finished trajectory: each distinct state it visited once."""
        for state in dict.fromkeys(states):
            self.total[state] = self.total.get(state, 0) + 1
            self.success[state] = self.success.get(state, 0) + int(succeeded)
        self.t += 1

    def state_dict(self) -> dict:
        """The statistics as plain data (string keys and numbers), for a checkpoint."""
        return {"total": dict(self.total), "success": dict(self.success),
                "explored": sorted([state, action] for state, action in self.explored), "t": self.t}

    def load_state_dict(self, data: dict) -> None:
        """Take back statistics saved by :meth:`state_dict`."""
        self.total = {key: int(value) for key, value in data["total"].items()}
        self.success = {key: int(value) for key, value in data["success"].items()}
        self.explored = {(state, action) for state, action in data["explored"]}
        self.t = int(data["t"])

    def counts(self, states: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
        """``(N_total, N_success)`` of each state, 0 for one never recorded."""
        total = np.array([self.total.get(state, 0) for state in states], dtype=np.float64)
        success = np.array([self.success.get(state, 0) for state in states], dtype=np.float64)
        return total, success


def state_scores(total: np.ndarray, success: np.ndarray, t: int, settings: Spo3Settings) -> np.ndarray:
    """``S(s) = exp(-alpha log(t) SR(s)) * 1[N_fail < xi or SR(s) > zeta]`` with ``SR = N_success /
    (N_total + epsilon)``; 1 for a state never visited (Eq. 1)."""
    total = np.asarray(total, dtype=np.float64)
    success = np.asarray(success, dtype=np.float64)
    rate = success / (total + settings.epsilon)
    kept = ((total - success) < settings.xi) | (rate > settings.zeta)
    score = np.where(kept, np.exp(-settings.alpha * math.log(t) * rate), 0.0)
    return np.where(total == 0, 1.0, score)


def rollout_allocation(scores: np.ndarray, settings: Spo3Settings) -> np.ndarray:
    """``n(s) = ceil(G_max S(s))`` (Eq. 3): 0 truncates the trajectory (a score of 0), 1 continues without a
    comparison. The 1e-12 keeps a product that rounding lifts past an integer (8 x 0.125) from taking
    one more, and is never what takes a positive score to 0."""
    scores = np.asarray(scores, dtype=np.float64)
    rounded = np.ceil(settings.g_max * scores - 1e-12).astype(np.int64)
    return np.where(scores > 0, np.maximum(rounded, 1), 0)


def novelty_weight(total: np.ndarray, settings: Spo3Settings) -> np.ndarray:
    """``w(N) = 0.5 exp(-omega_k N_total)``: novelty counts while a state is new, progress after."""
    return 0.5 * np.exp(-settings.omega_k * np.asarray(total, dtype=np.float64))


def step_rewards(
    score: np.ndarray, next_score: np.ndarray, changed: np.ndarray, success: np.ndarray, total: np.ndarray,
    settings: Spo3Settings,
) -> np.ndarray:
    """``R(s_t, s_{t+1}) = w(N(s_t)) R_novel + (0.5 - w(N(s_t))) (S(s_t) - S(s_{t+1})) + 0.5 R_success``
    (Eq. 2), per transition: ``changed`` is ``R_novel`` (the state changed), ``success`` the
    environment's success reward of the step, ``total`` the visits of ``s_t``."""
    weight = novelty_weight(total, settings)
    return (weight * np.asarray(changed, dtype=np.float64)
            + (0.5 - weight) * (np.asarray(score) - np.asarray(next_score))
            + 0.5 * np.asarray(success, dtype=np.float64))


def step_credit(rewards: np.ndarray, state: np.ndarray, n_states: int, norm: str = "mean_norm") -> np.ndarray:
    """Each step's reward against every step taken from the same state (GiGPO's step groups, as the
    official ``compute_3spo_advantage``; its default drops the std: ``mean_norm``)."""
    return pooled_norm(np.asarray(rewards, dtype=np.float64), np.asarray(state), n_states, norm)


@dataclass(frozen=True)
class Candidate(Generic[Node]):
    """One way out of a state: the action, its 3SPO reward (for ranking), where it leads and whether
    the episode ended there (``success``: it ended solved)."""

    action: str
    reward: float
    next: Node
    done: bool = False
    success: bool = False


@dataclass
class SearchResult(Generic[Node]):
    """The finished trajectories of one search, each a list of ``(state key, candidate taken)``, and
    whether each was solved."""

    trajectories: list[list[tuple[Hashable, Candidate[Node]]]] = field(default_factory=list)
    solved: list[bool] = field(default_factory=list)


def ranked_backtracking(
    root: Node,
    key: Callable[[Node], Hashable],
    expand: Callable[[Node, int], Sequence[Candidate[Node]] | None],
    stats: StateStats,
    settings: Spo3Settings,
    *,
    max_trajectories: int,
    max_depth: int,
    min_start: int = 0,
) -> SearchResult[Node]:
    """3SPO's ranked backtracking DFS from ``root``, asking ``expand(node, n)`` for each state's
    candidates (:func:`backtracking_search` says how the search goes)."""
    search = backtracking_search(root, key, stats, settings, max_trajectories=max_trajectories, max_depth=max_depth,
                                 min_start=min_start)
    try:
        request = next(search)
        while True:
            request = search.send(expand(*request))
    except StopIteration as done:
        return done.value


def backtracking_search(
    root: Node,
    key: Callable[[Node], Hashable],
    stats: StateStats,
    settings: Spo3Settings,
    *,
    max_trajectories: int,
    max_depth: int,
    min_start: int = 0,
) -> Generator[tuple[Node, int], Sequence[Candidate[Node]] | None, SearchResult[Node]]:
    """3SPO's ranked backtracking DFS from ``root``, as a generator a caller can run beside others
    (3SPO's rollouts step every task's search at once): it yields ``(node, n)`` where it needs a
    state's candidates and is sent them; it returns the :class:`SearchResult`.

    At a state it asks for ``n = n(s)`` candidates (the caller samples them from its policy after
    restoring the state; ``root`` gets at least ``min_start``); those whose ``(state, action)`` is in
    ``stats.explored`` are dropped, and so are repeats of an action among them (the same transition
    again); the rest are ranked by reward (ties keep the order given). None sent instead stops the
    search at once (a spent budget), the trajectory in progress unfinished and left out. The best is
    followed; the others wait on a stack with the path that led to them. A trajectory ends when its
    candidate ends the episode, at ``max_depth`` steps, or at a state given ``n(s) = 0`` (truncated);
    it is then recorded in ``stats`` and the search resumes from the top of the stack, with its
    next-best candidate, until ``max_trajectories`` are done or nothing is left.

    The official collector, on backtracking, samples the state's actions again and re-ranks them;
    here the stacked ranking is reused, as its docstring describes, so a state is expanded once per
    search.
    """
    result: SearchResult[Node] = SearchResult()
    stack: list[tuple[list[tuple[Hashable, Candidate[Node]]], Hashable, list[Candidate[Node]]]] = []
    path: list[tuple[Hashable, Candidate[Node]]] = []
    node: Node | None = root
    while len(result.trajectories) < max_trajectories:
        ranked: list[Candidate[Node]] = []
        if node is not None:
            state = key(node)
            total, success = stats.counts([state])
            allocation = int(rollout_allocation(state_scores(total, success, stats.t, settings), settings)[0])
            if not path:
                allocation = max(allocation, min_start)
            if allocation > 0 and len(path) < max_depth:
                candidates = yield node, allocation
                if candidates is None:
                    break
                ranked = _ranked(state, candidates, stats.explored)
        if ranked:
            if len(ranked) > 1:
                stack.append((list(path), state, ranked[1:]))
            node = _take(path, state, ranked[0], stats, result)
            continue
        if node is not None and path:  # truncated (n(s) = 0), too deep, or every action tried
            _finish(path, False, stats, result)
            if len(result.trajectories) >= max_trajectories:
                break
        if not stack:
            break
        saved, state, rest = stack.pop()
        path = list(saved)
        if len(rest) > 1:
            stack.append((saved, state, rest[1:]))
        node = _take(path, state, rest[0], stats, result)
    return result


def _ranked(state: Hashable, candidates: Sequence[Candidate], explored: set) -> list[Candidate]:
    """The candidates whose action is new at ``state`` (each action once), best reward first, ties in
    the order given."""
    fresh: dict[str, Candidate] = {}
    for candidate in candidates:
        if (state, candidate.action) not in explored:
            fresh.setdefault(candidate.action, candidate)
    return sorted(fresh.values(), key=lambda c: -c.reward)


def _take(path: list, state: Hashable, candidate: Candidate, stats: StateStats, result: SearchResult):
    """Follow ``candidate`` from ``state``; the next node, or None when the episode ended there."""
    stats.explored.add((state, candidate.action))
    path.append((state, candidate))
    if candidate.done:
        _finish(path, candidate.success, stats, result)
        return None
    return candidate.next


def _finish(path: list, solved: bool, stats: StateStats, result: SearchResult) -> None:
    stats.record([state for state, _ in path], solved)
    result.trajectories.append(list(path))
    result.solved.append(solved)
