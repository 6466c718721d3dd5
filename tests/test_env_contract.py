"""The text-environment contract (``ptgpo_envs.core``), checked on every registered environment.

A new environment is covered as soon as it is in the registry. If it needs constructor arguments for
these tests, an optional package or shared data, add it to the tables below; an environment is only
skipped when what it declares there is missing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ptgpo_envs
from baselines.expert_agent import ExpertAgent
from baselines.random_agent import RandomAgent
from ptgpo_algos.rollouts.evaluation import evaluate
from ptgpo_envs.core import INVALID_ACTION_OBSERVATION, TextEnv

#: The official ALFWorld evaluation games, read-only beside the checkout (never copied into it).
ALFWORLD_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "alfworld" / "json_2.1.1"
#: Env id -> constructor kwargs for these tests (registry defaults when absent).
CONTRACT_KWARGS: dict[str, dict[str, Any]] = {
    "ptgpo/ALFWorld-v0": {"split": "eval_out_of_distribution", "data_path": str(ALFWORLD_DATA)},
    # Keys, locked and closed doors, several rooms: every action has its moment.
    "ptgpo/BabyAI-v0": {"level": "KeyCorridorS3R1"},
}
#: Env id -> optional packages it needs; when one is not installed the environment is skipped.
OPTIONAL_MODULES: dict[str, tuple[str, ...]] = {
    "ptgpo/ALFWorld-v0": ("alfworld", "textworld"),
}
#: Envs that read data from outside the repository: a FileNotFoundError when they are built (data
#: not downloaded or generated) skips them.
NEEDS_DATA: set[str] = {"ptgpo/ALFWorld-v0", "ptgpo/WebShop-v0"}
#: Env id -> seeds the expert must solve 99 % of; 0 leaves it to the environment's own tests.
EXPERT_SEEDS: dict[str, int] = {
    "ptgpo/ALFWorld-v0": 0,  # its PDDL planner takes 0.1-10 s a state
}
DEFAULT_EXPERT_SEEDS = 200
#: Env id -> how many steps of an episode have every candidate action tried on them (all when absent).
#: ALFWorld's restore replays the episode, so trying each candidate at step k costs k engine steps;
#: its own tests compare the admissible commands with the original client's at every step.
VOCABULARY_CHECK_STEPS: dict[str, int] = {
    "ptgpo/ALFWorld-v0": 6,
}

ENV_IDS = ptgpo_envs.env_ids()
KEYS_ALWAYS = ("task", "admissible_actions", "state_key", "won", "step")


def make(env_id: str):
    """The unwrapped environment, with this file's kwargs (skipped if optional parts are missing)."""
    for module in OPTIONAL_MODULES.get(env_id, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{env_id} needs the optional package {module!r}")
    try:
        return gym.make(env_id, disable_env_checker=True, **CONTRACT_KWARGS.get(env_id, {})).unwrapped
    except FileNotFoundError as error:
        if env_id not in NEEDS_DATA:
            raise
        pytest.skip(f"{env_id} has no data here: {error}")


def play(env, seed: int, steps: int = 30, action_seed: int = 0) -> list[tuple]:
    """A seeded episode of admissible actions mixed with bad ones: its ``reset`` and each ``step``."""
    rng = random.Random(action_seed)
    observation, info = env.reset(seed=seed)
    record = [("reset", observation, info)]
    for _ in range(steps):
        if rng.random() < 0.2:
            action = rng.choice(["", "xyzzy", "GO  NOWHERE", "\x00\x1b[2J"])
        else:
            action = rng.choice(info["admissible_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        record.append((action, observation, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return record


def digest(record: list[tuple]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=repr).encode()).hexdigest()


def _actions(record: list[tuple]) -> list[str]:
    return [entry[0] for entry in record[1:]]


@pytest.fixture(params=ENV_IDS)
def env_id(request) -> str:
    return request.param


def test_gymnasium_check_env(env_id):
    check_env(make(env_id), skip_render_check=True)


def test_same_seed_same_episode_and_seeds_matter(env_id):
    assert play(make(env_id), seed=3) == play(make(env_id), seed=3)
    firsts = {make(env_id).reset(seed=seed)[0] for seed in range(10)}
    assert len(firsts) > 1, "ten seeds gave one and the same first observation"


def test_same_episode_in_another_process(env_id):
    env = make(env_id)
    here = digest(play(env, seed=5))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_env_contract as t;"
        "print(t.digest(t.play(t.make(sys.argv[2]), seed=5)))"
    )
    # A different hash seed catches set/dict iteration orders leaking into episodes.
    environment = {**os.environ, "PYTHONHASHSEED": "12345"}
    completed = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), env_id],
        capture_output=True, text=True, env=environment, timeout=120, check=True,
    )
    assert completed.stdout.strip().splitlines()[-1] == here


def test_fork_and_replay(env_id):
    env = make(env_id)
    original = play(env, seed=7, steps=40, action_seed=1)
    assert len(original) > 4, "the episode ended too early to fork"
    fork_at = 3
    actions = _actions(original)
    env = make(env_id)
    observation, info = env.reset(seed=7)
    for action in actions[:fork_at]:
        observation, *_, info = env.step(action)
    snapshot = env.snapshot()
    continuation = [env.step(action) for action in actions[fork_at:]]
    # Restore twice: on the same environment after it ran on, and on a fresh one in another episode.
    other = make(env_id)
    other.reset(seed=8)
    # restore() gives the info of that moment, less the step's ``action_valid``.
    info.pop("action_valid")
    for target in (env, other):
        assert target.restore(snapshot) == (observation, info)
        assert [target.step(action) for action in actions[fork_at:]] == continuation
    assert [entry[1:] for entry in original[fork_at + 1 :]] == [tuple(c) for c in continuation]


def test_fork_through_gymnasium_make_keeps_the_horizon(env_id):
    # Forked two steps in and run out to the default horizon: the restored episode must end where the
    # original did, through every wrapper gymnasium.make adds (a TimeLimit counting steps on its own
    # would cut the replay short).
    for module in OPTIONAL_MODULES.get(env_id, ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{env_id} needs the optional package {module!r}")
    try:
        env = gym.make(env_id, **CONTRACT_KWARGS.get(env_id, {}))
    except FileNotFoundError as error:
        pytest.skip(f"{env_id} has no data here: {error}")
    assert env.spec.max_episode_steps is None, "a TimeLimit wrapper would keep a step count restore() cannot reach"
    rng = random.Random(4)

    def run_out(info):
        outcomes = []
        while True:
            observation, reward, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"] or [""]))
            outcomes.append((observation, reward, terminated, truncated))
            if terminated or truncated:
                return outcomes

    for seed in range(20):
        _, info = env.reset(seed=seed)
        for _ in range(2):
            _, _, terminated, truncated, info = env.step(info["admissible_actions"][0])
        if not (terminated or truncated):
            break
    snapshot = env.unwrapped.snapshot()
    state = rng.getstate()
    original = run_out(info)
    for _ in range(2):  # replay twice: the first replay must not disturb the second
        _, info = env.unwrapped.restore(snapshot)
        rng.setstate(state)
        assert run_out(info) == original
    if not original[-1][2]:  # not won: truncated at the horizon
        assert len(original) == env.unwrapped.max_steps - 2 and original[-1][3]


def _bad_inputs(admissible: list[str]) -> list[str]:
    return [
        "",
        "   ",
        "\t\n",
        "xyzzy plugh",
        admissible[0] + " please",
        "x" * 100_000,
        admissible[0] + "\x00",
        "\x1b[2J\x07" + admissible[0],
    ]


def test_bad_input_costs_a_step_and_changes_nothing(env_id):
    env = make(env_id)
    observation, info = env.reset(seed=11)
    overridden = type(env)._invalid_action_observation is not TextEnv._invalid_action_observation
    for step, action in enumerate(_bad_inputs(info["admissible_actions"]), start=1):
        # Taken before the step: what a bad input shows cannot depend on it, since nothing changes.
        expected = env._invalid_action_observation()
        bad_observation, reward, terminated, truncated, bad_info = env.step(action)
        assert bad_observation == expected
        # Only an environment that reproduces an original's response may show something else.
        assert overridden or bad_observation == INVALID_ACTION_OBSERVATION
        assert (reward, terminated, bad_info["action_valid"], bad_info["step"]) == (0.0, False, False, step)
        assert bad_info["state_key"] == info["state_key"]
        assert bad_info["admissible_actions"] == info["admissible_actions"]
        assert not truncated or step >= env.max_steps


@pytest.mark.parametrize("dress", [str.upper, str.title, lambda a: f"  {a}\t\n", lambda a: f"\n{a.swapcase()} "])
def test_case_and_surrounding_whitespace_are_ignored(env_id, dress):
    plain, dressed = make(env_id), make(env_id)
    _, info = plain.reset(seed=13)
    dressed.reset(seed=13)
    action = info["admissible_actions"][0]
    expected = plain.step(action)
    assert expected[-1]["action_valid"]
    assert dressed.step(dress(action)) == expected


@pytest.mark.parametrize("action", [3, None, b"go", ["go"], 1.5])
def test_non_text_action_raises_type_error(env_id, action):
    env = make(env_id)
    env.reset(seed=0)
    with pytest.raises(TypeError, match=type(action).__name__):
        env.step(action)
    assert env.steps_taken == 0


def test_info_keys_and_admissible_actions_are_exactly_the_valid_ones(env_id):
    env = make(env_id)
    record = play(env, seed=17, steps=25, action_seed=2)
    vocabulary = sorted({a for entry in record for a in entry[-1]["admissible_actions"]})
    env = make(env_id)
    observation, info = env.reset(seed=17)
    checked_steps = VOCABULARY_CHECK_STEPS.get(env_id, len(record))
    for step, action in enumerate([None, *_actions(record)]):
        if action is not None:
            observation, _, terminated, truncated, info = env.step(action)
            assert isinstance(info["action_valid"], bool)
            if terminated or truncated:
                assert info["admissible_actions"] == []
                break
        assert set(KEYS_ALWAYS) <= set(info)
        assert isinstance(info["task"], str) and info["task"]
        assert isinstance(info["state_key"], str) and isinstance(info["won"], bool)
        admissible = info["admissible_actions"]
        assert admissible and all(isinstance(a, str) for a in admissible)
        assert len(set(admissible)) == len(admissible)
        assert env.observation_space.contains(observation)
        if step > checked_steps:
            continue
        here = env.snapshot()
        for candidate in vocabulary:
            valid = env.step(candidate)[-1]["action_valid"]
            assert valid == (candidate in admissible), f"{candidate!r} valid={valid}, admissible={admissible}"
            env.restore(here)


def test_progress_is_none_or_a_share_of_the_task_that_depends_on_the_state(env_id):
    env = make(env_id)
    record = play(env, seed=11, steps=25, action_seed=3)
    env = make(env_id)
    env.reset(seed=11)
    reported = env.progress() is not None
    twin = make(env_id)
    for action in [None, *_actions(record)]:
        if action is not None:
            *_, terminated, truncated, info = env.step(action)
        value = env.progress()
        assert (value is not None) == reported
        if not reported:
            continue
        assert isinstance(value, float) and 0.0 <= value <= 1.0
        if action is not None and info["won"]:
            assert value == 1.0
        twin.restore(env.snapshot())
        assert twin.progress() == value
        if action is not None and (terminated or truncated):
            break


def test_expert_solves_and_random_does_worse(env_id, record_property):
    env = make(env_id)
    env.reset(seed=0)
    try:
        env.expert_action()
    except NotImplementedError:
        pytest.skip(f"{env_id} has no expert")
    kwargs = CONTRACT_KWARGS.get(env_id)
    seeds = range(EXPERT_SEEDS.get(env_id, DEFAULT_EXPERT_SEEDS))
    if not seeds:
        pytest.skip(f"{env_id}'s expert is tested with the environment")
    expert = evaluate(ExpertAgent(), env_id, seeds, kwargs, batch_size=50)
    randomly = evaluate(RandomAgent(seed=0), env_id, seeds, kwargs, batch_size=50)
    record_property("expert_success", expert.success_rate)
    record_property("random_success", randomly.success_rate)
    assert expert.success_rate >= 0.99
    assert expert.invalid_rate == 0.0
    assert randomly.success_rate < expert.success_rate
