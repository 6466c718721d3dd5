"""The benchmark harness: config validation, the cell grid, failures, resume."""

from pathlib import Path

import pytest
import yaml

from leaderboard.records import read_record, read_records, record_path
from ptgpo_harness.bench import (
    BenchConfig,
    BenchError,
    load_config,
    plan_cells,
    run_bench,
    run_cell,
)
from ptgpo_harness.bench.pool import finish_cell

HOUSEHOLD = "ptgpo/Household-v0"


def _config(**overrides):
    data = {
        "name": "t",
        "budget": 100,
        "seeds": [0],
        "environments": [
            {"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"},
             "train_seeds": {"start": 0, "count": 10}, "eval_seeds": [100, 101, 102]},
        ],
        "baselines": ["random", "expert"],
    }
    data.update(overrides)
    return data


def test_embedded_default_is_the_documented_grid():
    config = load_config()
    assert [e.label for e in config.environments] == ["multiroom", "doorkey"]
    assert [e.kwargs["level"] for e in config.environments] == ["MultiRoom-N2-S4", "DoorKey-5x5"]
    assert [m.name for m in config.methods] == ["grpo", "rloo", "gigpo", "hgpo", "ptgpo", "placebo"]
    assert [m.rollout for m in config.methods] == ["linear"] * 4 + ["tree", "linear"]
    assert config.methods[-1].algo == "gigpo" and config.methods[-1].train == {"placebo": True}
    assert [b.name for b in config.baselines] == ["random", "expert", "sb3_ppo", "zero_shot"]
    assert config.policy["model"] == "tiny" and config.seeds == [0, 1, 2]
    # Every seed shares one pretrained tiny model, and every cell's final evaluation has 300 episodes.
    assert config.policy["tiny"]["seed"] == 0
    assert all(len(e.eval_seeds) == 300 for e in config.environments)
    assert len(plan_cells(config)) == 2 * (6 + 4) * 3
    # A CPU benchmark on any machine: on a GPU machine `auto` would put every cell's tiny model on the GPU.
    assert all(c.spec["policy.device"] == "cpu" for c in plan_cells(config) if c.kind == "rl")


def test_quick_keeps_the_grid_and_shrinks_budget_seeds_and_evaluation():
    full, quick = load_config(), load_config(quick=True)
    assert quick.name == f"{full.name}-quick"
    assert quick.budget < full.budget and quick.seeds == [0]
    assert [m.name for m in quick.methods] == [m.name for m in full.methods]
    assert [b.name for b in quick.baselines] == [b.name for b in full.baselines]
    assert all(len(e.eval_seeds) == 8 for e in quick.environments)
    assert quick.environments[0].eval_seeds == full.environments[0].eval_seeds[:8]
    assert quick.policy["group_size"] == full.policy["group_size"]


def test_seed_ranges_and_defaults():
    config = BenchConfig.from_dict(_config(methods=[{"algo": "grpo"}]))
    env = config.environments[0]
    assert env.train_seeds == (0, 10) and env.eval_seeds == [100, 101, 102]
    assert env.eval_kwargs is None and env.evaluation_kwargs == {"difficulty": "easy"}
    assert config.methods[0].name == "grpo" and config.methods[0].rollout == "linear"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"budget": 0}, "budget: expected an integer >= 1"),
        ({"seeds": []}, "seeds: expected a non-empty list"),
        ({"colour": "red"}, r"unknown key\(s\) 'colour'"),
        ({"baselines": ["dqn"]}, "unknown baseline 'dqn'"),
        ({"baselines": ["random", "random"]}, "'random' appears twice"),
        ({"methods": [{"algo": "grpo", "rollout": "forest"}]}, "rollout: 'forest' is not valid; choose one of linear, tree, patr"),
        ({"methods": [], "baselines": []}, "at least one method or baseline"),
        ({"policy": {"seed": 3}}, "policy.seed is set per cell"),
        ({"methods": [{"algo": "grpo", "train": {"total_decisions": 9}}]}, r"methods\[0\].train.total_decisions is set"),
        ({"seeds": [1, 1]}, "seeds: expected distinct seeds"),
        ({"environments": [{"id": "ptgpo/Nope-v0", "train_seeds": [0], "eval_seeds": [1]}]}, "unknown environment"),
        ({"environments": [{"id": HOUSEHOLD, "train_seeds": {"count": 2}, "eval_seeds": [5, 1]}]}, r"eval_seeds \(e.g. 1\) fall in train_seeds \[0, 2\)"),
        ({"environments": [{"id": HOUSEHOLD, "train_seeds": {"start": 0}, "eval_seeds": [1]}]}, "count: expected an integer >= 1"),
        ({"environments": [{"id": HOUSEHOLD, "train_seeds": [0, 1], "eval_seeds": [9]}]}, "train_seeds: expected a range"),
        ({"environments": [{"id": HOUSEHOLD, "train_seeds": {"count": 1}, "eval_seeds": [-3]}]}, r"eval_seeds\[0\]: expected an integer >= 0"),
        ({"environments": [{"id": HOUSEHOLD, "train_seeds": {"count": 1}, "eval_seeds": [3], "max_steps": 0}]}, "max_steps: expected an integer >= 1"),
    ],
)
def test_bad_configs_are_refused_with_the_key_named(overrides, message):
    with pytest.raises(BenchError, match=message):
        BenchConfig.from_dict(_config(**overrides))


def test_load_config_names_the_file(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(_config(budget=-5)))
    with pytest.raises(BenchError, match=r"b\.yaml: budget"):
        load_config(path)
    with pytest.raises(BenchError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_cells_cross_environments_methods_and_seeds():
    config = BenchConfig.from_dict(_config(seeds=[0, 1], methods=[{"name": "tree", "algo": "ptgpo", "rollout": "tree"}]))
    cells = plan_cells(config)
    assert [c.name for c in cells] == [
        "easy__tree__seed0", "easy__tree__seed1",
        "easy__random__seed0", "easy__random__seed1",
        "easy__expert__seed0", "easy__expert__seed1",
    ]
    rl = cells[1]
    assert rl.kind == "rl" and rl.budget == 100
    assert rl.spec["total_decisions"] == 100 and rl.spec["rollout"] == "tree" and rl.spec["seed"] == 1
    assert rl.spec["train_seeds"] == [0, 10] and rl.spec["eval_seeds"] == [100, 101, 102]
    assert cells[2].kind == "baseline" and cells[2].budget is None


def test_an_environment_budget_overrides_the_top_one_except_in_quick_runs():
    hard = {"label": "hard", "id": HOUSEHOLD, "kwargs": {"difficulty": "hard"}, "budget": 40,
            "train_seeds": {"start": 0, "count": 10}, "eval_seeds": [100]}
    data = _config(environments=[_config()["environments"][0], hard], methods=[{"algo": "grpo"}],
                   baselines=["random", "sb3_ppo"], quick={"budget": 7})
    budgets = {(c.env.label, c.method): (c.budget, c.spec.get("total_decisions"))
               for c in plan_cells(BenchConfig.from_dict(data))}
    assert budgets[("easy", "grpo")] == (100, 100) and budgets[("hard", "grpo")] == (40, 40)
    assert budgets[("hard", "sb3_ppo")] == (40, None) and budgets[("hard", "random")] == (None, None)
    quick = plan_cells(BenchConfig.from_dict(data, quick=True))
    assert {c.spec["total_decisions"] for c in quick if c.kind == "rl"} == {7}
    with pytest.raises(BenchError, match=r"environments\[1\]\.budget: expected an integer >= 1"):
        BenchConfig.from_dict({**data, "environments": [_config()["environments"][0], {**hard, "budget": 0}]})


def test_a_bench_that_trains_nothing_needs_no_budget_and_one_that_trains_is_told_which():
    untrained = {k: v for k, v in _config(baselines=["random", "zero_shot"]).items() if k != "budget"}
    config = BenchConfig.from_dict(untrained)
    assert config.budget is None and {c.budget for c in plan_cells(config)} == {None}
    assert "budget" not in config.to_dict()
    env = untrained["environments"][0]
    for trains, named in (({"methods": [{"algo": "grpo"}]}, "methods: grpo"),
                          ({"baselines": ["random", "sb3_ppo"]}, "baselines: sb3_ppo")):
        with pytest.raises(BenchError) as error:
            BenchConfig.from_dict({**untrained, **trains})
        assert str(error.value).startswith("budget: required") and named in str(error.value)
        assert "environments[0] (easy)" in str(error.value) and len(str(error.value).splitlines()) == 1
        # Each environment's own budget is enough.
        config = BenchConfig.from_dict({**untrained, **trains, "environments": [{**env, "budget": 30}]})
        assert config.budget is None and 30 in {c.budget for c in plan_cells(config)}
    # An iteration budget ends the methods' cells: no decision budget needed for them.
    config = BenchConfig.from_dict({**untrained, "methods": [{"algo": "grpo"}], "iterations": 2})
    assert {c.budget for c in plan_cells(config) if c.kind == "rl"} == {2}


def test_a_failing_cell_is_recorded_with_its_error(tmp_path):
    config = BenchConfig.from_dict(_config(environments=[
        {"label": "broken", "id": HOUSEHOLD, "kwargs": {"difficulty": "impossible"},
         "train_seeds": {"count": 1}, "eval_seeds": [1]},
    ]))
    record = run_cell(plan_cells(config)[0], tmp_path)
    assert record.status == "failed"
    assert record.error.startswith("ValueError: difficulty must be one of")
    assert read_record(record_path(tmp_path, "broken__random__seed0")).error == record.error
    assert "Traceback" not in record.error


def test_a_process_that_dies_without_a_record_is_recorded_as_failed(tmp_path):
    import logging

    cell = plan_cells(BenchConfig.from_dict(_config()))[0]
    assert finish_cell(cell, -9, tmp_path, 1.5, logging.getLogger("test")) == "failed"
    record = read_record(record_path(tmp_path, cell.name))
    assert "signal 9" in record.error and record.wall_time_s == 1.5


def test_harness_records_every_cell_goes_on_after_a_failure_and_resumes(tmp_path):
    # Options the random baseline does not take fail its cells when they run (the config is valid).
    config = BenchConfig.from_dict(_config(baselines=[{"name": "random", "options": {"epsilon": 0.1}}, "expert"],
                                           environments=[
        {"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"}, "train_seeds": {"count": 1},
         "eval_seeds": [1, 2]},
        {"label": "hard", "id": HOUSEHOLD, "kwargs": {"difficulty": "hard"}, "train_seeds": {"count": 1},
         "eval_seeds": [1]},
    ]))
    report = run_bench(config, tmp_path, workers=2, progress=False)
    assert sorted(report.ran) == sorted(c.name for c in plan_cells(config))
    assert sorted(report.failed) == ["easy__random__seed0", "hard__random__seed0"]
    records, problems = read_records(tmp_path)
    assert not problems and len(records) == 4
    ok = {(r.env_label, r.method): r for r in records if r.status == "ok"}
    assert ok["easy", "expert"].final_success == 1.0 and ok["easy", "expert"].eval_episodes == 2
    assert (tmp_path / "leaderboard").is_dir() and report.leaderboard_files
    assert "hard__random__seed0" in (tmp_path / "bench.log").read_text()

    before = {r.name: r.read_text() for r in tmp_path.glob("*.json")}
    again = run_bench(config, tmp_path, workers=2, progress=False, build_leaderboard=False)
    assert again.ran == [] and len(again.skipped) == 4
    assert {r.name: r.read_text() for r in tmp_path.glob("*.json")} == before

    retried = run_bench(config, tmp_path, workers=2, progress=False, retry_failed=True, build_leaderboard=False)
    assert sorted(retried.ran) == ["easy__random__seed0", "hard__random__seed0"]
    assert (tmp_path / "easy__expert__seed0.json").read_text() == before["easy__expert__seed0.json"]
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["environments"][0]["eval_seeds"] == [1, 2]


GPU_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs" / "bench").glob("*.yaml"))


def test_the_literature_gpu_configs_are_shipped():
    names = {p.name for p in GPU_CONFIGS}
    assert {"alfworld_qwen2.5-1.5b.yaml", "alfworld_qwen2.5-7b.yaml",
            "webshop_qwen2.5-1.5b.yaml", "webshop_qwen2.5-7b.yaml"} <= names


@pytest.mark.parametrize("path", GPU_CONFIGS, ids=lambda p: p.name)
def test_gpu_configs_follow_the_literature_setting(path):
    from ptgpo_algos.config import TrainConfig, merge_overrides

    config = load_config(path)
    # verl-agent's recipe, stopped by its 150 iterations for every method.
    assert config.policy["recipe"] == "verl-agent" and config.iterations == 150
    assert config.policy["model"].startswith("Qwen/Qwen2.5-") and config.seeds == [0, 1, 2]
    env = config.environments[0]
    assert env.max_steps == {"ptgpo/ALFWorld-v0": 50, "ptgpo/WebShop-v0": 15}[env.id]
    assert env.eval_kwargs is not None  # evaluation on the held-out split
    assert config.policy["rollout_backend"] == "vllm"  # rollouts on vLLM, updates in transformers
    methods = {m.name: m for m in config.methods}
    # Every estimator, and PATR as GRPO over its own rollouts.
    estimators = {"grpo", "rloo", "gigpo", "hgpo", "ptgpo", "g2po", "planpo", "progpo", "covgpo", "graphgpo", "patr"}
    # The auxiliary objectives beside their base estimators; isdpo's EMA teacher needs full fine-tuning.
    objectives = {"grpo+seed", "g2po+mcgpo", "gigpo+empg"} | ({"gigpo+isdpo"} if "1.5b" in path.name else set())
    # 3SPO over its own search, at the paper's 1.5B scale.
    spo3 = {"3spo"} if "1.5b" in path.name else set()
    assert set(methods) == estimators | objectives | spo3
    assert (methods["patr"].algo, methods["patr"].rollout) == ("grpo", "patr")
    assert methods["planpo"].algo_config["alpha_init"] == 2 * methods["planpo"].algo_config["alpha_final"] == 0.1
    for cell in plan_cells(config):
        if cell.kind == "rl":
            assert cell.spec["algo_config"]["gamma"] == 0.95
            assert (cell.budget, cell.budget_unit) == (150, "iterations")
            # Everything but what needs the GPU and the hub model is a valid TrainConfig.
            train = TrainConfig.from_dict(merge_overrides(cell.spec, {"model": "tiny", "device": "cpu"}))
            if cell.method == "patr":
                assert train.rollouts.patr.every == {"ptgpo/ALFWorld-v0": 5, "ptgpo/WebShop-v0": 3}[env.id]
            if cell.method == "3spo":
                assert train.rollouts.strategy == "3spo" and train.rollouts.spo3.trajectories == 8
            assert (train.rollouts.group_size, train.rollouts.tasks_per_iteration) == (8, 16)
            assert (train.run.iterations, train.run.total_decisions) == (150, None)
            assert train.policy.mode == "generate" and train.policy.require_think
            assert train.evaluation.temperature == 0.4


def test_baselines_evaluate_with_eval_kwargs(tmp_path):
    # The expert trains on nothing: it plays the evaluation split (look tasks), not the training one.
    config = BenchConfig.from_dict(_config(baselines=["expert"], environments=[
        {"label": "split", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy", "task_type": "pick"},
         "eval_kwargs": {"task_type": "look"}, "train_seeds": {"count": 1}, "eval_seeds": [7, 8]},
    ]))
    record = run_cell(plan_cells(config)[0], tmp_path)
    assert record.status == "ok" and record.final_success == 1.0 and record.eval_episodes == 2
    assert list(record.success_by_type) == ["Look"]


def test_a_quick_run_marks_its_folder_and_leaderboard_as_a_smoke_run(tmp_path):
    from leaderboard.board import SMOKE_MARKER, SMOKE_NOTICE

    data = _config(baselines=["random"], quick={"seeds": [0]})
    assert not BenchConfig.from_dict(data).smoke_run
    report = run_bench(BenchConfig.from_dict(data, quick=True), tmp_path, workers=1, progress=False)
    assert (tmp_path / SMOKE_MARKER).is_file() and "smoke_run" not in (tmp_path / "config.yaml").read_text()
    assert SMOKE_NOTICE in (tmp_path / "leaderboard" / "leaderboard.md").read_text(), report.leaderboard_error


def test_a_results_folder_grows_by_seeds_and_baselines_and_refuses_changed_settings(tmp_path):
    def run(**overrides):
        return run_bench(BenchConfig.from_dict(_config(**overrides)), tmp_path, workers=1, progress=False,
                         build_leaderboard=False)

    run(baselines=["random"])
    # A new seed and a new baseline run only their own cells; the saved config lists the union.
    grown = run(baselines=["random", "expert"], seeds=[0, 1])
    assert sorted(grown.ran) == ["easy__expert__seed0", "easy__expert__seed1", "easy__random__seed1"]
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["seeds"] == [0, 1] and [b["name"] for b in saved["baselines"]] == ["random", "expert"]
    # Running a part of it again (the first config) finds every cell done.
    assert run(baselines=["random"]).ran == []
    # Another worker count is the same benchmark.
    assert run(baselines=["random"], workers=3).ran == []
    # A changed shared setting or a changed entry is refused, naming the keys.
    with pytest.raises(BenchError, match=r"different benchmark config .*budget: saved 100, now 200"):
        run(baselines=["random"], budget=200)
    changed = [{"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "hard"},
                "train_seeds": {"start": 0, "count": 10}, "eval_seeds": [100, 101, 102]}]
    with pytest.raises(BenchError, match=r"environments\[easy\]\.kwargs: saved \{'difficulty': 'easy'\}"):
        run(baselines=["random"], environments=changed)


def test_rl_cells_are_checked_before_anything_runs(tmp_path):
    config = BenchConfig.from_dict(_config(methods=[{"algo": "grpo", "algo_config": {"gamma": 7}}]))
    with pytest.raises(BenchError, match=r"method 'grpo' on 'easy': algorithm.config \(algo_config\)"):
        run_bench(config, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    broken = BenchConfig.from_dict(_config(environments=[
        {"label": "broken", "id": HOUSEHOLD, "kwargs": {"difficulty": "impossible"}, "train_seeds": {"count": 1},
         "eval_seeds": [1]}]))
    with pytest.raises(BenchError, match=r"environment 'broken': kwargs: .*difficulty must be one of"):
        run_bench(broken, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_missing_config_and_lists_cells_on_dry_run(tmp_path, capsys):
    from ptgpo_harness.cli import main

    assert main(["bench", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(_config(seeds=[0, 1])))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "easy__random__seed1.json").write_text("{}")
    assert main(["bench", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "todo  easy__random__seed0", "done  easy__random__seed1",
        "todo  easy__expert__seed0", "todo  easy__expert__seed1",
    ]
    assert main(["bench", "--print-default"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["name"] == load_config().name


def test_an_iteration_budget_ends_every_rl_cell_after_as_many_iterations():
    sb3 = _config(methods=[{"algo": "grpo"}], baselines=["sb3_ppo"], iterations=3)
    cells = {c.method: c for c in plan_cells(BenchConfig.from_dict(sb3))}
    assert (cells["grpo"].budget, cells["grpo"].budget_unit) == (3, "iterations")
    assert cells["grpo"].spec["run.iterations"] == 3 and "total_decisions" not in cells["grpo"].spec
    # The baseline that trains keeps the decision budget.
    assert (cells["sb3_ppo"].budget, cells["sb3_ppo"].budget_unit) == (100, "decisions")
    # An environment's own iteration budget wins; a quick decision budget alone ends the quick run's cells.
    own = _config(methods=[{"algo": "grpo"}], iterations=3, quick={"budget": 7})
    own["environments"][0]["iterations"] = 5
    assert plan_cells(BenchConfig.from_dict(own))[0].spec["run.iterations"] == 5
    quick = plan_cells(BenchConfig.from_dict(own, quick=True))[0]
    assert (quick.budget, quick.budget_unit, quick.spec["total_decisions"]) == (7, "decisions", 7)
    quick_iterations = BenchConfig.from_dict({**own, "quick": {"iterations": 1}}, quick=True)
    assert plan_cells(quick_iterations)[0].spec["run.iterations"] == 1
    # Without one, the saved config is what it always was (a results folder of it still resumes).
    assert "iterations" not in BenchConfig.from_dict(_config()).to_dict()
    with pytest.raises(BenchError, match="policy sets iterations, and so does the bench's iteration budget"):
        BenchConfig.from_dict(_config(methods=[{"algo": "grpo"}], iterations=3, policy={"iterations": 4}))
    with pytest.raises(BenchError, match=r"methods\[grpo\].train sets iterations"):
        BenchConfig.from_dict(_config(methods=[{"algo": "grpo", "train": {"run.iterations": 4}}], iterations=3))


def test_records_say_which_recipe_and_environment_texts_they_were_measured_under(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    # The verl-agent recipe on the tiny model, in choose mode for speed: its prompt and settings apply.
    policy = {"recipe": "verl-agent", "mode": "choose", "group_size": 2, "tasks_per_iteration": 1,
              "tiny": {"hidden_size": 32, "pretrain_steps": 0}}
    config = BenchConfig.from_dict(_config(policy=policy, methods=[{"algo": "grpo"}], baselines=["random"],
                                           iterations=1, environments=[
        {"label": "webshop", "id": "ptgpo/WebShop-v0", "kwargs": {"split": "train"}, "max_steps": 3,
         "eval_kwargs": {"split": "test", "observation_style": "annotated"}, "train_seeds": {"count": 10},
         "eval_seeds": [20, 21]},
    ]))
    rl, random = (run_cell(cell, tmp_path) for cell in plan_cells(config))
    from ptgpo_envs.webshop.env import WebShopEnv

    reward = WebShopEnv(split="test")
    expected = {"recipe": "verl-agent", "observation_style": "annotated", "reward_impl": reward.reward_impl,
                "reward_model": reward.reward_model, "webshop_set": f"{len(reward.catalog.products)} products (bundled), test goals"}
    assert rl.status == "ok" and (rl.budget, rl.budget_unit, rl.iterations) == (1, "iterations", 1)
    assert rl.protocol == expected and random.protocol == expected
    assert (random.budget, random.budget_unit) == (None, "decisions")
    # The cell's CPU, split: model building (the tiny model's pretraining, when not cached) apart from
    # training and evaluation; a baseline counts none of them.
    assert rl.train_cpu_s > 0 and rl.eval_cpu_s > 0 and rl.setup_cpu_s > 0 and rl.gpu_s is None
    assert rl.train_cpu_s + rl.eval_cpu_s + rl.setup_cpu_s <= rl.cpu_time_s
    assert rl.optimizer_updates >= 1 and 0 < rl.unique_tokens <= rl.trained_tokens  # shared prefixes once
    assert random.train_cpu_s is None and random.setup_cpu_s is None


def test_a_method_or_baseline_may_run_its_own_seeds(tmp_path):
    config = BenchConfig.from_dict(_config(
        seeds=[0, 1, 2],
        methods=[{"name": "main", "algo": "grpo"}, {"name": "secondary", "algo": "rloo", "seeds": [0, 1]}],
        baselines=["random", {"name": "expert", "seeds": [5]}],
    ))
    names = [cell.name for cell in plan_cells(config)]
    assert names == ["easy__main__seed0", "easy__main__seed1", "easy__main__seed2",
                     "easy__secondary__seed0", "easy__secondary__seed1",
                     "easy__random__seed0", "easy__random__seed1", "easy__random__seed2", "easy__expert__seed5"]
    # The saved config keeps a method's own seeds, and a config without them saves none.
    assert config.to_dict()["methods"][1]["seeds"] == [0, 1]
    assert "seeds" not in BenchConfig.from_dict(_config()).to_dict()["baselines"][0]
    with pytest.raises(BenchError, match=r"methods\[0\]\.seeds: expected distinct seeds"):
        BenchConfig.from_dict(_config(methods=[{"name": "m", "algo": "grpo", "seeds": [1, 1]}]))
    # A quick run is a smoke run of the whole grid on its own seeds.
    quick = BenchConfig.from_dict({**_config(methods=[{"name": "m", "algo": "grpo", "seeds": [3, 4]}]),
                                   "quick": {"seeds": [0]}}, quick=True)
    assert [cell.seed for cell in plan_cells(quick)] == [0, 0, 0]


def test_a_model_this_machine_lacks_is_refused_before_the_first_cell():
    from ptgpo_harness.bench import check_train_configs

    config = BenchConfig.from_dict(_config(methods=[{"algo": "grpo"}], policy={"model": "/no/such/model"}))
    with pytest.raises(BenchError, match=r"method 'grpo' on 'easy': policy.model \(model\): no model folder"):
        check_train_configs(plan_cells(config))


def test_a_labelled_baseline_runs_twice_and_zero_shot_takes_policy_settings_as_options(tmp_path):
    # The zero-shot table's protocol: the same untrained policy evaluated greedily and sampled at 1.
    tiny = {"model": "tiny", "tiny": {"hidden_size": 32, "pretrain_steps": 0}}
    baselines = ["zero_shot", {"name": "zero_shot", "label": "zero_shot_t1", "options": {"eval_temperature": 1.0}}]
    environments = [{"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"}, "max_steps": 3,
                     "train_seeds": {"start": 0, "count": 10}, "eval_seeds": [100, 101]}]
    config = BenchConfig.from_dict(_config(policy=tiny, baselines=baselines, environments=environments))
    assert [(cell.name, cell.method) for cell in plan_cells(config)] == [
        ("easy__zero_shot__seed0", "zero_shot"), ("easy__zero_shot_t1__seed0", "zero_shot_t1")]
    report = run_bench(config, tmp_path, workers=1, progress=False, build_leaderboard=False)
    assert sorted(report.ran) == ["easy__zero_shot__seed0", "easy__zero_shot_t1__seed0"]
    records = {r.method: r for r in read_records(tmp_path)[0]}
    assert all(r.status == "ok" and r.method_kind == "baseline" for r in records.values())
    assert records["zero_shot_t1"].config["options"] == {"eval_temperature": 1.0}
    # `choose` mode plays admissible actions only.
    assert records["zero_shot"].eval_invalid_rate == records["zero_shot_t1"].eval_invalid_rate == 0.0
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert [b.get("label") for b in saved["baselines"]] == [None, "zero_shot_t1"]
    # The folder resumes by label; labels are names, so two entries may not share one.
    assert run_bench(config, tmp_path, workers=1, progress=False, build_leaderboard=False).ran == []
    with pytest.raises(BenchError, match="'zero_shot' appears twice"):
        BenchConfig.from_dict(_config(baselines=["zero_shot", {"name": "zero_shot", "options": {"eval_temperature": 1}}]))
    # The options reach the policy's config: a wrong one fails the cell, naming the field.
    (cell,) = plan_cells(BenchConfig.from_dict(_config(
        policy=tiny, environments=environments,
        baselines=[{"name": "zero_shot", "options": {"eval_temperature": -1.0}}])))
    record = run_cell(cell, tmp_path / "wrong")
    assert record.status == "failed" and "eval_temperature" in record.error


def test_a_generate_mode_baseline_records_its_invalid_step_rate(tmp_path):
    # One new token cannot hold <action>...</action>: every held-out step is unparsable, and the record says so.
    tiny = {"model": "tiny", "tiny": {"hidden_size": 32, "pretrain_steps": 0}}
    environments = [{"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"}, "max_steps": 3,
                     "train_seeds": {"start": 0, "count": 10}, "eval_seeds": [100, 101]}]
    baselines = [{"name": "zero_shot", "label": "zero_shot_generate", "options": {"mode": "generate", "max_new_tokens": 1}}]
    (cell,) = plan_cells(BenchConfig.from_dict(_config(policy=tiny, baselines=baselines, environments=environments)))
    record = run_cell(cell, tmp_path)
    assert record.status == "ok" and record.final_success == 0.0 and record.eval_invalid_rate == 1.0
    assert read_records(tmp_path)[0] == [record]
