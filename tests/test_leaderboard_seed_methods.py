"""The reported rows of G2PO, PlanPO, CovGPO, I-SDPO and SEED in ``leaderboard/reported.yaml`` against the "Reported
results" table of ``shared/specs/seed-methods.md``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaderboard.reported import DEFAULT_REPORTED, load_reported

SPEC = Path(__file__).resolve().parents[1] / ".." / "shared" / "specs" / "seed-methods.md"
SOURCES = {"G2PO": "g2po", "PlanPO": "planpo", "CovGPO": "covgpo", "I-SDPO": "isdpo", "SEED": "seed"}


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
    assert "2608.12957" in sources["isdpo"].citation and "not an agentic benchmark" in sources["isdpo"].setup
    assert "2607.14777" in sources["seed"].citation and "secondary" in sources["seed"].setup
    assert "60.2" in sources["seed"].setup
