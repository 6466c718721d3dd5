"""``ptgpo/BabyAI-v0``: levels, the view and its words, actions, forking, the experts."""

from __future__ import annotations

import pickle
import random
from collections import deque

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from minigrid.core.grid import Grid
from minigrid.core.world_object import Ball, Box, Door, Goal, Key
from minigrid.minigrid_env import MiniGridEnv

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_envs.babyai import LEVELS, BabyAIEnv, engine, get_level
from ptgpo_envs.babyai.actions import ACTIONS, admissible_actions
from ptgpo_envs.babyai.env import MISSION_COMPLETE
from ptgpo_envs.babyai.text import NOTHING_IN_VIEW, describe, relative_position
from ptgpo_envs.babyai.view import visible_objects
from ptgpo_envs.core import INVALID_ACTION_OBSERVATION

ENV_ID = "ptgpo/BabyAI-v0"
EAST, SOUTH, WEST, NORTH = range(4)


def room(width: int, height: int, agent: tuple[int, int], heading: int, objects=None, carrying=None):
    """A minigrid environment whose grid is a walled ``width`` x ``height`` room holding ``objects``."""
    env = engine.build(get_level("DoorKey-5x5"), 100)
    engine.reset(env, 0)
    grid = Grid(width, height)
    grid.wall_rect(0, 0, width, height)
    for (x, y), obj in (objects or {}).items():
        grid.set(x, y, obj)
    env.grid, env.agent_pos, env.agent_dir, env.carrying = grid, agent, heading, carrying
    return env


def partitioned(door: Door):
    """A 7x5 room split by a wall at x=3 with ``door`` at (3, 2), a red ball behind it at (5, 2) and
    the agent at (1, 2) facing the door."""
    env = room(7, 5, (1, 2), EAST, {(5, 2): Ball("red")})
    env.grid.vert_wall(3, 0)
    env.grid.set(3, 2, door)
    return env


# ----------------------------------------------------------------- levels and kwargs
@pytest.mark.parametrize("name", list(LEVELS))
def test_each_level_is_minigrids_own_with_its_horizon(name):
    level = LEVELS[name]
    env = level.environment_class()(**level.kwargs)
    env.reset(seed=0)
    assert env.max_steps == level.horizon
    if level.minigrid_id is not None:
        spec = gym.spec(level.minigrid_id)
        assert spec.entry_point.split(":")[1] == level.entry_point.split(":")[1]
        assert dict(spec.kwargs) == dict(level.kwargs)
    assert BabyAIEnv(name).max_steps == level.horizon


def test_levels_are_named_like_minigrid_in_any_case():
    assert get_level("gotolocals6n3") is LEVELS["GoToLocalS6N3"]
    assert get_level(" BabyAI-KeyCorridorS3R1-v0 ") is LEVELS["KeyCorridorS3R1"]
    assert get_level("MiniGrid-DoorKey-6x6-v0") is LEVELS["DoorKey-6x6"]
    assert get_level("MiniGrid-MultiRoom-N4-S5-v1") is LEVELS["MultiRoom-N4-S5"]


@pytest.mark.parametrize("level", ["DoorKey", "GoToLocalS9N9", "", None, 3])
def test_unknown_levels_are_refused_with_the_list(level):
    with pytest.raises(ValueError, match="level must be one of GoToObjS4, .*DoorKey-5x5") as error:
        gym.make(ENV_ID, level=level)
    assert "MultiRoom-N2-S4" in str(error.value)


@pytest.mark.parametrize("max_steps", [0, -3, 2.5, "64", True])
def test_bad_horizons_are_refused(max_steps):
    with pytest.raises(ValueError, match="max_steps"):
        BabyAIEnv("GoToLocal", max_steps=max_steps)


def test_horizon_is_counted_by_the_environment_not_a_time_limit():
    env = gym.make(ENV_ID, level="GoToLocal", max_steps=3)
    assert env.spec.max_episode_steps is None and env.unwrapped.max_steps == 3
    assert env.unwrapped.minigrid.max_steps == 3
    _, info = env.reset(seed=4)
    for step in range(1, 4):
        _, _, terminated, truncated, info = env.step("turn left")
        assert (terminated, truncated) == (False, step == 3)


def test_info_names_the_mission_and_level():
    env = BabyAIEnv("PutNextLocalS5N3")
    observation, info = env.reset(seed=2)
    assert info["task"] == env.minigrid.mission and info["task"].startswith("put the ")
    assert info["task_type"] == "PutNextLocalS5N3"
    assert info["state_key"] == observation
    assert gym.make(ENV_ID).unwrapped.level.name == "GoToLocal"


# ----------------------------------------------------------------- the view in words
@pytest.mark.parametrize("right, forward, words", [
    (0, 3, "3 steps forward"), (0, 1, "1 step forward"), (-1, 0, "1 step left"), (3, 0, "3 steps right"),
    (2, 1, "2 steps right and 1 step forward"), (-1, 5, "1 step left and 5 steps forward"),
])
def test_relative_positions(right, forward, words):
    assert relative_position(right, forward) == words


def furnished(heading: int):
    """A 7x7 room with a red key, a blue ball and a green box, the agent at (3, 5) facing ``heading``."""
    return room(7, 7, (3, 5), heading, {(1, 3): Key("red"), (3, 2): Ball("blue"), (5, 4): Box("green")})


def test_description_of_a_room_facing_north():
    env = furnished(NORTH)
    # The ball hides the wall straight ahead: BabyAI-Text names a wall only when nothing is in between.
    assert describe(env) == [
        "a wall 3 steps left",
        "a wall 3 steps right",
        "a blue ball 3 steps forward",
        "a green box 2 steps right and 1 step forward",
        "a red key 2 steps left and 2 steps forward",
    ]


def test_positions_turn_with_the_agent():
    env = furnished(EAST)
    # Facing east the key is behind the agent, the ball on its left; the wall to its right is 1 step away.
    assert describe(env) == [
        "a wall 3 steps forward",
        "a wall 1 step right",
        "a blue ball 3 steps left",
        "a green box 1 step left and 2 steps forward",
    ]


def test_doors_say_their_state_and_closed_ones_hide_what_is_behind():
    walls = ["a wall 2 steps left", "a wall 2 steps right"]
    assert describe(partitioned(Door("yellow"))) == [*walls, "a closed yellow door 2 steps forward"]
    assert describe(partitioned(Door("yellow", is_locked=True))) == [*walls, "a locked yellow door 2 steps forward"]
    assert describe(partitioned(Door("yellow", is_open=True))) == [
        *walls, "an open yellow door 2 steps forward", "a red ball 4 steps forward",
    ]


def test_carried_object_comes_first_and_an_empty_view_says_so():
    env = room(7, 7, (3, 5), NORTH, carrying=Key("purple"))
    assert describe(env) == ["You carry a purple key", "a wall 5 steps forward", "a wall 3 steps left", "a wall 3 steps right"]
    # In the middle of a 17x17 room every wall is out of sight.
    assert describe(room(17, 17, (8, 8), NORTH)) == [NOTHING_IN_VIEW]


@pytest.mark.parametrize("name", ["GoToLocal", "KeyCorridorS3R3", "MultiRoom-N4-S5", "DoorKey-8x8", "OpenDoor"])
def test_the_view_is_minigrids_partial_view(name):
    env = BabyAIEnv(name)
    rng = random.Random(0)
    for seed in range(6):
        _, info = env.reset(seed=seed)
        for _ in range(40):
            minigrid = env.minigrid
            grid, _ = MiniGridEnv.gen_obs_grid(minigrid)
            size = minigrid.agent_view_size
            agent = (size // 2, size - 1)
            expected = sorted(
                (i - agent[0], agent[1] - j, grid.get(i, j).type, grid.get(i, j).color)
                for i in range(size) for j in range(size) if grid.get(i, j) is not None and (i, j) != agent
            )
            assert sorted((s.right, s.forward, s.obj.type, s.obj.color) for s in visible_objects(minigrid)) == expected
            _, _, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
            if terminated or truncated:
                break


# ----------------------------------------------------------------- actions
@pytest.mark.parametrize("ahead, carrying, expected", [
    (None, None, ["go forward"]),
    (None, Ball("red"), ["go forward", "drop"]),
    ("wall", None, []),
    (Key("red"), None, ["pick up"]),
    (Key("red"), Ball("blue"), []),
    (Box("green"), None, ["pick up", "toggle"]),
    (Door("red"), None, ["toggle"]),
    (Door("red", is_open=True), None, ["go forward", "toggle"]),
    (Door("red", is_locked=True), None, []),
    (Door("red", is_locked=True), Key("blue"), []),
    (Door("red", is_locked=True), Key("red"), ["toggle"]),
    (Goal(), None, ["go forward"]),
])
def test_admissible_actions_are_those_that_change_something(ahead, carrying, expected):
    env = room(5, 5, (2, 2), NORTH, carrying=carrying)
    if ahead != "wall":
        env.grid.set(2, 1, ahead)
    else:
        env.agent_pos = (2, 1)
    assert admissible_actions(env) == ["turn left", "turn right", *expected]


def test_each_action_does_what_it_says():
    door = Door("yellow", is_locked=True)
    env = room(7, 7, (3, 5), NORTH, {(3, 4): Key("yellow"), (2, 5): door})
    env.step(ACTIONS["pick up"])
    assert describe(env)[0] == "You carry a yellow key" and env.grid.get(3, 4) is None
    env.step(ACTIONS["go forward"])
    assert tuple(env.agent_pos) == (3, 4)
    env.step(ACTIONS["drop"])
    assert env.carrying is None and env.grid.get(3, 3).type == "key"
    env.step(ACTIONS["pick up"])
    env.step(ACTIONS["turn left"])
    assert env.agent_dir == WEST
    env.step(ACTIONS["turn right"])
    env.step(ACTIONS["turn left"])
    env.step(ACTIONS["turn left"])
    env.step(ACTIONS["go forward"])
    assert (tuple(env.agent_pos), env.agent_dir) == ((3, 5), SOUTH)
    env.step(ACTIONS["turn right"])
    assert "a locked yellow door 1 step forward" in describe(env)
    env.step(ACTIONS["toggle"])
    assert "an open yellow door 1 step forward" in describe(env) and not door.is_locked
    env.step(ACTIONS["toggle"])
    assert "a closed yellow door 1 step forward" in describe(env)


def test_inadmissible_and_unknown_actions_waste_a_step_and_change_nothing():
    env = BabyAIEnv("GoToLocal")
    observation, info = env.reset(seed=0)
    assert "pick up" not in info["admissible_actions"]
    for step, action in enumerate(["pick up", "done", "drop", "move north"], start=1):
        bad_observation, reward, terminated, _, bad_info = env.step(action)
        assert bad_observation == INVALID_ACTION_OBSERVATION
        assert (reward, terminated, bad_info["action_valid"], bad_info["step"]) == (0.0, False, False, step)
        assert bad_info["state_key"] == info["state_key"]
    assert env.minigrid.step_count == 0


def test_success_pays_one_and_says_so():
    env = BabyAIEnv("GoToObjS4")
    _, info = env.reset(seed=1)
    while True:
        observation, reward, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            break
    assert (reward, terminated, info["won"]) == (1.0, True, True)
    assert observation.splitlines()[0] == MISSION_COMPLETE
    assert info["state_key"] == "\n".join(observation.splitlines()[1:])


# ----------------------------------------------------------------- determinism and forking
def random_play(env, seed: int, steps: int, action_seed: int = 0) -> list[tuple]:
    rng = random.Random(action_seed)
    observation, info = env.reset(seed=seed)
    record = [(observation, info)]
    for _ in range(steps):
        result = env.step(rng.choice(info["admissible_actions"]))
        record.append(result)
        info = result[-1]
        if result[2] or result[3]:
            break
    return record


@pytest.mark.parametrize("name", ["PutNextLocal", "DoorKey-8x8"])
def test_seeds_fix_the_episode(name):
    assert random_play(BabyAIEnv(name), 5, 30) == random_play(BabyAIEnv(name), 5, 30)
    missions_and_views = {BabyAIEnv(name).reset(seed=seed)[0] for seed in range(8)}
    assert len(missions_and_views) > 1


@pytest.mark.parametrize("name", ["PutNextLocal", "KeyCorridorS3R2", "MultiRoom-N4-S5"])
def test_fork_through_gymnasium_make_replays_exactly(name):
    env = gym.make(ENV_ID, level=name, max_steps=40)
    rng = random.Random(3)
    _, info = env.reset(seed=9)
    actions = []
    for _ in range(12):
        actions.append(rng.choice(info["admissible_actions"]))
        *_, info = env.step(actions[-1])
    snapshot = env.unwrapped.snapshot()
    inner_draw = env.unwrapped.minigrid.np_random.integers(1 << 30)
    continuation = []
    while not env.unwrapped.done:
        actions.append(rng.choice(info["admissible_actions"]))
        continuation.append(env.step(actions[-1]))
        info = continuation[-1][-1]
    replayed = actions[12:]
    for target in (env, gym.make(ENV_ID, level=name, max_steps=40)):
        target.reset(seed=1)
        target.unwrapped.restore(pickle.loads(pickle.dumps(snapshot)))
        assert target.unwrapped.minigrid.np_random.integers(1 << 30) == inner_draw
        target.unwrapped.restore(snapshot)
        assert [target.step(action) for action in replayed] == continuation


def test_snapshots_are_unaffected_by_later_play():
    env = BabyAIEnv("KeyCorridorS3R1")
    env.reset(seed=0)
    snapshot = env.snapshot()
    first = env.restore(snapshot)
    for action in ["turn left", "turn left", "go forward", "toggle", "go forward"]:
        if action in env.admissible_actions():
            env.step(action)
    assert env.restore(snapshot) == first


# ----------------------------------------------------------------- experts
FAST_EXPERT_SEEDS = 20


@pytest.mark.parametrize("name", list(LEVELS))
def test_expert_solves_every_level(name):
    env = gym.make(ENV_ID, level=name)
    seeds = FAST_EXPERT_SEEDS if LEVELS[name].horizon < 500 else 8
    for seed in range(seeds):
        _, info = env.reset(seed=seed)
        while True:
            action = env.unwrapped.expert_action()
            assert action in info["admissible_actions"]
            _, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert info["won"], f"{name} seed {seed}: the expert did not solve it"


@pytest.mark.parametrize("name", ["PutNextLocalS6N4", "UnlockLocal", "KeyCorridorS3R2"])
def test_bot_advice_depends_on_the_episode_only_and_survives_restore(name):
    rng = random.Random(1)
    asked_each_step, asked_at_the_end = BabyAIEnv(name), BabyAIEnv(name)
    _, info = asked_each_step.reset(seed=4)
    asked_at_the_end.reset(seed=4)
    for _ in range(8):  # leave the bot's plan, then ask
        asked_each_step.expert_action()
        action = rng.choice(info["admissible_actions"])
        *_, info = asked_each_step.step(action)
        asked_at_the_end.step(action)
    snapshot = asked_each_step.snapshot()
    restored = BabyAIEnv(name)
    restored.reset(seed=77)
    restored.expert_action()  # an advisor for another episode, which the restore must not reuse
    restored.restore(snapshot)
    plays = []
    for env in (asked_each_step, asked_at_the_end, restored):
        actions = []
        while not env.done:
            actions.append(env.expert_action())
            env.step(actions[-1])
        plays.append(actions)
    assert plays[0] == plays[1] == plays[2]


@pytest.mark.parametrize("name", ["KeyCorridorS3R1", "UnlockLocal", "DoorKey-5x5", "MultiRoom-N2-S4"])
def test_expert_recovers_from_random_play_after_a_restore(name):
    for seed in range(6):
        env, rng = BabyAIEnv(name), random.Random(seed)
        _, info = env.reset(seed=seed)
        for _ in range(rng.randrange(1, 20)):
            *_, info = env.step(rng.choice(info["admissible_actions"]))
            if env.done:
                break
        if env.done:
            continue
        restored = BabyAIEnv(name)
        restored.reset(seed=seed + 100)
        restored.restore(env.snapshot())
        while not restored.done:
            *_, info = restored.step(restored.expert_action())
        assert info["won"], f"{name} seed {seed}"


def _fewest_steps(name: str, seed: int) -> int:
    """Breadth-first search over minigrid's own dynamics (snapshots of the real environment)."""
    env = BabyAIEnv(name)
    env.reset(seed=seed)
    frontier = deque([(env.snapshot(), 0)])
    seen = set()
    while frontier:
        snapshot, depth = frontier.popleft()
        env.restore(snapshot)
        for action in env.admissible_actions():
            env.restore(snapshot)
            *_, info = env.step(action)
            if info["won"]:
                return depth + 1
            minigrid = env.minigrid
            key = (minigrid.hash(), repr(minigrid.carrying and minigrid.carrying.encode()))
            if key not in seen:
                seen.add(key)
                frontier.append((env.snapshot(), depth + 1))
    raise AssertionError("unsolvable")


@pytest.mark.parametrize("name, seed", [("DoorKey-5x5", 0), ("DoorKey-5x5", 3), ("DoorKey-6x6", 1), ("MultiRoom-N2-S4", 2)])
def test_planner_plays_a_shortest_solution(name, seed):
    env = BabyAIEnv(name)
    env.reset(seed=seed)
    steps = 0
    while not env.done:
        *_, info = env.step(env.expert_action())
        steps += 1
    assert info["won"] and steps == _fewest_steps(name, seed)


def test_check_env_on_a_minigrid_level():
    check_env(BabyAIEnv("MultiRoom-N2-S4"), skip_render_check=True)


@pytest.mark.parametrize("name", ["MultiRoom-N2-S4", "DoorKey-5x5"])
def test_progress_is_the_share_of_the_start_plan_done_on_the_planners_levels(name):
    # Each expert action shortens the plan by its cost (1; 2 to open and pass a door), so progress
    # climbs from 0 to 1 in steps of cost / d_start.
    from ptgpo_envs.babyai.planner import distance_to_goal

    env = BabyAIEnv(name)
    for seed in range(5):
        env.reset(seed=seed)
        start = distance_to_goal(env.minigrid)
        assert env.progress() == 0.0 and start > 0
        while True:
            _, _, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                break
            assert env.progress() == pytest.approx(1 - distance_to_goal(env.minigrid) / start)
        assert info["won"] and env.progress() == 1.0
        # Restored elsewhere, an episode reports the same progress: it depends on the state only.
        env.reset(seed=seed)
        env.step(env.expert_action())
        here, value = env.snapshot(), env.progress()
        other = BabyAIEnv(name)
        other.restore(here)
        assert other.progress() == value > 0


def test_progress_is_none_on_babyai_levels():
    env = BabyAIEnv("GoToLocal")
    env.reset(seed=0)
    assert env.progress() is None
