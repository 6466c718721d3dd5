"""The third hostile probe's config cases: a field is set once within one source of settings, whatever
its spelling, while a later source still overrides an earlier one; and values that would allocate or
run for ever are refused up front with a message. Each test states the guarantee it checks.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from ptgpo_harness.bench.config import BenchConfig, BenchError
from ptgpo_harness.bench.plan import plan_cells
from ptgpo_harness.cli import build_parser, main
from ptgpo_harness.commands.train import build_config, parse_set
from ptgpo_algos.config import TrainConfig, check_spellings
from ptgpo_algos.policy.settings import MAX_NEW_TOKENS
from ptgpo_algos.rollouts.settings import MAX_EPISODES_PER_ITERATION


def _cli(*argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _train_args(*argv: str):
    return build_parser().parse_args(["train", *argv])


# =========================================================================== 1. one field, one spelling
#: Two spellings of one field in one file, and how the message names each place.
TWICE = [
    ("seed: 1\nrun: {seed: 2}\n", "seed (top level) and run.seed (in the run section) both set run.seed (seed)"),
    ("learning_rate: 1.0e-3\noptim: {lr: 1.0e-2}\n",
     "learning_rate (top level) and optim.lr (in the optim section) both set optim.lr (learning_rate)"),
    ("optim.lr: 1.0e-3\noptim: {lr: 1.0e-2}\n",
     "optim.lr (a dotted key) and optim.lr (in the optim section) both set optim.lr (learning_rate)"),
    ("algo: grpo\nalgorithm.name: grpo\n",  # the same value twice is still two places to keep in step
     "algo (top level) and algorithm.name (a dotted key) both set algorithm.name (algo)"),
    ("env_kwargs: {difficulty: easy}\nenv.kwargs.difficulty: hard\n",
     "env_kwargs (top level) and env.kwargs.difficulty (a dotted key) both set env.kwargs (env_kwargs)"),
    ("rollout: patr\npatr: {alpha: 0.3}\nrollouts: {patr: {every: 3}}\n",
     "patr (top level) and rollouts.patr (in the rollouts section) both set rollouts.patr (patr)"),
    ("policy: {tiny: {pretrain_steps: 0}}\ntiny.hidden_size: 32\n",
     "policy.tiny (in the policy section) and tiny.hidden_size (a dotted key) both set policy.tiny (tiny)"),
]


@pytest.mark.parametrize("text, message", TWICE)
def test_a_config_file_that_sets_a_field_twice_is_refused_naming_both_places(tmp_path, capsys, text, message):
    path = _yaml(tmp_path, text)
    with pytest.raises(ValueError) as caught:
        TrainConfig.from_yaml(path)
    assert str(caught.value) == f"{path}: {message}; keep one"
    code, err = _cli("train", "--config", path, capsys=capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_different_fields_of_one_section_in_several_spellings_are_one_config(tmp_path):
    path = _yaml(tmp_path, """
        learning_rate: 1.0e-3
        optim: {epochs: 3}
        optim.minibatch_size: 16
        env_kwargs: {size: 4}
        env.max_steps: 20
    """)
    config = TrainConfig.from_yaml(path)
    assert (config.optim.lr, config.optim.epochs, config.optim.minibatch_size) == (1e-3, 3, 16)
    assert (config.env.kwargs, config.env.max_steps) == ({"size": 4}, 20)


@pytest.mark.parametrize("argv, message", [
    (["--set", "seed=1", "--set", "run.seed=2"], "--set seed and --set run.seed both set run.seed (seed)"),
    (["--set", "seed=1", "--set", "seed=2"], "--set seed is given twice"),
    (["--seed", "1", "--set", "run.seed=2"], "--seed and --set run.seed both set run.seed (seed)"),
    (["--lr", "1e-3", "--set", "optim={lr: 1.0e-2}"],
     "--lr and --set optim (optim.lr) both set optim.lr (learning_rate)"),
    (["--difficulty", "easy", "--set", "env.kwargs.difficulty=hard"],
     "--difficulty and --set env.kwargs.difficulty both set env.kwargs.difficulty"),
])
def test_the_command_line_is_one_source_and_sets_a_field_once(capsys, argv, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}; keep one$"):
        build_config(_train_args(*argv))
    code, err = _cli("train", *argv, capsys=capsys)
    assert code == 2 and message in err


def test_parse_set_refuses_a_field_set_twice_for_every_command_that_takes_set():
    with pytest.raises(ValueError, match=r"--set learning_rate and --set optim.lr both set optim.lr"):
        parse_set(["learning_rate=1e-3", "optim.lr=1e-2"])
    assert parse_set(["learning_rate=1e-3", "optim.epochs=2"]) == {"learning_rate": "1e-3", "optim.epochs": 2}


def test_a_flag_or_set_still_overrides_the_config_file_in_any_spelling(tmp_path):
    path = _yaml(tmp_path, """
        seed: 1
        optim: {lr: 1.0e-3, epochs: 3}
        env_kwargs: {difficulty: easy, subgoal_reward: 0.1}
    """)
    config = build_config(_train_args("--config", str(path), "--seed", "5", "--set", "learning_rate=2e-3",
                                      "--difficulty", "hard"))
    assert (config.run.seed, config.optim.lr, config.optim.epochs) == (5, 2e-3, 3)
    assert config.env.kwargs == {"difficulty": "hard", "subgoal_reward": 0.1}
    config = build_config(_train_args("--config", str(path), "--set", "run={seed: 7}", "--lr", "3e-3"))
    assert (config.run.seed, config.optim.lr) == (7, 3e-3)


def test_check_spellings_takes_a_section_alone_and_hindsight_off():
    check_spellings([("optim", {}, None), ("learning_rate", 1e-3, None)])
    with pytest.raises(ValueError, match=r"hindsight \(top level\) and hindsight.types \(a dotted key\) both set "
                                         r"hindsight; keep one"):
        check_spellings([("hindsight", None, None), ("hindsight.types", "same", None)])


BENCH = {
    "name": "x", "budget": 10, "seeds": [0],
    "environments": [{"id": "ptgpo/FrozenLake-v0", "train_seeds": {"start": 0, "count": 5}, "eval_seeds": [100]}],
    "methods": [{"name": "g", "algo": "grpo"}],
}


@pytest.mark.parametrize("place, fields", [
    ("policy", {"learning_rate": 1e-3, "optim": {"lr": 1e-2}}),
    ("methods[0].train", {"ppo_epochs": 1, "optim.epochs": 2}),
    ("quick.policy", {"eval_every": 1, "evaluation": {"every": 2}}),
])
def test_a_benchmark_place_of_training_keys_sets_each_field_once(place, fields):
    data = {**BENCH, "methods": [dict(BENCH["methods"][0])], "quick": {}}
    if place == "policy":
        data["policy"] = fields
    elif place == "quick.policy":
        data["quick"] = {"policy": fields}
    else:
        data["methods"][0]["train"] = fields
    with pytest.raises(BenchError, match=rf"^{re.escape(place)}: .* both set .*; keep one$"):
        BenchConfig.from_dict(data, quick=True)


def test_quick_policy_overrides_one_field_and_keeps_the_rest_of_the_section():
    data = {**BENCH, "policy": {"optim": {"lr": 1e-3, "epochs": 3}, "tasks_per_iteration": 4},
            "quick": {"policy": {"optim": {"lr": 1e-2}, "tasks_per_iteration": 1}}}
    cell = plan_cells(BenchConfig.from_dict(data, quick=True))[0]
    config = TrainConfig.from_dict(cell.spec)
    assert (config.optim.lr, config.optim.epochs, config.rollouts.tasks_per_iteration) == (1e-2, 3, 1)
    # Keys that replace the same keys are kept as written (what a quick run's results folder holds).
    plain = {**BENCH, "policy": {"tasks_per_iteration": 4}, "quick": {"policy": {"tasks_per_iteration": 1}}}
    assert BenchConfig.from_dict(plain, quick=True).policy == {"tasks_per_iteration": 1}


# =========================================================================== 2. messages, not tracebacks
@pytest.mark.parametrize("key, value, message", [
    ("algo", {"name": "grpo"}, "algorithm.name (algo): expected a name (a string), got {'name': 'grpo'}"),
    ("algorithm.loss", ["ppo-clip"], "algorithm.loss (loss): expected a name (a string), got ['ppo-clip']"),
    ("policy.recipe", {}, "policy.recipe (recipe): {} is not valid; choose one of"),
    ("rollouts.patr.scorer", {"name": "value"}, "rollouts.patr.scorer: expected a name (a string)"),
])
def test_a_name_given_as_a_mapping_or_list_is_refused_with_a_message(tmp_path, capsys, key, value, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        TrainConfig.from_dict({key: value, **({"rollout": "patr"} if "patr" in key else {})})
    path = _yaml(tmp_path, "algo:\n  name: grpo\n")
    code, err = _cli("train", "--config", path, capsys=capsys)
    assert code == 2 and "algorithm.name (algo): expected a name (a string), got {'name': 'grpo'}" in err


def test_evaluate_bounds_its_counts_before_building_anything(tmp_path, capsys):
    base = ["evaluate", tmp_path, "--env", "ptgpo/FrozenLake-v0"]
    code, err = _cli(*base, "--episodes", 10**12, capsys=capsys)
    assert code == 2 and f"--episodes must be in [1, {MAX_EPISODES_PER_ITERATION}], got {10**12}" in err
    code, err = _cli(*base, "--batch-size", 10**12, capsys=capsys)
    assert code == 2 and "--batch-size must be in [1, " in err
    code, err = _cli(*base, "--max-steps", 10**12, capsys=capsys)
    assert code == 2 and "--max-steps must be in [1, 1000000]" in err


@pytest.mark.parametrize("count", [10**12, MAX_EPISODES_PER_ITERATION + 1])
def test_a_bench_eval_seed_range_is_bounded(count):
    environment = {**BENCH["environments"][0], "eval_seeds": {"start": 1000, "count": count}}
    with pytest.raises(BenchError, match=rf"environments\[0\]\.eval_seeds\.count: expected an integer in \[1, "
                                         rf"{MAX_EPISODES_PER_ITERATION}\], got {count}"):
        BenchConfig.from_dict({**BENCH, "environments": [environment]})
    with pytest.raises(BenchError, match=r"eval_seeds\.count: expected an integer in \[1, "):
        BenchConfig.from_dict({**BENCH, "environments": [{**environment, "held_out": 0.5}]})


@pytest.mark.parametrize("count", ["1000000000000", "1e12", "1.0e+12"])
def test_bench_refuses_a_huge_eval_seed_count_in_any_spelling_with_a_message(tmp_path, capsys, count):
    path = tmp_path / "bench.yaml"
    path.write_text("name: x\nbudget: 10\nseeds: [0]\nbaselines: [random]\nenvironments: [{id: ptgpo/FrozenLake-v0, "
                    f"train_seeds: {{start: 0, count: 5}}, eval_seeds: {{start: 100, count: {count}}}}}]\n")
    code, err = _cli("bench", path, "--dry-run", capsys=capsys)
    assert code == 2 and "eval_seeds.count: expected an integer in [1, " in err and "Traceback" not in err


@pytest.mark.parametrize("settings, message", [
    ({"rollout": "patr", "patr": {"max_leaves": 10**12}},
     "rollouts.patr.max_leaves: 1000000000000 x tasks_per_iteration 8"),
    ({"rollout": "patr", "patr": {"max_leaves": 2**18}}, "rollouts.patr.max_leaves: 262144 x tasks_per_iteration 8"),
    ({"algo": "3spo", "spo3": {"g_max": 10**12}}, "rollouts.spo3.g_max: 1000000000000 x tasks_per_iteration 8"),
    ({"algo": "3spo", "spo3": {"trajectories": 10**12}}, "rollouts.spo3.trajectories: 1000000000000 x"),
    ({"mode": "generate", "max_new_tokens": 10**12}, "policy.max_new_tokens (max_new_tokens): expected an integer in"),
])
def test_settings_that_size_an_iteration_are_bounded_up_front(settings, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        TrainConfig.from_dict(settings)


def test_the_bounds_leave_every_usual_setting_alone():
    TrainConfig.from_dict({"rollout": "patr", "patr": {"max_leaves": 2**17}, "tasks_per_iteration": 8})
    TrainConfig.from_dict({"algo": "3spo", "spo3": {"g_max": 64, "trajectories": 64}})
    TrainConfig.from_dict({"mode": "generate", "max_new_tokens": MAX_NEW_TOKENS})
    # A large PATR tree with few tasks, or many tasks with the default tree, is fine.
    TrainConfig.from_dict({"rollout": "patr", "patr": {"max_leaves": 1024}, "tasks_per_iteration": 1024})


def test_a_training_seed_range_beyond_64_bits_is_refused_before_any_model_is_built():
    # The trainer draws seeds with numpy's 64-bit integers: a stop past them failed after the model was built.
    with pytest.raises(ValueError, match=re.escape("env.train_seeds (train_seeds): give [start, stop) with 0 <= start "
                                                   "< stop <= 2**63 - 1")):
        TrainConfig.from_dict({"train_seeds": [0, 10**30]})
    widest = TrainConfig.from_dict({"train_seeds": [0, 2**63 - 1], "eval_seeds": [2**63]})
    assert widest.env.train_seeds == (0, 2**63 - 1)
