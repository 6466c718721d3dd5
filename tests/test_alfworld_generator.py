"""Generated ALFWorld games: all six task types, planner-checked, and played like official games."""

from __future__ import annotations

import importlib.util
import json

import gymnasium as gym
import pytest

import ptgpo_envs  # noqa: F401
from ptgpo_envs.alfworld.data import TASK_TYPES, list_games
from ptgpo_envs.alfworld.generator import generate_games

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("alfworld") is None, reason="the alfworld package is not installed"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("alfworld_generated")
    paths = generate_games(6, root, seed=3)
    return root, paths


def test_one_game_of_each_task_type_in_the_official_layout(generated):
    root, paths = generated
    assert len(paths) == 6
    games = list_games(root / "train")
    assert sorted(game.task_type for game in games) == sorted(TASK_TYPES.values())
    for path in paths:
        folder = path.parent
        assert {p.name for p in folder.iterdir()} == {"game.tw-pddl", "traj_data.json", "initial_state.pddl"}
        game = json.loads(path.read_text())
        traj = json.loads((folder / "traj_data.json").read_text())
        assert game["solvable"] is True and game["walkthrough"]
        assert game["pddl_problem"] == (folder / "initial_state.pddl").read_text()
        assert folder.parent.name.startswith(traj["task_type"] + "-" + traj["pddl_params"]["object_target"])
        assert "UNKNOWN GOAL" not in game["grammar"]


def test_generation_is_deterministic_in_the_seed(generated, tmp_path):
    root, paths = generated
    again = generate_games(1, tmp_path, seed=3)
    assert again[0].relative_to(tmp_path) == paths[0].relative_to(root)
    assert again[0].read_text() == paths[0].read_text()


def test_the_planners_plan_wins_every_generated_game_with_demangled_names(generated):
    root, paths = generated
    env = gym.make("ptgpo/ALFWorld-v0", split="train", data_path=str(root)).unwrapped
    for seed, game in enumerate(env.games):
        plan = json.loads(open(game.path).read())["walkthrough"]  # the planner expert's, at generation
        observation, info = env.reset(seed=seed)
        assert info["task"] and "Your task is to: " + info["task"] in observation
        assert "_bar_" not in observation and "|" not in observation
        for action in plan:
            assert not env.done
            observation, reward, terminated, truncated, info = env.step(action)
            assert info["action_valid"] and "_bar_" not in observation
        assert terminated and info["won"] and reward == 1.0, game.path
    # The planner expert, asked afresh through the environment, wins a generated game too.
    env.reset(options={"game": next(i for i, g in enumerate(env.games) if g.task_type == "Look")})
    while not env.done:
        *_, info = env.step(env.expert_action())
    assert info["won"]
    env.close()


def test_bad_requests_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown task types"):
        generate_games(1, tmp_path, task_types=["Juggle"])
    with pytest.raises(ValueError, match="count must be"):
        generate_games(0, tmp_path)
