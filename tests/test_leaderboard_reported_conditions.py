"""Reported rows' conditions and source quality: parsed and checked, part of each row's protocol
description (so rows that differ in them are never one protocol), and the 2026 rows with theirs;
records say which ALFWorld version and WebShop set they were measured on."""

from __future__ import annotations

import pytest
import yaml

from leaderboard.aggregate import build_leaderboard
from leaderboard.protocols import measured_protocol, reported_protocol
from leaderboard.records import ResultRecord, write_record
from leaderboard.reported import DEFAULT_REPORTED, QUALITIES, ReportedFileError, load_reported


def _write(tmp_path, sources, rows):
    path = tmp_path / "reported.yaml"
    path.write_text(yaml.safe_dump({"sources": sources, "rows": rows}))
    return path


def _row(**extra):
    return {"method": "GiGPO", "model": "Qwen2.5-1.5B-Instruct", "source": "paper",
            "results": {"ALFWorld": {"All": 86.7}}, **extra}


def test_a_rows_conditions_update_its_sources_in_a_fixed_order(tmp_path):
    sources = {"paper": {"citation": "A paper", "protocol": "verl-agent", "quality": "paper",
                         "conditions": {"selection": "final", "split": "valid_seen", "episodes": 128}}}
    loaded = load_reported(_write(tmp_path, sources, [_row(), _row(conditions={"selection": "best"})]))
    final, best = loaded.rows
    assert final.conditions == {"split": "valid_seen", "episodes": "128", "selection": "final"}
    assert best.conditions == {"split": "valid_seen", "episodes": "128", "selection": "best"}
    assert loaded.sources["paper"].quality == "paper"
    assert reported_protocol(final.protocol, final.conditions) == \
        "verl-agent; split valid_seen; episodes 128; selection final"
    assert reported_protocol(final.protocol, final.conditions) != reported_protocol(best.protocol, best.conditions)
    assert reported_protocol(None, {}) == "not stated" and reported_protocol("verl-agent") == "verl-agent"


@pytest.mark.parametrize("source, message", [
    ({"citation": "A", "conditions": {"seed": 1}}, r"conditions must map some of split, episodes"),
    ({"citation": "A", "conditions": ["split"]}, r"conditions must map"),
    ({"citation": "A", "quality": "blog"}, r"quality must be one of paper, official code, secondary"),
])
def test_bad_conditions_and_quality_are_named(tmp_path, source, message):
    with pytest.raises(ReportedFileError, match=message):
        load_reported(_write(tmp_path, {"paper": source}, [_row()]))


def test_measured_cells_under_other_conditions_are_marked(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for seed in (0, 1):
        write_record(results, ResultRecord(
            method="gigpo", method_kind="rl", env_id="ptgpo/ALFWorld-v0", env_label="alfworld", seed=seed,
            status="ok", final_success=0.5, protocol={"recipe": "verl-agent", "alfworld_version": "0.4.2"},
            created_at="2026-12-01T09:00:00+00:00"))
    sources = {"paper": {"citation": "A paper", "protocol": "verl-agent", "conditions": {"split": "valid_seen"}}}
    row = _row(results={"ALFWorld": {"success": 86.7}})  # the measured table's column
    board = build_leaderboard(results, load_reported(_write(tmp_path, sources, [row])))
    assert board.reported_rows[0].protocols[""] == "verl-agent; split valid_seen"
    assert any(cell.protocol_mark for row in board.rows for cell in row.cells.values())


def test_records_name_the_alfworld_version_and_the_webshop_set():
    assert measured_protocol({"recipe": "verl-agent", "alfworld_version": "0.4.2"}) == "verl-agent, ALFWorld 0.4.2"
    assert measured_protocol({"recipe": None, "webshop_set": "1000 products (original files), test goals"}) == \
        "PTGPO's own, WebShop 1000 products (original files), test goals"


def test_the_shipped_file_has_the_2026_rows_with_quality_and_conditions():
    loaded = load_reported(DEFAULT_REPORTED)
    assert all(source.quality in QUALITIES for source in loaded.sources.values())
    figures = {(row.method, row.model): row.results for row in loaded.rows}
    assert figures["GraphGPO", "Qwen2.5-1.5B-Instruct"]["ALFWorld"]["All"].value == 92.71
    assert figures["GraphGPO", "Qwen2.5-1.5B-Instruct"]["WebShop"]["success"].value == 78.65
    assert figures["EMPG (on DAPO)", "not stated"]["ALFWorld"]["All"].value == 88.1
    assert figures["HiPER", "Qwen2.5-7B-Instruct"]["WebShop"]["success"].value == 83.3
    trca = [row for row in loaded.rows if row.method == "TRCA"]
    assert trca and all(row.conditions["max_steps"] == "ALFWorld 25" for row in trca)
    gigpo = next(row for row in loaded.rows if row.source == "gigpo")
    assert gigpo.conditions["alfworld"] == "0.4.2" and gigpo.conditions["split"] == "valid_seen"
