"""``ptgpo/Sokoban-v0``: rooms, the solver, the generator and the environment's action semantics."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.expert_agent import ExpertAgent
from ptgpo_algos.rollouts.evaluation import evaluate
from ptgpo_envs.sokoban import SokobanEnv, generate_puzzle, solve, solve_pushes
from ptgpo_envs.sokoban.room import parse_level
from ptgpo_envs.sokoban.solver import freeze_deadlock

CORRIDOR = "#######\n#@$__.#\n#######"
# Player beside a box with free floor behind it (push left) and a target to its right.
BESIDE_A_BOX = "######\n#____#\n#_$@.#\n#____#\n######"
# Player beside two boxes in a row: neither push nor move left.
BOXES_IN_A_ROW = "#######\n#_____#\n#_$$@_#\n#_____#\n#_..__#\n#######"


def cell(room, row: int, column: int) -> int:
    return row * room.width + column


def test_level_text_round_trips():
    room, player, boxes = parse_level(BOXES_IN_A_ROW)
    assert (room.width, room.height, len(room.floor)) == (7, 6, 20)
    assert room.render(player, boxes) == BOXES_IN_A_ROW
    room, player, boxes = parse_level("#####\n#+*$#\n#####")
    assert room.targets == {cell(room, 1, 1), cell(room, 1, 2)} and player == cell(room, 1, 1)
    assert room.render(player, boxes) == "#####\n#+*$#\n#####"


@pytest.mark.parametrize(
    "level, message",
    [
        ("#####\n_@$.#\n#####", "enclosed by walls"),
        ("#####\n#_$.#\n#####", "exactly one player"),
        ("######\n#@$$.#\n######", "as many targets as boxes"),
        ("#####\n#@x.#\n#####", "unknown level character"),
    ],
)
def test_bad_levels_are_refused_with_a_reason(level, message):
    with pytest.raises(ValueError, match=message):
        parse_level(level)


def test_push_distance_and_dead_squares_in_a_corridor():
    room, _, _ = parse_level(CORRIDOR)
    # The target is at column 5; a box at column 1 has no room behind it for the player.
    assert room.push_distance == {cell(room, 1, c): 5 - c for c in (2, 3, 4, 5)}


def test_solver_pushes_along_the_corridor():
    room, player, boxes = parse_level(CORRIDOR)
    assert solve(room, boxes, player) == ["push right"] * 3


def test_solver_walks_around_and_is_push_optimal():
    room, player, boxes = parse_level("######\n#.___#\n#_$__#\n#___@#\n######")
    pushes = solve_pushes(room, boxes, player)
    assert len(pushes) == 2
    env = SokobanEnv()
    env.reset(options={"level": "######\n#.___#\n#_$__#\n#___@#\n######"})
    for action in solve(room, boxes, player):
        *_, terminated, _, info = env.step(action)
        assert info["action_valid"]
    assert terminated and info["won"]


def test_solver_sees_deadlocks():
    cornered, player, boxes = parse_level("######\n#$___#\n#__@.#\n######")
    assert solve_pushes(cornered, boxes, player) is None
    room, _, _ = parse_level(BOXES_IN_A_ROW)
    against_wall = frozenset({cell(room, 1, 2), cell(room, 1, 3)})
    assert freeze_deadlock(room, against_wall, cell(room, 1, 3))
    assert not freeze_deadlock(room, frozenset({cell(room, 2, 2), cell(room, 2, 3)}), cell(room, 2, 3))


@pytest.mark.parametrize("size, num_boxes", [(6, 1), (6, 2), (7, 2), (8, 3)])
def test_generated_puzzles_are_solvable_in_the_announced_pushes(size, num_boxes):
    for seed in range(25):
        puzzle = generate_puzzle(np.random.default_rng(seed), size, num_boxes)
        room = puzzle.room
        assert (room.width, room.height, len(puzzle.boxes), len(room.targets)) == (size, size, num_boxes, num_boxes)
        assert puzzle.player in room.floor and puzzle.player not in puzzle.boxes
        assert puzzle.boxes != room.targets and puzzle.optimal_pushes >= num_boxes + 1
        assert len(solve_pushes(room, puzzle.boxes, puzzle.player)) == puzzle.optimal_pushes


def test_the_seed_fixes_the_room():
    first = [SokobanEnv(size=7, num_boxes=2).reset(seed=seed)[0] for seed in range(20)]
    again = [SokobanEnv(size=7, num_boxes=2).reset(seed=seed)[0] for seed in range(20)]
    assert first == again and len(set(first)) == 20


def test_push_needs_a_box_and_move_needs_a_free_cell():
    env = SokobanEnv()
    _, info = env.reset(options={"level": BESIDE_A_BOX})
    assert info["admissible_actions"] == ["move up", "move down", "push left", "move right"]
    for refused in ("move left", "push up", "push right"):
        _, reward, _, _, info = env.step(refused)
        assert (info["action_valid"], reward) == (False, 0.0)
    observation, _, _, _, info = env.step("push left")
    assert info["state_key"] == "######\n#____#\n#$@_.#\n#____#\n######"
    assert observation.startswith("You pushed the box left.")
    _, info = env.reset(options={"level": BOXES_IN_A_ROW})
    assert info["admissible_actions"] == ["move up", "move down", "move right"]


def test_solving_pays_one_and_ends_the_episode():
    env = SokobanEnv()
    observation, info = env.reset(options={"level": CORRIDOR})
    assert info["score"] == 0.0 and env.optimal_pushes == 3
    for _ in range(2):
        assert env.step("push right")[1:3] == (0.0, False)
    observation, reward, terminated, truncated, info = env.step("push right")
    assert (reward, terminated, truncated, info["won"], info["score"]) == (1.0, True, False, True, 1.0)
    assert info["state_key"] == "#######\n#___@*#\n#######" and "solved" in observation


def test_expert_replans_after_a_detour_and_survives_a_deadlock():
    env = SokobanEnv(size=7, num_boxes=2)
    env.reset(seed=3)
    for _ in range(3):
        env.step(env.admissible_actions()[-1])
    while not env.done:
        *_, info = env.step(env.expert_action())
    assert info["won"]
    env.reset(options={"level": "######\n#____#\n#_$@.#\n#____#\n######"})
    *_, info = env.step("push left")  # the box is now against the left wall, off its row's target: dead
    room, player, boxes = parse_level(info["state_key"])
    assert solve_pushes(room, boxes, player) is None
    assert env.expert_action() in env.admissible_actions()


@pytest.mark.parametrize("kwargs", [{"num_boxes": 2}, {"size": 7, "num_boxes": 2}, {"size": 8, "num_boxes": 3}])
def test_expert_solves_larger_rooms(kwargs):
    assert evaluate(ExpertAgent(), "ptgpo/Sokoban-v0", range(30), kwargs).success_rate == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 5}, "size .* from 6 to 10"),
        ({"size": 11}, "size .* from 6 to 10"),
        ({"size": 6.0}, "size"),
        ({"num_boxes": 0}, "num_boxes must be an integer from 1 to 3"),
        ({"num_boxes": True}, "num_boxes"),
    ],
)
def test_bad_kwargs_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SokobanEnv(**kwargs)


@pytest.mark.parametrize(
    "level, message",
    [("######\n#$___#\n#__@.#\n######", "cannot be solved"), ("#####\n#@*_#\n#####", "already solved")],
)
def test_unplayable_levels_are_refused(level, message):
    with pytest.raises(ValueError, match=message):
        SokobanEnv().reset(options={"level": level})


def test_progress_is_the_share_of_boxes_on_targets():
    env = SokobanEnv()
    env.reset(options={"level": CORRIDOR})
    assert env.progress() == 0.0
    env.step("push right")
    env.step("push right")
    observation, reward, terminated, _, info = env.step("push right")
    assert terminated and env.progress() == info["score"] == 1.0
