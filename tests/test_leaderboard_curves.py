"""Learning-curve loading never trusts a file: a record's ``curve_path`` stays inside its results
folder, and a torn or garbage line is reported by file and line while the other lines still count."""

from __future__ import annotations

import json
import os

import pytest
from leaderboard_fixtures import record

from leaderboard.aggregate import build_leaderboard
from leaderboard.curves import plot_learning_curves, read_cost_curve, read_curve
from leaderboard.records import write_record

ROWS = "".join(
    json.dumps({"decisions": d, "success": s}) + "\n" for d, s in ((0, 0.0), (50, 0.5), (100, 1.0))
)


def board_with_curve(results, curve_path):
    write_record(results, record("grpo", "B", 0, 0.5, curve_path=str(curve_path)))
    return build_leaderboard(results)


@pytest.mark.parametrize("escape", ["absolute", "dotdot", "symlink-file", "symlink-folder"])
def test_a_curve_path_leaving_the_results_folder_is_a_problem_and_not_read(tmp_path, escape):
    results, outside = tmp_path / "results", tmp_path / "elsewhere"
    results.mkdir()
    outside.mkdir()
    (outside / "curve.jsonl").write_text(ROWS)
    if escape == "absolute":
        curve_path = outside / "curve.jsonl"
    elif escape == "dotdot":
        curve_path = "../elsewhere/curve.jsonl"
    elif escape == "symlink-file":
        os.symlink(outside / "curve.jsonl", results / "curve.jsonl")
        curve_path = "curve.jsonl"
    else:
        os.symlink(outside, results / "runs")
        curve_path = "runs/curve.jsonl"
    board = board_with_curve(results, curve_path)
    assert plot_learning_curves(board, tmp_path / "out") == []  # the only curve was not read
    [problem] = board.problems
    assert problem.path == results / "B__grpo__seed0.json" and problem.kind == "curve"
    assert str(curve_path) in problem.message and "results folder" in problem.message


def test_a_curve_inside_the_folder_is_read_through_a_symlink_that_stays_inside(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "curve.jsonl").write_text(ROWS)
    os.symlink(tmp_path / "runs", tmp_path / "alias")
    board = board_with_curve(tmp_path, "alias/curve.jsonl")
    assert [p.name for p in plot_learning_curves(board, tmp_path / "out")] == ["curves-B.png"]
    assert board.problems == []


def test_torn_and_garbage_lines_name_the_file_and_line_and_the_rest_is_kept(tmp_path):
    path = tmp_path / "curve.jsonl"
    lines = [
        b'{"decisions": 0, "success": 0.0}',
        b'{"decisions": 10, "success": 0.\xe2\x82',  # torn inside a multi-byte character
        b"[" * 100_000 + b"]" * 100_000,  # nested too deeply for the parser
        b'{"decisions": ' + b"9" * 400 + b', "success": 0.5}',  # too large for a float
        b'{"decisions": ' + b"9" * 5000 + b', "success": 0.5}',  # too many digits to convert
        b'{"decisions": 20, "success": 1.5}',  # not a fraction
        b'{"decisions": -5, "success": 0.5}',  # negative count
        b"\x00\x01garbage",
        b'{"decisions": 30, "success": 0.75}',
        b'{"decisions": 40, "succ',  # torn last line
    ]
    path.write_bytes(b"\n".join(lines))
    curve, problems = read_curve(path)
    assert list(curve.x) == [0, 30] and list(curve.success) == [0.0, 0.75]
    assert [(p.path, p.line, p.kind) for p in problems] == [
        (path, n, "curve") for n in (2, 3, 4, 5, 6, 7, 8, 10)
    ]
    assert "UTF-8" in problems[0].message and "nested" in problems[1].message
    assert str(problems[0]).startswith(f"{path}:2: curve")


def test_a_curve_that_is_not_a_file_is_a_problem(tmp_path):
    (tmp_path / "folder.jsonl").mkdir()
    curve, problems = read_curve(tmp_path / "folder.jsonl")
    assert curve is None and [(p.kind, p.line) for p in problems] == [("curve", None)]
    assert "directory" in problems[0].message
    curve, problems = read_curve(tmp_path / "missing.jsonl")
    assert curve is None and "missing" in problems[0].message


def _saved_figures(monkeypatch, module):
    """Keep the figures ``module`` saves, by file name, instead of writing them."""
    figures = {}

    def keep(figure, path):
        figures[path.name] = figure
        return path

    monkeypatch.setattr(module, "save_png", keep)
    return figures


def test_curves_carry_the_random_and_expert_levels_as_reference_lines(tmp_path, monkeypatch):
    import leaderboard.curves as curves
    from leaderboard_fixtures import write_fixture

    write_fixture(tmp_path)
    figures = _saved_figures(monkeypatch, curves)
    plot_learning_curves(build_leaderboard(tmp_path), tmp_path / "out")
    axes = figures["curves-A.png"].axes[0]
    lines = {line.get_label(): (line.get_linestyle(), line.get_ydata()[0]) for line in axes.get_lines()}
    # The fixture's env A: random scored 0.1 on its one seed, expert 1.0 on both.
    assert lines["random (10.0 %)"] == (":", pytest.approx(10.0))
    assert lines["expert (100.0 %)"] == ("--", pytest.approx(100.0))
    assert {"grpo (n=3)", "ptgpo (n=2)"} <= set(lines)


def test_heat_map_digits_contrast_with_their_cells(tmp_path, monkeypatch):
    import leaderboard.plots as plots
    from leaderboard_fixtures import write_fixture

    write_fixture(tmp_path)
    figures = _saved_figures(monkeypatch, plots)
    plots.plot_improvement(build_leaderboard(tmp_path), tmp_path / "out")
    texts = figures["improvement.png"].axes[0].texts
    assert texts
    for text in texts:
        value = float(text.get_text())
        assert text.get_color() == ("white" if abs(value - 0.5) > 0.3 else "black")
    assert {text.get_color() for text in texts} == {"white", "black"} or len(texts) < 3


def test_curves_are_plotted_against_every_unit_of_cost_the_runs_recorded(tmp_path):
    # grpo's run folder holds the trainer's cost.jsonl beside its curve (an iteration without evaluation
    # has no success; a CPU run's gpu_s is null); the baseline's curve has decisions only.
    run = tmp_path / "runs" / "grpo"
    run.mkdir(parents=True)
    (run / "curve.jsonl").write_text("".join(
        json.dumps({"decisions": d, "tokens": 3 * d, "success": s, "wall_time_s": 99.0 + d})
        + "\n" for d, s in ((0, 0.0), (50, 0.5), (100, 1.0))))
    (run / "cost.jsonl").write_text("".join(json.dumps(row) + "\n" for row in (
        {"iteration": 0, "decisions": 0, "train_cpu_s": 0.0, "gpu_s": None, "success": 0.0},
        {"iteration": 1, "decisions": 20, "train_cpu_s": 4.0, "gpu_s": None},
        {"iteration": 2, "decisions": 50, "train_cpu_s": 10.0, "gpu_s": None, "success": 0.5},
        {"iteration": 3, "decisions": 100, "train_cpu_s": 21.0, "gpu_s": None, "success": 1.0})))
    (tmp_path / "sb3.jsonl").write_text(ROWS)
    write_record(tmp_path, record("grpo", "B", 0, 0.5, curve_path="runs/grpo/curve.jsonl"))
    write_record(tmp_path, record("sb3_ppo", "B", 0, 0.2, "baseline", curve_path="sb3.jsonl"))
    board = build_leaderboard(tmp_path)
    assert [p.name for p in plot_learning_curves(board, tmp_path / "out")] == [
        "curves-B.png", "curves-B-tokens.png", "curves-B-train_cpu_s.png"]
    assert board.problems == []  # a run without a unit is left out of its plot, not a problem
    curve, problems = read_cost_curve(run / "curve.jsonl", "train_cpu_s")
    assert list(curve.x) == [0.0, 10.0, 21.0] and list(curve.success) == [0.0, 0.5, 1.0] and problems == []
    assert read_cost_curve(run / "curve.jsonl", "gpu_s") == (None, [])
    assert read_cost_curve(tmp_path / "sb3.jsonl", "train_cpu_s") == (None, [])
