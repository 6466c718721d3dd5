"""Preregistered hypotheses: hand-computed Welch tests over levels, Holm's correction, refusals, the CLI."""

import math

import pytest

from leaderboard.hypotheses import (
    Hypothesis,
    HypothesisError,
    Preregistration,
    decide,
    hypotheses_csv,
    hypotheses_markdown,
    load_hypotheses,
)
from leaderboard.inference import t_two_sided_p
from leaderboard.records import ResultRecord, read_records_with_paths, write_record
from ptgpo_harness.cli import main

# Success in % by (method, level): three seeds each.
SUCCESS = {
    ("a", "one"): [60, 70, 80], ("b", "one"): [40, 50, 60],
    ("a", "two"): [20, 30, 40], ("b", "two"): [20, 30, 40],
    ("c", "one"): [61, 70, 79], ("c", "two"): [20, 30, 40],
}


def _write(folder, success=SUCCESS, status=None):
    for (method, level), values in success.items():
        for seed, value in enumerate(values):
            failed = status == (method, level, seed)
            write_record(folder, ResultRecord(
                method=method, method_kind="rl", env_id="e", env_label=level, seed=seed, budget=100, decisions=100,
                status="failed" if failed else "ok", error="boom" if failed else None,
                final_success=None if failed else value / 100))
    return read_records_with_paths(folder)[0]


def _prereg(*hypotheses, alpha=0.05):
    return Preregistration(alpha, tuple(hypotheses), "hypotheses.yaml")


def test_one_level_is_the_textbook_welch_test(tmp_path):
    records = _write(tmp_path)
    [outcome] = decide(records, _prereg(Hypothesis("H1", "a", "b", ("one",))))
    # Means 70 and 50; each s^2/n = 100/3, so se = sqrt(200/3) and df = (200/3)^2 / (2 (100/3)^2 / 2) = 4.
    assert outcome.first_mean == pytest.approx(70) and outcome.second_mean == pytest.approx(50)
    assert outcome.test.difference == pytest.approx(20)
    assert outcome.test.df == pytest.approx(4.0)
    assert outcome.test.p == pytest.approx(t_two_sided_p(20 / math.sqrt(200 / 3), 4.0))
    assert 0.05 < outcome.test.p < 0.1  # t = 2.449 lies between the 95th (2.132) and 97.5th (2.776) percentiles
    assert outcome.holm_p == outcome.test.p and outcome.decision == "not separated"
    assert outcome.seeds == ((3, 3),)


def test_over_several_levels_the_effect_is_the_difference_of_means_over_levels(tmp_path):
    records = _write(tmp_path)
    [outcome] = decide(records, _prereg(Hypothesis("H1", "a", "b", ("one", "two"))))
    # Means over levels: a (70 + 30) / 2 = 50, b (50 + 30) / 2 = 40; se = sqrt(4 * 100/3) / 2.
    assert outcome.test.difference == pytest.approx(10)
    se = math.sqrt(4 * 100 / 3) / 2
    assert outcome.test.p == pytest.approx(t_two_sided_p(10 / se, 8.0))  # four equal terms: df = 4 * 2


def test_holm_corrects_over_the_family_and_a_decision_names_its_direction(tmp_path):
    records = _write(tmp_path)
    alone = decide(records, _prereg(Hypothesis("H1", "a", "b", ("one",)), alpha=0.1))
    assert alone[0].decision == "separated"  # p = 0.07 < 0.1
    family = decide(records, _prereg(Hypothesis("H1", "a", "b", ("one",)), Hypothesis("H2", "b", "a", ("one",)),
                                     Hypothesis("H3", "a", "c", ("two",)), alpha=0.1))
    p = alone[0].test.p
    assert [o.holm_p for o in family] == pytest.approx([min(1, 3 * p), min(1, 3 * p), 1.0])
    assert [o.decision for o in family] == ["not separated"] * 3
    reversed_alone = decide(records, _prereg(Hypothesis("H2", "b", "a", ("one",)), alpha=0.1))
    text = hypotheses_markdown(alone + reversed_alone, _prereg(alpha=0.1))
    assert text.count("**separated** (`a` higher)") == 2
    # Identical data: a zero effect with p = 1, never separated.
    same = decide(records, _prereg(Hypothesis("H4", "a", "c", ("two",))))
    assert same[0].test.difference == 0 and same[0].decision == "not separated"
    rows = hypotheses_csv(family).splitlines()
    assert rows[0].startswith("name,first,second,levels") and rows[1].startswith("H1,a,b,one,70.0000,50.0000,20.0000")


def test_an_unfinished_or_failed_study_is_not_decided(tmp_path):
    records = _write(tmp_path, status=("a", "two", 1))
    with pytest.raises(HypothesisError, match=r"two__a__seed1\.json has no result \(failed: boom\); re-run"):
        decide(records, _prereg(Hypothesis("H1", "a", "b", ("one", "two"))))
    with pytest.raises(HypothesisError, match=r"H1: a on three has 0 seed\(s\) with a record"):
        decide(records, _prereg(Hypothesis("H1", "a", "b", ("three",))))


@pytest.mark.parametrize("text, message", [
    ("hypotheses: []", "non-empty 'hypotheses' list"),
    ("alpha: 2\nhypotheses: [{name: H, first: a, second: b, levels: [x]}]", "alpha must be a number in"),
    ("hypotheses: [{name: H, first: a, second: a, levels: [x]}]", "first and second are both 'a'"),
    ("hypotheses: [{name: H, first: a, second: b, levels: []}]", r"hypotheses\[0\]\.levels: expected a non-empty"),
    ("hypotheses: [{name: H, first: a, second: b, levels: [x], test: t}]", r"unknown key\(s\) \['test'\]"),
    ("hypotheses: [{name: H, first: a, second: b, levels: [x]}, {name: H, first: b, second: a, levels: [x]}]",
     "names must be unique"),
    ("hypotheses: [{name: H, first: a, second: b, levels: [x]}]\nhypotheses: []", "duplicate"),
])
def test_bad_hypotheses_files_are_refused_with_the_file_named(tmp_path, text, message):
    path = tmp_path / "h.yaml"
    path.write_text(text)
    with pytest.raises(HypothesisError, match=message) as error:
        load_hypotheses(path)
    assert str(path) in str(error.value)


def test_the_leaderboard_command_decides_the_folders_hypotheses(tmp_path, capsys):
    _write(tmp_path)
    (tmp_path / "hypotheses.yaml").write_text(
        "alpha: 0.05\nhypotheses:\n"
        "  - {name: H1, first: a, second: b, levels: [one, two], question: 'does a beat b?'}\n")
    assert main(["leaderboard", str(tmp_path), "--formats", "md,csv", "--reported", "none"]) == 0
    table = (tmp_path / "leaderboard" / "hypotheses.md").read_text()
    assert "| H1 | `a` − `b` | one, two | matched decisions (final success) | 3/3 | 50.0 vs 40.0 | +10.0 [" in table
    assert "does a beat b?" in table
    assert (tmp_path / "leaderboard" / "hypotheses.csv").read_text().count("\n") == 2
    assert "# Preregistered hypotheses" in capsys.readouterr().out

    (tmp_path / "leaderboard" / "hypotheses.md").unlink()
    assert main(["leaderboard", str(tmp_path), "--formats", "md", "--reported", "none", "--hypotheses", "none"]) == 0
    assert not (tmp_path / "leaderboard" / "hypotheses.md").exists()

    (tmp_path / "hypotheses.yaml").write_text("hypotheses: [{name: H1, first: a, second: b, levels: [nowhere]}]\n")
    (tmp_path / "leaderboard" / "leaderboard.md").unlink()
    assert main(["leaderboard", str(tmp_path), "--formats", "md", "--reported", "none"]) == 2
    assert "a on nowhere has 0 seed(s)" in capsys.readouterr().err
    assert not (tmp_path / "leaderboard" / "leaderboard.md").exists()  # refused before anything is written


# Hostile names: HTML for a Markdown page, a spreadsheet formula for a CSV, a code span's own delimiter.
HOSTILE_NAME = "=cmd|' /C calc'!A0 <script>alert(1)</script>"
HOSTILE_METHOD = "<script>alert(2)</script>`<script>alert(3)</script>"
HOSTILE_LEVEL = "-2+3 <script>alert(4)</script>"


def test_hostile_names_stay_inert_in_both_hypotheses_files(tmp_path):
    import csv
    import io
    import re

    success = {(HOSTILE_METHOD, HOSTILE_LEVEL): [60, 70, 80], ("@b", HOSTILE_LEVEL): [40, 50, 60]}
    records = _write(tmp_path, success)
    hypothesis = Hypothesis(HOSTILE_NAME, HOSTILE_METHOD, "@b", (HOSTILE_LEVEL,), question=HOSTILE_NAME)
    outcomes = decide(records, _prereg(hypothesis))

    markdown = hypotheses_markdown(outcomes, _prereg(hypothesis))
    # Outside code spans no raw tag is left; inside one, the span cannot be closed early by a backtick.
    outside_code = re.sub(r"`[^`]*`", "", markdown)
    assert "<script>" not in outside_code and markdown.count("`") % 2 == 0
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    [row] = [line for line in markdown.splitlines() if line.startswith("|") and "3/3" in line]
    assert len(re.split(r"(?<!\\)\|", row)) == 13  # the comparison's | and ` did not add a cell

    rows = list(csv.DictReader(io.StringIO(hypotheses_csv(outcomes))))
    assert [rows[0][key] for key in ("name", "first", "second", "levels")] == [
        "'" + HOSTILE_NAME, HOSTILE_METHOD, "'@b", "'" + HOSTILE_LEVEL]
    assert rows[0]["decision"] in ("separated", "not separated")


def test_a_hypotheses_file_linked_out_of_the_results_folder_is_refused(tmp_path, capsys):
    results, outside = tmp_path / "results", tmp_path / "outside"
    results.mkdir()
    outside.mkdir()
    _write(results)
    (outside / "secret.yaml").write_text("hypotheses: [{name: H1, first: a, second: b, levels: [one]}]\n")
    (results / "hypotheses.yaml").symlink_to(outside / "secret.yaml")
    assert main(["leaderboard", str(results), "--formats", "md", "--reported", "none"]) == 2
    err = capsys.readouterr().err
    assert "hypotheses.yaml" in err and "symbolic link" in err and len(err.strip().splitlines()) == 1
    assert not (results / "leaderboard" / "hypotheses.md").exists()

    # A link that stays in its folder reads as the file it names.
    (results / "hypotheses.yaml").unlink()
    (results / "prereg.yaml").write_text("hypotheses: [{name: H1, first: a, second: b, levels: [one]}]\n")
    (results / "hypotheses.yaml").symlink_to("prereg.yaml")
    assert main(["leaderboard", str(results), "--formats", "md", "--reported", "none"]) == 0
    assert (results / "leaderboard" / "hypotheses.md").is_file()


@pytest.mark.parametrize("flag", ["--hypotheses", "--reported", "a FIFO named hypotheses.yaml"])
def test_an_input_that_is_not_a_regular_file_is_a_one_line_refusal(tmp_path, capsys, flag):
    import os

    _write(tmp_path)
    if flag.startswith("--"):
        path, argv = "/dev/zero", [flag, "/dev/zero"]
    else:  # never passed over as if absent: opening it for reading would wait for a writer
        path, argv = str(tmp_path / "hypotheses.yaml"), []
        os.mkfifo(path)
    assert main(["leaderboard", str(tmp_path), "--formats", "md", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ptgpo leaderboard: {path}: not a regular file (a ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "leaderboard" / "leaderboard.md").exists()


@pytest.mark.parametrize("name", ["hypotheses.yaml", "reported.yaml"])
def test_an_input_file_beyond_the_size_limit_is_refused_unread(tmp_path, monkeypatch, name):
    from leaderboard import records
    from leaderboard.hypotheses import load_hypotheses as load
    from leaderboard.reported import ReportedFileError, load_reported

    monkeypatch.setattr(records, "MAX_INPUT_BYTES", 1000)
    path = tmp_path / name
    path.write_text("# padding\n" * 200)
    error = HypothesisError if name == "hypotheses.yaml" else ReportedFileError
    with pytest.raises(error, match="larger than 1,000 bytes"):
        (load if name == "hypotheses.yaml" else load_reported)(path)
