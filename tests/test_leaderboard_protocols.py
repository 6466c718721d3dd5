"""Protocols on the leaderboard: a measured cell in a column that holds a reported number of another
protocol is marked in every format, with a legend line; records say what they were measured under;
budgets in iterations stand apart from budgets in decisions."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from leaderboard.aggregate import build_leaderboard
from leaderboard.board import LeaderboardError
from leaderboard.protocols import measured_protocol
from leaderboard.records import ResultRecord, read_records, write_record
from leaderboard.render import to_csv, to_html, to_latex, to_markdown
from leaderboard.reported import load_reported

VERL = {"recipe": "verl-agent", "observation_style": "original", "reward_impl": "spacy",
        "reward_model": "en_core_web_sm-3.8.0"}
PROTOCOLS = {
    "gigpo": VERL,                                   # the reported numbers' protocol
    "grpo": {**VERL, "recipe": None},                # PTGPO's own prompt
    "ptgpo": {**VERL, "reward_impl": "stand-in", "reward_model": None},
    "rloo": None,                                    # written before protocols were recorded
}


def _record(method, seed, success, **extra) -> ResultRecord:
    extra.setdefault("protocol", PROTOCOLS.get(method))
    extra.setdefault("budget", 150)
    extra.setdefault("budget_unit", "iterations")
    extra.setdefault("iterations", extra["budget"] if extra["budget_unit"] == "iterations" else None)
    extra.setdefault("decisions", 1000 + 37 * seed)
    return ResultRecord(method=method, method_kind="rl", env_id="ptgpo/WebShop-v0", env_label="webshop", seed=seed,
                        status="ok", final_success=success, score=100 * success + 10,
                        created_at="2026-11-29T09:00:00+00:00", **extra)


@pytest.fixture
def board(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for method in PROTOCOLS:
        for seed in (0, 1):
            write_record(results, _record(method, seed, 0.4 + 0.1 * seed))
    reported = tmp_path / "reported.yaml"
    reported.write_text(yaml.safe_dump({
        "sources": {"paper": {"citation": "A paper", "protocol": "verl-agent"}},
        "rows": [{"method": "GiGPO", "model": "Qwen2.5-1.5B-Instruct", "source": "paper",
                  "results": {"WebShop": {"success": 65.0}}}],
    }))
    return build_leaderboard(results, load_reported(reported))


def _cells(board):
    return {(row.method, column.metric): cell for row in board.rows for column, cell in row.cells.items()}


def test_cells_under_another_protocol_than_a_reported_number_of_their_column_are_marked(board):
    cells = _cells(board)
    # Same protocol (WebShop's column spelled either way), or no reported number in the column: no mark.
    assert not cells["gigpo", "success"].protocol_mark and not cells["grpo", "score"].protocol_mark
    assert all(cells[method, "success"].protocol_mark for method in ("grpo", "ptgpo", "rloo"))
    [note] = board.protocol_notes
    assert note.startswith("‡ webshop: measured under PTGPO's own (grpo); not recorded (rloo); verl-agent, "
                           "stand-in reward (ptgpo); reported in the same columns under verl-agent (paper).")
    assert board.reported_rows[0].protocols[""] == "verl-agent"


def test_the_mark_and_the_legend_are_in_every_format(board):
    markdown = to_markdown(board)
    rows = {line.split(" | ")[1]: line for line in markdown.splitlines() if line.startswith("| ")}
    assert "‡" not in rows["gigpo"] and rows["grpo"].count("‡") == 1
    assert board.protocol_notes[0] in markdown and "| Protocol |" in markdown and "| verl-agent |" in markdown
    table = list(csv.DictReader(io.StringIO(to_csv(board))))
    marks = {(r["method"], r["metric"]): r["protocol_mark"] for r in table if r["env_label"] == "webshop"}
    assert (marks["gigpo", "success"], marks["grpo", "success"], marks["grpo", "score"]) == ("0", "1", "0")
    protocols = {r["method"]: r["protocol"] for r in table if r["metric"] == "success"}
    assert protocols == {"gigpo": "verl-agent", "grpo": "PTGPO's own", "ptgpo": "verl-agent, stand-in reward",
                         "rloo": "not recorded", "GiGPO": "verl-agent"}
    latex = to_latex(board)
    tex_rows = {line.split(" & ")[1]: line for line in latex.splitlines() if line.count(" & ") > 5}
    assert r"\ddag{}" not in tex_rows["gigpo"] and r"\ddag{}" in tex_rows["grpo"]
    assert "% ‡ webshop: measured under" in latex
    page = to_html(board)
    assert page.count('<span class="mark"') == 3 and f'<p class="note protocol">{board.protocol_notes[0]}' in \
        page.replace("&#x27;", "'")


def test_an_unstated_protocol_marks_every_cell_of_its_column(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    write_record(results, _record("gigpo", 0, 0.5))
    reported = tmp_path / "reported.yaml"
    reported.write_text(yaml.safe_dump({
        "sources": {"paper": {"citation": "A paper"}},
        "rows": [{"method": "X", "source": "paper", "results": {"webshop": {"success": 60.0}}}],
    }))
    board = build_leaderboard(results, load_reported(reported))
    assert _cells(board)["gigpo", "success"].protocol_mark
    assert "reported in the same columns under not stated (paper)" in board.protocol_notes[0]
    assert not build_leaderboard(results).protocol_notes  # no reported numbers, nothing to compare with


def test_protocol_descriptions():
    assert measured_protocol(VERL) == "verl-agent"
    assert measured_protocol({"recipe": None}) == "PTGPO's own"
    assert measured_protocol({"recipe": "verl-agent", "observation_style": "annotated"}) == \
        "verl-agent, annotated pages"
    assert measured_protocol(None) == "not recorded"


# ----------------------------------------------------------------------------- records and budgets
def test_records_written_before_protocols_and_budget_units_still_read(tmp_path):
    old = _record("grpo", 0, 0.5, budget=3000, budget_unit="decisions").to_dict()
    for field in ("protocol", "budget_unit", "iterations"):
        del old[field]
    (tmp_path / "old.json").write_text(json.dumps(old))
    [record], problems = read_records(tmp_path)
    assert problems == [] and (record.protocol, record.budget_unit, record.iterations) == (None, "decisions", None)


@pytest.mark.parametrize(
    "change, field",
    [({"budget_unit": "episodes"}, "budget_unit"), ({"protocol": {"prompt": "x"}}, "protocol"),
     ({"protocol": {"recipe": 3}}, "protocol"), ({"iterations": -1}, "iterations")],
)
def test_bad_protocol_and_budget_fields_are_named(change, field):
    with pytest.raises(ValueError, match=f"field '{field}'"):
        _record("grpo", 0, 0.5, **change)


def test_iteration_budgets_match_iterations_not_decisions(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    # Decisions spent differ by far more than 2 %: an iteration budget matches the iterations.
    write_record(results, _record("grpo", 0, 0.5, decisions=1000))
    write_record(results, _record("gigpo", 0, 0.6, decisions=2000))
    board = build_leaderboard(results)
    assert (board.budgets["webshop"], board.budget_units["webshop"]) == (150, "iterations")
    assert "Budget per RL run (policy decisions, or training iterations of every method alike): webshop: 150 " \
           "iterations." in to_markdown(board)
    write_record(results, _record("ptgpo", 0, 0.6, iterations=90))
    stopped = r"did not train their budget's iterations(.|\n)*  90 of 150 iterations: webshop__ptgpo__seed0"
    with pytest.raises(LeaderboardError, match=stopped):
        build_leaderboard(results)
    write_record(results, _record("ptgpo", 0, 0.6, budget=150, budget_unit="decisions"))
    with pytest.raises(LeaderboardError, match="budget 150 decisions: webshop__ptgpo__seed0.json"):
        build_leaderboard(results)
