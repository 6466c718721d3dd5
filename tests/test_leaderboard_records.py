"""The result-record schema: validation, atomic one-file-per-cell storage, tolerant reading."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from leaderboard.records import (
    SCHEMA_VERSION,
    RecordError,
    ResultRecord,
    SchemaVersionError,
    cell_name,
    read_records,
    record_exists,
    write_record,
)


def make(**overrides) -> ResultRecord:
    fields = dict(
        method="grpo",
        method_kind="rl",
        env_id="ptgpo/Household-v0",
        env_label="Household-easy",
        env_kwargs={"difficulty": "easy"},
        seed=3,
        budget=2000,
        status="ok",
        decisions=1990,
        tokens=51234,
        final_success=0.625,
        best_success=0.75,
        eval_episodes=16,
        success_by_type={"Pick": 1.0, "Look": 0.5},
        wall_time_s=12.5,
        curve_path="curves/x.jsonl",
        config={"estimator": "grpo", "lr": 1e-5},
        created_at="2026-11-29T09:00:00+00:00",
    )
    fields.update(overrides)
    return ResultRecord(**fields)


def test_round_trip_through_dict_and_file(tmp_path):
    record = make()
    data = record.to_dict()
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert list(data)[0] == "schema_version"
    assert ResultRecord.from_dict(json.loads(json.dumps(data))) == record

    path = write_record(tmp_path, record)
    assert path == tmp_path / "Household-easy__grpo__seed3.json"
    assert record_exists(tmp_path, cell_name("Household-easy", "grpo", 3))
    assert not record_exists(tmp_path, cell_name("Household-easy", "grpo", 4))
    records, problems = read_records(tmp_path)
    assert records == [record] and problems == []


def test_cell_name_is_file_safe_and_distinguishes_cells():
    assert cell_name("Household (hard)/v0", "sb3 ppo", 0) == "Household-hard-v0__sb3-ppo__seed0"
    names = {
        cell_name(env, method, seed) for env in ("A", "B") for method in ("grpo", "ptgpo") for seed in (0, 1)
    }
    assert len(names) == 8
    with pytest.raises(TypeError):
        cell_name("A", "grpo", "0")


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"seed": "3"}, "seed"),
        ({"seed": True}, "seed"),
        ({"method_kind": "measured"}, "method_kind"),
        ({"status": "done"}, "status"),
        ({"final_success": 62.5}, "final_success"),
        ({"success_by_type": {"Pick": 2.0}}, "success_by_type"),
        ({"decisions": -1}, "decisions"),
        ({"budget": 0}, "budget"),
        ({"env_kwargs": None}, "env_kwargs"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"method": ""}, "method"),
        ({"final_return": float("nan")}, "final_return"),
        ({"score": float("inf")}, "score"),
        ({"eval_overlap": 1.5}, "eval_overlap"),
        ({"eval_invalid_rate": -0.1}, "eval_invalid_rate"),
        ({"eval_layouts": -1}, "eval_layouts"),
        ({"episodes": -2}, "episodes"),
        ({"trained_tokens": 1.5}, "trained_tokens"),
        ({"cpu_time_s": -1.0}, "cpu_time_s"),
        ({"provenance": "abc123"}, "provenance"),
    ],
)
def test_invalid_fields_are_named(overrides, field):
    data = make().to_dict() | overrides
    with pytest.raises(RecordError, match=repr(field)):
        ResultRecord.from_dict(data)


def test_failed_record_must_say_why_and_unknown_or_missing_fields_are_refused():
    with pytest.raises(RecordError, match="error"):
        make(status="failed", error=None)
    assert make(status="failed", error="OOM").status == "failed"
    with pytest.raises(RecordError, match="succes"):
        ResultRecord.from_dict(make().to_dict() | {"succes": 1.0})
    data = make().to_dict()
    del data["env_label"]
    with pytest.raises(RecordError, match="env_label"):
        ResultRecord.from_dict(data)
    with pytest.raises(SchemaVersionError):
        ResultRecord.from_dict(make().to_dict() | {"schema_version": 2})


def test_a_record_changed_after_construction_is_validated_before_writing(tmp_path):
    record = make()
    record.final_success = 1.5
    with pytest.raises(RecordError, match="final_success"):
        write_record(tmp_path, record)
    assert list(tmp_path.iterdir()) == []


def test_write_is_atomic_and_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = write_record(tmp_path, make(final_success=0.25))
    before = path.read_bytes()

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_record(tmp_path, make(final_success=0.75))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left behind

    write_record(tmp_path, make(final_success=0.75))
    assert read_records(tmp_path)[0][0].final_success == 0.75


def test_unreadable_files_are_reported_by_name_and_line_and_the_rest_is_read(tmp_path):
    write_record(tmp_path, make(seed=0))
    write_record(tmp_path, make(seed=1))
    text = json.dumps(make(seed=2).to_dict(), indent=2)
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    (tmp_path / "invalid.json").write_text(json.dumps(make().to_dict() | {"tokens": "many"}))
    (tmp_path / "future.json").write_text(json.dumps(make().to_dict() | {"schema_version": 2}))
    (tmp_path / "notes.txt").write_text("not a record")
    (tmp_path / "curves").mkdir()
    (tmp_path / "curves" / "x.json").write_text("{}")  # subdirectories are not scanned

    records, problems = read_records(tmp_path)
    assert sorted(r.seed for r in records) == [0, 1]
    by_name = {p.path.name: p for p in problems}
    assert set(by_name) == {"truncated.json", "invalid.json", "future.json"}
    truncated = by_name["truncated.json"]
    assert truncated.kind == "corrupt"
    assert truncated.line == text[: len(text) // 2].count("\n") + 1
    assert str(truncated).startswith(f"{tmp_path / 'truncated.json'}:{truncated.line}: corrupt")
    assert by_name["invalid.json"].kind == "invalid" and "'tokens'" in by_name["invalid.json"].message
    assert by_name["future.json"].kind == "schema_version"


def test_hostile_files_are_listed_as_problems_naming_the_file_never_a_traceback(tmp_path):
    write_record(tmp_path, make(seed=0))
    (tmp_path / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "folder.json").mkdir()
    good = make(seed=1).to_dict()
    text = json.dumps(good)
    (tmp_path / "long-int.json").write_text(text.replace('"tokens": 51234', '"tokens": ' + "9" * 5000))
    (tmp_path / "huge-int.json").write_text(
        text.replace('"wall_time_s": 12.5', '"wall_time_s": ' + "9" * 400)
    )
    (tmp_path / "not-utf8.json").write_bytes(
        text.encode("utf-8")[:40] + b"\xff\xfe" + text.encode("utf-8")[40:]
    )

    records, problems = read_records(tmp_path)
    assert [r.seed for r in records] == [0]
    by_name = {p.path.name: p for p in problems}
    assert set(by_name) == {"nested.json", "folder.json", "long-int.json", "huge-int.json", "not-utf8.json"}
    assert by_name["nested.json"].kind == "corrupt" and "nested" in by_name["nested.json"].message
    assert by_name["folder.json"].kind == "unreadable" and "directory" in by_name["folder.json"].message
    assert by_name["long-int.json"].kind == "corrupt"
    # A number too large for a float is still a number: the schema decides, by field name.
    assert by_name["huge-int.json"].kind == "invalid" and "'wall_time_s'" in by_name["huge-int.json"].message
    assert by_name["not-utf8.json"].kind == "corrupt"
    assert all(str(p).startswith(str(tmp_path)) for p in problems)


def test_an_ok_record_without_final_success_is_a_problem_and_not_counted(tmp_path):
    write_record(tmp_path, make(seed=0))
    (tmp_path / "no-result.json").write_text(json.dumps(make(seed=1).to_dict() | {"final_success": None}))
    records, problems = read_records(tmp_path)
    assert [r.seed for r in records] == [0]
    assert [(p.path.name, p.kind) for p in problems] == [("no-result.json", "invalid")]
    assert "'final_success'" in problems[0].message and "status 'ok'" in problems[0].message
    with pytest.raises(RecordError, match="final_success"):
        make(final_success=None)
    assert make(status="failed", error="OOM", final_success=None).final_success is None


def test_records_written_before_provenance_and_held_out_fields_still_read(tmp_path):
    # The default benchmark's committed records carry them; one without them (as written before) reads, with None.
    results = Path(__file__).resolve().parents[1] / "docs" / "results" / "babyai-cpu"
    records, problems = read_records(results)
    assert len(records) == 60 and problems == []
    assert all(r.provenance and r.provenance["commit"] for r in records)
    assert all(r.eval_overlap == 0 for r in records if r.env_label == "doorkey" and r.method != "sb3_ppo")
    old = json.loads((results / "doorkey__ptgpo__seed0.json").read_text())
    for key in ("episodes", "trained_tokens", "cpu_time_s", "eval_layouts", "eval_overlap", "provenance"):
        old.pop(key)
    (tmp_path / "doorkey__ptgpo__seed0.json").write_text(json.dumps(old))
    (before,), problems = read_records(tmp_path)
    assert problems == [] and before.provenance is None and before.eval_overlap is None and before.cpu_time_s is None
    assert all(r.eval_invalid_rate is None for r in records)  # written before the field existed
    record = make(episodes=40, trained_tokens=9000, cpu_time_s=12.5, eval_layouts=7, eval_overlap=0.25,
                  provenance={"commit": "abc", "dirty": False})
    assert ResultRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
