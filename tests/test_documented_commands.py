"""The documented commands run as written: every shell block of the README and the docs marked
``<!-- runnable -->`` (on the line before its fence) is run verbatim by bash, in a folder of its own.

They run at a tiny scale: ``ptgpo`` on the PATH is a shim that appends to each command what makes it
small (:func:`tiny_scale`: one iteration of a bare tiny model, two evaluation episodes, a few demo
seeds) and otherwise leaves it as the page spells it, so a renamed flag, a refused value (``1e-3``) or
a wrong folder in a page fails here. A block that installs packages, needs data or a GPU, or runs a
whole benchmark is not marked.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runnable -->"
_BLOCK = re.compile(r"^<!-- runnable -->\n```(?:bash|sh)\n(.*?)^```", re.M | re.S)

#: What makes a ``ptgpo train`` tiny: one iteration of a bare, small tiny model on two groups of two.
TRAIN_SCALE = ["--iterations", "1", "--eval-every", "1", "--eval-episodes", "2", "--group-size", "2", "--tasks", "2",
               "--set", "tiny.pretrain_steps=0", "--set", "tiny.hidden_size=16", "--set", "tiny.intermediate_size=32"]
#: Options whose value is a count, made small: command -> option -> the small value.
SMALL_COUNTS = {"evaluate": {"--episodes": "2"}, "demo": {"--seeds": "3"}}


def tiny_scale(argv: list[str]) -> list[str]:
    """``ptgpo`` arguments as a page spells them, made small (see the module docstring)."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    argv = list(argv)
    for option, small in SMALL_COUNTS.get(command, {}).items():
        if option in argv:
            argv[argv.index(option) + 1] = small
    return argv + TRAIN_SCALE if command == "train" else argv


def documented_blocks() -> list[tuple[str, str]]:
    """``(page:line, commands)`` of every marked block of the README and the docs."""
    blocks = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2
            blocks.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return blocks


BLOCKS = documented_blocks()


def test_the_pages_mark_their_runnable_blocks():
    # Every marker is followed by a shell block, and the commands a first day needs are among them.
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    markers = sum(page.read_text(encoding="utf-8").count(MARK) for page in pages)
    assert markers == len(BLOCKS) and markers >= 6
    marked = {where.split(":")[0] for where, _ in BLOCKS}
    assert {"README.md", "docs/getting-started.md", "docs/training/cli.md"} <= marked
    assert tiny_scale(["evaluate", "runs/x", "--episodes", "256"]) == ["evaluate", "runs/x", "--episodes", "2"]
    assert tiny_scale(["train", "--lr", "1e-3"])[:3] == ["train", "--lr", "1e-3"]


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> dict[str, str]:
    """The environment a block runs in: ``ptgpo`` on the PATH (the shim), this tree's packages, a
    shared model cache, no progress bars."""
    folder = tmp_path_factory.mktemp("shim")
    script = folder / "ptgpo"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
        "from test_documented_commands import tiny_scale\n"
        "from ptgpo_harness.cli import main\n"
        # Guarded as pip's entry scripts are: `--nproc` spawns processes that import this file anew.
        "if __name__ == '__main__':\n"
        "    sys.exit(main(tiny_scale(sys.argv[1:])))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "PTGPO_CACHE": str(tmp_path_factory.mktemp("cache")), "PTGPO_NO_PROGRESS": "1",
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
@pytest.mark.parametrize("where, commands", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_documented_block_runs_as_written(where, commands, shim, tmp_path):
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", commands], cwd=tmp_path, env=shim,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{where}:\n{commands}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
