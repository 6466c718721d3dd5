"""pass@k and pass^k: the estimators on hand-computed numbers, and ``ptgpo evaluate --trials``."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from leaderboard.passk import pass_at_k, pass_hat_k, pass_k


@pytest.mark.parametrize("n, c, k, at, hat", [
    (5, 2, 2, 1 - 3 / 10, 1 / 10),   # C(3,2)=3, C(5,2)=10, C(2,2)=1
    (4, 3, 2, 1.0, 3 / 6),           # C(1,2)=0; C(3,2)=3, C(4,2)=6
    (4, 3, 1, 0.75, 0.75),           # k=1: both are the success rate
    (3, 0, 2, 0.0, 0.0),
    (3, 3, 3, 1.0, 1.0),
    (10, 5, 3, 1 - 10 / 120, 10 / 120),  # C(5,3)=10, C(10,3)=120
])
def test_the_estimators_on_hand_computed_numbers(n, c, k, at, hat):
    assert pass_at_k(n, c, k) == pytest.approx(at)
    assert pass_hat_k(n, c, k) == pytest.approx(hat)


def test_the_estimators_are_the_mean_over_every_choice_of_k_trials():
    trials = [True, False, True, True, False, False]
    for k in range(1, len(trials) + 1):
        subsets = list(itertools.combinations(trials, k))
        assert pass_at_k(6, 3, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
        assert pass_hat_k(6, 3, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_impossible_counts_are_refused(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs 0 <= c <= n and 1 <= k <= n"):
        pass_at_k(n, c, k)


def test_a_panel_averages_its_tasks_with_intervals_over_tasks():
    report = pass_k([[True, True, True, False], [False, False, False, False]], key=("test",))
    assert (report.tasks, report.trials) == (2, 4)
    assert report.success.point == pytest.approx((0.75 + 0.0) / 2)
    assert report.pass_at[2].point == pytest.approx((1.0 + 0.0) / 2)
    assert report.pass_hat[2].point == pytest.approx((0.5 + 0.0) / 2)
    assert report.pass_hat[4].point == 0.0 and report.pass_at[4].point == 0.5
    # two tasks resampled: the interval spans the all-of-one-task means
    assert (report.pass_at[2].low, report.pass_at[2].high) == (0.0, 1.0)
    assert report.pass_at[2].over == "tasks"
    assert json.loads(json.dumps(report.to_dict()))["pass_hat"]["2"][0] == pytest.approx(0.25)


def test_one_task_has_no_interval_and_uneven_trials_are_refused():
    report = pass_k([[True, False]])
    assert report.pass_at[1].low is None and report.pass_at[2].point == 1.0
    with pytest.raises(ValueError, match="the same number"):
        pass_k([[True, False], [True]])


@pytest.fixture(scope="module")
def lake_run(tmp_path_factory):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    out = tmp_path_factory.mktemp("passk") / "run"
    run_training(TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=6, algo="grpo",
        group_size=2, tasks_per_iteration=2, iterations=1, eval_every=1, eval_seeds=2, ppo_epochs=1,
        out_dir=str(out), tiny={"hidden_size": 16, "pretrain_steps": 0})), progress=False)
    return out


def test_evaluate_trials_reports_pass_k_of_the_trials_it_played(lake_run, tmp_path, capsys):
    from ptgpo_harness.cli import main

    one, three = tmp_path / "one.json", tmp_path / "three.json"
    base = ["evaluate", str(lake_run), "--episodes", "6", "--temperature", "1.0", "--no-progress"]
    assert main([*base, "--out", str(one)]) == 0
    assert main([*base, "--trials", "3", "--out", str(three)]) == 0
    assert "pass^k" in capsys.readouterr().out
    single, trials = json.loads(one.read_text()), json.loads(three.read_text())
    assert "trials" not in single
    won = trials["trial_success"]
    assert won[0] == [e["won"] for e in single["per_episode"]]  # trial 0 is the evaluation without --trials
    assert len(won) == 3 and all(len(w) == 6 for w in won)
    per_task = [sum(w[task] for w in won) for task in range(6)]
    figures = trials["trials"]
    assert (figures["tasks"], figures["trials"]) == (6, 3)
    assert figures["success"][0] == pytest.approx(sum(per_task) / 18)
    assert figures["pass_at"]["3"][0] == pytest.approx(sum(c > 0 for c in per_task) / 6)
    assert figures["pass_hat"]["3"][0] == pytest.approx(sum(c == 3 for c in per_task) / 6)


@pytest.mark.parametrize("flags, message", [
    (["--trials", "3", "--temperature", "0"], "--trials 3 at temperature 0 plays the same greedy episodes"),
    (["--trials", "0"], r"--trials must be in \[1, 1000\], got 0"),
])
def test_evaluate_refuses_trials_that_measure_nothing(lake_run, flags, message, capsys):
    from ptgpo_harness.cli import main

    assert main(["evaluate", str(lake_run), "--no-progress", *flags]) == 2
    assert re.search(message, capsys.readouterr().err)


def _trials(k, at, hat, tasks=4):
    return {"trials": k, "tasks": tasks, "pass_at": {str(i): at for i in range(1, k + 1)},
            "pass_hat": {str(i): hat for i in range(1, k + 1)}}


@pytest.mark.parametrize("trials", [
    {"trials": 1, "tasks": 2, "pass_at": {"1": 0.5}, "pass_hat": {"1": 0.5}},   # one trial is no repeat
    {**_trials(2, 0.5, 0.5), "pass_hat": {"1": 0.5}},                               # a k missing
    _trials(2, 1.5, 0.5),                                                           # not a fraction
    {**_trials(2, 0.5, 0.5), "extra": 1},
    _trials(2, 0.5, 0.5) | {"trials": 10**9},                                       # k beyond any evaluation
])
def test_a_record_with_malformed_trials_is_refused_naming_the_field(trials):
    from leaderboard.records import RecordError
    from tests.leaderboard_fixtures import record

    with pytest.raises(RecordError, match="trials"):
        record("grpo", "A", 0, 0.5, trials=trials)


def test_the_leaderboard_shows_pass_k_columns_only_where_records_have_them(tmp_path):
    from leaderboard.aggregate import aggregate
    from leaderboard.records import ResultRecord, read_records_with_paths, write_record
    from tests.leaderboard_fixtures import record

    for seed in range(2):
        write_record(tmp_path / f"grpo-{seed}.json", record("grpo", "B", seed, 0.5, trials=_trials(4, 0.75, 0.25)))
        write_record(tmp_path / f"ptgpo-{seed}.json", record("ptgpo", "B", seed, 0.6, trials=_trials(2, 0.8, 0.4)))
        write_record(tmp_path / f"gigpo-{seed}.json", record("gigpo", "B", seed, 0.7))  # an older record
    old = json.loads((tmp_path / "gigpo-0.json").read_text())
    del old["trials"]   # written before the field existed: still reads
    assert ResultRecord.from_dict(old).trials is None
    board = aggregate(read_records_with_paths(tmp_path)[0])
    metrics = [c.metric for c in board.columns]
    assert metrics == ["success", "pass@2", "pass^2"]  # the largest k every record with trials has
    cells = {row.method: {c.metric: cell.mean for c, cell in row.cells.items()} for row in board.rows}
    assert cells["grpo"]["pass@2"] == pytest.approx(75.0) and cells["grpo"]["pass^2"] == pytest.approx(25.0)
    assert cells["ptgpo"]["pass^2"] == pytest.approx(40.0)
    assert "pass@2" not in cells["gigpo"]
    assert {row.method: row.mean_success for row in board.rows}["grpo"] == pytest.approx(50.0)


def test_evaluate_record_adds_the_trials_to_a_result_record(lake_run, tmp_path, capsys):
    from leaderboard.records import ResultRecord, read_record, write_record
    from ptgpo_harness.cli import main

    path = tmp_path / "cell.json"
    write_record(path, ResultRecord(method="grpo", method_kind="rl", env_id="ptgpo/FrozenLake-v0", env_label="lake",
                                    seed=0, status="ok", final_success=0.5))
    base = ["evaluate", str(lake_run), "--episodes", "4", "--temperature", "1.0", "--no-progress",
            "--record", str(path)]
    assert main([*base, "--trials", "2"]) == 0
    trials = read_record(path).trials
    assert (trials["trials"], trials["tasks"], sorted(trials["pass_at"])) == (2, 4, ["1", "2"])
    assert main(base) == 2
    assert "--record adds pass@k and pass^k to a result record: give --trials 2" in capsys.readouterr().err
    write_record(path, ResultRecord(method="grpo", method_kind="rl", env_id="ptgpo/Sokoban-v0", env_label="s",
                                    seed=0, status="ok", final_success=0.5))
    assert main([*base, "--trials", "2"]) == 2
    assert "is a record of ptgpo/Sokoban-v0, not of ptgpo/FrozenLake-v0" in capsys.readouterr().err
    assert read_record(path).trials is None
