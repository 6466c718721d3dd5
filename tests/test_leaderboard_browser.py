"""leaderboard.html in a real browser: headless Chromium renders the tables, sorts them when a header
is clicked (a mouse event, not a call into the script) and loads the plots next to the page.

Skipped where Chromium is not installed (Debian: ``apt-get install -y chromium``; ``.ci/run`` installs
it). ``python tests/test_leaderboard_browser.py`` rewrites the leaderboard page's screenshot,
``docs/images/leaderboard-html.png``, from the same hand-made records.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from chromium_cdp import Chromium, find_chromium
from leaderboard_fixtures import write_fixture

from leaderboard.aggregate import build_leaderboard
from leaderboard.render import write_outputs

CHROMIUM = find_chromium()
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "images" / "leaderboard-html.png"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)

ROW_METHODS = "[...document.querySelector('table').tBodies[0].rows].map(r => r.cells[1].textContent)"


def build_page(folder: Path) -> Path:
    """The leaderboard of the hand-made records (tests/leaderboard_fixtures.py), every format."""
    results = folder / "results"
    results.mkdir()
    write_fixture(results)
    write_outputs(build_leaderboard(results), results / "leaderboard")
    return results / "leaderboard" / "leaderboard.html"


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    return build_page(tmp_path_factory.mktemp("browser"))


@pytest.fixture
def page(html):
    with Chromium(CHROMIUM) as browser:
        browser.open(html.as_uri())
        yield browser


def test_tables_render_with_intervals_and_bold_only_where_separated(page):
    tables = page.evaluate(
        "[...document.querySelectorAll('table')].map(t => ({"
        " head: [...t.tHead.rows[0].cells].map(c => c.textContent.trim()),"
        " rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent.trim())) }))"
    )
    measured, compute, *comparisons, improvement, failed = tables
    assert measured["head"][:5] == ["Rank", "Method", "Kind", "Mean success", "IQM"]
    assert measured["head"][5:] == ["A · Pick", "A · Look", "A · All", "B"]
    grpo = measured["rows"][0]
    assert grpo[:3] == ["1", "grpo", "rl"]
    # Student-t intervals over the seeds, clipped to [0, 100].
    assert grpo[5:] == [
        "50.0 [25.2, 74.8] (n=3)",
        "70.0 [45.2, 94.8] (n=3)",
        "60.0 [35.2, 84.8] (n=3)",
        "40.0 [0.0, 83.0] (n=3)",
    ]
    assert [row[1] for row in measured["rows"]] == ["grpo", "ptgpo", "random", "zero-shot", "expert"]
    assert compute["head"][0] == "Method" and [row[0] for row in compute["rows"]][:2] == ["grpo", "ptgpo"]
    # Mean success and each of the four columns: every family's pairs with their corrected p.
    assert len(comparisons) == 5 and all(t["head"][-2:] == ["Holm p", "Separated"] for t in comparisons)
    assert improvement["head"] == ["X \\ Y", "grpo", "ptgpo", "random", "zero-shot"]
    assert failed["rows"][0][:2] == ["B__gigpo__seed0.json", "gigpo"]
    # Two or three seeds separate nothing after correction here, so nothing is drawn bold.
    assert not any(row[-1] == "yes" for t in comparisons for row in t["rows"])
    bold = page.evaluate(
        "[...document.querySelectorAll('td')].filter(td => [...td.querySelectorAll('*')].concat([td])"
        ".some(e => Number(getComputedStyle(e).fontWeight) >= 700 && e.textContent.trim()))"
        ".map(td => td.textContent.trim())"
    )
    assert bold == []


def test_clicking_a_header_sorts_rows_numbers_by_value_and_empty_cells_last(page):
    assert page.evaluate(ROW_METHODS) == ["grpo", "ptgpo", "random", "zero-shot", "expert"]
    page.click_selector("table th", 5)  # A · Pick: grpo 50, ptgpo 80, random 20, expert 100, zero-shot –
    assert page.evaluate(ROW_METHODS) == ["random", "grpo", "ptgpo", "expert", "zero-shot"]
    assert page.evaluate("document.querySelectorAll('table th')[5].dataset.dir") == "asc"
    page.click_selector("table th", 5)
    assert page.evaluate(ROW_METHODS) == ["expert", "ptgpo", "grpo", "random", "zero-shot"]
    page.click_selector("table th", 1)  # Method: text order
    assert page.evaluate(ROW_METHODS) == ["expert", "grpo", "ptgpo", "random", "zero-shot"]
    assert page.evaluate("document.querySelectorAll('table th')[5].dataset.dir") is None


def test_the_plots_next_to_the_page_load(page):
    images = page.evaluate(
        "[...document.images].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth, i.naturalHeight])"
    )
    assert sorted(src for src, *_ in images) == [
        "curves-A.png",
        "improvement.png",
        "intervals.png",
        "profiles.png",
    ]
    for src, complete, width, height in images:
        assert complete and width > 100 and height > 100, src
    assert not [e for e in page.events if e.get("method") == "Runtime.exceptionThrown"]


def test_every_table_of_a_three_level_benchmark_fits_a_1400_pixel_window(tmp_path):
    from leaderboard.records import ResultRecord, write_record

    # A benchmark's size: ten methods on three levels, with compute figures of real runs' widths.
    results = tmp_path / "results"
    results.mkdir()
    for level in ("doorkey", "multiroom", "keycorridor"):
        for index, method in enumerate(("ptgpo", "hgpo", "rloo", "gigpo", "grpo", "sb3_ppo", "random",
                                        "zero_shot", "placebo", "expert")):
            for seed in range(3):
                write_record(results, ResultRecord(
                    method=method, method_kind="rl", env_id="ptgpo/BabyAI-v0", env_label=level, seed=seed,
                    budget=12000, decisions=12000, episodes=627, trained_tokens=2_880_239 + index,
                    cpu_time_s=153.1, status="ok", final_success=(index + seed) / 13))
    write_outputs(build_leaderboard(results, None), results / "leaderboard", ["html"])
    with Chromium(CHROMIUM, width=1400, height=900) as browser:
        browser.open((results / "leaderboard" / "leaderboard.html").as_uri())
        page_width, window = browser.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert page_width <= window  # the page never scrolls sideways
        widths = browser.evaluate(
            "[...document.querySelectorAll('table')].map(t => [t.tHead.rows[0].cells[0].textContent,"
            " t.getBoundingClientRect().width, t.parentElement.clientWidth])")
        # The leaderboard and its compute table fit: nothing to scroll to (the wider matrices scroll in
        # their own boxes).
        fitting = {head: width <= box for head, width, box in widths if head in ("Rank", "Method")}
        assert fitting == {"Rank": True, "Method": True}, widths


def test_a_screenshot_shows_the_page(page, tmp_path):
    import matplotlib.image

    shot = matplotlib.image.imread(page.screenshot(tmp_path / "page.png"))
    assert shot.shape[:2] == (900, 1280)
    assert shot[..., :3].std() > 0.05  # not a blank page


def write_screenshot() -> None:
    if CHROMIUM is None:
        sys.exit("Chromium is not installed (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as folder, Chromium(CHROMIUM, width=1400, height=640) as browser:
        browser.open(build_page(Path(folder)).as_uri())
        shot = browser.screenshot(Path(folder) / "page.png")
        # A palette of 64 colours keeps the text sharp at a third of the size of the RGB capture.
        from PIL import Image

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        Image.open(shot).convert("RGB").quantize(colors=64).save(SCREENSHOT, optimize=True)
    print(f"wrote {SCREENSHOT}")


if __name__ == "__main__":
    write_screenshot()
