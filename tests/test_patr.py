"""PATR's rules by hand (pruning, expansion, loops, the group's value, the judge blend), its settings in
the training config, and training with ``--rollout patr``. Its trees themselves (replay from reset,
shared prefixes, budgets) are checked with the other rollouts in tests/test_rollout.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Step
from ptgpo_algos.rollouts.patr.collection import (
    SCORERS,
    Branch,
    PatrConfig,
    expansions,
    process_scores,
    repeats,
    score_prunes,
    value_scores,
)

from resume_scenarios import killed_and_resumed


def test_a_checkpoint_prunes_below_the_median_minus_alpha():
    # median 0.5 (mean of the middle two, 0.4 and 0.6): the threshold is 0.0 with alpha 0.5.
    assert score_prunes([0.9, -0.1, 0.4, 0.6], 0.5).tolist() == [False, True, False, False]
    assert score_prunes([0.9, 0.0, 0.4, 0.6], 0.5).tolist() == [False, False, False, False]  # not below
    # median 0.3: with alpha 0.2, 0.05 < 0.1 is pruned; with alpha 0 everything below the median.
    assert score_prunes([0.05, 0.3, 0.8], 0.2).tolist() == [True, False, False]
    assert score_prunes([0.05, 0.3, 0.8], 0.0).tolist() == [True, False, False]
    assert score_prunes([0.7], 0.0).tolist() == [False] and score_prunes([], 0.5).tolist() == []


def test_expansion_takes_the_top_k_eligible_ties_in_the_given_order_within_the_room():
    scores = [0.2, 0.9, 0.5, 0.9, 0.1]
    eligible = [True, True, True, False, True]  # branch 3 was pruned
    assert expansions(scores, eligible, top_k=2, room=5, order=[0, 1, 2, 3, 4]) == [1, 2]
    assert expansions(scores, eligible, top_k=2, room=1, order=[0, 1, 2, 3, 4]) == [1]
    assert expansions(scores, eligible, top_k=2, room=0, order=[0, 1, 2, 3, 4]) == []
    assert expansions(scores, eligible, top_k=0, room=5, order=[0, 1, 2, 3, 4]) == []
    # Equal scores: the order decides.
    assert expansions([0.5, 0.5, 0.5], [True] * 3, top_k=2, room=9, order=[2, 0, 1]) == [1, 2]


def test_a_loop_is_the_same_action_repeat_limit_times_in_a_row():
    assert repeats(["a", "b", "b", "b"], 3) and not repeats(["b", "b", "a", "b"], 3)
    assert not repeats(["b", "b"], 3) and repeats(["b", "b"], 2)
    assert not repeats(["b"] * 50, None)


def _steps(keys, rewards):
    return [Step(state_key=k, action="x", reward=r) for k, r in zip(keys, rewards)]


def test_the_groups_value_is_the_mean_return_of_the_leaves_through_a_state():
    finished = [
        _steps(["s0", "a", "b"], [0, 0, 1]),        # return 1, through a and b
        _steps(["s0", "a", "c", "a"], [0, 0, 0, 0]),  # return 0, through a (twice: counted once) and c
        _steps(["s0", "d"], [0, 0.5]),              # return 0.5
    ]
    # a: (1 + 0) / 2; b: 1; d: 0.5; s0: all three; z: never seen -> the mean of all returns, 0.5.
    assert value_scores(["a", "b", "d", "s0", "z"], finished) == [0.5, 1.0, 0.5, 0.5, 0.5]
    assert value_scores(["a"], []) == [0.0]


def _branch(key, progress):
    return Branch(task="t", steps=(), observation="o", state_key=key, progress=progress)


def test_scorers_read_progress_or_the_group_value_and_a_judge_is_blended_in():
    branches = [_branch("a", 0.25), _branch("b", 0.75)]
    finished = [_steps(["a"], [1.0]), _steps(["c"], [0.0])]
    assert process_scores("progress", None, 0.5, branches, finished).tolist() == [0.25, 0.75]
    assert process_scores("value", None, 0.5, branches, finished).tolist() == [1.0, 0.5]
    assert process_scores("auto", None, 0.5, branches, finished).tolist() == [0.25, 0.75]
    without = [_branch("a", None), _branch("b", 0.75)]
    assert process_scores("auto", None, 0.5, without, finished).tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="progress scorer needs the environment's progress"):
        process_scores("progress", None, 0.5, without, finished)
    # s = lam * judge + (1 - lam) * scorer: 0.25 * [1.0, 0.5] + 0.75 * [0.25, 0.75] = [0.4375, 0.6875].
    assert process_scores("progress", "value", 0.25, branches, finished).tolist() == [0.4375, 0.6875]
    SCORERS.register("wrong_length", lambda branches, finished: [1.0])
    try:
        with pytest.raises(ValueError, match="one finite score per branch"):
            process_scores("wrong_length", None, 0.5, branches, finished)
    finally:
        SCORERS.unregister("wrong_length")


# ----------------------------------------------------------------------------- the config
def test_patr_is_a_rollout_strategy_with_the_papers_defaults_and_k_by_environment():
    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "algo": "grpo", "rollout": "patr"})
    assert config.rollouts.strategy == "patr"
    assert config.rollouts.patr == PatrConfig(every=5)  # a typed section, resolved once
    assert config.to_dict()["rollouts"]["patr"] == {
        "initial_branches": 4, "children": 2, "top_k": 2, "every": 5, "alpha": 0.5, "repeat_limit": 6,
        "max_leaves": 10, "pruned_reward": 0.0, "scorer": "auto", "judge": None, "lam": 0.5}
    shop = TrainConfig.from_dict({"env_id": "ptgpo/WebShop-v0", "rollout": "patr", "patr": {"alpha": 0.25}})
    assert (shop.rollouts.patr.every, shop.rollouts.patr.alpha) == (3, 0.25)
    given = TrainConfig.from_dict({"rollout": "patr", "rollouts.patr.every": 7})
    assert given.rollouts.patr.every == 7
    # The saved form reads back as the same config; other strategies leave K unresolved, and an older
    # config.json's empty section reads as the defaults.
    assert TrainConfig.from_dict(config.to_dict()) == config
    grpo = TrainConfig.from_dict({"algo": "grpo"})
    assert grpo.rollouts.patr == PatrConfig() and TrainConfig.from_dict({"algo": "grpo", "patr": {}}) == grpo


@pytest.mark.parametrize(
    "patr, message",
    [
        ({"alpah": 1}, "rollouts.patr (patr): unknown key(s) 'alpah' (did you mean 'alpha'?)"),
        ({"children": 1}, "rollouts.patr.children: expected an integer >= 2"),
        ({"every": 0}, "rollouts.patr.every: expected an integer >= 1"),
        ({"alpha": -1}, "rollouts.patr.alpha: expected a number >= 0.0"),
        ({"repeat_limit": 1}, "rollouts.patr.repeat_limit: expected an integer >= 2"),
        ({"max_leaves": 3}, "rollouts.patr.max_leaves: expected an integer >= 4"),
        ({"scorer": "prm"}, "rollouts.patr.scorer: unknown process scorer 'prm'"),
        ({"judge": "valeu"}, "(did you mean 'value'?)"),
        ({"lam": 2}, "rollouts.patr.lam: expected a number >= 0.0 and <= 1.0"),
        (5, "rollouts.patr (patr): expected a mapping"),
    ],
)
def test_bad_patr_settings_fail_with_clear_messages(patr, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"rollout": "patr", "patr": patr})
    assert message in str(error.value)


def test_the_cli_takes_rollout_patr(tmp_path):
    from ptgpo_harness.cli import build_parser
    from ptgpo_harness.commands.train import build_config

    args = build_parser().parse_args(["train", "--env", "ptgpo/Sokoban-v0", "--algo", "planpo", "--rollout", "patr",
                                      "--set", "rollouts.patr.top_k=1"])
    config = build_config(args)
    assert (config.algorithm.name, config.rollouts.strategy, config.rollouts.patr.top_k) == ("planpo", "patr", 1)


# ----------------------------------------------------------------------------- training
LAKE = {"desc": ["SFFF", "FHFH", "FFFH", "HFFG"]}


def _config(tmp_path, **change):
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=12, algo="grpo", rollout="patr",
                patr={"every": 3}, tasks_per_iteration=2, iterations=100, total_decisions=150, eval_every=2,
                eval_seeds=2, out_dir=str(tmp_path / "run"), tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict(data)


def test_training_over_patr_rollouts_logs_its_counts_and_spends_the_budget_exactly(tmp_path, monkeypatch):
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    summary = run_training(_config(tmp_path), progress=False)
    assert summary.decisions == 150
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    assert {f"rollout/patr_{name}" for name in ("branches", "checkpoints", "expansions", "pruned_score",
                                                "pruned_repeat", "leaves_per_group")} <= set(rows[0])
    assert sum(row["rollout/patr_expansions"] for row in rows) > 0
    assert sum(row["rollout/decisions_saved"] for row in rows) == summary.decisions_saved > 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["rollouts"]["strategy"] == "patr" and saved["rollouts"]["patr"]["every"] == 3


def test_the_progress_scorer_needs_an_environment_that_reports_progress(tmp_path):
    from ptgpo_algos.training.preflight import check_environment

    config = _config(tmp_path, env_id="ptgpo/BabyAI-v0", env_kwargs={"level": "GoToLocal"}, max_steps=None,
                     patr={"scorer": "progress"})
    with pytest.raises(ValueError, match=r"rollouts.patr.scorer: PATR's progress scorer .* needs its progress\(\)"):
        check_environment(config)
    check_environment(config.replace(**{"rollouts.patr.scorer": "auto"}))
    check_environment(config.replace(**{"env.kwargs.level": "MultiRoom-N2-S4"}))


@pytest.mark.parametrize("algo", ["g2po", "planpo", "progpo", "covgpo"])
def test_every_seed_estimator_trains_over_patr_rollouts_from_the_command_line(algo, tmp_path, monkeypatch):
    import ptgpo_algos.training.trainer as trainer
    from ptgpo_harness.cli import main

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    passed = []
    real = trainer.estimate_batch

    def spy(name, batch, **config):
        passed.append((name, config.get("progress")))
        return real(name, batch, **config)

    monkeypatch.setattr(trainer, "estimate_batch", spy)
    code = main(["train", "--env", "ptgpo/FrozenLake-v0", "--algo", algo, "--rollout", "patr", "--iterations", "3",
                 "--tasks", "2", "--eval-every", "3", "--eval-episodes", "2", "--out", str(tmp_path / "run"),
                 "--no-progress", "--set", f"env_kwargs={json.dumps(LAKE)}", "--set", "max_steps=12",
                 "--set", "rollouts.patr.every=3", "--set", "tiny={hidden_size: 32, pretrain_steps: 0}"])
    assert code == 0
    # PlanPO's alpha decays with the run's progress, which the trainer passes: iteration / iterations.
    expected = [0.0, 1 / 3, 2 / 3] if algo == "planpo" else [None] * 3
    assert passed == [(algo, value) for value in expected]


def test_a_killed_patr_run_resumes_to_the_uninterrupted_runs_metrics(tmp_path, monkeypatch):
    # PATR's tie-breaking draws from the run's generator, which the checkpoint keeps.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))

    def config(out_dir, **change):
        return _config(tmp_path, out_dir=str(tmp_path / out_dir), **change)

    resumed, whole = killed_and_resumed(monkeypatch, config, "ptgpo_algos.rollouts.patr.collection.collect_patr_rollouts")
    assert resumed == whole
    assert sum(row["rollout/patr_expansions"] for row in whole) > 0
