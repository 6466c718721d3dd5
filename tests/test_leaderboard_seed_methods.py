"""The reported rows of G2PO, PlanPO, CovGPO, PATR, I-SDPO and SEED in ``leaderboard/reported.yaml``
against the "Reported results" table of ``shared/specs/seed-methods.md``, and how the tables show them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaderboard.reported import DEFAULT_REPORTED, load_reported

SPEC = Path(__file__).resolve().parents[1] / ".." / "shared" / "specs" / "seed-methods.md"
SOURCES = {"G2PO": "g2po", "PlanPO": "planpo", "CovGPO": "covgpo", "PATR": "patr", "I-SDPO": "isdpo", "SEED": "seed"}


def spec_numbers() -> dict[str, set[float]]:
    """Per method, every number of its rows' method and baseline cells."""
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} not available")
    table = SPEC.read_text(encoding="utf-8").split("## Reported results", 1)[1]
    numbers: dict[str, set[float]] = {method: set() for method in SOURCES}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in SOURCES:
            numbers[cells[0]] |= {float(x) for x in re.findall(r"\d+(?:\.\d+)?", " ".join(cells[4:6]))}
    return numbers


def values(rows) -> set[float]:
    return {v.value for row in rows for metrics in row.results.values() for v in metrics.values()}


def test_seed_method_rows_hold_the_specs_numbers_and_no_others():
    loaded = load_reported(DEFAULT_REPORTED)
    papers = values(row for row in loaded.rows if row.source in ("gigpo", "hgpo"))
    for method, spec in spec_numbers().items():
        source = SOURCES[method]
        shipped = values(row for row in loaded.rows if row.source == source)
        assert spec, method
        assert shipped <= spec, (method, shipped - spec)
        # A baseline left out of the source's rows is one the GiGPO/HGPO rows already hold.
        assert spec - shipped <= papers, (method, spec - shipped - papers)


def test_seed_method_sources_carry_the_specs_caveats():
    sources = load_reported(DEFAULT_REPORTED).sources
    assert "2606.22995" in sources["g2po"].citation and "secondary" in sources["g2po"].setup
    assert "2608.17289" in sources["planpo"].citation and "Caveat" in sources["planpo"].setup
    assert "2607.22724" in sources["covgpo"].citation and "secondary" in sources["covgpo"].setup
    assert "not stated" in sources["covgpo"].setup
    assert "2607.15610" in sources["patr"].citation and "single-run noise" in sources["patr"].setup
    assert "secondary" in sources["patr"].setup and "λ not stated" in sources["patr"].setup
    assert "2608.12957" in sources["isdpo"].citation and "not an agentic benchmark" in sources["isdpo"].setup
    assert "2607.14777" in sources["seed"].citation and "secondary" in sources["seed"].setup
    assert "60.2" in sources["seed"].setup


def test_patrs_rows_render_in_the_reported_table(tmp_path):
    # PATR's environments (FrozenLake, SWE-Bench Verified) become reported columns of their own.
    from leaderboard.aggregate import build_leaderboard
    from leaderboard.render import to_markdown

    from leaderboard_fixtures import measured_on

    measured_on(tmp_path, ("frozenlake", "ptgpo/FrozenLake-v0"), ("SWE-Bench Verified", "swe/SWE-Bench-Verified-v0"))
    board = build_leaderboard(tmp_path, load_reported(DEFAULT_REPORTED))
    rows = {(row.method, row.model): row for row in board.reported_rows if row.source == "patr"}
    assert len(rows) == 9
    assert [cell.mean for cell in rows["PATR", "Qwen2.5-0.5B"].cells.values()] == [75.8]
    table = [[c.strip() for c in line.strip("|").split("|")]
             for line in to_markdown(board).split("## Reported in papers")[1].splitlines() if line.startswith("| ")]
    header = table[0]
    lake, swe = header.index("FrozenLake"), header.index("SWE-Bench Verified · resolved")
    shown = {(row[0], row[1]): (row[lake], row[swe]) for row in table[1:] if row[2] == "patr"}
    assert shown == {("PATR", "Qwen2.5-0.5B"): ("75.8", "–"), ("GRPO", "Qwen2.5-0.5B"): ("66.5", "–"),
                     ("PATR", "Qwen2.5-3B"): ("74.3", "–"), ("GRPO", "Qwen2.5-3B"): ("66.8", "–"),
                     ("PATR", "Qwen3-4B"): ("–", "27.2"), ("PATR (judge)", "Qwen3-4B"): ("–", "26"),
                     ("GRPO", "Qwen3-4B"): ("–", "22.2"), ("ARPO", "Qwen3-4B"): ("–", "25.4"),
                     ("Tree-Random", "Qwen3-4B"): ("–", "24.8")}
