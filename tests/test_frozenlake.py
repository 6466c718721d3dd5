"""``ptgpo/FrozenLake-v0``: Gymnasium's dynamics in words, generated maps, the experts, forking."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.envs.toy_text.frozen_lake import MAPS

import ptgpo_envs  # noqa: F401  (registers the environments)
from baselines.expert_agent import ExpertAgent
from ptgpo_algos.rollouts.evaluation import evaluate
from ptgpo_envs.frozenlake import ACTIONS, TextFrozenLakeEnv

CLASSIC = MAPS["4x4"]  # SFFF / FHFH / FFFH / HFFG


def grid(observation: str) -> list[str]:
    """The map rows of an observation (between the sentence and the legend), without spaces."""
    return [line.replace(" ", "") for line in observation.splitlines()[1:-1]]


def test_shortest_walk_on_the_classic_map_wins():
    env = TextFrozenLakeEnv(desc=CLASSIC)
    env.reset(seed=0)
    for action in ["go down", "go down", "go right", "go right", "go down"]:
        observation, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, info["won"]) == (0.0, False, False)
    assert info["state_key"] == "3,2"
    observation, reward, terminated, truncated, info = env.step("go right")
    assert (reward, terminated, truncated, info["won"]) == (1.0, True, False, True)
    assert observation.startswith("You reached the goal!")
    assert grid(observation)[3] == "HFFP"


def test_hole_ends_the_episode_without_reward():
    env = TextFrozenLakeEnv(desc=CLASSIC)
    env.reset(seed=0)
    env.step("go right")
    observation, reward, terminated, _, info = env.step("go down")
    assert (reward, terminated, info["won"], info["state_key"]) == (0.0, True, False, "1,1")
    assert "fell into a hole" in observation


def test_edge_keeps_the_agent_in_place_and_says_so():
    env = TextFrozenLakeEnv(desc=CLASSIC)
    observation, info = env.reset(seed=0)
    assert grid(observation) == ["PFFF", "FHFH", "FFFH", "HFFG"]
    assert info["admissible_actions"] == list(ACTIONS)
    observation, reward, terminated, _, info = env.step("go up")
    assert (info["state_key"], info["action_valid"], terminated) == ("0,0", True, False)
    assert "edge of the lake" in observation


def test_maps_are_generated_from_the_seed_and_always_solvable():
    env = TextFrozenLakeEnv(size=6)
    maps = {}
    for seed in range(50):
        observation, _ = env.reset(seed=seed)
        rows = grid(observation)
        assert len(rows) == 6 and all(len(row) == 6 for row in rows)
        assert rows[0][0] == "P" and rows[5][5] == "G"
        maps[seed] = rows
    assert len({tuple(rows) for rows in maps.values()}) > 40
    assert grid(TextFrozenLakeEnv(size=6).reset(seed=7)[0]) == maps[7]
    assert evaluate(ExpertAgent(), "ptgpo/FrozenLake-v0", range(50), {"size": 6}).success_rate == 1.0


def test_expert_walks_a_shortest_path():
    env = TextFrozenLakeEnv(desc=CLASSIC)
    env.reset(seed=0)
    for steps in range(1, 20):
        *_, terminated, _, info = env.step(env.expert_action())
        if terminated:
            break
    assert info["won"] and steps == 6


def test_slippery_moves_follow_gymnasium_probabilities():
    env = TextFrozenLakeEnv(desc=["SFFF", "FFFF", "FFFF", "FFFG"], is_slippery=True)
    counts: dict[str, int] = {}
    for seed in range(600):
        env.reset(seed=seed)
        key = env.step("go right")[-1]["state_key"]
        counts[key] = counts.get(key, 0) + 1
    # Gymnasium: the intended move or either perpendicular one (up bumps the edge), a third each.
    assert set(counts) == {"0,1", "1,0", "0,0"}
    assert all(150 <= n <= 250 for n in counts.values()), counts


def test_slippery_fork_replays_the_same_slips():
    env = TextFrozenLakeEnv(size=8, is_slippery=True)
    seed = 0
    while True:  # the first seed whose first three expert moves stay on the ice
        env.reset(seed=seed)
        if not any(env.step(env.expert_action())[2] for _ in range(3)):
            break
        seed += 1
    snapshot = env.snapshot()
    actions, continuation = [], []
    while not env.done:
        actions.append(env.expert_action())
        continuation.append(env.step(actions[-1]))
    other = TextFrozenLakeEnv(size=8, is_slippery=True)
    other.reset(seed=seed + 1)
    for target in (env, other):
        target.restore(snapshot)
        assert [target.step(action) for action in actions] == continuation
    assert any("slid" in observation for observation, *_ in continuation)


def test_slippery_expert_beats_random(record_property):
    from baselines.random_agent import RandomAgent

    kwargs = {"is_slippery": True}
    expert = evaluate(ExpertAgent(), "ptgpo/FrozenLake-v0", range(200), kwargs).success_rate
    randomly = evaluate(RandomAgent(seed=0), "ptgpo/FrozenLake-v0", range(200), kwargs).success_rate
    record_property("slippery_expert_success", expert)
    record_property("slippery_random_success", randomly)
    assert expert > 0.8 and randomly < expert - 0.3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 1}, "size must be an integer from 2 to 32"),
        ({"size": "4"}, "size must be an integer"),
        ({"is_slippery": 1}, "is_slippery must be True or False"),
        ({"frozen_prob": 0.5}, "frozen_prob must be a probability from 0.6 to 1"),
        ({"desc": "SFFG"}, "desc must be a non-empty list"),
        ({"desc": ["SF", "FFG"]}, "one common length"),
        ({"desc": ["SX", "FG"]}, "only use the tiles"),
        ({"desc": ["FF", "FG"]}, "exactly one start"),
        ({"desc": ["SH", "HG"]}, "no path from the start"),
        ({"desc": CLASSIC, "size": 8}, "contradicts"),
    ],
)
def test_bad_kwargs_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TextFrozenLakeEnv(**kwargs)


def test_registered_with_gymnasium():
    env = gym.make("ptgpo/FrozenLake-v0", size=5)
    observation, info = env.reset(seed=1)
    assert len(grid(observation)) == 5 and info["state_key"] == "0,0"
    assert env.spec.max_episode_steps is None and env.unwrapped.max_steps == 100  # no TimeLimit: forkable


def test_progress_is_the_share_of_the_start_distance_covered():
    # CLASSIC's start is 6 safe moves from the goal.
    env = TextFrozenLakeEnv(desc=CLASSIC)
    env.reset(seed=0)
    assert env.progress() == 0.0
    expected = [1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0]
    for action, share in zip(["go down", "go down", "go right", "go right", "go down", "go right"], expected):
        env.step(action)
        assert env.progress() == pytest.approx(share)
    env.reset(seed=0)
    env.step("go right")
    assert env.progress() == pytest.approx(1 / 6)  # (0,1) is 5 moves away, by (0,2) and column 2
    env.step("go left")
    env.step("go left")  # the edge: still the start
    assert env.progress() == 0.0
    env.step("go right")
    env.step("go down")  # a hole
    assert env.progress() == 0.0
    corridor = TextFrozenLakeEnv(desc=["FSFG"])
    corridor.reset(seed=0)
    corridor.step("go right")
    assert corridor.progress() == 0.5
    corridor.step("go left")
    corridor.step("go left")
    assert corridor.progress() == 0.0  # 3 moves away from the goal, the start 2: clipped, not -0.5
