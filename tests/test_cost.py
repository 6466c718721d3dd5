"""What a run costs in every unit, budgets in them, and comparisons at matched cost (ptgpo_algos.cost,
leaderboard.matched, the hypotheses' ``cost``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from leaderboard.aggregate import build_leaderboard
from leaderboard.curves import Curve
from leaderboard.hypotheses import HypothesisError, decide, hypotheses_csv, hypotheses_markdown, load_hypotheses
from leaderboard.matched import common_cost, matched_costs, matched_csv, matched_markdown, success_at
from leaderboard.records import ResultRecord, read_records_with_paths, write_record
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.cost import Budget, standard_error
from ptgpo_algos.training.trainer import run_training

ROOT = Path(__file__).resolve().parents[1]


def _config(out_dir: Path, **change) -> TrainConfig:
    """The golden FrozenLake run's settings: a few seconds of CPU an iteration at most."""
    return TrainConfig.from_dict({
        "env_id": "ptgpo/FrozenLake-v0", "env_kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 8,
        "algo": "gigpo", "group_size": 6, "tasks_per_iteration": 4, "iterations": 40, "eval_every": 100,
        "eval_seeds": 6, "ppo_epochs": 2, "minibatch_size": 48, "learning_rate": 5e-3,
        "tiny": {"hidden_size": 32, "pretrain_steps": 0}, "seed": 3, "out_dir": str(out_dir), **change})


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))


# ------------------------------------------------------------------------------- budgets in the trainer
def test_a_trained_token_budget_stops_at_the_first_iteration_that_reaches_it(tmp_path):
    summary = run_training(_config(tmp_path / "run", **{"run.budget": {"unit": "trained_tokens", "amount": 40000}}),
                           progress=False)
    metrics = _rows(summary.metrics_path)
    cost = [row for row in _rows(tmp_path / "run" / "cost.jsonl") if row["iteration"] > 0]
    # The cost log counts what the metrics rows say each iteration trained, cumulatively.
    assert [row["trained_tokens"] for row in cost] == list(np.cumsum([row["update/train_tokens"] for row in metrics]))
    assert [row["optimizer_updates"] for row in cost] == list(np.cumsum([row["update/updates"] for row in metrics]))
    assert [row["episodes"] for row in cost] == list(np.cumsum([row["rollout/episodes"] for row in metrics]))
    assert [row["unique_tokens"] for row in cost] == list(np.cumsum([row["update/computed_tokens"] for row in metrics]))
    assert all(0 < row["unique_tokens"] < row["trained_tokens"] for row in cost[1:])  # shared prefixes once
    spent = [row["trained_tokens"] for row in cost]
    # Not before the amount, and not one iteration later than needed.
    assert spent[-1] >= 40000 > spent[-2] and summary.iterations == len(metrics) < 40
    assert summary.budget_overshoot == spent[-1] - 40000 == summary.cost["trained_tokens"] - 40000
    assert summary.cost["gpu_s"] is None and summary.cost["train_cpu_s"] > 0 and summary.cost["eval_cpu_s"] > 0


def test_a_cpu_second_budget_stops_at_the_first_iteration_at_or_after_it(tmp_path):
    summary = run_training(_config(tmp_path / "run", **{"run.budget": {"unit": "train_cpu_s", "amount": 1.5}}),
                           progress=False)
    cost = _rows(tmp_path / "run" / "cost.jsonl")
    spent = [row["train_cpu_s"] for row in cost]
    assert spent == sorted(spent) and spent[0] == 0.0
    assert spent[-1] >= 1.5 > spent[-2] and summary.iterations == cost[-1]["iteration"] < 40
    assert summary.budget_overshoot == pytest.approx(spent[-1] - 1.5)
    # Evaluation and model building count in training CPU neither.
    assert cost[-1]["eval_cpu_s"] > 0 and summary.setup_cpu_s > 0


def test_the_nearest_rule_stops_at_the_boundary_nearest_the_budget_as_the_last_iteration_foretells(tmp_path):
    budget = {"unit": "trained_tokens", "amount": 40000, "stop": "nearest"}
    summary = run_training(_config(tmp_path / "run", **{"run.budget": budget}), progress=False)
    spent = [row["trained_tokens"] for row in _rows(tmp_path / "run" / "cost.jsonl")]
    # It stops once the budget lies within half the last iteration's spend, and not a boundary before.
    assert spent[-1] + (spent[-1] - spent[-2]) / 2 >= 40000 > spent[-2] + (spent[-2] - spent[-3]) / 2
    assert summary.budget_overshoot == spent[-1] - 40000


def test_the_stop_rules_of_a_budget():
    reached, nearest = Budget("train_cpu_s", 10.0), Budget("train_cpu_s", 10.0, stop="nearest")
    assert not reached.spent(9.0, 4.0) and reached.spent(10.0) and reached.overshoot(12.5) == 2.5
    # 9 s spent, the last iteration took 4: one more would end near 13, 3 past; stopping now is 1 short.
    assert nearest.spent(9.0, 4.0) and not nearest.spent(7.0, 4.0) and nearest.overshoot(9.0) == -1.0
    with pytest.raises(ValueError, match="run.budget.stop: 'soon' is not valid"):
        Budget("train_cpu_s", 10.0, stop="soon")


def test_evaluations_at_fractions_of_the_budget_carry_their_standard_error(tmp_path):
    config = _config(tmp_path / "run", **{"run.budget": {"unit": "trained_tokens", "amount": 160000},
                                          "evaluation.every_fraction": 0.25})
    summary = run_training(config, progress=False)
    cost = _rows(tmp_path / "run" / "cost.jsonl")
    curve = _rows(summary.curve_path)
    # An evaluation at the first iteration that reaches each quarter of the budget (and at the start).
    marks = [min(4, int(row["trained_tokens"] / 40000)) for row in cost]
    due = [row["iteration"] for row, before in zip(cost[1:], marks) if int(row["trained_tokens"] / 40000) > before]
    assert [row["iteration"] for row in curve] == [0] + due and len(due) >= 3
    evaluated = [row for row in cost if "success" in row]
    assert [row["iteration"] for row in evaluated] == [row["iteration"] for row in curve]
    for row, point in zip(evaluated, curve):
        assert row["success"] == point["success"] and row["decisions"] == point["decisions"]
        assert row["eval_episodes"] == 6 and row["success_se"] == standard_error(row["success"], 6)


def test_the_cost_survives_a_resume(tmp_path):
    straight = run_training(_config(tmp_path / "straight", iterations=4), progress=False)
    run_training(_config(tmp_path / "resumed", iterations=2, checkpoint_every=1), progress=False)
    resumed = run_training(_config(tmp_path / "resumed", iterations=4, checkpoint_every=1, resume=True),
                           progress=False)
    counts = ("episodes", "trained_tokens", "optimizer_updates")
    assert {k: resumed.cost[k] for k in counts} == {k: straight.cost[k] for k in counts}
    assert resumed.cost["train_cpu_s"] > 0
    rows = _rows(tmp_path / "resumed" / "cost.jsonl")
    assert [row["iteration"] for row in rows] == [0, 1, 2, 3, 4]


def test_budget_config_is_checked_before_anything_runs(tmp_path):
    def refused(budget) -> str:
        with pytest.raises(ValueError) as error:
            TrainConfig.from_dict({"run.budget": budget})
        return str(error.value)

    assert "run.total_decisions" in refused({"unit": "decisions", "amount": 10})
    assert "missing amount" in refused({"unit": "trained_tokens"})
    assert "choose one of trained_tokens" in refused({"unit": "tokens_trained", "amount": 10})
    assert "expected a number > 0" in refused({"unit": "train_cpu_s", "amount": 0})
    assert "did you mean 'amount'" in refused({"unit": "train_cpu_s", "amount": 1, "amont": 2})
    assert TrainConfig.from_dict({"run.budget": {"unit": "trained_tokens", "amount": "2e6"}}).run.budget == \
        Budget("trained_tokens", 2e6)
    with pytest.raises(ValueError, match="every_fraction"):
        TrainConfig.from_dict({"evaluation.every_fraction": 1.5})
    with pytest.raises(ValueError, match="gpu_s needs a GPU"):
        run_training(_config(tmp_path / "run", **{"run.budget": {"unit": "gpu_s", "amount": 10}}), progress=False)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- reading at matched cost
def test_the_leaderboard_reads_the_units_the_trainer_writes():
    from leaderboard.curves import COST_UNITS as READ
    from ptgpo_algos.cost import COST_UNITS as WRITTEN, Cost

    assert list(READ) == list(WRITTEN)
    assert set(WRITTEN) - {"decisions", "tokens"} < set(Cost().state_dict())


def _curve(*points) -> Curve:
    return Curve(np.array([p[0] for p in points], dtype=float), np.array([p[1] for p in points], dtype=float))


def test_success_is_read_off_the_curve_between_the_evaluations_around_the_cost():
    curve = _curve((0, 0.0), (100, 0.2), (100, 0.4), (300, 0.8))
    assert success_at(curve, 0) == 0.0
    assert success_at(curve, 50) == pytest.approx(0.2)  # halfway to the later evaluation at 100: 0.4 / 2
    assert success_at(curve, 200) == pytest.approx(0.6)  # halfway from 0.4 to 0.8
    assert success_at(curve, 300) == 0.8
    with pytest.raises(ValueError, match="covers 0 to 300"):
        success_at(curve, 301)
    assert common_cost([curve, _curve((0, 0.0), (250, 1.0))]) == 250


def _run(folder: Path, method: str, seed: int, points: list[tuple[float, float]], unit: str = "trained_tokens",
         final: float | None = None, **record: object) -> None:
    """A record whose run folder holds a curve and the trainer's cost log with ``points`` in ``unit``."""
    run = folder / "runs" / f"{method}{seed}"
    run.mkdir(parents=True)
    (run / "curve.jsonl").write_text("".join(json.dumps({"decisions": 10 * i, "success": s}) + "\n"
                                             for i, (_, s) in enumerate(points)))
    (run / "cost.jsonl").write_text("".join(json.dumps({"iteration": i, unit: x, "success": s}) + "\n"
                                            for i, (x, s) in enumerate(points)))
    write_record(folder, ResultRecord(method=method, method_kind="rl", env_id="ptgpo/X-v0", env_label="L",
                                      seed=seed, status="ok", final_success=points[-1][1] if final is None else final,
                                      eval_episodes=10, curve_path=f"runs/{method}{seed}/curve.jsonl", **record))


def _two_methods(folder: Path) -> None:
    # a spends its tokens slowly and ends at 400 and 500; b at 1000 and 800: the common cost is 400.
    _run(folder, "a", 0, [(0, 0.0), (200, 0.4), (400, 0.6)])
    _run(folder, "a", 1, [(0, 0.0), (500, 0.5)])
    _run(folder, "b", 0, [(0, 0.0), (200, 0.1), (1000, 0.9)])
    _run(folder, "b", 1, [(0, 0.0), (800, 0.8)])


def test_the_leaderboard_reads_every_method_at_the_smallest_final_spend(tmp_path):
    _two_methods(tmp_path)
    board = build_leaderboard(tmp_path)
    found = {item.unit: item for item in matched_costs(board)}
    assert set(found) == {"decisions", "trained_tokens"}
    tokens = found["trained_tokens"]
    assert tokens.cost == 400
    a, b = sorted(tokens.methods, key=lambda m: m.method)
    # a: 0.6 at its end, 0.4 at 400 of 500; b: 0.1 + 0.8 * 200 / 800 = 0.3, and 0.4 at 400 of 800.
    assert (a.method, a.seeds, a.mean, a.final_spend) == ("a", 2, pytest.approx(0.5), 450)
    assert (b.method, b.mean, b.se, b.final_spend) == ("b", pytest.approx(0.35), pytest.approx(0.05), 900)
    assert found["decisions"].cost == 10  # every run has a point at 10 decisions on its curve rows
    text = matched_markdown(matched_costs(board))
    assert "| Method | policy decisions at 10 | trained tokens at 400 |" in text
    assert "| `b` | " in text and "35.0 ± 5.0" in text
    rows = list(csv.DictReader(io.StringIO(matched_csv(matched_costs(board)))))
    assert {(r["unit"], r["method"], r["success_mean"]) for r in rows if r["unit"] == "trained_tokens"} == {
        ("trained_tokens", "a", "0.500000"), ("trained_tokens", "b", "0.350000")}


def test_a_hypothesis_with_a_cost_is_decided_on_the_curves_at_the_common_cost(tmp_path):
    _two_methods(tmp_path)
    _run(tmp_path, "a", 2, [(0, 0.0), (400, 0.7)])
    _run(tmp_path, "b", 2, [(0, 0.0), (400, 0.2)])
    (tmp_path / "hypotheses.yaml").write_text(
        "hypotheses:\n"
        "  - {name: H1, first: a, second: b, levels: [L], cost: trained_tokens}\n"
        "  - {name: H2, first: a, second: b, levels: [L]}\n")
    preregistration = load_hypotheses(tmp_path / "hypotheses.yaml")
    records = read_records_with_paths(tmp_path)[0]
    matched, final = decide(records, preregistration)
    assert matched.held_at == (400.0,) and final.held_at == ()
    assert matched.first_mean == pytest.approx(100 * (0.6 + 0.4 + 0.7) / 3)
    assert matched.second_mean == pytest.approx(100 * (0.3 + 0.4 + 0.2) / 3)
    assert final.second_mean == pytest.approx(100 * (0.9 + 0.8 + 0.2) / 3)  # final success, as before
    table = hypotheses_markdown([matched, final], preregistration)
    assert "| H1 | `a` − `b` | L | trained tokens at 400 |" in table
    assert "| H2 | `a` − `b` | L | matched decisions (final success) |" in table
    assert hypotheses_csv([matched]).splitlines()[1].endswith(",trained_tokens,400")


def test_runs_a_guard_stopped_short_of_a_cost_budget_are_refused_or_kept_knowingly(tmp_path, capsys):
    from ptgpo_harness.cli import main

    def run(method, seed, points, overshoot):
        _run(tmp_path, method, seed, points, budget=400, budget_unit="trained_tokens", budget_overshoot=overshoot,
             trained_tokens=int(points[-1][0]), final=points[-1][1])

    run("a", 0, [(0, 0.0), (200, 0.4), (410, 0.6)], 10.0)
    run("a", 1, [(0, 0.0), (390, 0.5)], -10.0)
    run("b", 0, [(0, 0.0), (200, 0.1), (405, 0.3)], 5.0)
    run("b", 1, [(0, 0.0), (300, 0.2)], None)  # the iteration guard stopped it at 300 of 400
    (tmp_path / "hypotheses.yaml").write_text(
        "hypotheses:\n  - {name: H1, first: a, second: b, levels: [L], cost: trained_tokens}\n")
    assert main(["leaderboard", str(tmp_path), "--formats", "md,csv"]) == 2
    refusal = capsys.readouterr().err
    assert "stopped before their budget of trained_tokens" in refusal and "300 of 400 trained_tokens: L__b__seed1" in refusal
    assert "--keep-short-runs" in refusal

    assert main(["leaderboard", str(tmp_path), "--formats", "md,csv", "--keep-short-runs"]) == 0
    table = (tmp_path / "leaderboard" / "leaderboard.md").read_text()
    assert ("L: stopped before their budget (kept with --keep-short-runs): b seed 1 (300 of 400 trained_tokens)"
            in table)
    # Not every run was stopped by the budget, so the hypothesis is read on the curves where all reached: 300.
    [outcome] = decide(read_records_with_paths(tmp_path)[0], load_hypotheses(tmp_path / "hypotheses.yaml"))
    assert outcome.held_at == (300.0,) and not outcome.at_budget
    assert outcome.first_mean == pytest.approx(100 * (0.4 + 0.2 / 210 * 100 + 0.5 * 300 / 390) / 2)
    assert "| H1 | `a` − `b` | L | trained tokens at 300 |" in (tmp_path / "leaderboard" / "hypotheses.md").read_text()


def test_a_hypothesis_with_a_cost_refuses_a_run_that_did_not_record_it(tmp_path):
    _two_methods(tmp_path)
    (tmp_path / "runs" / "b1" / "cost.jsonl").unlink()
    (tmp_path / "h.yaml").write_text("hypotheses:\n  - {name: H1, first: a, second: b, levels: [L], cost: trained_tokens}\n")
    with pytest.raises(HypothesisError, match=r"b__seed1.json has no learning curve in trained_tokens \(it recorded no"):
        decide(read_records_with_paths(tmp_path)[0], load_hypotheses(tmp_path / "h.yaml"))
    (tmp_path / "h.yaml").write_text("hypotheses:\n  - {name: H1, first: a, second: b, levels: [L], cost: money}\n")
    with pytest.raises(HypothesisError, match="cost: 'money' is not a unit of cost"):
        load_hypotheses(tmp_path / "h.yaml")


@pytest.mark.parametrize("study", ["evidence-cpu", "neighbours-evidence-cpu"])
def test_the_committed_studies_still_load_and_decide_as_committed(study):
    # The neighbours' study is decided with the evidence run's records beside its own.
    folder = ROOT / "docs" / "results" / study
    records, problems = [], []
    for results in dict.fromkeys([ROOT / "docs" / "results" / "evidence-cpu", folder]):
        found, trouble = read_records_with_paths(results)
        records, problems = records + found, problems + trouble
    assert records and problems == []
    outcomes = decide(records, load_hypotheses(folder / "hypotheses.yaml"))
    committed = list(csv.DictReader((folder / "leaderboard" / "hypotheses.csv").open()))
    fresh = list(csv.DictReader(io.StringIO(hypotheses_csv(outcomes))))
    keys = ("name", "first_mean", "second_mean", "difference", "low", "high", "p", "holm_p", "decision")
    assert [{k: row[k] for k in keys} for row in fresh] == [{k: row[k] for k in keys} for row in committed]
    assert {row["cost"] for row in fresh} == {"decisions"}
