"""Our environments in GEM's registry (``ptgpo_envs.integrations.gem``).

GEM's own test pattern (its ``tests/test_env``: ``gem.make``, an episode through
``gem.utils.debug.run_and_print_episode`` with its random policy, the same through GEM's observation
wrappers, then ``gem.make_vec`` with wrappers), with assertions added, and ``spawn(same_state=True)``
against our ``snapshot()``/``restore()``. Skipped where GEM is not installed;
``bash scripts/test_env_integrations.sh`` builds a venv with it and runs this.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

gem = pytest.importorskip("gem", reason="GEM is not installed: bash scripts/test_env_integrations.sh")

import ptgpo_envs  # noqa: E402
from ptgpo_envs.integrations.gem import GemTextEnv, gem_id, parse_action, register_gem_envs  # noqa: E402

FAST = ["ptgpo:Household-v0", "ptgpo:FrozenLake-v0", "ptgpo:Sokoban-v0"]


def test_every_registered_environment_is_in_gems_registry():
    from gem.envs.registration import ENV_REGISTRY

    assert register_gem_envs() == []  # importing the module registered them all; a second call adds none
    for env_id in ptgpo_envs.env_ids():
        assert ENV_REGISTRY[gem_id(env_id)].kwargs == {}  # the maker fixes the environment
    assert gem_id("ptgpo/Household-v0") == "ptgpo:Household-v0"


@pytest.mark.parametrize("name", FAST)
def test_gem_make_plays_as_gymnasium_make_does(name):
    env = gem.make(name)
    assert isinstance(env, gem.Env) and env.env_id == name
    reference = gym.make(env.ptgpo_env_id).unwrapped
    observation, info = env.reset(seed=7)
    assert (observation, info) == reference.reset(seed=7)
    while not reference.done:
        action = reference.expert_action()
        assert env.step(f"I will do it.\n\\boxed{{{action}}}")[:4] == reference.step(action)[:4]
    assert env.env.done and env.env._won()


@pytest.mark.parametrize("name", FAST)
def test_gems_episode_runner_and_wrappers_with_its_random_policy(name, capsys):
    from gem.utils.debug import run_and_print_episode
    from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

    env = gem.make(name, max_steps=12, seed=3)
    run_and_print_episode(env, lambda _: env.sample_random_action())
    assert env.env.done and env.env.steps_taken <= 12
    for wrapper in ("concat", "concat_with_action"):
        wrapped = WRAPPER_FACTORY[wrapper](gem.make(name, max_steps=6, seed=4))
        history = []
        run_and_print_episode(wrapped, lambda observation: history.append(observation) or wrapped.unwrapped.sample_random_action())
        assert wrapped.unwrapped.env.done
        # GEM's wrappers concatenate the episode's observations: each prompt extends the one before.
        assert all(later.startswith(earlier.rstrip("\n")[:40]) for earlier, later in zip(history, history[1:]))
    assert "TIME" in capsys.readouterr().out


def test_gems_vector_env_with_wrappers_gives_each_copy_its_own_seed():
    from gem.utils.debug import run_and_print_episode
    from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

    vector = gem.make_vec(["ptgpo:Household-v0"] * 3, wrappers=[WRAPPER_FACTORY["concat"]], seed=10, max_steps=4)
    observations, infos = vector.reset()
    assert len(observations) == 3 and len(set(observations)) > 1
    for index, observation in enumerate(observations):
        assert observation.startswith(gym.make("ptgpo/Household-v0").unwrapped.reset(seed=10 + index)[0][:60])
    run_and_print_episode(vector, lambda _: [env.unwrapped.sample_random_action() for env in vector.envs], ignore_done=True,
                          max_steps=5)


@pytest.mark.parametrize("name", FAST)
def test_spawn_same_state_forks_the_episode(name):
    env = gem.make(name)
    observation, info = env.reset(seed=11)
    for _ in range(2):
        if not env.env.done:
            observation, *_ , info = env.step(env.env.expert_action())
    child = env.spawn(same_state=True)
    assert child.env.steps_taken == env.env.steps_taken and child.env.admissible_actions() == info["admissible_actions"]
    # The same actions from the fork give the same continuation, and playing the child leaves the parent be.
    parent_steps = env.env.steps_taken
    while not env.env.done:
        action = env.env.expert_action()
        assert child.step(action)[:4] == env.step(action)[:4]
    fresh = env.spawn(same_state=False, seed=5)
    assert fresh.reset()[0] == gym.make(env.ptgpo_env_id).unwrapped.reset(seed=5)[0]
    assert parent_steps < env.env.steps_taken


def test_spawn_refuses_a_copy_under_other_kwargs_and_snapshots_cross_no_classes():
    env = gem.make("ptgpo:Household-v0", difficulty="easy")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="same_state"):
        env.spawn(same_state=True, difficulty="hard")
    other = gem.make("ptgpo:Sokoban-v0")
    with pytest.raises(ValueError, match="snapshot was taken on"):
        other.set_state(env.get_state())
    assert env.spawn(difficulty="hard").env_kwargs == {"difficulty": "hard"}


@pytest.mark.parametrize("text, action", [
    ("go to desk 1", "go to desk 1"),
    ("think... \\boxed{go left} no, \\boxed{go right}", "go right"),
    ("\\boxed{}", ""),
    ("\\boxed{unclosed", "\\boxed{unclosed"),
])
def test_the_last_boxed_answer_is_the_action(text, action):
    assert parse_action(text) == action


def test_bad_actions_use_a_step_and_non_text_raises():
    env = gem.make("ptgpo:Household-v0")
    observation, info = env.reset(seed=2)
    for step, bad in enumerate(["", "\\boxed{}", "x" * 100_000, "\\boxed{go to\x00 desk 1}"], start=1):
        after, reward, terminated, truncated, after_info = env.step(bad)
        assert after_info["action_valid"] is False and reward == 0.0 and not terminated
        assert after_info["state_key"] == info["state_key"] and env.env.steps_taken == step
    with pytest.raises(TypeError):
        env.step(3)


def test_every_makeable_environment_makes_through_gem():
    made = 0
    for env_id in ptgpo_envs.env_ids():
        try:
            ptgpo_envs.check_env_kwargs(env_id, {})
        except ValueError:
            continue  # ALFWorld without its engine or data
        env = gem.make(gem_id(env_id))
        observation, info = env.reset(seed=0)
        assert isinstance(env, GemTextEnv) and info["admissible_actions"]
        child = env.spawn(same_state=True)
        action = info["admissible_actions"][-1]
        assert child.step(action)[:4] == env.step(action)[:4]
        made += 1
    assert made >= 5


def test_a_gem_id_builds_its_own_environment_only():
    with pytest.raises(ValueError, match="ptgpo:Household-v0 always builds ptgpo/Household-v0"):
        gem.make("ptgpo:Household-v0", ptgpo_id="ptgpo/Sokoban-v0")
    with pytest.raises(ValueError, match="ptgpo:Household-v0 with .* cannot be made"):
        gem.make("ptgpo:Household-v0", difficulty="impossible")
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        gem.make("ptgpo:Household-v0", seed="0")
    sokoban = gem.make("ptgpo:Sokoban-v0")
    assert sokoban.ptgpo_env_id == "ptgpo/Sokoban-v0"
    with pytest.raises(ValueError, match="always builds ptgpo/Sokoban-v0"):
        sokoban.spawn(ptgpo_id="ptgpo/Household-v0")
