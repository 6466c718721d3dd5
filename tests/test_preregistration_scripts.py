"""The preregistered run's two scripts: the pilot's budget rule, and the independent recomputation of the
hypotheses (checked against the leaderboard on the committed evidence run)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml
from scipy import stats

from leaderboard.records import ResultRecord, write_record
from test_scripts import ROOT, _script

EVIDENCE = ROOT / "docs" / "results" / "evidence-cpu"


def test_the_independent_route_agrees_with_the_leaderboard_on_the_evidence_run(capsys):
    recompute = _script("recompute_hypotheses")
    assert recompute.main([str(EVIDENCE), "--compare"]) == 0
    printed = capsys.readouterr().out
    assert "| H1 | +32.9 [+20.2, +45.6] |" in printed and "the leaderboard agrees" in printed


def test_the_independent_route_catches_a_leaderboard_that_disagrees(tmp_path, capsys):
    folder = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, folder, ignore=shutil.ignore_patterns("runs", "*.png", "*.html"))
    table = folder / "leaderboard" / "hypotheses.csv"
    table.write_text(table.read_text().replace("0.447958,0.447958", "0.447958,0.0447958"))
    assert _script("recompute_hypotheses").main([str(folder), "--compare"]) == 1
    assert "H2 holm_p: leaderboard 0.0447958, recomputed 0.447958" in capsys.readouterr().err


def test_the_independent_route_decides_a_hypotheses_file_it_is_given(tmp_path, capsys):
    folder = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, folder, ignore=shutil.ignore_patterns("runs", "*.png", "*.html"))
    spec = yaml.safe_load((folder / "hypotheses.yaml").read_text())
    first = dict(spec["hypotheses"][0], name="H1-one", levels=spec["hypotheses"][0]["levels"][:1])
    other = tmp_path / "one-level.yaml"
    other.write_text(yaml.safe_dump({"alpha": 0.05, "hypotheses": [first]}))
    recompute = _script("recompute_hypotheses")
    assert recompute.main([str(folder), "--hypotheses", str(other)]) == 0
    level = first["levels"][0]
    success = {m: [json.loads(p.read_text())["final_success"] * 100 for p in sorted(folder.glob(f"{level}__{m}__*.json"))]
               for m in (first["first"], first["second"])}
    p = stats.ttest_ind(success[first["first"]], success[first["second"]], equal_var=False).pvalue
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| H1-one |"))
    assert f"| {p:.4f} | {p:.4f} |" in row  # one hypothesis: its Holm p is its p
    with pytest.raises(SystemExit):
        recompute.main([str(folder), "--hypotheses", str(tmp_path / "missing.yaml")])
    assert "missing.yaml: no such file" in capsys.readouterr().err


def test_welch_over_one_level_is_scipy_s_welch_and_holm_steps_down():
    recompute = _script("recompute_hypotheses")
    a, b = [80.0, 90.0, 70.0, 85.0], [50.0, 65.0, 40.0]
    result = recompute.welch_over_levels([a], [b])
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert result["difference"] == pytest.approx(np.mean(a) - np.mean(b))
    assert result["p"] == pytest.approx(reference.pvalue)
    # Two levels: the difference of the means over levels, half of each level's.
    two = recompute.welch_over_levels([a, a], [b, [x + 10 for x in b]])
    assert two["difference"] == pytest.approx(np.mean(a) - np.mean(b) - 5.0)
    assert recompute.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def _pilot_run(folder, method, seed, points):
    run = folder / "runs" / f"lvl__{method}__seed{seed}"
    run.mkdir(parents=True)
    (run / "curve.jsonl").write_text("".join(json.dumps({"decisions": 10 * i, "success": s}) + "\n"
                                             for i, (_, s) in enumerate(points)))
    (run / "cost.jsonl").write_text("".join(json.dumps({"iteration": i, "decisions": 10 * i, "train_cpu_s": c,
                                                        "success": s}) + "\n" for i, (c, s) in enumerate(points)))
    write_record(folder, ResultRecord(method=method, method_kind="rl", env_id="ptgpo/BabyAI-v0", env_label="lvl",
                                      seed=seed, status="ok", final_success=points[-1][1], budget=20.0,
                                      budget_unit="train_cpu_s", budget_overshoot=points[-1][0] - 20.0,
                                      train_cpu_s=points[-1][0], curve_path=f"runs/lvl__{method}__seed{seed}/curve.jsonl"))


def test_the_pilot_budget_is_where_the_median_run_first_reaches_the_threshold(tmp_path, capsys):
    pilot = _script("pilot_budgets")
    # At 5, 10, 15, 20 s: run a is 0.2, 0.4, 0.6, 0.8; b is 0.15, 0.3, then its final 0.7 (it stopped at
    # 12 s); c is 0.05, 0.1, 0.15, 0.2. The medians: 15, 30, 60 and 70 %.
    _pilot_run(tmp_path, "a", 0, [(0.0, 0.0), (20.0, 0.8)])
    _pilot_run(tmp_path, "b", 0, [(0.0, 0.0), (10.0, 0.3), (12.0, 0.7)])
    _pilot_run(tmp_path, "c", 0, [(0.0, 0.0), (21.0, 0.21)])
    assert pilot.main([str(tmp_path), "--step", "5"]) == 0
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith("| ") and "%" in line] == [
        "| 5 | 15.0 % |", "| 10 | 30.0 % |", "| 15 | 60.0 % |", "| 20 | 70.0 % |"]
    assert "**Budget: 15 train_cpu_s** (the median reaches 50 % first at 15)" in printed
    assert pilot.main([str(tmp_path), "--step", "5", "--threshold", "0.95"]) == 0
    assert "never reaches 95 %: the pilot budget, 20" in capsys.readouterr().out


def _token_run(folder, method, seed, points, overshoot):
    run = folder / "runs" / f"lvl__{method}__seed{seed}"
    run.mkdir(parents=True)
    (run / "curve.jsonl").write_text("".join(json.dumps({"decisions": 10 * i, "success": s}) + "\n"
                                             for i, (_, s) in enumerate(points)))
    (run / "cost.jsonl").write_text("".join(json.dumps({"iteration": i, "decisions": 10 * i, "trained_tokens": t,
                                                        "success": s}) + "\n" for i, (t, s) in enumerate(points)))
    write_record(folder, ResultRecord(method=method, method_kind="rl", env_id="ptgpo/BabyAI-v0", env_label="lvl",
                                      seed=seed, status="ok", final_success=points[-1][1], budget=400,
                                      budget_unit="trained_tokens", budget_overshoot=overshoot,
                                      trained_tokens=int(points[-1][0]), decisions=10 * (len(points) - 1),
                                      curve_path=f"runs/lvl__{method}__seed{seed}/curve.jsonl"))


def test_a_family_with_a_hypothesis_read_on_the_curves_is_checked_where_it_can_be(tmp_path, capsys):
    from ptgpo_harness.cli import main

    for seed, (a, b, c) in enumerate([(0.8, 0.3, 0.5), (0.7, 0.4, 0.6), (0.9, 0.2, 0.4)]):
        _token_run(tmp_path, "a", seed, [(0, 0.0), (200, a / 2), (410, a)], 10.0)
        _token_run(tmp_path, "b", seed, [(0, 0.0), (200, b / 2), (395, b)], -5.0)
        # c's last seed was stopped by a guard at 300 tokens: H2 is read on the curves.
        _token_run(tmp_path, "c", seed, [(0, 0.0), (200, c / 2), (300 if seed == 2 else 402, c)],
                   None if seed == 2 else 2.0)
    (tmp_path / "hypotheses.yaml").write_text(yaml.safe_dump({"alpha": 0.05, "hypotheses": [
        {"name": "H1", "first": "a", "second": "b", "levels": ["lvl"], "cost": "trained_tokens"},
        {"name": "H2", "first": "a", "second": "c", "levels": ["lvl"], "cost": "trained_tokens"}]}))
    recompute = _script("recompute_hypotheses")
    with pytest.raises(SystemExit, match="H2: not every run was stopped by a budget in trained_tokens"):
        recompute.main([str(tmp_path)])
    assert main(["leaderboard", str(tmp_path), "--formats", "md,csv", "--keep-short-runs"]) == 0
    capsys.readouterr()
    assert recompute.main([str(tmp_path), "--compare"]) == 0
    printed = capsys.readouterr().out
    assert "| H2 | read on the curves (the leaderboard's p) |" in printed and "the leaderboard agrees" in printed
    p1 = stats.ttest_ind([80.0, 70.0, 90.0], [30.0, 40.0, 20.0], equal_var=False).pvalue
    assert f"| {p1:.4f} |" in next(line for line in printed.splitlines() if line.startswith("| H1 |"))
