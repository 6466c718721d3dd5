"""The package's structure, checked from its source with ``ast``: layers, no import cycles, short functions.

The layers, bottom to top (a module imports only from its own layer or below), one per package but the
harness's two::

    ptgpo_envs                    environments, the vector interface, the open registries' class
    ptgpo_algos                   data, estimators, losses, policies, episodes, rollouts, config, trainer
    baselines                     random, expert, SB3 PPO, zero-shot
    leaderboard                   records, statistics, tables (of ptgpo_algos: only files and yaml_safe)
    ptgpo_harness.bench           the benchmark harness: may import all of the above
    ptgpo_harness.commands, .cli  the command line

Every import counts: one inside a function (a cycle hidden in a function is still a cycle) and one
under ``if TYPE_CHECKING:`` (a type-only import still ties the two modules: neither can be read, moved
or tested without the other). The graph and the function lengths are ``scripts/code_shape.py``'s.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
code_shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_shape)

SOURCES = code_shape.read_sources(None)
GRAPH = code_shape.import_graph(SOURCES)


def test_no_import_cycles():
    assert code_shape.cycles(GRAPH) == []


#: The layers, bottom to top: a module's layer is that of the longest prefix of its name listed here.
LAYERS = (
    ("ptgpo_envs",),
    ("ptgpo_algos",),
    ("baselines",),
    ("leaderboard",),
    ("ptgpo_harness", "ptgpo_harness.bench"),
    ("ptgpo_harness.commands", "ptgpo_harness.cli"),
)


def _layer(module: str) -> int:
    found = [(len(prefix), layer) for layer, prefixes in enumerate(LAYERS) for prefix in prefixes
             if module == prefix or module.startswith(prefix + ".")]
    assert found, f"{module} is in no layer: add its package to LAYERS"
    return max(found)[1]


def test_every_package_has_a_layer():
    packages = {prefix.split(".")[0] for prefixes in LAYERS for prefix in prefixes}
    assert {module.split(".")[0] for module in GRAPH} == packages == set(code_shape.PACKAGES)


def test_an_upward_import_is_found():
    # The check itself, on a made-up graph: the core naming the harness or a baseline is refused.
    graph = {"ptgpo_algos.training.trainer": {"ptgpo_harness.bench.grid": "deferred"},
             "ptgpo_algos.config": {"baselines.registry": "type-only"},
             "ptgpo_harness.bench.plan": {"ptgpo_harness.commands.bench": "top"},
             "ptgpo_harness.cli": {"ptgpo_harness.bench": "top", "leaderboard.records": "top"}}
    assert {module: _upward(graph, module) for module in graph} == {
        "ptgpo_algos.training.trainer": ["ptgpo_harness.bench.grid"], "ptgpo_algos.config": ["baselines.registry"],
        "ptgpo_harness.bench.plan": ["ptgpo_harness.commands.bench"], "ptgpo_harness.cli": []}


def _upward(graph: dict[str, dict[str, str]], module: str) -> list[str]:
    return sorted(other for other in graph[module] if _layer(other) > _layer(module))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_only_go_down_the_layers(module):
    up = _upward(GRAPH, module)
    if module.startswith("leaderboard"):
        core = {other for other in GRAPH[module] if other.startswith("ptgpo_algos")}
        assert core <= {"ptgpo_algos.files", "ptgpo_algos.yaml_safe"}
    # The leaderboard only reads records: the core may name it (no import), the harness writes them.
    assert up == [], f"{module} imports from a higher layer: {up}"


def test_functions_are_short_or_say_why():
    long = [f"{module}:{line} {function} ({length} lines)"
            for module, function, line, length, docstring in code_shape.functions(SOURCES)
            if length > code_shape.MAX_FUNCTION_LINES and "Long because" not in docstring]
    assert long == [], "functions over 60 lines without a reason ('Long because ...') in their docstring"


def test_no_module_imports_another_modules_private_name():
    # A name with a leading underscore is its module's own; a second module that needs it makes it public.
    found = []
    for module, source in SOURCES.items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level or (node.module or "").split(".")[0] in code_shape.PACKAGES:
                found += [f"{module}: {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []


def test_the_verl_bridges_older_paths_are_the_moved_modules():
    # verl configs name the bridge's modules by their flat paths (integrations.verl_leaves.register...):
    # each is the moved module itself, with one DeprecationWarning naming the new path.
    old = sorted(p.stem for p in (ROOT / "ptgpo_algos" / "integrations").glob("verl_*.py"))
    assert old == [f"verl_{name}" for name in ("agent_loop", "dataset", "hub", "leaves", "steps", "trainer", "tree")]
    code = ("import warnings\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    import ptgpo_algos.integrations.verl_hub as old\n"
            "    from ptgpo_algos.integrations.verl_hub import GroupHub\n"
            "import ptgpo_algos.integrations.verl.hub as new\n"
            "print(old is new, GroupHub is new.GroupHub, [str(w.message) for w in caught if w.category is DeprecationWarning])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("True True ['ptgpo_algos.integrations.verl_hub moved to "
                                   "ptgpo_algos.integrations.verl.hub; import it from there']")
