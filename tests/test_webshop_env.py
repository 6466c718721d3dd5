"""WebShop environment: page flow, the text-environment contract, bad input, the expert, original data."""

from pathlib import Path

import gymnasium as gym
import pytest

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_envs.core import INVALID_ACTION_OBSERVATION
from ptgpo_envs.webshop import WebShopEnv

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "webshop"


@pytest.fixture(scope="module", autouse=True)
def index_cache(tmp_path_factory):
    """Keep the search-index cache of these tests out of the home folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTGPO_CACHE", str(tmp_path_factory.mktemp("ptgpo-cache")))
        patch.delenv("WEBSHOP_DATA", raising=False)
        yield


@pytest.fixture
def env():
    return WebShopEnv(split="test")


@pytest.fixture
def annotated():
    return WebShopEnv(split="test", observation_style="annotated")


def _play(env, actions):
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
    return observation, reward, terminated, truncated, info


def _to_item(env):
    """Search the goal product's title and open it; returns the info on its item page."""
    env.reset(seed=0, options={"goal_index": 0})
    _play(env, [f"search[{env.goal['name']}]"])
    assert env.goal["asin"] in env.page.hits[:10]
    return _play(env, [f"click[{env.goal['asin'].lower()}]"])[-1]


def test_plays_out_of_the_box_with_gymnasium_make():
    env = gym.make("ptgpo/WebShop-v0")
    observation, info = env.reset(seed=3)
    assert observation.startswith(f"WebShop [SEP] Instruction: [SEP] {info['task']} [SEP] Search")
    assert env.spec.max_episode_steps is None and env.unwrapped.max_steps == 15  # the env counts its horizon
    (search,) = info["admissible_actions"]
    assert search == f"search[{info['task'].lower()}]"
    observation, reward, terminated, truncated, info = env.step(search)
    assert info["action_valid"] and "Page 1 (Total results: " in observation
    assert env.observation_space.contains(observation) and env.action_space.contains(search)
    assert {"score", "task_type", "won", "state_key"} <= set(info)


def test_results_pages_paginate_ten_at_a_time(annotated):
    env = annotated
    env.reset(seed=0, options={"goal_index": 0})
    _, _, _, _, info = _play(env, ["search[cotton]"])
    hits = env.page.hits
    assert len(hits) == 50
    assert info["admissible_actions"] == ["click[back to search]", "click[next >]"] + [
        f"click[{asin.lower()}]" for asin in hits[:10]
    ]
    observation, _, _, _, info = _play(env, ["click[Next >]"])
    assert "Page 2 (Total results: 50)" in observation and hits[10] in observation
    assert "click[< prev]" in info["admissible_actions"]
    _play(env, ["click[next >]"] * 3)
    assert "click[next >]" not in env.admissible_actions()  # page 5 is the last
    _, _, _, _, info = _play(env, ["click[< prev]", "click[back to search]"])
    assert info["state_key"] == "Search"


def test_original_results_pages_offer_next_past_the_last_hit(env):
    env.reset(seed=0, options={"goal_index": 0})
    _, _, _, _, info = _play(env, ["search[cotton]"])
    search = f"search[{' '.join(info['task'].split()).lower()}]"
    hits = env.page.hits
    assert info["admissible_actions"] == ["click[back to search]", "click[next >]"] + [
        f"click[{asin.lower()}]" for asin in hits[:10]
    ] + [search]
    observation, _, _, _, info = _play(env, ["click[next >]"] * 5)
    assert observation.endswith("Back to Search [SEP] Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >")
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]", "click[next >]", search]
    assert info["state_key"] == "Back to Search [SEP] Page 6 (Total results: 50) [SEP] < Prev"


def test_item_page_options_sub_pages_and_back(env):
    info = _to_item(env)
    product = env.catalog.by_asin[env.goal["asin"]]
    option_name, values = next(iter(product["options"].items()))
    for clickable in ("description", "features", "reviews", "buy now", "< prev", "back to search", *values):
        assert f"click[{clickable}]" in info["admissible_actions"]
    observation, _, _, _, info = _play(env, [f"click[{values[0]}]", f"click[{values[1]}]"])
    assert info["state_key"].startswith(f"You have clicked {values[1]}. [SEP] Back to Search")
    assert dict(env.page.options) == {option_name: values[1]}
    observation, _, _, _, info = _play(env, ["click[features]"])
    assert product["BulletPoints"][0] in observation
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[< prev]"]
    assert len(info["admissible_actions"]) == 3 and info["admissible_actions"][2].startswith("search[")
    _play(env, ["click[< prev]"])
    assert env.page.name == "item" and dict(env.page.options) == {option_name: values[1]}
    _play(env, ["click[reviews]", "click[< prev]", "click[description]", "click[< prev]"])
    _, _, _, _, info = _play(env, ["click[< prev]"])
    assert env.page.name == "results" and env.page.options == ()
    assert any(a == f"click[{env.goal['asin'].lower()}]" for a in info["admissible_actions"])


def test_buying_ends_the_episode_with_the_webshop_reward(env):
    _to_item(env)
    observation, reward, terminated, truncated, info = _play(env, ["click[buy now]"])
    goal = env.goal
    # No option selected: (attributes + 0 options + price) / (attributes + options + 1).
    expected = (len(goal["attributes"]) + 1) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    assert terminated and not truncated
    assert reward == info["score"] == pytest.approx(expected)
    assert info["won"] is (expected == 1.0)
    assert info["purchased_asin"] == goal["asin"] and info["reward_info"]["r_type"] == 1.0
    assert info["admissible_actions"] == []
    assert "Your score (min 0.0, max 1.0)" in observation


def test_annotated_instruction_on_every_page_but_not_in_state_key(annotated):
    env = annotated
    _, info = env.reset(seed=5)
    task = info["task"]
    for action in [f"search[{env.goal['name']}]", f"click[{env.goal['asin']}]", "click[description]"]:
        observation, _, _, _, info = env.step(action)
        assert info["action_valid"]
        assert observation.startswith(f"WebShop [SEP] Instruction: [SEP] {task} [SEP] ")
        assert observation.endswith(info["state_key"]) and task not in info["state_key"]


BAD_ACTIONS = [
    "",
    "   ",
    "click[nothing]",
    "search[",
    "search]shirt[",
    "search[]",
    "search[   ]",
    "search[" + "a" * 501 + "]",
    "search[" + "a" * 100_000 + "]",
    "search[shirt\x00]",
    "search [shirt]",
    "click[buy now]",
]


@pytest.mark.parametrize("style", ["original", "annotated"])
@pytest.mark.parametrize("action", BAD_ACTIONS)
def test_bad_input_on_the_search_page_costs_a_step_and_nothing_else(action, style):
    env = WebShopEnv(split="test", observation_style=style)
    page, info = env.reset(seed=1)
    observation, reward, terminated, truncated, after = env.step(action)
    # The original shows the page again; the annotated style says the action was not understood.
    assert observation == (page if style == "original" else INVALID_ACTION_OBSERVATION)
    assert (reward, terminated, truncated, after["action_valid"]) == (0.0, False, False, False)
    assert after["state_key"] == info["state_key"] and after["step"] == 1


@pytest.mark.parametrize("action", ["click[]", "click[b0]", "click[[buy now]]", "buy now", "search[]"])
def test_bad_input_on_the_item_page(action):
    env = WebShopEnv(split="test", render_mode="ansi")
    info = _to_item(env)
    page = env.render()
    observation, reward, terminated, _, after = env.step(action)
    assert (reward, terminated, after["action_valid"]) == (0.0, False, False)
    assert after["state_key"] == info["state_key"]
    assert observation == page and page.startswith("Instruction: [SEP] ") and page.endswith("Buy Now")


def test_search_from_any_page_only_in_the_original_style(env, annotated):
    _to_item(env)
    observation, _, _, _, info = env.step("search[Shirt]")
    assert info["action_valid"] and env.page.name == "results" and env.page.query == "shirt"
    assert env.page.asin is None and env.page.options == ()
    _to_item(annotated)
    _, _, _, _, info = annotated.step("search[shirt]")
    assert not info["action_valid"] and annotated.page.name == "item"
    assert not any(a.startswith("search[") for a in info["admissible_actions"])


def test_search_keyword_is_case_insensitive_and_query_normalised(env):
    env.reset(seed=0)
    assert env.match_action("  SEARCH[ Blue   Cotton\tShirt ] ") == "search[blue cotton shirt]"
    assert env.match_action("search[a]b]") == "search[a]b]"
    with pytest.raises(TypeError):
        env.step(None)


def test_horizon_truncates_at_fifteen_steps(env):
    env.reset(seed=0)
    for step in range(15):
        _, _, terminated, truncated, _ = env.step("click[nowhere]")
    assert truncated and not terminated
    with pytest.raises(RuntimeError):
        env.step("search[x]")
    assert WebShopEnv(split="test", max_steps=3).max_steps == 3


def test_snapshot_restore_replays_exactly(env):
    env.reset(seed=7)
    env.step(env.expert_action())
    snapshot = env.snapshot()
    actions = [env.expert_action(), "click[< prev]", "click[next >]", "click[back to search]"]
    first = [env.step(a) for a in actions]
    assert env.restore(snapshot)[1]["state_key"] != first[-1][-1]["state_key"]
    second = [env.step(a) for a in actions]
    assert first == second


def test_same_seed_same_episode_across_instances():
    runs = []
    for _ in range(2):
        env = WebShopEnv(split="train")
        observation, info = env.reset(seed=11)
        trace = [(observation, info)]
        while not env.done:
            trace.append(env.step(env.expert_action()))
        runs.append(trace)
    assert runs[0] == runs[1]


def test_expert_scores_one_on_100_bundled_goals():
    env = WebShopEnv(split="test")
    scores, lengths = [], []
    for goal_index in range(100):
        env.reset(seed=goal_index, options={"goal_index": goal_index})
        while not env.done:
            _, _, _, _, info = env.step(env.expert_action())
        scores.append(info["score"])
        lengths.append(env.steps_taken)
        assert info["won"]
    assert sum(scores) / len(scores) == 1.0
    assert max(lengths) < 15


def test_reset_options_are_validated(env):
    with pytest.raises(ValueError, match="goal_index must be an int in \\[0, 500\\)"):
        env.reset(options={"goal_index": 500})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"goal": 1})
    with pytest.raises(ValueError, match="split must be one of"):
        WebShopEnv(split="validation")


def test_plays_the_original_data_from_data_path():
    env = gym.make("ptgpo/WebShop-v0", data_path=str(FIXTURE), split="test").unwrapped
    assert len(env.catalog.products) == 3
    for goal_index in range(3):
        env.reset(options={"goal_index": goal_index})
        while not env.done:
            _, _, _, _, info = env.step(env.expert_action())
        assert info["won"] and info["task_type"] in ("beauty", "fashion")


def test_webshop_data_variable_selects_the_data(monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", str(FIXTURE))
    env = WebShopEnv(split="all")
    _, info = env.reset(seed=0)
    assert info["task"] in {goal["instruction_text"] for goal in env.catalog.goals}
    assert env.catalog.source.endswith("fixtures/webshop")


def test_a_search_without_hits_leaves_only_the_way_back(env, annotated):
    annotated.reset(seed=0)
    observation, _, _, _, info = annotated.step("search[qqqzzx]")
    assert info["action_valid"] and observation.endswith("Back to Search [SEP] Page 1 (Total results: 0)")
    assert info["admissible_actions"] == ["click[back to search]"]
    # The original's results page always offers Next >, even without a hit.
    env.reset(seed=0)
    observation, _, _, _, info = env.step("search[qqqzzx]")
    assert observation.endswith("Back to Search [SEP] Page 1 (Total results: 0) [SEP] Next >")
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]


def test_observation_style_and_spacy_model_are_validated():
    with pytest.raises(ValueError, match="observation_style must be one of 'original', 'annotated', got 'rich'"):
        WebShopEnv(split="test", observation_style="rich")
    with pytest.raises(ValueError, match="spacy_model must be"):
        WebShopEnv(split="test", spacy_model="")


def test_reward_implementation_is_reported(env):
    # No spaCy model is installed in the test environment: the stand-in scores titles.
    stand_in = WebShopEnv(split="test", spacy_model=None)
    _, info = stand_in.reset(seed=0)
    assert (stand_in.reward_impl, info["reward_impl"], info["reward_model"]) == ("stand-in", "stand-in", None)
    _, info = env.reset(seed=0)
    assert info["reward_impl"] == env.reward_impl in ("spacy", "stand-in")
    assert (info["reward_model"] is None) == (env.reward_impl == "stand-in")
    assert info["observation_style"] == env.observation_style == "original"
    assert WebShopEnv(split="test", observation_style="annotated").reset(seed=0)[1]["observation_style"] == "annotated"
