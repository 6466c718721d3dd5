"""The text featuriser, the SB3 Gymnasium wrapper and the SB3 PPO baseline."""

import json
import math

import numpy as np
import pytest
from stable_baselines3.common.env_checker import check_env

from baselines.registry import BASELINES, BaselineRun, get_baseline, run_baseline
from baselines.sb3_ppo import SB3Agent, SlotActionEnv, slot_action
from baselines.text_features import HashedBagOfWords, SlotFeaturizer, words
from ptgpo_algos.rollouts.evaluation import evaluate
from ptgpo_envs import make_env

HOUSEHOLD = "ptgpo/Household-v0"


def test_words_lowercase_and_split_on_punctuation():
    assert words("Go to Desk 1, then look!") == ["go", "to", "desk", "1", "then", "look"]


def test_hashed_bag_of_words_matches_hand_computed_buckets():
    # crc32("go") = 3060306774 -> bucket 6 of 8; crc32("to") = 3616002756 -> bucket 4.
    vector = HashedBagOfWords(dims=8)("Go to go")
    expected = np.zeros(8, dtype=np.float32)
    expected[6], expected[4] = 2 / math.sqrt(5), 1 / math.sqrt(5)
    np.testing.assert_allclose(vector, expected, rtol=1e-6)


def test_hashed_bag_of_words_collisions_add_up_and_empty_text_is_zero():
    # crc32("go") and crc32("desk") both land in bucket 2 of 4.
    np.testing.assert_allclose(HashedBagOfWords(dims=4)("go desk"), [0, 0, 1, 0])
    assert not HashedBagOfWords(dims=4)("...").any()


def test_featurizer_layout_and_truncation():
    featurizer = SlotFeaturizer(max_slots=3, text_dims=8, slot_dims=4)
    vector = featurizer("put apple", "you see a desk", ["go to desk 1", "look"])
    assert vector.shape == (featurizer.size,) == (2 * 8 + 3 * (4 + 1),)
    np.testing.assert_allclose(vector[:8], HashedBagOfWords(8)("put apple"))
    np.testing.assert_allclose(vector[8:16], HashedBagOfWords(8)("you see a desk"))
    np.testing.assert_allclose(vector[16:20], HashedBagOfWords(4)("go to desk 1"))
    np.testing.assert_allclose(vector[20:24], HashedBagOfWords(4)("look"))
    assert not vector[24:28].any()
    np.testing.assert_array_equal(vector[-3:], [1, 1, 0])
    assert featurizer.truncated(["a", "b", "c", "d"]) and not featurizer.truncated(["a"])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_featurizer_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="max_slots"):
        SlotFeaturizer(max_slots=bad)


def test_slot_action_wraps_around_the_reachable_actions():
    actions = ["a", "b", "c", "d"]
    assert slot_action(1, actions, max_slots=8) == "b"
    assert slot_action(5, actions, max_slots=8) == "b"
    # Only the first max_slots actions are reachable.
    assert slot_action(3, actions, max_slots=3) == "a"
    assert slot_action(2, [], max_slots=3) == ""


def _wrapped(seeds=range(3, 6)):
    return SlotActionEnv(make_env(HOUSEHOLD, {"difficulty": "easy"}), SlotFeaturizer(), seeds, seed=0)


def test_wrapper_passes_sb3_env_checker():
    check_env(_wrapped(), warn=True, skip_render_check=True)


def test_wrapper_plays_the_slot_action_on_training_seeds_only():
    env = _wrapped(seeds=range(11, 13))
    features, info = env.reset(seed=1)
    assert info["task_seed"] in (11, 12)
    assert env.observation_space.contains(features)
    admissible = info["admissible_actions"]
    slot = len(admissible) + 1  # wraps to admissible[1]
    _, _, _, _, step_info = env.step(slot)
    assert step_info["action_text"] == admissible[1] and step_info["action_valid"]
    seen = {env.reset()[1]["task_seed"] for _ in range(20)}
    assert seen == {11, 12}


def test_registry_lists_the_four_baselines_and_rejects_unknown_names():
    assert set(BASELINES) == {"random", "expert", "sb3_ppo", "zero_shot"}
    with pytest.raises(ValueError, match="unknown baseline .dqn.; choose one of random"):
        get_baseline("dqn")


def test_sb3_ppo_trains_through_sb3_and_logs_a_curve(tmp_path):
    job = BaselineRun(
        env_id=HOUSEHOLD,
        env_kwargs={"difficulty": "easy"},
        train_seeds=range(50),
        eval_seeds=list(range(1000, 1006)),
        seed=0,
        budget=300,
        out_dir=tmp_path,
        options={"eval_points": 3, "ppo": {"n_steps": 100}},
    )
    outcome = run_baseline("sb3_ppo", job)
    assert outcome.decisions == 300  # three PPO rollouts of 100 steps, counted by SB3 itself
    rows = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert [row["decisions"] for row in rows] == [0, 100, 200, 300]
    assert outcome.final_eval["episodes"] == 6
    assert outcome.final_eval["success"] == rows[-1]["success"]
    assert outcome.best_success == max(row["success"] for row in rows)


def test_sb3_budget_that_rollouts_do_not_divide_is_never_exceeded(tmp_path):
    job = BaselineRun(HOUSEHOLD, {"difficulty": "easy"}, range(2), [1000], 0, 250, tmp_path,
                      options={"eval_points": 1, "ppo": {"n_steps": 100}})
    outcome = run_baseline("sb3_ppo", job)
    assert outcome.decisions == 249  # 3 rollouts of 83 steps


def test_sb3_rejects_unknown_options(tmp_path):
    job = BaselineRun(HOUSEHOLD, {}, range(1), [1000], 0, 10, tmp_path, options={"slots": 4})
    with pytest.raises(ValueError, match="unknown sb3_ppo option"):
        run_baseline("sb3_ppo", job)


def test_sb3_agent_evaluates_a_model_greedily():
    class FixedModel:  # always picks slot 0, like a policy that learned one action
        def predict(self, observations, deterministic):
            assert deterministic
            return np.zeros(len(observations), dtype=np.int64), None

    result = evaluate(SB3Agent(FixedModel(), SlotFeaturizer()), HOUSEHOLD, [1000, 1001], {"difficulty": "easy"})
    assert [e.invalid_actions for e in result.episodes] == [0, 0]


def test_random_and_expert_baselines_bracket_household(tmp_path):
    job = BaselineRun(HOUSEHOLD, {"difficulty": "easy"}, range(1), list(range(1000, 1010)), 0, 0, tmp_path)
    expert = run_baseline("expert", job)
    random = run_baseline("random", job)
    assert expert.final_eval["success"] == 1.0 and expert.decisions == 0
    assert random.final_eval["success"] < expert.final_eval["success"]
    with pytest.raises(ValueError, match="takes no options"):
        run_baseline("random", BaselineRun(HOUSEHOLD, {}, range(1), [1000], 0, 0, tmp_path, options={"x": 1}))


def test_sb3_cell_writes_a_result_record(tmp_path):
    from leaderboard.records import read_record, record_path
    from ptgpo_harness.bench import BenchConfig, plan_cells, run_cell

    config = BenchConfig.from_dict({
        "name": "sb3", "budget": 300, "seeds": [4],
        "environments": [{"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"},
                          "train_seeds": {"count": 100}, "eval_seeds": [1000, 1001, 1002]}],
        "baselines": [{"name": "sb3_ppo", "options": {"eval_points": 2, "ppo": {"n_steps": 150}}}],
    })
    (cell,) = plan_cells(config)
    run_cell(cell, tmp_path)
    record = read_record(record_path(tmp_path, "easy__sb3_ppo__seed4"))
    assert record.status == "ok" and record.method_kind == "baseline"
    assert record.budget == record.decisions == 300 and record.eval_episodes == 3
    assert record.curve_path == "runs/easy__sb3_ppo__seed4/curve.jsonl"
    assert (tmp_path / record.curve_path).is_file()
