"""3SPO's pure parts against hand computations: state scores, allocation, step rewards and credit, and
the ranked backtracking search on a small tree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptgpo_algos.rollouts.spo3.search import (
    Candidate,
    Spo3Settings,
    StateStats,
    ranked_backtracking,
    rollout_allocation,
    state_scores,
    step_credit,
    step_rewards,
)
from ptgpo_algos.rollouts.spo3.settings import Spo3Config


def test_state_scores_by_hand():
    settings = Spo3Settings()  # alpha 50, xi 10, zeta 0.1
    total = np.array([0, 4, 20, 20])
    success = np.array([0, 1, 1, 3])
    scores = state_scores(total, success, t=2, settings=settings)
    assert scores[0] == 1.0  # never visited
    assert scores[1] == pytest.approx(math.exp(-50 * math.log(2) * 1 / (4 + 1e-6)), rel=1e-12)
    assert scores[2] == 0.0  # 19 failures and a 5 % success rate: dropped
    assert scores[3] == pytest.approx(math.exp(-50 * math.log(2) * 3 / (20 + 1e-6)), rel=1e-12)
    assert state_scores(np.array([4]), np.array([1]), t=1, settings=settings)[0] == 1.0  # lambda(1) = 0


def test_lower_success_rates_score_higher():
    scores = state_scores(np.array([10, 10, 10]), np.array([1, 5, 9]), t=5, settings=Spo3Settings(alpha=1.0))
    assert scores[0] > scores[1] > scores[2] > 0


def test_allocation_by_hand():
    settings = Spo3Settings(g_max=8)
    assert rollout_allocation(np.array([1.0, 0.0, 0.3, 0.125, 1e-9]), settings).tolist() == [8, 0, 3, 1, 1]
    # A score that annealing has taken near 0 (2^-50) still continues, as ceil does: only 0 truncates.
    assert rollout_allocation(np.array([2.0 ** -50]), settings).tolist() == [1]


def test_step_rewards_and_credit_by_hand():
    settings = Spo3Settings(omega_k=0.1)
    # A new state (w = 0.5): novelty and success only. Visited 10 times: w = 0.5 e^-1.
    rewards = step_rewards(np.array([1.0, 0.8]), np.array([0.2, 0.3]), np.array([1, 0]), np.array([0.0, 1.0]),
                           np.array([0, 10]), settings)
    w = 0.5 * math.exp(-1.0)
    assert rewards[0] == pytest.approx(0.5)
    assert rewards[1] == pytest.approx(0.0 * w + (0.5 - w) * 0.5 + 0.5)
    credit = step_credit(np.array([1.0, 3.0, 5.0]), np.array([0, 0, 1]), 2)
    assert credit.tolist() == [-1.0, 1.0, 0.0]


def _tree():
    """r -b(.9)-> y -d(1)-> solved, y -e(.2)-> failed; r -a(.3)-> x -f-> failed; r -c(.1)-> failed."""
    children = {
        "r": [Candidate("a", 0.3, "x"), Candidate("b", 0.9, "y"), Candidate("c", 0.1, None, done=True)],
        "y": [Candidate("e", 0.2, None, done=True), Candidate("d", 1.0, None, done=True, success=True)],
        "x": [Candidate("f", 0.0, None, done=True)],
    }
    asked = []

    def expand(node, n):
        asked.append((node, n))
        return children[node]

    return expand, asked


def _actions(result):
    return [[candidate.action for _, candidate in trajectory] for trajectory in result.trajectories]


def test_search_follows_the_best_first_and_backtracks_to_the_latest_untried():
    expand, asked = _tree()
    stats = StateStats()
    result = ranked_backtracking("r", str, expand, stats, Spo3Settings(), max_trajectories=10, max_depth=5)
    assert _actions(result) == [["b", "d"], ["b", "e"], ["a", "f"], ["c"]]
    assert result.solved == [True, False, False, False]
    assert asked == [("r", 8), ("y", 8), ("x", 8)]  # unseen states get G_max; each expanded once
    assert (stats.total["r"], stats.success["r"], stats.total["y"], stats.success["y"]) == (4, 1, 2, 1)
    assert stats.t == 5
    # Every pair is explored now: a second search finds nothing new.
    again = ranked_backtracking("r", str, expand, stats, Spo3Settings(), max_trajectories=10, max_depth=5)
    assert again.trajectories == []


def test_search_stops_at_its_budget_and_truncates_deep_or_dropped_states():
    expand, _ = _tree()
    two = ranked_backtracking("r", str, expand, StateStats(), Spo3Settings(), max_trajectories=2, max_depth=5)
    assert _actions(two) == [["b", "d"], ["b", "e"]]
    shallow = ranked_backtracking("r", str, expand, StateStats(), Spo3Settings(), max_trajectories=10, max_depth=1)
    assert _actions(shallow) == [["b"], ["a"], ["c"]] and shallow.solved == [False, False, False]
    hopeless = StateStats(total={"y": 20}, success={"y": 0}, t=30)  # S(y) = 0: no rollouts from y
    cut = ranked_backtracking("r", str, expand, hopeless, Spo3Settings(), max_trajectories=10, max_depth=5)
    assert _actions(cut) == [["b"], ["a", "f"], ["c"]]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_search_that_truncates_its_last_trajectory_takes_no_more(count):
    # At max_depth 1, "b" and "a" are cut short (truncated); the stacked "c" ends its episode at once
    # and was taken as one trajectory more than asked.
    expand, _ = _tree()
    result = ranked_backtracking("r", str, expand, StateStats(), Spo3Settings(), max_trajectories=count, max_depth=1)
    assert _actions(result) == [["b"], ["a"], ["c"]][:count]


def _spent(expand, stats, settings, trajectories):
    """The decisions a search asks for (the sum of its ``n``) and its result."""
    asked = []

    def counted(node, n):
        asked.append(n)
        return expand(node, n)

    result = ranked_backtracking((0, ()), lambda node: node, counted, stats, settings.settings,
                                 max_trajectories=trajectories, max_depth=10**9, min_start=settings.min_start)
    return sum(asked), result


def test_a_search_can_spend_exactly_its_declared_most():
    # Spo3Config.most_decisions, g_max x (1 + trajectories x (horizon - 1)), reached: the start has
    # `trajectories` distinct actions, each later state one action sampled g_max times, every state new
    # and every episode ending at the horizon. 4 x 5 on the way down from the start, 4 x 4 on each of
    # the two ways down from its other actions.
    horizon, settings = 5, Spo3Config(g_max=4, trajectories=3)

    def expand(node, n):
        depth, path = node
        actions = [f"a{i}" for i in range(n)] if depth == 0 else ["on"] * n
        return [Candidate(a, 0.0, (depth + 1, (*path, a)), done=depth + 1 == horizon) for a in actions]

    spent, result = _spent(expand, StateStats(), settings, settings.trajectories)
    assert spent == settings.most_decisions(horizon) == 4 * 5 + 2 * 4 * 4 == 52
    assert _actions(result) == [["a0", "on", "on", "on", "on"], ["a1", "on", "on", "on", "on"],
                                ["a2", "on", "on", "on", "on"]]


@pytest.mark.parametrize("seed", range(40))
def test_a_search_never_spends_more_than_its_declared_most(seed):
    # Random trees under random statistics: repeats, explored actions, episodes ending anywhere up to
    # the horizon, states scored 0 (cut) or low (fewer samples).
    rng = np.random.default_rng(seed)
    horizon = int(rng.integers(1, 7))
    g_max = int(rng.integers(1, 5))
    settings = Spo3Config(g_max=g_max, trajectories=int(rng.integers(1, 6)), xi=float(rng.integers(1, 4)),
                          min_start=int(rng.integers(0, g_max + 1)))

    def expand(node, n):
        depth, path = node
        actions = rng.choice(["a", "b", "c", "d"], size=n)
        return [Candidate(str(a), float(rng.random()), (depth + 1, (*path, str(a))),
                          done=depth + 1 == horizon or bool(rng.random() < 0.2), success=bool(rng.random() < 0.3))
                for a in actions]

    stats = StateStats(t=int(rng.integers(1, 20)))
    for _ in range(3):  # statistics from earlier searches, and their explored pairs
        spent, _ = _spent(expand, stats, settings, settings.trajectories)
        assert spent <= settings.most_decisions(horizon)


@pytest.mark.parametrize("change", [{"alpha": -1.0}, {"g_max": 0}, {"xi": math.nan}, {"g_max": 2.5}])
def test_bad_settings_are_named(change):
    with pytest.raises(ValueError, match=r"spo3\.(alpha|g_max|xi) must be"):
        Spo3Settings(**change)


def test_a_spent_budget_stops_the_search_and_leaves_the_trajectory_in_progress_out():
    expand, _ = _tree()
    calls = []

    def two_expansions(node, n):
        calls.append(node)
        return expand(node, n) if len(calls) <= 2 else None

    stats = StateStats()
    result = ranked_backtracking("r", str, two_expansions, stats, Spo3Settings(), max_trajectories=10, max_depth=5)
    # r and y expanded; b-d and b-e finish; a leads to x, whose expansion the budget refuses.
    assert _actions(result) == [["b", "d"], ["b", "e"]] and stats.t == 3


def test_repeated_actions_count_once_and_the_start_gets_at_least_min_start():
    def expand(node, n):
        return [Candidate("a", 0.5, None, done=True)] * n

    result = ranked_backtracking("r", str, expand, StateStats(), Spo3Settings(), max_trajectories=10, max_depth=5)
    assert _actions(result) == [["a"]]  # eight samples of one action: one transition
    hopeless = StateStats(total={"r": 20}, success={"r": 0}, t=30)
    assert ranked_backtracking("r", str, expand, hopeless, Spo3Settings(), max_trajectories=10,
                               max_depth=5).trajectories == []
    kept = ranked_backtracking("r", str, expand, hopeless, Spo3Settings(), max_trajectories=10, max_depth=5,
                               min_start=1)
    assert _actions(kept) == [["a"]]


def test_statistics_round_trip_through_plain_data():
    stats = StateStats(total={"x": 3, "y": 1}, success={"x": 1, "y": 0}, explored={("x", "go"), ("y", "stay")}, t=4)
    data = stats.state_dict()
    assert data["explored"] == [["x", "go"], ["y", "stay"]]
    back = StateStats()
    back.load_state_dict(data)
    assert back == stats
