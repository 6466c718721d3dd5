"""The documentation site builds with ``mkdocs build --strict``: no broken link, no missing page or
API reference target, no unknown table marker, no warning. Needs the ``docs`` extra
(``pip install -e ".[docs]"``); skipped with a message without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]



def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return True


MISSING = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "pymdownx")
           if _missing(name)]


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed ({', '.join(MISSING)} missing): "
                                          'pip install -e ".[docs]"')
def test_site_builds_strictly(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    site = tmp_path / "site"
    for page in ("index.html", "getting-started/index.html", "training/cli/index.html", "api/advantages/index.html"):
        assert (site / page).is_file(), page
    # Every generated table was filled in (docs/_tools/hooks.py replaces its markers).
    for page in site.rglob("*.html"):
        assert "<!-- ptgpo:" not in page.read_text(), page
