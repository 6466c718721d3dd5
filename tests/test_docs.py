"""The documentation covers the code and builds.

Without the docs extra: every public module is in the API reference (``docs/api/*.md``), every public
module, class, function and method has a docstring, every example is included in a page, and the
docs do not point at files that do not exist. With it (``pip install -e ".[docs]"``; skipped with a
message otherwise): the site builds with ``mkdocs build --strict``, with no broken link, no missing
page or API reference target, no unknown table marker and no warning."""

from __future__ import annotations

import ast
import importlib.util
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ptgpo_envs", "ptgpo_algos", "baselines", "leaderboard", "ptgpo_harness")


def _public_modules() -> dict[str, Path]:
    """Every public module of the five packages (no part of its dotted name starts with ``_``)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if any(part.startswith("_") and part != "__init__" for part in parts):
                continue
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def test_every_public_module_is_in_the_api_reference():
    documented = {line.split()[1] for page in (ROOT / "docs/api").glob("*.md")
                  for line in page.read_text().splitlines() if line.startswith("::: ")}
    modules = set(_public_modules())
    assert not modules - documented, f"add these to a page of docs/api/: {sorted(modules - documented)}"
    assert not documented - modules, f"docs/api/ documents what is not a module: {sorted(documented - modules)}"


def _undocumented(body: list[ast.stmt], prefix: str) -> list[str]:
    """Public functions, classes and (in public classes) methods under ``body`` without a docstring."""
    missing = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            if not ast.get_docstring(node):
                missing.append(prefix + node.name)
            if isinstance(node, ast.ClassDef):
                missing += _undocumented(node.body, f"{prefix}{node.name}.")
    return missing


def test_every_public_module_class_function_and_method_has_a_docstring():
    missing = []
    for name, path in _public_modules().items():
        tree = ast.parse(path.read_text())
        if not ast.get_docstring(tree):
            missing.append(name)
        missing += _undocumented(tree.body, name + ".")
    assert not missing, "no docstring: " + ", ".join(missing)


def test_every_example_is_shown_in_the_docs():
    pages = "\n".join(page.read_text() for page in (ROOT / "docs").rglob("*.md"))
    for example in sorted((ROOT / "examples").glob("*.py")):
        assert f'--8<-- "examples/{example.name}"' in pages, f"no page includes examples/{example.name}"


def test_repository_paths_named_in_docs_exist():
    """A path in backticks or a snippet include that looks like a file of this repository exists."""
    named = re.compile(r'(?:`|--8<-- ")((?:ptgpo_envs|ptgpo_algos|baselines|leaderboard|scripts|configs|examples|'
                       r'tests|docs)/[\w./-]+?\.(?:py|yaml|md|txt|sh|json))')
    missing = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page.parent.name == "leaderboard" and "results" in page.parts:
            continue  # a built leaderboard lists the files it could not read, missing ones included
        for path in named.findall(page.read_text()):
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)



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


def _table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|") and not line.startswith("|--")
            and not re.match(r"^\|[-:| ]+\|$", line.strip())]


def test_readme_headline_is_the_committed_evidence_decision():
    """The README's hypotheses table is the evidence run's committed decision, figure for figure."""
    import csv

    with open(ROOT / "docs/results/evidence-cpu/leaderboard/hypotheses.csv", newline="") as handle:
        decided = {row["name"]: row for row in csv.DictReader(handle)}
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("| | Comparison | Means |"):].split("\n\n")[0]  # up to the table's end
    rows = {row[0]: row for row in _table_rows(block)[1:]}
    assert set(rows) == set(decided)

    def signed(value: str) -> str:
        return f"{float(value):+.1f}".replace("-", "\N{MINUS SIGN}")

    for name, row in decided.items():
        _, _, means, effect, holm, decision = rows[name]
        assert means == f"{float(row['first_mean']):.1f} vs {float(row['second_mean']):.1f}", name
        assert effect == f"{signed(row['difference'])} [{signed(row['low'])}, {signed(row['high'])}]", name
        holm_p = float(row["holm_p"])
        assert holm == ("< 0.0001" if holm_p < 1e-4 else f"{holm_p:.4f}"), name
        assert decision == row["decision"], name


def test_readme_training_output_is_the_committed_one():
    """The README shows what ``examples/train_frozenlake.py`` printed, as committed for the docs."""
    output = (ROOT / "docs/results/data/train_frozenlake.txt").read_text()
    assert output.strip() in (ROOT / "README.md").read_text()


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "_tools" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_tables_keep_their_placeholders():
    # "[runs/<env>-<algo>-s<seed>]" would be read as HTML tags and shown as "[runs/--s]".
    table = _hooks().config_table("run")
    assert "[runs/&lt;env&gt;-&lt;algo&gt;-s&lt;seed&gt;]" in table and "<env>" not in table


def test_pages_with_generated_tables_say_how_to_view_them():
    pages = [page for page in (ROOT / "docs").rglob("*.md") if re.search(r"^<!-- ptgpo:", page.read_text(), re.M)]
    assert len(pages) >= 10
    for page in pages:
        assert "mkdocs serve" in page.read_text(), f"{page.relative_to(ROOT)}: its tables are blank on the repository"


def test_home_lists_what_the_readme_lists():
    def intro(text: str) -> str:
        end = "extends through entry points."
        return text[text.index("- **Environments**"):text.index(end) + len(end)]

    assert intro((ROOT / "docs" / "index.md").read_text()) == intro((ROOT / "README.md").read_text())


def test_environment_pages_point_at_data_a_user_has():
    for page in (ROOT / "docs" / "environments").glob("*.md"):
        assert "../shared" not in page.read_text(), f"{page.name}: a folder beside this repository, not a user's"
