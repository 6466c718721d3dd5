"""``ptgpo show``'s page in a real browser: headless Chromium draws a PTGPO run's prefix trees, opens a
decision when its line is clicked (a mouse event), switches the shown advantages when another
estimator is picked, and loads nothing from anywhere.

Skipped where Chromium is not installed (Debian: ``apt-get install -y chromium``; ``.ci/run`` installs
it). ``python tests/test_viewer_browser.py`` rewrites the screenshots the docs show,
``docs/images/viewer-tree.png`` and ``docs/images/viewer-linear.png``, from two fresh tiny runs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from chromium_cdp import Chromium, find_chromium
from viewer_runs import train_recorded

from ptgpo_algos.viewer import write_pages

CHROMIUM = find_chromium()
IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)

SHOWN_E0 = "[...document.querySelectorAll('ul.tree summary > .a.e0:not(.badge)')].filter(e => e.offsetWidth > 0).length"


@pytest.fixture(scope="module")
def tree_page(tmp_path_factory) -> Path:
    run = train_recorded(tmp_path_factory.mktemp("browser") / "run", "ptgpo", "tree")
    return write_pages(run, run / "show", [2])[0]


def test_the_tree_renders_and_a_clicked_decision_opens(tree_page, tmp_path):
    import matplotlib.image

    with Chromium(CHROMIUM, width=1400, height=900) as page:
        page.open(tree_page.as_uri())
        nodes = page.evaluate("document.querySelectorAll('ul.tree li').length")
        assert nodes > 4 and page.evaluate("document.querySelectorAll('ul.tree ul').length") > 0
        # Nested lists draw the tree: a decision's children sit to the right of it.
        indent = page.evaluate("(() => { const li = document.querySelector('ul.tree ul li');"
                               " return li.getBoundingClientRect().left"
                               " - li.parentElement.parentElement.getBoundingClientRect().left; })()")
        assert indent > 10
        observation = "document.querySelector('ul.tree details pre')"
        assert page.evaluate(f"{observation}.checkVisibility()") is False  # closed until clicked
        page.click_selector("ul.tree details > summary", 0)
        assert page.evaluate("document.querySelector('ul.tree details').open") is True
        assert page.evaluate(f"{observation}.checkVisibility()") is True
        assert "You stand on the start" in page.evaluate(f"{observation}.textContent")
        # The run's estimator is shown first; picking another shows its advantages instead.
        assert page.evaluate(SHOWN_E0) == nodes
        page.click_selector("nav label", 1)
        assert page.evaluate(SHOWN_E0) == 0
        assert page.evaluate("[...document.querySelectorAll('ul.tree summary > .a.e1:not(.badge)')]"
                             ".filter(e => e.offsetWidth > 0).length") == nodes
        assert not [e for e in page.events if e.get("method") == "Runtime.exceptionThrown"]
        shot = matplotlib.image.imread(page.screenshot(tmp_path / "tree.png"))
    assert shot.shape[:2] == (900, 1400) and shot[..., :3].std() > 0.05


def _write(page_path: Path, name: str, click: int | None) -> None:
    with tempfile.TemporaryDirectory() as folder, Chromium(CHROMIUM, width=1400, height=1000) as browser:
        browser.open(page_path.as_uri())
        if click is not None:
            browser.click_selector("details > summary", click)
            browser.evaluate("window.scrollTo(0, document.querySelector('section.group').offsetTop - 130)")
        shot = browser.screenshot(Path(folder) / "page.png")
        from PIL import Image

        # A palette of 64 colours keeps the text sharp at a third of the size of the RGB capture.
        Image.open(shot).convert("RGB").quantize(colors=64).save(IMAGES / name, optimize=True)
    print(f"wrote {IMAGES / name}")


def write_screenshots() -> None:
    if CHROMIUM is None:
        sys.exit("Chromium is not installed (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as folder:
        tree = train_recorded(Path(folder) / "ptgpo-tree", "ptgpo", "tree")
        linear = train_recorded(Path(folder) / "gigpo-linear", "gigpo", "linear")
        _write(write_pages(tree, tree / "show", [2])[0], "viewer-tree.png", 2)
        _write(write_pages(linear, linear / "show", [2])[0], "viewer-linear.png", None)


if __name__ == "__main__":
    write_screenshots()
