"""ptgpo/Household-v0: rules, text, task types, difficulty scaling, state keys and the expert."""

from __future__ import annotations

import re
import statistics

import gymnasium as gym
import numpy as np
import pytest

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_envs.household import DIFFICULTIES, TASK_TYPES, HouseholdEnv

SEEDS = range(200)
SHORT_NAMES = [t.short for t in TASK_TYPES]


def play_expert(env: HouseholdEnv, seed: int, omniscient: bool = False) -> tuple[bool, int, list]:
    """Run the expert from reset; return (won, steps, [(action, observation, reward, info), ...])."""
    _, info = env.reset(seed=seed)
    transcript = []
    while True:
        action = env.expert_action(omniscient=omniscient)
        assert action in info["admissible_actions"], (seed, action, info["admissible_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        transcript.append((action, observation, reward, info))
        if terminated or truncated:
            return terminated, info["step"], transcript


def act(env: HouseholdEnv, info: dict, action: str) -> tuple[str, float, bool, dict]:
    assert action in info["admissible_actions"], (action, info["admissible_actions"])
    observation, reward, terminated, _, info = env.step(action)
    return observation, reward, terminated, info


def first(actions: list[str], prefix: str) -> str:
    return next(a for a in actions if a.startswith(prefix))


def expert_until(env: HouseholdEnv, info: dict, stop) -> dict:
    """Follow the omniscient expert until ``stop(info)`` holds (and the episode still runs)."""
    while not stop(info):
        _, _, terminated, info = act(env, info, env.expert_action(omniscient=True))
        assert not terminated
    return info


def holding_goal(env: HouseholdEnv) -> bool:
    layout = env.layout
    return env._state.held >= 0 and layout.object_kinds[env._state.held] == layout.task.obj


# ----------------------------------------------------------------------------- expert and difficulty
@pytest.mark.parametrize("omniscient", [False, True], ids=["searching", "omniscient"])
@pytest.mark.parametrize("difficulty", [d.name for d in DIFFICULTIES])
def test_expert_solves_nearly_every_seed(difficulty, omniscient):
    env = HouseholdEnv(difficulty=difficulty)
    wins = sum(play_expert(env, seed, omniscient)[0] for seed in SEEDS)
    assert wins >= 0.99 * len(SEEDS)


def expert_lengths(difficulty: str) -> list[int]:
    env = HouseholdEnv(difficulty=difficulty)
    return [play_expert(env, seed)[1] for seed in SEEDS]


def test_expert_needs_more_steps_as_difficulty_grows():
    easy, medium, hard = (expert_lengths(d) for d in ("easy", "medium", "hard"))
    assert 4 <= statistics.median(easy) <= 8
    assert 4 <= statistics.mean(easy) <= 8
    assert 15 <= statistics.median(hard) <= 30
    assert 15 <= statistics.mean(hard) <= 30
    assert statistics.mean(easy) < statistics.mean(medium) < statistics.mean(hard)
    assert max(hard) <= HouseholdEnv(difficulty="hard").max_steps


def test_omniscient_expert_is_faster_on_average():
    for difficulty in ("easy", "hard"):
        env = HouseholdEnv(difficulty=difficulty)
        searching = [play_expert(env, s)[1] for s in range(60)]
        omniscient = [play_expert(env, s, omniscient=True)[1] for s in range(60)]
        assert statistics.mean(omniscient) < statistics.mean(searching)


def test_expert_recovers_from_random_detours():
    rng = np.random.default_rng(3)
    for difficulty in ("easy", "hard"):
        env = HouseholdEnv(difficulty=difficulty, max_steps=200)
        for seed in range(60):
            _, info = env.reset(seed=seed)
            for _ in range(int(rng.integers(5, 40))):
                actions = info["admissible_actions"]
                _, _, terminated, info = act(env, info, actions[rng.integers(len(actions))])
                if terminated:
                    break
            while not terminated:
                _, _, terminated, info = act(env, info, env.expert_action())
                assert info["step"] < 200, f"expert stuck on seed {seed}"


def random_success(difficulty: str, episodes: int = 200) -> float:
    env = HouseholdEnv(difficulty=difficulty)
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(episodes):
        _, info = env.reset(seed=seed)
        while True:
            actions = info["admissible_actions"]
            _, _, terminated, truncated, info = env.step(actions[rng.integers(len(actions))])
            if terminated or truncated:
                wins += terminated
                break
    return wins / episodes


def test_random_agent_fails_where_the_expert_succeeds():
    rates = {d: random_success(d) for d in ("easy", "hard")}
    assert rates["easy"] < 0.5
    assert rates["hard"] <= 0.02
    assert rates["hard"] <= rates["easy"]


# ----------------------------------------------------------------------------- task types
@pytest.mark.parametrize("index", range(len(TASK_TYPES)), ids=SHORT_NAMES)
def test_each_task_type_can_be_requested_and_won(index):
    task_type = TASK_TYPES[index]
    for name in (task_type.alfworld, task_type.short.upper()):
        for difficulty in ("easy", "hard"):
            env = HouseholdEnv(difficulty=difficulty, task_type=name)
            for seed in range(15):
                won, _, transcript = play_expert(env, seed)
                assert won
                assert transcript[-1][2] == 1.0 and transcript[-1][3]["won"]
                assert transcript[-1][3]["task_type"] == task_type.short


def test_all_six_task_types_occur_by_default():
    env = HouseholdEnv()
    seen = {env.reset(seed=seed)[1]["task_type"] for seed in range(120)}
    assert sorted(seen) == sorted(SHORT_NAMES)


def test_pick_two_needs_both_objects_in_one_receptacle():
    env = HouseholdEnv(difficulty="medium", task_type="Pick2")
    for seed in range(20):
        _, _, transcript = play_expert(env, seed)
        moves = [(reward, obs) for action, obs, reward, _ in transcript if action.startswith("move")]
        assert moves[-1][0] == 1.0
        assert any(reward == 0.0 for reward, _ in moves[:-1]), "a single object cannot finish Pick2"


@pytest.mark.parametrize("task_type", ["Heat", "Cool", "Clean"])
def test_conditioning_tasks_need_the_condition(task_type):
    env = HouseholdEnv(difficulty="easy", task_type=task_type)
    for seed in range(10):
        _, info = env.reset(seed=seed)
        info = expert_until(env, info, lambda _: holding_goal(env))
        target = env.layout.task.target
        info = act(env, info, first(info["admissible_actions"], f"go to {target} "))[3]
        if f"open {env.layout.receptacles[env._state.location]}" in info["admissible_actions"]:
            info = act(env, info, f"open {env.layout.receptacles[env._state.location]}")[3]
        _, reward, terminated, info = act(env, info, first(info["admissible_actions"], "move "))
        assert (reward, terminated, info["won"]) == (0.0, False, False)


def test_look_wins_with_the_lamp_on_and_the_object_in_hand_in_either_order():
    env = HouseholdEnv(difficulty="easy", task_type="look_at_obj_in_light")
    for seed in range(10):
        won, _, transcript = play_expert(env, seed)  # fetches the object, then turns the lamp on
        assert won and transcript[-1][0] == "use desklamp 1"
        _, info = env.reset(seed=seed)
        lamp_at = next(r for r, c in enumerate(env._state.contents) if env.layout.lamp in c)
        info = act(env, info, f"go to {env.layout.receptacles[lamp_at]}")[3]
        before = info["state_key"]
        observation, reward, terminated, info = act(env, info, "use desklamp 1")
        assert observation == "You turn on the desklamp 1."
        assert (reward, terminated) == (0.0, False)
        assert info["state_key"] == f"{before}|desklamp on"
        while not terminated:
            action = env.expert_action()
            observation, reward, terminated, info = act(env, info, action)
        assert action.startswith(f"take {env.layout.task.obj} ") and reward == 1.0


@pytest.mark.parametrize("difficulty", ["easy", "medium"])
def test_achieved_tasks_hold_the_own_task_exactly_when_the_step_wins(difficulty):
    """Hindsight relabelling's contract: what ``achieved_tasks`` reports is what winning means."""
    env = HouseholdEnv(difficulty=difficulty)
    rng = np.random.default_rng(0)
    wins = relabelled = 0
    for seed in range(300):
        _, info = env.reset(seed=seed)
        assert env.achieved_tasks() == {}
        terminated = truncated = False
        while not (terminated or truncated):
            # Half expert, half random: many wins, and many completions of other tasks on the way.
            actions = info["admissible_actions"]
            action = env.expert_action() if rng.random() < 0.5 else actions[int(rng.integers(len(actions)))]
            _, reward, terminated, truncated, info = env.step(action)
            achieved = env.achieved_tasks()
            assert (info["task"] in achieved) == (reward == 1.0), (seed, action, achieved)
            if reward == 1.0:
                assert achieved[info["task"]] == info["task_type"], "a task's type as info names it"
            wins += reward == 1.0
            relabelled += bool(achieved) and reward == 0.0
            if not action.startswith(("move ", "take ", "use ")):
                assert achieved == {}
            for sentence in achieved:
                kind = (action.split(" ")[1] if not action.startswith("use ") else
                        env.layout.object_kinds[env._state.held])
                assert f" {kind} " in sentence, (action, sentence)
    assert wins >= 50 and relabelled >= 100, (wins, relabelled)


def test_achieved_tasks_are_cleared_by_restore_and_name_every_condition():
    env = HouseholdEnv(difficulty="easy", task_type="Heat")
    _, info = env.reset(seed=5)
    info = expert_until(env, info, lambda _: holding_goal(env))
    snapshot = env.snapshot()
    while True:
        action = env.expert_action()
        _, reward, terminated, _, info = env.step(action)
        if terminated:
            break
    obj, target = env.layout.task.obj, env.layout.task.target
    assert env.achieved_tasks() == {
        f"put a {obj} in {target}.": "Pick", f"put some {obj} on {target}.": "Pick",
        f"put a hot {obj} in {target}.": "Heat", f"heat some {obj} and put it in {target}.": "Heat",
    }
    _, info = env.restore(snapshot)
    assert env.achieved_tasks() == {}
    # Put the object, not heated yet, back where it was taken from: a pick task there, no heat task.
    act(env, info, first(info["admissible_actions"], "move "))
    here = env.layout.receptacle_kinds[env._state.location]
    achieved = env.achieved_tasks()
    assert {f"put a {obj} in {here}.", f"put some {obj} on {here}."} <= set(achieved)
    assert not any("hot" in sentence or "heat" in sentence for sentence in achieved)
    env.step("fly to the moon")
    assert env.achieved_tasks() == {}, "an invalid step completes nothing"

    assert gym.make("ptgpo/FrozenLake-v0").unwrapped.achieved_tasks() is None


# ----------------------------------------------------------------------------- text and grammar
def test_reset_observation_is_alfworld_style():
    env = HouseholdEnv()
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        match = re.fullmatch(
            r"-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room\. Looking quickly "
            r"around you, you see (a [a-z]+ \d+, )+and a [a-z]+ \d+\.\n\nYour task is to: (.+)",
            observation,
        )
        assert match and match.group(2) == info["task"]
        assert sorted(info["admissible_actions"]) == info["admissible_actions"]
        names = re.findall(r"a ([a-z]+ \d+)", observation.split("\n\n")[1])
        assert {f"go to {n}" for n in names} | {"look", "inventory"} == set(info["admissible_actions"])


def test_closed_containers_hide_their_contents_until_opened():
    env = HouseholdEnv(difficulty="hard")
    checked = 0
    for seed in range(10):
        _, info = env.reset(seed=seed)
        layout = env.layout
        for r, name in enumerate(layout.receptacles):
            if not layout.openable[r] or not env._state.contents[r]:
                continue
            observation, _, _, info = act(env, info, f"go to {name}")
            assert observation == f"You arrive at {name}. The {name} is closed."
            assert not any(a.startswith("take ") for a in info["admissible_actions"])
            assert info["state_key"] == f"{name}|closed|"
            observation, _, _, info = act(env, info, f"open {name}")
            inside = [layout.objects[o] for o in env._state.contents[r]]
            assert observation.startswith(f"You open the {name}. The {name} is open. In it, you see a ")
            assert all(f"a {obj}" in observation for obj in inside)
            takes = [a for a in info["admissible_actions"] if a.startswith("take ")]
            assert takes == sorted(f"take {obj} from {name}" for obj in inside if obj != "desklamp 1")
            observation, _, _, info = act(env, info, f"close {name}")
            assert observation == f"You close the {name}."
            checked += 1
            break
    assert checked == 10


def test_grammar_heat_cool_clean_examine_inventory_look():
    env = HouseholdEnv(difficulty="easy", task_type="Heat")
    _, info = env.reset(seed=4)
    observation, _, _, info = act(env, info, "inventory")
    assert observation == "You are not carrying anything."
    assert act(env, info, "look")[0].startswith("You are in the middle of a room.")
    info = expert_until(env, info, lambda _: holding_goal(env))
    obj = env.layout.objects[env._state.held]
    assert act(env, info, "inventory")[0] == f"You are carrying: a {obj}."
    assert act(env, info, f"examine {obj}")[0] == f"There's nothing special about {obj}."
    info = act(env, info, "go to microwave 1")[3]
    assert f"heat {obj} with microwave 1" in info["admissible_actions"]
    observation, _, _, info = act(env, info, f"heat {obj} with microwave 1")
    assert observation == f"You heat the {obj} using the microwave 1."
    assert act(env, info, f"examine {obj}")[0] == f"The {obj} is hot."
    assert info["state_key"].endswith(f"|{obj}:hot")
    info = act(env, info, "go to sinkbasin 1")[3]
    observation, _, _, info = act(env, info, f"clean {obj} with sinkbasin 1")
    assert observation == f"You clean the {obj} using the sinkbasin 1."
    assert act(env, info, f"examine {obj}")[0] == f"The {obj} is clean and hot."
    info = act(env, info, "go to fridge 1")[3]
    observation, _, _, info = act(env, info, f"cool {obj} with fridge 1")
    assert observation == f"You cool the {obj} using the fridge 1."
    assert act(env, info, f"examine {obj}")[0] == f"The {obj} is clean and cool."  # cooling undoes heat
    observation, _, _, info = act(env, info, "look")
    assert observation.startswith("You are facing the fridge 1. The fridge 1 is ")
    observation, _, _, info = act(env, info, "examine fridge 1")
    assert observation.startswith("The fridge 1 is ")
    if "open fridge 1" in info["admissible_actions"]:
        info = act(env, info, "open fridge 1")[3]
    observation, _, _, info = act(env, info, f"move {obj} to fridge 1")
    assert observation == f"You move the {obj} to the fridge 1."
    assert f"take {obj} from fridge 1" in info["admissible_actions"]
    handling = ("heat ", "cool ", "clean ", "move ")
    assert not any(a.startswith(handling) for a in info["admissible_actions"])


def test_invalid_commands_say_nothing_happens():
    env = HouseholdEnv()
    _, info = env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("take apple 1 from countertop 1")
    assert observation.startswith("Nothing happens.")
    assert (reward, terminated, info["action_valid"]) == (0.0, False, False)


# ----------------------------------------------------------------------------- state keys and forks
def test_state_key_is_equal_for_the_same_observable_state():
    env = HouseholdEnv(difficulty="medium")
    for seed in range(10):
        _, info = env.reset(seed=seed)
        a, b = env.layout.receptacles[:2]
        at_a = act(env, info, f"go to {a}")[3]
        info = act(env, at_a, f"go to {b}")[3]
        again = act(env, info, f"go to {a}")[3]
        assert again["state_key"] == at_a["state_key"]
        assert again["admissible_actions"] == at_a["admissible_actions"]
        for neutral in ("look", "inventory", f"examine {a}"):
            assert act(env, again, neutral)[3]["state_key"] == at_a["state_key"]


def test_state_key_changes_with_every_state_changing_action():
    env = HouseholdEnv(difficulty="easy", task_type="Heat")  # kitchens: all three appliances
    changing = ("go to ", "open ", "close ", "take ", "move ", "heat ", "cool ", "clean ")
    rng = np.random.default_rng(0)
    checked = conditioned = 0
    for seed in range(60):
        _, info = env.reset(seed=seed)
        for _ in range(30):
            actions = [a for a in info["admissible_actions"] if a.startswith(changing)]
            conditioning = [a for a in actions if a.startswith(changing[-3:])]
            action = (conditioning or actions)[rng.integers(len(conditioning or actions))]
            before = info["state_key"]
            observation, _, terminated, info = act(env, info, action)
            verb = action.split()[0]
            gives = {"heat": "hot", "cool": "cool", "clean": "clean"}.get(verb)
            held_tags = before.split("|")[2].partition(":")[2].split("+")
            if gives in held_tags:  # re-applying a condition the held object has changes nothing
                continue
            assert info["state_key"] != before, (action, before)
            checked += 1
            conditioned += verb in ("heat", "cool", "clean")
            if terminated:
                break
    assert checked > 500 and conditioned > 20


def test_equal_state_keys_offer_equal_actions():
    rng = np.random.default_rng(1)
    for difficulty in ("easy", "hard"):
        env = HouseholdEnv(difficulty=difficulty)
        for seed in range(10):
            offered: dict[str, list[str]] = {}
            for _ in range(8):  # a group of rollouts of one task, as group-based RL makes them
                _, info = env.reset(seed=seed)
                while True:
                    actions = info["admissible_actions"]
                    assert offered.setdefault(info["state_key"], actions) == actions
                    _, _, terminated, truncated, info = env.step(actions[rng.integers(len(actions))])
                    if terminated or truncated:
                        break
            assert len(offered) > 10


def test_snapshot_is_independent_of_later_play():
    env = HouseholdEnv(difficulty="hard")
    _, info = env.reset(seed=11)
    for _ in range(3):
        info = act(env, info, env.expert_action())[3]
    snapshot = env.snapshot()
    original = play_from(env, info)
    _, restored_info = env.restore(snapshot)
    assert restored_info == {k: v for k, v in info.items() if k != "action_valid"}
    assert play_from(env, restored_info) == original


def play_from(env: HouseholdEnv, info: dict) -> list:
    outputs = []
    while True:
        observation, reward, terminated, truncated, info = env.step(env.expert_action())
        outputs.append((observation, reward, info["state_key"]))
        if terminated or truncated:
            return outputs


# ----------------------------------------------------------------------------- subgoal rewards
SUBGOALS_PER_TYPE = {"Pick": 1, "Look": 2, "Clean": 2, "Heat": 2, "Cool": 2, "Pick2": 3}


@pytest.mark.parametrize("task_type", SHORT_NAMES)
def test_subgoal_rewards_pay_each_subgoal_of_the_plan_once(task_type):
    sparse = HouseholdEnv(difficulty="easy", task_type=task_type)
    shaped = HouseholdEnv(difficulty="easy", task_type=task_type, subgoal_reward=0.125)
    for seed in range(10):
        won, steps, plain = play_expert(sparse, seed)
        won_shaped, steps_shaped, transcript = play_expert(shaped, seed)
        assert (won_shaped, steps_shaped) == (won, steps) and won
        assert [r for _, _, r, _ in plain] == [0.0] * (steps - 1) + [1.0]
        rewards = [r for _, _, r, _ in transcript]
        assert sum(rewards) == 1.0 + 0.125 * SUBGOALS_PER_TYPE[task_type]
        assert set(rewards) <= {0.0, 0.125, 1.0, 1.125}
        # Observations, infos and success are those of the sparse game.
        assert [(a, o, i) for a, o, _, i in transcript] == [(a, o, i) for a, o, _, i in plain]


@pytest.mark.parametrize("task_type", SHORT_NAMES)
def test_progress_counts_the_plans_subgoals_that_hold_now(task_type):
    # Along the shortest plan, progress is the subgoals paid so far (subgoal_reward's) over the
    # subgoals + 1, and 1 at the win. Pick2 is the exception: its first object, once placed, is no
    # longer held, so it counts 1/4 (placed) until the second is held (3/4).
    env = HouseholdEnv(difficulty="easy", task_type=task_type)
    shaped = HouseholdEnv(difficulty="easy", task_type=task_type, subgoal_reward=0.125)
    shares = SUBGOALS_PER_TYPE[task_type] + 1
    for seed in range(5):
        env.reset(seed=seed)
        shaped.reset(seed=seed)
        values, paid = [env.progress()], 0
        while True:
            action = env.expert_action(omniscient=True)
            *_, terminated, truncated, info = env.step(action)
            paid += shaped.step(action)[1] == 0.125
            values.append(env.progress())
            if terminated or truncated:
                break
            if task_type != "Pick2":
                assert values[-1] == paid / shares
        assert info["won"] and values[0] == 0.0 and values[-1] == 1.0
        assert values == sorted(values)
        if task_type == "Pick2":
            assert sorted(set(values)) == [0.0, 0.25, 0.75, 1.0]


def test_subgoal_rewards_are_paid_once_per_episode_and_forks_keep_what_was_paid():
    env = HouseholdEnv(difficulty="easy", task_type="Heat", subgoal_reward=0.25)
    _, info = env.reset(seed=4)
    start = env.snapshot()
    actions, rewards = [], []
    while not holding_goal(env):
        actions.append(env.expert_action(omniscient=True))
        _, reward, _, info = act(env, info, actions[-1])
        rewards.append(reward)
    assert rewards[-1] == 0.25 and sum(rewards) == 0.25
    obj, here = env.layout.objects[env._state.held], env.layout.receptacles[env._state.location]
    assert act(env, info, f"move {obj} to {here}")[1] == 0.0
    dropped = env.snapshot()
    _, info = env.restore(dropped)
    assert act(env, info, f"take {obj} from {here}")[1:3] == (0.0, False)  # held before: paid already
    _, info = env.restore(start)
    replayed = []
    for action in actions:
        _, reward, _, info = act(env, info, action)
        replayed.append(reward)
    assert replayed == rewards  # restoring the start forgets the payment


# ----------------------------------------------------------------------------- kwargs
def test_kwargs_are_validated_with_helpful_messages():
    with pytest.raises(ValueError, match="easy, medium, hard"):
        HouseholdEnv(difficulty="extreme")
    with pytest.raises(ValueError, match="pick_heat_then_place \\(Heat\\)"):
        HouseholdEnv(task_type="boil")
    with pytest.raises(ValueError, match="task_type"):
        HouseholdEnv(task_type=3)
    assert HouseholdEnv(task_type=" pick2 ").task_type.short == "Pick2"
    assert HouseholdEnv(task_type="Pick_Two_Obj_And_Place").task_type.short == "Pick2"
    assert HouseholdEnv().difficulty.name == "medium"
    assert [HouseholdEnv(difficulty=d.name).max_steps for d in DIFFICULTIES] == [30, 40, 50]
    assert HouseholdEnv(difficulty="hard", max_steps=7).max_steps == 7
    for bad in (-0.1, 1.0, "0.1", True, float("nan")):
        with pytest.raises(ValueError, match="subgoal_reward must be a number in \\[0, 1\\)"):
            HouseholdEnv(subgoal_reward=bad)
    assert HouseholdEnv(subgoal_reward=0).subgoal_reward == 0.0


def test_registered_env_passes_gymnasium_checks():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("ptgpo/Household-v0", difficulty="hard", task_type="Clean")
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(seed=0)
    assert info["task_type"] == "Clean"
