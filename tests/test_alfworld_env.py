"""``ptgpo/ALFWorld-v0`` on the official evaluation games (shared copy beside the repository).

The engine is slow (20-100 ms a step, planner 0.1-10 s a state), so these tests sample one game of
each task type per split; the full evaluation is ``ptgpo alfworld eval`` (see the README).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import pytest

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_envs.alfworld.data import SPLITS, TASK_TYPES, list_games, resolve_split_dir
from ptgpo_envs.alfworld.grammar import match_command, placement_key
from ptgpo_envs.core import INVALID_ACTION_OBSERVATION

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "alfworld" / "json_2.1.1"

needs_alfworld = pytest.mark.skipif(
    importlib.util.find_spec("alfworld") is None, reason="the alfworld package is not installed"
)
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"ALFWorld's evaluation games are not at {DATA} (the shared data folder)"
)
pytestmark = [needs_alfworld, needs_data]

EVAL_SPLITS = ("eval_in_distribution", "eval_out_of_distribution")


def make(split: str = "eval_out_of_distribution", **kwargs):
    return gym.make("ptgpo/ALFWorld-v0", split=split, data_path=str(DATA), **kwargs).unwrapped


def one_game_per_type(split: str) -> dict[str, int]:
    """The index of the first game of each task type in ``split`` (game index = seed)."""
    games = list_games(resolve_split_dir(split, DATA))
    first: dict[str, int] = {}
    for index, game in enumerate(games):
        first.setdefault(game.task_type, index)
    return first


def play_expert(env, seed: int) -> tuple[bool, list[str], list[str]]:
    observation, info = env.reset(seed=seed)
    observations, actions = [observation], []
    done = False
    while not done:
        action = env.expert_action()
        observation, reward, terminated, truncated, info = env.step(action)
        assert info["action_valid"], action
        observations.append(observation)
        actions.append(action)
        done = terminated or truncated
    return bool(info["won"]) and reward == 1.0, actions, observations


def test_official_splits_have_the_published_sizes():
    assert len(list_games(resolve_split_dir("eval_in_distribution", DATA))) == 140
    assert len(list_games(resolve_split_dir("eval_out_of_distribution", DATA))) == 134
    # The alfworld-download root (holding json_2.1.1/) is accepted as well as json_2.1.1 itself.
    assert resolve_split_dir("eval_in_distribution", DATA.parent) == DATA / SPLITS["eval_in_distribution"]


@pytest.mark.slow
@pytest.mark.parametrize("split", EVAL_SPLITS)
def test_planner_expert_wins_a_game_of_every_task_type(split):
    env = make(split)
    sample = one_game_per_type(split)
    assert set(sample) == set(TASK_TYPES.values())
    for task_type, seed in sample.items():
        won, actions, _ = play_expert(env, seed)
        assert won, f"expert lost {env.games[seed].path}"
        assert env.games[seed].task_type == task_type and 1 <= len(actions) < env.max_steps
    env.close()


def test_reset_shows_the_task_and_info_carries_the_engine_state():
    env = make()
    observation, info = env.reset(seed=0)
    assert "Your task is to: " + info["task"] in observation
    assert info["task_type"] in TASK_TYPES.values()
    assert info["state_key"] == observation and info["won"] is False and info["step"] == 0
    assert "look" in info["admissible_actions"] and "inventory" in info["admissible_actions"]
    assert info["gamefile"] == env.games[0].path
    assert info["observation_style"] == "original"  # what the run was measured under, for its record
    # The seed picks the game: seeds 0..N-1 cover the split, seed N wraps to game 0.
    assert env.reset(seed=len(env.games))[1]["gamefile"] == env.games[0].path
    assert env.reset(seed=1)[1]["gamefile"] == env.games[1].path


def test_expert_plan_in_info_is_the_planners_plan():
    env = make(expert_plan=True)
    seed = one_game_per_type("eval_out_of_distribution")["Pick"]
    _, info = env.reset(seed=seed)
    plan = info["expert_plan"]
    assert plan and plan[0] == env.expert_action()
    for action in plan:
        _, reward, terminated, _, info = env.step(action)
    assert terminated and info["won"] and reward == 1.0


def test_both_placement_grammars_work():
    assert placement_key("move cd 2 to drawer 3") == placement_key("put cd 2 in/on drawer 3") == ("cd 2", "drawer 3")
    admissible = ["go to desk 1", "put cd 2 in/on drawer 3", "take cd 1 from desk 1"]
    for said in ("move cd 2 to drawer 3", "put cd 2 in drawer 3", "PUT cd 2 on  drawer 3", "put cd 2 in/on drawer 3"):
        assert match_command(said, admissible) == "put cd 2 in/on drawer 3"
    assert match_command("put cd 1 in/on drawer 3", admissible) is None
    assert match_command("move cd 2 to drawer 3", ["move cd 2 to drawer 3"]) == "move cd 2 to drawer 3"
    assert match_command("put cd 2 in/on drawer 3", ["move cd 2 to drawer 3"]) == "move cd 2 to drawer 3"

    # In a real game: the expert's placements said the other way still win.
    env = make()
    seed = one_game_per_type("eval_out_of_distribution")["Pick"]
    env.reset(seed=seed)
    done = False
    while not done:
        action = env.expert_action()
        key = placement_key(action)
        said = f"move {key[0]} to {key[1]}" if key else action
        _, _, terminated, truncated, info = env.step(said)
        assert info["action_valid"]
        done = terminated or truncated
    assert info["won"]


def test_snapshot_restore_and_replay_reproduce_observations_exactly():
    env = make()
    seed = one_game_per_type("eval_out_of_distribution")["Pick"]
    won, actions, observations = play_expert(env, seed)
    assert won and len(actions) >= 4
    env.reset(seed=seed)
    snapshots = [env.snapshot()]
    for action in actions[:-1]:
        env.step(action)
        snapshots.append(env.snapshot())
    # Restore every prefix, in a scrambled order, on this env and on one that played another game.
    other = make()
    other.reset(seed=seed + 1)
    for target in (env, other):
        for k in (2, 0, len(actions) - 1, 1):
            observation, info = target.restore(snapshots[k])
            assert observation == observations[k] == info["state_key"]
            replay = [target.step(action)[0] for action in actions[k:]]
            assert replay == observations[k + 1 :]
            assert target.done
    # A fresh episode with the same seed and actions replays identically.
    fresh = make()
    assert [fresh.reset(seed=seed)[0]] + [fresh.step(action)[0] for action in actions] == observations


BAD_COMMANDS = ["", "   ", "xyzzy", "x" * 100_000, "go to\x00 desk 1", "move ghost 9 to desk 1"]


@pytest.mark.parametrize("style", ["original", "annotated"])
def test_bad_inputs_are_invalid_steps_that_change_nothing(style):
    env = make(observation_style=style)
    observation, info = env.reset(seed=3)
    for step, action in enumerate(BAD_COMMANDS, 1):
        bad, reward, terminated, truncated, bad_info = env.step(action)
        assert bad == ("Nothing happens." if style == "original" else INVALID_ACTION_OBSERVATION)
        assert (reward, terminated, truncated, bad_info["action_valid"], bad_info["step"]) == (0.0, False, False, False, step)
        assert bad_info["state_key"] == observation
        assert bad_info["admissible_actions"] == info["admissible_actions"]
    with pytest.raises(TypeError):
        env.step(None)


def test_original_style_answers_bad_input_as_the_engine_does():
    # The original client hands every command to the engine; ours keeps inadmissible ones from it
    # (the contract), and shows what the engine would have answered.
    env, engine_side = make(), make()
    env.reset(seed=3)
    engine_side.reset(seed=3)
    for action in BAD_COMMANDS[:3] + BAD_COMMANDS[4:] + ["take apple 9 from desk 1", "go to Desk 1!"]:
        observation, *_, info = env.step(action)
        engine_side._engine.step(action)
        assert not info["action_valid"] and observation == engine_side._engine.feedback, action


def test_observation_style_is_validated():
    with pytest.raises(ValueError, match="observation_style must be one of 'original', 'annotated'"):
        make(observation_style="verbose")


def test_the_horizon_truncates_at_max_steps():
    env = make(max_steps=3)
    env.reset(seed=0)
    outcomes = [env.step("look")[2:4] for _ in range(3)]
    assert outcomes == [(False, False), (False, False), (False, True)]


def test_bad_configuration_fails_with_a_clear_message(tmp_path):
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        make("valid_everything")
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        gym.make("ptgpo/ALFWorld-v0", split="eval_in_distribution", data_path=str(tmp_path))
    with pytest.raises(ValueError, match="unknown task types"):
        make(task_types=["Juggle"])
    env = make(task_types=["Heat"])
    assert {game.task_type for game in env.games} == {"Heat"}
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"game": len(env.games)})


def test_eval_command_writes_a_leaderboard_record_and_episodes(tmp_path):
    from leaderboard.records import read_records
    from ptgpo_harness.cli import main

    argv = ["alfworld", "eval", "--split", "eval_out_of_distribution", "--agent", "expert",
            "--data-path", str(DATA), "--episodes", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    (record,), problems = read_records(tmp_path)
    assert not problems
    assert (record.env_label, record.method, record.eval_episodes) == ("ALFWorld-OOD", "expert", 2)
    assert record.final_success == 1.0 and record.success_by_type == {"Look": 1.0}
    rows = (tmp_path / "episodes" / "ALFWorld-OOD__expert__seed0.jsonl").read_text().splitlines()
    assert [json.loads(row)["won"] for row in rows] == [True, True]
