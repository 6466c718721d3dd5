"""A benchmark whose budget is a cost (training CPU seconds, trained tokens...): every RL cell stops at
it, its record keeps the spend and the overshoot, and the leaderboard holds the column to it."""

from __future__ import annotations

import json

import pytest
import yaml

from leaderboard.aggregate import build_leaderboard
from leaderboard.board import LeaderboardError
from leaderboard.records import ResultRecord, read_records, write_record
from leaderboard.render import to_markdown
from ptgpo_harness.bench import BenchConfig, BenchError, plan_cells, run_bench

HOUSEHOLD = "ptgpo/Household-v0"


def _config(**overrides):
    data = {
        "name": "cost",
        "budget": 6.5,
        "budget_unit": "train_cpu_s",
        "seeds": [0],
        "policy": {"model": "tiny", "tiny": {"pretrain_steps": 0}, "mode": "choose", "group_size": 2,
                   "tasks_per_iteration": 2, "eval_every": 1},
        "environments": [
            {"label": "easy", "id": HOUSEHOLD, "kwargs": {"difficulty": "easy"}, "max_steps": 6,
             "train_seeds": {"start": 0, "count": 1000}, "eval_seeds": {"start": 1000000, "count": 3}},
        ],
        "methods": [{"algo": "grpo"}],
        "baselines": ["random"],
    }
    data.update(overrides)
    return data


def test_a_cost_budget_becomes_every_rl_cell_s_run_budget():
    hard = {**_config()["environments"][0], "label": "hard", "kwargs": {"difficulty": "hard"}, "budget": 2}
    config = BenchConfig.from_dict(_config(environments=[_config()["environments"][0], hard]))
    cells = {(c.env.label, c.method): c for c in plan_cells(config)}
    easy = cells["easy", "grpo"]
    assert (easy.budget, easy.budget_unit) == (6.5, "train_cpu_s")
    assert easy.spec["run.budget"] == {"unit": "train_cpu_s", "amount": 6.5, "stop": "reached"}
    assert "total_decisions" not in easy.spec
    assert cells["hard", "grpo"].spec["run.budget"]["amount"] == 2.0
    nearest = BenchConfig.from_dict(_config(budget_stop="nearest"))
    assert plan_cells(nearest)[0].spec["run.budget"]["stop"] == "nearest"
    assert nearest.to_dict()["budget_stop"] == "nearest" and "budget_stop" not in config.to_dict()
    assert cells["easy", "random"].budget is None
    assert config.to_dict()["budget_unit"] == "train_cpu_s"
    # A decisions config saves what it always did, so results folders written before the unit resume.
    assert "budget_unit" not in BenchConfig.from_dict(_config(budget=10, budget_unit="decisions")).to_dict()


@pytest.mark.parametrize("overrides, message", [
    ({"budget_unit": "episodes"}, r"budget_unit: 'episodes' is not valid; choose one of decisions, trained_tokens"),
    ({"budget": 0}, r"budget: expected a number > 0"),
    ({"budget": 2.5, "budget_unit": "decisions"}, r"budget: expected an integer >= 1"),
    ({"iterations": 3}, r"iterations and budget_unit: train_cpu_s both end the RL cells; keep one of them"),
    ({"policy": {"run.budget": {"unit": "trained_tokens", "amount": 5}}}, r"policy.run.budget is set per cell"),
    ({"budget_stop": "soon"}, r"budget_stop: 'soon' is not valid; choose one of reached, nearest"),
    ({"budget_stop": "nearest", "budget_unit": "decisions", "budget": 10}, r"budget_stop: a budget of decisions"),
])
def test_a_cost_budget_that_cannot_be_met_is_refused_with_its_key(overrides, message):
    with pytest.raises(BenchError, match=message):
        BenchConfig.from_dict(_config(**overrides))


def test_a_baseline_that_trains_for_decisions_is_refused_in_a_cost_budget_bench():
    config = BenchConfig.from_dict(_config(baselines=["sb3_ppo"]))
    with pytest.raises(BenchError, match="sb3_ppo trains for a budget of decisions, and this config's budget_unit "
                                         "is train_cpu_s"):
        plan_cells(config)


# GRPO trains no token while every episode of a group fails (its advantages are all zero); PTGPO's
# coverage credit gives a signal from the first iteration, so its trained tokens grow every iteration.
@pytest.mark.parametrize("unit, budget, method", [("trained_tokens", 3000, {"algo": "ptgpo", "rollout": "tree"}),
                                                 ("train_cpu_s", 1.5, {"algo": "grpo"})])
def test_every_rl_cell_spends_its_cost_budget_and_records_the_overshoot(tmp_path, unit, budget, method):
    config = BenchConfig.from_dict(_config(budget=budget, budget_unit=unit, methods=[method]))
    report = run_bench(config, tmp_path, workers=1, progress=False)
    assert not report.failed
    records, problems = read_records(tmp_path)
    assert not problems
    [record] = [r for r in records if r.method_kind == "rl"]
    spend = getattr(record, unit)
    assert (record.budget, record.budget_unit) == (budget, unit)
    assert spend >= budget and record.budget_overshoot == pytest.approx(spend - budget)
    # Stopped at the first iteration boundary at or past the budget: every earlier one was short of it.
    cost = tmp_path / "runs" / f"easy__{method['algo']}__seed0" / "cost.jsonl"
    rows = [json.loads(line) for line in cost.read_text().splitlines()]
    assert rows[-1][unit] == pytest.approx(spend) and all(row[unit] < budget for row in rows[:-1])
    assert f"easy: {budget:g} {unit}" in (tmp_path / "leaderboard" / "leaderboard.md").read_text()


def _record(method, spend, **extra):
    extra.setdefault("budget_overshoot", spend - 20.0)
    return ResultRecord(method=method, method_kind="rl", env_id=HOUSEHOLD, env_label="easy", seed=0, status="ok",
                        final_success=0.5, budget=20.0, budget_unit="train_cpu_s", train_cpu_s=spend,
                        decisions=100 + int(spend), created_at="2026-12-06T00:00:00+00:00", **extra)


def test_the_leaderboard_holds_a_cost_column_to_its_budget_not_to_equal_decisions(tmp_path):
    write_record(tmp_path, _record("grpo", 21.5))
    write_record(tmp_path, _record("gigpo", 26.0))  # decisions 4 % apart: the matched unit is the cost
    write_record(tmp_path, _record("rloo", 19.0))  # the nearest rule stopped it short
    board = build_leaderboard(tmp_path)
    assert (board.budgets["easy"], board.budget_units["easy"]) == (20.0, "train_cpu_s")
    assert "each run stops at an iteration boundary at or near it" in to_markdown(board)
    assert "easy: 20 train_cpu_s" in to_markdown(board)
    write_record(tmp_path, _record("ptgpo", 12.0, budget_overshoot=None))  # an iteration cap stopped it
    with pytest.raises(LeaderboardError, match=r"stopped before their budget of train_cpu_s stopped them(.|\n)*"
                                               r"12.0 of 20.0 train_cpu_s: easy__ptgpo__seed0"):
        build_leaderboard(tmp_path)


def test_a_record_s_cost_budget_and_overshoot_are_validated():
    with pytest.raises(ValueError, match="field 'budget_overshoot'"):
        _record("grpo", 21.0, budget_overshoot="far")
    with pytest.raises(ValueError, match="field 'budget'.*a positive integer"):
        ResultRecord(method="grpo", method_kind="rl", env_id=HOUSEHOLD, env_label="easy", seed=0, status="ok",
                     final_success=0.5, budget=2.5, budget_unit="decisions")


@pytest.mark.parametrize("unit, interleaved", [("train_cpu_s", True), ("trained_tokens", False)])
def test_a_budget_in_seconds_runs_the_methods_seed_by_seed(tmp_path, monkeypatch, unit, interleaved):
    import ptgpo_harness.bench.grid as grid

    ran = []
    monkeypatch.setattr(grid, "run_cells", lambda todo, *args: ran.extend(cell.name for cell in todo) or [])
    config = BenchConfig.from_dict(_config(budget_unit=unit, seeds=[0, 1], methods=[{"algo": "grpo"},
                                                                                   {"algo": "gigpo"}]))
    run_bench(config, tmp_path, workers=1, progress=False, build_leaderboard=False)
    by_seed = ["easy__grpo__seed0", "easy__gigpo__seed0", "easy__grpo__seed1", "easy__gigpo__seed1"]
    by_method = ["easy__grpo__seed0", "easy__grpo__seed1", "easy__gigpo__seed0", "easy__gigpo__seed1"]
    assert ran[:4] == (by_seed if interleaved else by_method) and ran[4:] == ["easy__random__seed0",
                                                                               "easy__random__seed1"]


def test_a_hypothesis_in_the_unit_the_runs_were_stopped_in_is_decided_on_final_success(tmp_path):
    from leaderboard.hypotheses import decide, hypotheses_markdown, load_hypotheses
    from leaderboard.records import read_records_with_paths

    for seed, (ptgpo, gigpo) in enumerate([(0.9, 0.5), (0.8, 0.4), (0.85, 0.45)]):
        write_record(tmp_path, _record("ptgpo", 20.5 + seed).__class__(
            **{**_record("ptgpo", 20.5 + seed).to_dict(), "seed": seed, "final_success": ptgpo}))
        write_record(tmp_path, _record("gigpo", 19.0 + seed).__class__(
            **{**_record("gigpo", 19.0 + seed).to_dict(), "seed": seed, "final_success": gigpo}))
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({"hypotheses": [
        {"name": "H1", "first": "ptgpo", "second": "gigpo", "levels": ["easy"], "cost": "train_cpu_s"}]}))
    [outcome] = decide(read_records_with_paths(tmp_path)[0], load_hypotheses(tmp_path / "h.yaml"))
    # No curve is read (the records have none): the budget matched the CPU seconds already.
    assert outcome.at_budget and outcome.held_at == (20.0,)
    assert outcome.test.difference == pytest.approx(40.0)
    assert "final success at a budget of" in hypotheses_markdown([outcome], load_hypotheses(tmp_path / "h.yaml"))
