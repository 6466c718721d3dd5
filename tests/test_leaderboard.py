"""The leaderboard: hand-checked aggregation, refusals, reported rows, every output format, the CLI.

Fixture (success in %, computed by hand below):

env "A" (task types Pick, Look; budget 100)        env "B" (plain success; budget 100)
  grpo   All 50,70,60  -> 60 ± 10/sqrt(3)            grpo   30,30,60 -> 40 ± sqrt(300)/sqrt(3) = 10
         Pick 40,60,50 -> 50 ± 5.7735                ptgpo  20,40    -> 30 ± 10
         Look 60,80,70 -> 70 ± 5.7735                random 5        -> 5 (n=1, no ±)
  ptgpo  All 80,60 -> 70 ± sqrt(200)/sqrt(2) = 10    zero-shot 90    -> 90 (n=1)
         Pick 90,70 -> 80 ± 10; Look 70,50 -> 60 ± 10  expert 100    -> 100
  random All 10, Pick 20, Look 0 (n=1)               gigpo: failed (listed, not averaged)
  expert All 100,100 -> 100 ± 0 (reference row)

Intervals (95 % percentile bootstrap over seeds). With two or three seeds every value of the seeds
is drawn alone with probability 1/4 or 1/27, above the 2.5 % tail, so a cell's interval is the range
of its seeds: grpo A·All [50, 70], B [30, 60]; ptgpo A·Pick [70, 90], A·All [60, 80]. One seed: none.

Mean success (mean over envs of the overall column): grpo (60+40)/2 = 50, ptgpo (70+30)/2 = 50,
random (10+5)/2 = 7.5 (one seed: no interval), zero-shot 90 but on 1 of 2 envs. IQM over the
seed x task scores (tasks A·Pick, A·Look, B): grpo's nine sorted 30 30 40 50 60 60 60 70 80 lose two
at each end -> 54; ptgpo's six 20 40 50 70 70 90 lose one -> 57.5; random's three 20 0 5 -> 8.33.

Ranks: grpo 1, ptgpo 1 (their mean-success intervals overlap); random and zero-shot have a single seed,
so no test can place them: they are not ranked, listed after, random first (more envs); expert is a
reference row (unranked, never best). Best (a cell whose
interval lies above every other ranked cell's): only A·Pick ptgpo 80 [70, 90] (grpo [40, 60],
random 20). A·Look grpo 70 [60, 80] and A·All ptgpo [60, 80] overlap the runner-up; B's highest,
zero-shot 90, has no interval; grpo and ptgpo tie on mean success: no bold there.

P(grpo > ptgpo) per task: Pick 0/6, Look 4.5/6, B 4/6 -> (0 + 0.75 + 0.667) / 3 = 0.472.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from leaderboard_fixtures import measured_on, record, write_fixture

from leaderboard.aggregate import build_leaderboard
from leaderboard.board import Column, LeaderboardError, mean_se
from leaderboard.curves import Curve, mean_curve
from leaderboard.records import write_record
from leaderboard.render import (
    comparisons_csv,
    comparisons_markdown,
    improvement_csv,
    improvement_markdown,
    to_csv,
    to_html,
    to_latex,
    to_markdown,
    write_outputs,
)
from leaderboard.reported import (
    DEFAULT_REPORTED,
    ReportedResults,
    ReportedRow,
    ReportedSource,
    ReportedValue,
    load_reported,
)
from leaderboard.inference import t_quantile
from leaderboard.stats import Estimate

SE3 = 10 / math.sqrt(3)  # SE of (a-10, a, a+10)
T2 = 4.302653  # Student's t, 97.5 % quantile, 2 degrees of freedom


@pytest.fixture
def results(tmp_path) -> Path:
    write_fixture(tmp_path)
    return tmp_path


def cells(board, method):
    row = next(r for r in board.rows if r.method == method)
    return row, {(c.env_label, c.metric): cell for c, cell in row.cells.items()}


def test_mean_se_by_hand():
    assert mean_se([50.0, 70.0, 60.0]) == pytest.approx((60.0, SE3))
    assert mean_se([30.0, 30.0, 60.0]) == pytest.approx((40.0, 10.0))
    assert mean_se([42.0]) == (42.0, None)


def test_aggregation_numbers_ranks_and_best_marks(results):
    board = build_leaderboard(results)
    assert board.columns == [
        Column("A", "Pick"),
        Column("A", "Look"),
        Column("A", "All"),
        Column("B", "success"),
    ]
    # random and zero-shot have a single seed: no test can place them, so they are not ranked.
    assert [(r.method, r.rank, r.unranked, r.section) for r in board.rows] == [
        ("grpo", 1, None, "measured"),
        ("ptgpo", 1, None, "measured"),
        ("random", None, "a single seed", "measured"),
        ("zero-shot", None, "a single seed", "measured"),
        ("expert", None, None, "reference"),
    ]
    best = lambda c: [c[k].best for k in [("A", "Pick"), ("A", "Look"), ("A", "All"), ("B", "success")]]

    row, c = cells(board, "grpo")
    assert (c["A", "All"].mean, c["A", "All"].se, c["A", "All"].n) == pytest.approx((60, SE3, 3))
    assert (c["A", "All"].low, c["A", "All"].high) == pytest.approx((60 - T2 * SE3, 60 + T2 * SE3))
    assert c["A", "All"].over == "t"
    assert (c["A", "Pick"].mean, c["A", "Pick"].se) == pytest.approx((50, SE3))
    assert (c["B", "success"].mean, c["B", "success"].se) == pytest.approx((40, 10))
    # 40 - 43.0 is clipped to 0: a success rate cannot be negative.
    assert (c["B", "success"].low, c["B", "success"].high) == pytest.approx((0, 40 + T2 * 10))
    assert row.mean_success == pytest.approx(50) and row.envs_covered == 2 and not row.best_mean_success
    ms = row.mean_success_estimate
    # Squared SEs 100/3 (A) and 100 (B); Welch-Satterthwaite df = (400/3)^2 / ((100/3)^2/2 + 100^2/2).
    half = t_quantile(0.975, (400 / 3) ** 2 / ((100 / 3) ** 2 / 2 + 100**2 / 2)) * math.sqrt(400 / 3) / 2
    assert ms.over == "t" and (ms.point, ms.low, ms.high) == pytest.approx((50, 50 - half, 50 + half))
    assert row.iqm.point == pytest.approx(54) and row.iqm.over == "seeds"
    assert best(c) == [False, False, False, False]

    row, c = cells(board, "ptgpo")
    assert (c["A", "All"].mean, c["A", "All"].se, c["A", "All"].n) == pytest.approx((70, 10, 2))
    assert (c["A", "Pick"].low, c["A", "Pick"].high) == pytest.approx((0, 100))  # n = 2: t = 12.7
    assert (c["A", "Look"].mean, c["A", "Look"].se) == pytest.approx((60, 10))
    assert (c["B", "success"].mean, c["B", "success"].se) == pytest.approx((30, 10))
    assert row.mean_success == pytest.approx(50) and not row.best_mean_success
    assert row.iqm.point == pytest.approx(57.5)
    # Pick 80 against grpo's 50: Welch's p is about 0.08 with two and three seeds, so nothing is bold.
    assert best(c) == [False, False, False, False]

    row, c = cells(board, "random")
    assert (c["A", "Look"].mean, c["A", "Look"].se, c["A", "Look"].n) == (0.0, None, 1)
    assert c["A", "Look"].low is None and c["A", "Look"].over is None
    assert row.mean_success == pytest.approx(7.5) and not row.mean_success_estimate.has_interval
    # One seed but three tasks: the IQM's interval resamples the tasks.
    assert row.iqm.point == pytest.approx(25 / 3) and row.iqm.over == "tasks"

    row, c = cells(board, "zero-shot")
    assert row.envs_covered == 1 and row.mean_success == pytest.approx(90) and not row.best_mean_success
    assert not c["B", "success"].best and ("A", "All") not in c

    row, c = cells(board, "expert")
    assert c["A", "All"].mean == 100 and c["A", "All"].se == 0 and not any(cell.best for cell in c.values())

    assert [(p.name, r.method) for p, r in board.failed] == [("B__gigpo__seed0.json", "gigpo")]
    assert "gigpo" not in {r.method for r in board.rows}
    assert board.budgets == {"A": 100, "B": 100}
    assert board.problems == []


def test_probability_of_improvement_between_every_pair_of_ranked_methods(results):
    board = build_leaderboard(results)
    pairs = {(i.better, i.worse): i for i in board.improvements}
    ranked = ["grpo", "ptgpo", "random", "zero-shot"]
    assert set(pairs) == {(x, y) for x in ranked for y in ranked if x != y}  # expert is not ranked
    forward, backward = pairs["grpo", "ptgpo"], pairs["ptgpo", "grpo"]
    assert forward.estimate.point == pytest.approx((0 + 0.75 + 4 / 6) / 3) and forward.tasks == 3
    assert backward.estimate.point == pytest.approx(1 - forward.estimate.point)
    assert backward.estimate.low == pytest.approx(1 - forward.estimate.high)
    # Both beat random on every task, seed against seed; zero-shot shares one task (B) with each.
    assert pairs["grpo", "random"].estimate.point == 1.0 and pairs["grpo", "random"].estimate.over == "tasks"
    assert pairs["zero-shot", "grpo"].tasks == 1 and not pairs["zero-shot", "grpo"].estimate.has_interval

    markdown = improvement_markdown(board)
    assert "| X \\ Y | grpo | ptgpo | random | zero-shot |" in markdown
    assert "| grpo | – | 0.47 [" in markdown and "1.00 [1.00, 1.00]†" in markdown
    rows = list(csv.DictReader(io.StringIO(improvement_csv(board))))
    assert len(rows) == 12
    row = next(r for r in rows if (r["method_x"], r["method_y"]) == ("grpo", "ptgpo"))
    assert float(row["probability"]) == pytest.approx(0.472222, abs=1e-6) and row["ci_over"] == "seeds"
    assert float(row["ci_low"]) <= float(row["probability"]) <= float(row["ci_high"])


def test_a_dominating_method_improves_on_the_others_with_probability_one(tmp_path):
    for seed in range(4):
        for method, success in (("strong", 0.8 + 0.01 * seed), ("weak", 0.1 + 0.01 * seed)):
            write_record(tmp_path, record(method, "B", seed, success))
    board = build_leaderboard(tmp_path)
    [strong_over_weak, weak_over_strong] = board.improvements
    assert (strong_over_weak.better, strong_over_weak.estimate) == (
        "strong",
        Estimate(1.0, 1.0, 1.0, "seeds"),
    )
    assert weak_over_strong.estimate.point == 0.0
    strong = board.rows[0]
    assert (strong.method, strong.rank, board.rows[1].rank) == ("strong", 1, 2)
    assert strong.cells[Column("B", "success")].best and strong.best_mean_success
    [comparison] = [c for c in board.comparisons if c.column is None]
    assert (comparison.better, comparison.worse, comparison.separated) == ("strong", "weak", True)
    assert comparison.difference == pytest.approx(70.0) and comparison.p_holm == comparison.p < 1e-6
    markdown = comparisons_markdown(board)
    assert "## mean success" in markdown and "## B · success" in markdown
    assert re.search(r"\| strong \| weak \| 70\.0 \[6\d\.\d, 7\d\.\d\] \| [0-9.e-]+ \| [0-9.e-]+ \| yes \|", markdown)
    rows = list(csv.DictReader(io.StringIO(comparisons_csv(board))))
    assert [(r["scope"], r["better"], r["separated"]) for r in rows] == [("mean success", "strong", "1"),
                                                                        ("B · success", "strong", "1")]
    assert "| 1 | strong | rl | **81.5 [" in to_markdown(board)


def test_ties_are_never_bold_and_methods_not_separated_share_a_rank(tmp_path):
    # a and b: the same seeds, a tie; c: below both, not separated from them; d: below all, separated
    # from a and b after Holm's correction over the six pairs (0.022) but not from c (0.052).
    values = {"a": [0.5, 0.6, 0.7], "b": [0.5, 0.6, 0.7], "c": [0.3, 0.4, 0.5], "d": [0.0, 0.05, 0.1]}
    for method, seeds in values.items():
        for seed, success in enumerate(seeds):
            write_record(tmp_path, record(method, "B", seed, success))
    board = build_leaderboard(tmp_path)
    assert [(row.method, row.rank) for row in board.rows] == [("a", 1), ("b", 1), ("c", 1), ("d", 3)]
    assert not any(cell.best for row in board.rows for cell in row.cells.values())
    assert not any(row.best_mean_success for row in board.rows)
    holm_p = {(c.better, c.worse): c.p_holm for c in board.comparisons if c.column is None}
    assert holm_p["a", "d"] == pytest.approx(0.02196, abs=1e-4) and holm_p["c", "d"] == pytest.approx(0.0518, abs=1e-3)
    markdown = to_markdown(board)
    assert "**" not in markdown.split("| Rank |")[1].split("\n\n")[0]
    assert "share a rank" in markdown and "never bold" in markdown


def test_spent_decisions_more_than_two_percent_apart_are_refused_naming_the_files(results):
    for path in results.glob("*.json"):
        data = json.loads(path.read_text())
        if data["method_kind"] == "rl" and data["status"] == "ok":
            path.write_text(json.dumps(data | {"decisions": 1000}))
    data = json.loads((results / "B__ptgpo__seed1.json").read_text())
    (results / "B__ptgpo__seed1.json").write_text(json.dumps(data | {"decisions": 1020}))  # 2 %: kept
    assert build_leaderboard(results).rows
    (results / "B__ptgpo__seed1.json").write_text(json.dumps(data | {"decisions": 1021}))
    with pytest.raises(LeaderboardError, match="spent different numbers of policy decisions") as error:
        build_leaderboard(results)
    message = str(error.value)
    assert "1021 decisions: B__ptgpo__seed1.json" in message and "1000 to 1021" in message
    assert "B__grpo__seed0.json" in message and "'A'" not in message  # only the column at fault
    assert build_leaderboard(results, decisions_tolerance=0.05).rows  # accepted knowingly


def test_corrupt_and_truncated_files_are_reported_and_the_rest_aggregated(results):
    good = (results / "A__grpo__seed0.json").read_text()
    (results / "A__grpo__seed9.json").write_text(good[: len(good) // 3])
    (results / "B__ptgpo__seed9.json").write_text(
        '{\n  "schema_version": 1,\n  "method": "ptgpo",\n  "seed": 9}'
    )
    board = build_leaderboard(results)
    problems = {p.path.name: p for p in board.problems}
    assert set(problems) == {"A__grpo__seed9.json", "B__ptgpo__seed9.json"}
    assert problems["A__grpo__seed9.json"].kind == "corrupt" and problems["A__grpo__seed9.json"].line >= 1
    assert problems["B__ptgpo__seed9.json"].kind == "invalid"
    _, c = cells(board, "grpo")
    assert (c["A", "All"].mean, c["A", "All"].n) == pytest.approx((60, 3))  # unchanged by the bad files
    assert "A__grpo__seed9.json:" in to_markdown(board)


def test_mismatched_budget_is_refused_naming_the_files(results):
    write_record(results, record("hgpo", "B", 0, 0.5, budget=200))
    with pytest.raises(LeaderboardError, match="different budgets") as error:
        build_leaderboard(results)
    assert "B__hgpo__seed0.json" in str(error.value) and "budget 200" in str(error.value)
    assert "budget 100" in str(error.value)


def test_other_schema_version_is_refused_naming_the_file(results):
    data = json.loads((results / "B__grpo__seed0.json").read_text())
    (results / "B__grpo__seed7.json").write_text(json.dumps(data | {"schema_version": 2, "seed": 7}))
    with pytest.raises(LeaderboardError, match="schema version") as error:
        build_leaderboard(results)
    assert "B__grpo__seed7.json" in str(error.value)


def test_duplicate_cells_and_conflicting_env_labels_are_refused(results):
    data = json.loads((results / "B__grpo__seed0.json").read_text())
    (results / "copy.json").write_text(json.dumps(data))
    with pytest.raises(LeaderboardError, match="seed 0") as error:
        build_leaderboard(results)
    assert "copy.json" in str(error.value) and "B__grpo__seed0.json" in str(error.value)
    (results / "copy.json").write_text(json.dumps(data | {"seed": 5, "env_kwargs": {"size": 9}}))
    with pytest.raises(LeaderboardError, match="different environments"):
        build_leaderboard(results)


def test_reported_rows_stay_separate(results):
    # A reported GRPO far above every measured row, plus a results-dir record of kind "reported".
    paper = ReportedResults(
        rows=[
            ReportedRow("GRPO", "Qwen2.5-7B-Instruct", "paper", {"B": {"success": ReportedValue(99.0, 1.5)}})
        ],
        sources={"paper": ReportedSource("paper", "Someone et al., Table 1")},
        caveat="check the PDF",
    )
    # Same (env, method, seed) as a measured cell, so it needs its own file name.
    write_record(
        results / "reported-grpo.json", record("grpo", "B", 0, 0.95, "reported", source="Someone et al.")
    )
    board = build_leaderboard(results, paper)
    _, c = cells(board, "grpo")
    assert (c["B", "success"].mean, c["B", "success"].n) == pytest.approx(
        (40, 3)
    )  # not averaged with 95 or 99
    assert not c["B", "success"].best
    assert all(r.section != "reported" for r in board.rows)
    assert [(r.method, r.source, r.rank) for r in board.reported_rows] == [
        ("grpo", "Someone et al.", None),
        ("GRPO", "paper", None),
    ]
    paper_cell = board.reported_rows[1].cells[Column("B", "success")]
    assert (paper_cell.mean, paper_cell.se, paper_cell.n, paper_cell.best) == (99.0, 1.5, None, False)
    markdown = to_markdown(board)
    measured, reported = markdown.split("## Reported in papers")
    assert "99" not in measured and "99 ± 1.5" in reported and "check the PDF" in reported


def test_shipped_reported_yaml_matches_the_spec():
    """Every number in shared/specs/reported-results.md is in reported.yaml's gigpo and hgpo sources,
    and nothing else is (the other sources: test_leaderboard_seed_methods.py)."""
    spec = Path(__file__).resolve().parents[1] / ".." / "shared" / "specs" / "reported-results.md"
    if not spec.is_file():
        pytest.skip(f"{spec} not available")
    expected = {}
    section = None
    for line in spec.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            # Later sections (the 2026 numbers) are not reported.yaml's gigpo and hgpo sources.
            section = "gigpo" if "GiGPO paper" in line else "hgpo" if "HGPO paper" in line else None
        if section is None or not line.startswith("| ") or line.startswith("| model"):
            continue
        cols = [c.strip() for c in line.strip("|").split("|")]
        if section == "gigpo":
            model, method, values = cols[0], cols[1], cols[2:]
            names = [("ALFWorld", m) for m in ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2", "All")]
        else:
            model, k, method, values = cols[0], cols[1], cols[2], cols[3:]
            method = method if k == "–" else f"{method} (K={k})"
            names = [("ALFWorld", "in"), ("ALFWorld", "out")]
        names += [("WebShop", "score"), ("WebShop", "success")]
        for (env, metric), text in zip(names, values, strict=True):
            if text:
                value, _, pm = text.partition("±")
                key = (section, f"Qwen2.5-{model}-Instruct", method, env, metric)
                expected[key] = (float(value), float(pm) if pm else None)
    loaded = load_reported(DEFAULT_REPORTED)
    actual = {
        (row.source, row.model, row.method, env, metric): (v.value, v.pm)
        for row in loaded.rows
        if row.source in ("gigpo", "hgpo")
        for env, metrics in row.results.items()
        for metric, v in metrics.items()
    }
    assert len(expected) == 106  # GiGPO table 70 filled cells, HGPO table 36
    assert actual == expected
    assert "secondary copies" in loaded.caveat
    assert (
        "2505.10978" in loaded.sources["gigpo"].citation and "2602.22817" in loaded.sources["hgpo"].citation
    )


def test_csv_parses_and_carries_the_numbers(results):
    board = build_leaderboard(results)
    rows = list(csv.DictReader(io.StringIO(to_csv(board))))
    by_key = {(r["method"], r["env_label"], r["metric"]): r for r in rows}
    assert float(by_key["grpo", "A", "All"]["mean"]) == pytest.approx(60)
    assert float(by_key["grpo", "A", "All"]["se"]) == pytest.approx(SE3, rel=1e-5)
    assert by_key["grpo", "A", "All"]["n"] == "3" and by_key["grpo", "A", "All"]["budget"] == "100"
    interval = [float(by_key["grpo", "A", "All"][k]) for k in ("ci_low", "ci_high")]
    assert interval == pytest.approx([60 - T2 * SE3, 60 + T2 * SE3], rel=1e-5)
    assert by_key["grpo", "A", "All"]["ci_over"] == "t"
    single = by_key["random", "B", "success"]
    assert (
        single["se"] == single["budget"] == single["ci_low"] == single["ci_high"] == single["ci_over"] == ""
    )
    assert float(by_key["grpo", "", "iqm"]["mean"]) == pytest.approx(54)
    assert (
        by_key["random", "", "iqm"]["ci_over"] == "tasks"
        and by_key["random", "", "mean_success"]["ci_low"] == ""
    )
    # No cell of the fixture is separated from every other after correction (see the aggregation test).
    assert not [r for r in rows if r["best"] == "1"]
    assert (
        by_key["expert", "A", "All"]["section"] == "reference" and by_key["expert", "A", "All"]["rank"] == ""
    )


def _tex_width(line: str) -> int:
    spans = sum(int(n) - 1 for n in re.findall(r"\\multicolumn\{(\d+)\}", line))
    return len(re.split(r"(?<!\\)&", line)) + spans


def _mark_pick_best(board):
    """Mark ptgpo's A·Pick best, as a separating test would, to see how each format shows it."""
    row = next(r for r in board.rows if r.method == "ptgpo")
    row.cells[Column("A", "Pick")].best = True
    return board


def test_latex_is_booktabs_with_consistent_columns_and_escaping(results):
    write_record(results, record("sb3_ppo & co%", "B", 0, 0.1, "baseline"))
    measured_on(results, ("alfworld", "ptgpo/ALFWorld-v0"))
    board = _mark_pick_best(build_leaderboard(results, load_reported(DEFAULT_REPORTED)))
    tex = to_latex(board)
    # Measured, compute, the mean-success comparisons, reported.
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 4
    for block in re.findall(r"\\begin\{tabular\}\{(\w+)\}(.*?)\\end\{tabular\}", tex, re.S):
        spec, body = block
        lines = [line for line in body.strip().splitlines()]
        assert lines[0] == r"\toprule" and lines[-1] == r"\bottomrule" and r"\midrule" in lines
        rows = [line for line in lines if line.endswith(r"\\")]
        assert len(rows) >= 3 and {_tex_width(line) for line in rows} == {len(spec)}
    assert r"sb3\_ppo \& co\%" in tex
    assert r"\textbf{80.0} [0.0, 100.0] {\scriptsize(2)}" in tex  # ptgpo, A·Pick: best
    assert r"60.0 [35.2, 84.8] {\scriptsize(3)}" in tex  # grpo, A·All
    assert r"grpo & ptgpo & 0.0 [" in tex  # a comparison: the same mean success
    assert r"8.3 [0.0, 20.0]\dag{}" in tex  # random's IQM, resampled over tasks
    assert "90.16" in tex  # reported numbers keep the paper's precision


class _Tables(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.links = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"rows": 0, "class": attrs.get("class"), "widths": []})
        elif tag == "tr":
            self.tables[-1]["rows"] += 1
            self.tables[-1]["widths"].append(0)
        elif tag in ("td", "th"):
            self.tables[-1]["widths"][-1] += 1
        elif tag in ("link", "img") or (tag == "script" and "src" in attrs):
            self.links.append((tag, attrs.get("src") or attrs.get("href")))


def test_html_is_standalone_with_sortable_tables(results):
    measured_on(results, ("alfworld", "ptgpo/ALFWorld-v0"))
    papers = load_reported(DEFAULT_REPORTED)
    board = _mark_pick_best(build_leaderboard(results, papers))
    page = to_html(board)
    parser = _Tables()
    parser.feed(page)
    measured, compute, *comparisons, improvement, reported, failed = parser.tables
    # Method, then decisions, episodes, trained tokens and CPU s of each of the three environments
    # (the expert's alfworld record included).
    assert compute["rows"] == 1 + 5 and set(compute["widths"]) == {1 + 3 * 4}
    # Mean success and each of the four columns; 6 pairs of the 4 ranked methods in mean success.
    assert len(comparisons) == 5 and comparisons[0]["rows"] == 1 + 6 and set(comparisons[0]["widths"]) == {6}
    assert measured["rows"] == 1 + 5 and set(measured["widths"]) == {5 + 4 + 1}  # + the expert's alfworld
    assert improvement["rows"] == 1 + 4 and set(improvement["widths"]) == {1 + 4}
    # The papers' numbers on the environment measured only: method, model, source, protocol; ALFWorld's
    # types + All, in, out; no WebShop, AppWorld, ... column.
    on_alfworld = [row for row in papers.rows if "ALFWorld" in row.results]
    assert 0 < len(on_alfworld) < len(papers.rows)
    assert reported["rows"] == 1 + len(on_alfworld) and set(reported["widths"]) == {4 + 7 + 2}
    assert failed["rows"] == 1 + 1
    assert {t["class"] for t in parser.tables} == {"sortable"}
    assert parser.links == [] and "<script>" in page and "http" not in page
    assert '<td data-value="80"><span class="best">80.0</span><span class="ci"> [0.0, 100.0]</span>' in page
    assert "share a rank" in page and "P(X &gt; Y)" in page

    # Plots are named by file, in the page's own folder: the folder stays self-contained.
    parser = _Tables()
    parser.feed(to_html(board, ["curves-A.png", "intervals.png"]))
    assert parser.links == [("img", "curves-A.png"), ("img", "intervals.png")]


def test_markdown_shows_intervals_seed_counts_and_only_separated_bests(results):
    markdown = to_markdown(_mark_pick_best(build_leaderboard(results)))
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert table[0].startswith(
        "| Rank | Method | Kind | Mean success | IQM | A · Pick | A · Look | A · All | B |"
    )
    assert re.match(
        r"\| 1 \| grpo \| rl \| 50\.0 \[32\.3, 67\.7\] \| 54\.0 \[\d\d\.\d, \d\d\.\d\] \| "
        r"50\.0 \[25\.2, 74\.8\] \(n=3\) \| 70\.0 \[45\.2, 94\.8\] \(n=3\) \| 60\.0 \[35\.2, 84\.8\] \(n=3\) \| "
        r"40\.0 \[0\.0, 83\.0\] \(n=3\) \|$",
        table[1],
    ), table[1]
    assert "| **80.0 [0.0, 100.0]** (n=2) |" in table[2]
    assert "| – | random | baseline | 7.5 (not ranked: a single seed) | 8.3 [0.0, 20.0]† | 20.0 (n=1) |" in markdown
    assert ("| – | zero-shot | baseline | 90.0 (1/2 envs; not ranked: a single seed) | 90.0 | – | – | – | 90.0 (n=1) |"
            in markdown)
    assert "| ref | expert |" in markdown
    assert "CUDA out of memory \\| at step 3" in markdown.split("## Failed runs")[1]
    legend = markdown.split("## How to read the table")[1]
    for rule in (
        "95 % confidence interval",
        "single seed has no interval",
        "marked †, of the tasks",
        "Student t over seeds",
        "Holm-corrected",
        "share a rank",
        "separate it from every other",
        "never bold",
    ):
        assert rule in legend, rule


def test_mean_curve_interpolates_onto_the_shared_range():
    first = Curve(x=[0.0, 10.0], success=[0.0, 1.0])
    second = Curve(x=[5.0, 15.0], success=[0.0, 1.0])
    curve = mean_curve([first, second], points=6)
    assert list(curve.x) == [5, 6, 7, 8, 9, 10]
    # At 5: 0.5 and 0.0; at 10: 1.0 and 0.5. SE of two values = |a - b| / 2.
    assert curve.mean[0] == pytest.approx(0.25) and curve.mean[-1] == pytest.approx(0.75)
    assert curve.se[0] == pytest.approx(0.25) and curve.se[-1] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="share no range"):
        mean_curve([first, Curve(x=[20.0, 30.0], success=[0.0, 1.0])])


def test_all_formats_are_written_and_png_curves_are_valid(results):
    import matplotlib.image

    (results / "curves" / "ptgpo-1.jsonl").write_text(
        '{"decisions": 5, "success": 0.0}\n{"decisions": 55, "succ'
    )
    board = build_leaderboard(results)
    out = results / "board"
    written = write_outputs(board, out)
    assert sorted(p.name for p in written) == [
        "comparisons.csv",
        "comparisons.md",
        "curves-A.png",
        "improvement.csv",
        "improvement.md",
        "improvement.png",
        "intervals.png",
        "leaderboard.csv",
        "leaderboard.html",
        "leaderboard.md",
        "leaderboard.tex",
        "profiles.png",
    ]
    for name in ("curves-A.png", "intervals.png", "improvement.png", "profiles.png"):
        png = out / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert f'<img src="{name}"' in (out / "leaderboard.html").read_text()
    assert [(p.path.name, p.line, p.kind) for p in board.problems] == [("ptgpo-1.jsonl", 2, "curve")]
    assert "ptgpo-1.jsonl:2: curve" in (out / "leaderboard.md").read_text()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_seeds_whose_curves_share_no_range_are_named_by_their_records(results):
    # Every run folder's curve file has the same name, so the problem names the records instead.
    (results / "curves" / "grpo-2.jsonl").write_text('{"decisions": 500, "success": 0.1}\n')
    board = build_leaderboard(results)
    write_outputs(board, results / "board", formats=("png",))
    [problem] = board.problems
    records = sorted(p.name for p in results.glob("*.json") if "grpo" in p.name and p.name.startswith("A"))
    assert problem.path.name == records[0] and problem.kind == "curve"
    assert f"grpo on A, with {records[1]}, {records[2]}: the curves share no range" in problem.message


def test_cli_writes_requested_formats_and_refuses_mixed_budgets(results, capsys):
    from ptgpo_harness.cli import main

    out = results / "out"
    assert (
        main(["leaderboard", str(results), "--out", str(out), "--formats", "md,csv", "--reported", "none"])
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "comparisons.csv",
        "comparisons.md",
        "improvement.csv",
        "improvement.md",
        "leaderboard.csv",
        "leaderboard.md",
        "matched-cost.csv",
        "matched-cost.md",
    ]
    assert capsys.readouterr().out == (out / "leaderboard.md").read_text()

    write_record(results, record("hgpo", "A", 0, 0.5, budget=300))
    assert main(["leaderboard", str(results), "--out", str(out), "--reported", "none"]) == 2
    assert "A__hgpo__seed0.json" in capsys.readouterr().err
    assert main(["leaderboard", str(results / "missing")]) == 2


def test_a_smoke_run_says_so_in_every_format(results, tmp_path_factory):
    from leaderboard.board import SMOKE_MARKER, SMOKE_NOTICE

    out = tmp_path_factory.mktemp("board")
    write_outputs(build_leaderboard(results), out, ["md", "csv", "tex", "html"])
    assert not any(SMOKE_NOTICE.split(":")[0] in path.read_text() for path in out.iterdir())
    (results / SMOKE_MARKER).write_text(SMOKE_NOTICE)
    board = build_leaderboard(results)
    write_outputs(board, out, ["md", "csv", "tex", "html"])
    for name in ("leaderboard.md", "improvement.md"):
        assert f"> **{SMOKE_NOTICE}**" in (out / name).read_text()
    assert SMOKE_NOTICE.upper() in (out / "leaderboard.tex").read_text()
    assert f'<p class="smoke"><strong>{html.escape(SMOKE_NOTICE)}' in (out / "leaderboard.html").read_text()
    for name in ("leaderboard.csv", "improvement.csv"):
        rows = list(csv.DictReader((out / name).open()))
        assert rows and all(row["smoke_run"] == "1" for row in rows)


def test_the_papers_numbers_join_only_for_the_environments_measured(results):
    papers = load_reported(DEFAULT_REPORTED)
    assert build_leaderboard(results, papers).reported_rows == []  # Household and Sokoban: no paper's
    assert "Reported in papers" not in to_markdown(build_leaderboard(results, papers))
    measured_on(results, ("webshop-small", "ptgpo/WebShop-v0"))  # a label of one's own, the id's name
    board = build_leaderboard(results, papers)
    assert {column.env_label for column in board.reported_columns} == {"WebShop"}
    assert {row.source for row in board.reported_rows} == set(board.sources)
    assert len(board.reported_rows) == sum("WebShop" in row.results for row in papers.rows)


def test_several_results_folders_make_one_leaderboard(results, tmp_path_factory, capsys):
    from ptgpo_harness.cli import main

    more = tmp_path_factory.mktemp("more")
    for seed, success in ((0, 0.4), (1, 0.6)):
        write_record(more, record("rloo", "A", seed, success))
    out = tmp_path_factory.mktemp("board")
    assert main(["leaderboard", str(more), str(results)]) == 2  # where the tables go must be said
    assert "--out" in capsys.readouterr().err
    assert main(["leaderboard", str(results), str(more), "--out", str(out), "--formats", "csv",
                 "--reported", "none"]) == 0
    rows = {row["method"]: row for row in csv.DictReader((out / "leaderboard.csv").open())}
    assert set(rows) >= {"rloo", "grpo", "ptgpo"}  # one board, both folders
    write_record(more, record("grpo", "A", 0, 0.1))  # a cell the first folder holds too
    assert main(["leaderboard", str(results), str(more), "--out", str(out), "--reported", "none"]) == 2
    err = capsys.readouterr().err
    assert "A__grpo__seed0.json" in err and "both grpo on A, seed 0" in err


def test_cli_refuses_unmatched_spent_decisions_unless_told_a_larger_tolerance(results, capsys):
    from ptgpo_harness.cli import main

    write_record(results, record("hgpo", "B", 0, 0.5, decisions=37))  # the others spent 0
    args = ["leaderboard", str(results), "--formats", "md", "--reported", "none"]
    assert main(args) == 2
    assert "37 decisions: B__hgpo__seed0.json" in capsys.readouterr().err
    assert main(args + ["--decisions-tolerance", "nan"]) == 2
    assert main(args + ["--decisions-tolerance", "inf"]) == 0


def test_an_environment_of_one_task_type_gets_one_success_column(tmp_path):
    # A BabyAI level reports its level as the task type: a type column would repeat the overall one.
    for seed, success in enumerate([0.25, 0.75]):
        write_record(tmp_path, record("grpo", "A", seed, success, success_by_type={"DoorKey-5x5": success}))
    board = build_leaderboard(tmp_path)
    assert board.columns == [Column("A", "success")]
    assert board.rows[0].values[Column("A", "success")] == [25.0, 75.0]  # shown in %


def test_the_audit_marks_overlap_counts_compute_and_flags_mixed_commits(tmp_path):
    for seed in range(2):
        write_record(tmp_path, record("grpo", "B", seed, 0.5 + 0.1 * seed, eval_overlap=0.0, decisions=100,
                                      eval_invalid_rate=0.1 + 0.2 * seed,
                                      episodes=10 + 2 * seed, trained_tokens=1000, cpu_time_s=20.0 + seed,
                                      provenance={"commit": "a" * 40, "dirty": False}))
        write_record(tmp_path, record("ptgpo", "B", seed, 0.6 + 0.1 * seed, eval_overlap=0.5 + 0.2 * seed,
                                      decisions=100, provenance={"commit": "b" * 40, "dirty": seed == 1}))
    board = build_leaderboard(tmp_path)
    grpo, ptgpo = (cells(board, method)[1]["B", "success"] for method in ("grpo", "ptgpo"))
    assert (grpo.overlap, grpo.overlap_mark) == (0.0, False)
    assert ptgpo.overlap == pytest.approx(0.6) and ptgpo.overlap_mark
    assert board.overlap_notes == ["§ B: not held out: a share of the evaluation episodes started in a layout the "
                                   "run had trained on (ptgpo 60 %); such a cell measures memory as well as skill."]
    assert board.commits == {"a" * 12: 2, "b" * 12: 1, "b" * 12 + "+dirty": 1}
    assert "written by 3 commits" in board.commit_note
    row = next(r for r in board.rows if r.method == "grpo")
    assert row.compute["B"] == {"decisions": 100.0, "episodes": 11.0, "trained_tokens": 1000.0, "cpu_time_s": 20.5}
    assert next(r for r in board.rows if r.method == "ptgpo").compute["B"]["episodes"] is None

    markdown = to_markdown(board)
    assert "(n=2) |" in markdown and "§ (n=2)" in markdown and board.commit_note in markdown
    assert "| grpo | 100 | 11 | 1,000 | 20.5 |" in markdown
    table = {(r["method"], r["metric"]): r for r in csv.DictReader(io.StringIO(to_csv(board)))}
    assert table["ptgpo", "success"]["overlap_mark"] == "1" and table["ptgpo", "success"]["eval_overlap"] == "0.6"
    assert table["grpo", "success"]["cpu_time_s"] == "20.5" and table["ptgpo", "success"]["episodes"] == ""
    # Invalid-step rates are averaged like overlap; a method whose records did not measure one has none.
    assert table["grpo", "success"]["eval_invalid_rate"] == "0.2" and table["ptgpo", "success"]["eval_invalid_rate"] == ""
    assert r"\S{}" in to_latex(board) and 'title="not held out' in to_html(board)
    single = tmp_path / "single"
    single.mkdir()
    write_record(single, record("grpo", "B", 0, 0.5, provenance={"commit": "a" * 40, "dirty": False}))
    assert build_leaderboard(single).commit_note is None  # one commit: nothing to say


def test_comparisons_csv_names_cannot_start_a_formula(tmp_path):
    for seed, (first, second) in enumerate(((0.4, 0.1), (0.6, 0.2), (0.5, 0.3))):
        write_record(tmp_path, record("=cmd|' /C calc'!A0", "B", seed, first))
        write_record(tmp_path, record("@sum(1)", "B", seed, second))
    rows = list(csv.DictReader(io.StringIO(comparisons_csv(build_leaderboard(tmp_path)))))
    assert {(row["better"], row["worse"]) for row in rows} == {("'=cmd|' /C calc'!A0", "'@sum(1)")}


def test_intervals_png_draws_each_mean_success_interval(results, monkeypatch):
    import leaderboard.plots as plots

    figures = {}
    monkeypatch.setattr(plots, "save_png", lambda figure, path: figures.setdefault(path.name, figure) and path)
    board = build_leaderboard(results)
    plots.plot_intervals(board, results / "out")
    mean_panel, iqm_panel = figures["intervals.png"].axes
    for axes, estimates in ((mean_panel, [row.mean_success_estimate for row in board.ranked()]),
                            (iqm_panel, [row.iqm for row in board.ranked()])):
        drawn = sorted(float(x) for collection in axes.collections
                       for (low, _), (high, _) in collection.get_segments() for x in (low, high))
        wanted = sorted(x for e in estimates if e is not None and e.has_interval for x in (e.low, e.high))
        assert wanted and drawn == pytest.approx(wanted)
    # grpo and ptgpo: Student-t intervals over the seeds; random and zero-shot (one seed): none.
    assert len(mean_panel.collections[0].get_segments()) == 2


def _with_provenance(made, commit, cpu, created_at):
    made.provenance = {"commit": commit, "dirty": False, "python": "3.11.7", "cpu": cpu, "cores": 2, "threads": 1,
                       "platform": "Linux-6.1-x86_64", "versions": {"torch": "2.13.0+cpu", "numpy": "2.4.6"},
                       "config": {}}
    made.created_at = created_at
    return made


def test_the_page_opens_on_the_table_and_says_where_its_numbers_come_from(tmp_path):
    import hashlib

    for seed in range(3):
        write_record(tmp_path, _with_provenance(record("grpo", "B", seed, 0.3 + 0.1 * seed), "0123456789abcdef",
                                                "AMD EPYC", f"2026-12-04T17:2{seed}:00+00:00"))
        write_record(tmp_path, _with_provenance(record("ptgpo", "B", seed, 0.5 + 0.1 * seed), "0123456789abcdef",
                                                "Intel Xeon", f"2026-12-05T0{seed}:10:00+01:00"))
    (tmp_path / "config.yaml").write_text("name: tiny-bench\nbudget: 100\n")
    digest = hashlib.sha256(b"name: tiny-bench\nbudget: 100\n").hexdigest()[:12]
    board = build_leaderboard(tmp_path)
    assert board.provenance == [
        ("Commit", "0123456789ab"),
        ("Written", "2026-12-04 17:20 to 2026-12-05 01:10 UTC, 6 records"),
        ("Machine", "AMD EPYC, 2 cores, Linux-6.1-x86_64 (3 records); Intel Xeon, 2 cores, Linux-6.1-x86_64 (3 records)"),
        ("Software", "Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6"),
        ("Config", f"tiny-bench ({tmp_path / 'config.yaml'}, sha256 {digest})"),
    ]
    markdown = to_markdown(board)
    assert markdown.startswith("# Leaderboard\n\n| Rank | Method |")
    table_end = markdown.index("\n\n", markdown.index("| Rank |"))
    assert markdown.index("## Provenance") > table_end and markdown.index("## How to read the table") > table_end
    assert f"- **Config**: tiny-bench ({tmp_path / 'config.yaml'}, sha256 {digest})" in markdown
    assert "- **Commit**: 0123456789ab" in markdown
    page = to_html(board)
    assert page.index("<table") < page.index("<h2>Provenance</h2>") < page.index("<h2>How to read the table</h2>")
    assert "<li><strong>Written</strong>: 2026-12-04 17:20 to 2026-12-05 01:10 UTC, 6 records</li>" in page


def test_a_method_without_spread_over_seeds_is_listed_by_its_mean_but_not_ranked(tmp_path):
    # constant scores 19 % on every seed: the interval [19, 19] says nothing of another seed.
    values = {"a": [0.5, 0.6, 0.7], "constant": [0.19, 0.19, 0.19], "c": [0.0, 0.05, 0.1]}
    for method, seeds in values.items():
        for seed, success in enumerate(seeds):
            write_record(tmp_path, record(method, "B", seed, success))
    board = build_leaderboard(tmp_path)
    assert [(row.method, row.rank, row.unranked) for row in board.rows] == [
        ("a", 1, None), ("c", 2, None), ("constant", None, "no spread over seeds")]
    estimate = board.rows[2].mean_success_estimate
    assert (estimate.point, estimate.low, estimate.high) == pytest.approx((19, 19, 19))  # shown as measured
    overall = {(c.better, c.worse): c for c in board.comparisons if c.column is None}
    # Its pairs carry a difference but no test; a against c is the only test of the family (Holm: p itself).
    assert overall["a", "constant"].p is None and overall["a", "constant"].difference == pytest.approx(41)
    assert overall["constant", "c"].p is None and not overall["constant", "c"].separated
    assert overall["a", "c"].p_holm == overall["a", "c"].p < 0.05
    markdown = to_markdown(board)
    assert "| – | constant | rl | 19.0 [19.0, 19.0] (not ranked: no spread over seeds) |" in markdown
    assert "no spread over seeds" in markdown.split("## How to read the table")[1]
    rows = list(csv.DictReader(io.StringIO(to_csv(board))))
    assert {row["rank"] for row in rows if row["method"] == "constant"} == {""}
    assert "<td data-value=\"\">–</td><td class=\"text\">constant</td>" in to_html(board)


def test_a_config_linked_out_of_the_results_folder_is_not_read(tmp_path):
    (tmp_path / "secret.yaml").write_text("name: secret\n")
    results = tmp_path / "results"
    results.mkdir()
    write_record(results, record("grpo", "B", 0, 0.5))
    (results / "config.yaml").symlink_to(tmp_path / "secret.yaml")
    board = build_leaderboard(results)
    assert "Config" not in dict(board.provenance) and "secret" not in to_markdown(board).replace("secret.yaml", "")
    [problem] = board.problems
    assert problem.kind == "unreadable" and "symbolic link" in problem.message


def test_a_record_beyond_the_input_limit_is_listed_unread(results, monkeypatch):
    from leaderboard import records

    monkeypatch.setattr(records, "MAX_INPUT_BYTES", 2000)
    path = results / "B__grpo__seed0.json"
    path.write_text(path.read_text().replace("\n}", ',\n  "error": "' + "x" * 2000 + '"\n}'))
    board = build_leaderboard(results)
    assert [(p.path.name, p.kind) for p in board.problems] == [("B__grpo__seed0.json", "unreadable")]
    assert "larger than 2,000 bytes" in board.problems[0].message
