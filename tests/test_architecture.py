"""The package's structure, checked from its source with ``ast``: layers, no import cycles, short functions
and modules, and the older import paths of moved modules.

The layers, bottom to top (a module imports only from its own layer or below; a module's layer is that
of the longest prefix of its name listed in :data:`LAYERS`)::

    ptgpo_envs                    environments, the vector interface, the open registries' class
    ptgpo_algos                   records, files, validation, config fields; the components: estimators,
                                  objectives, policies, the critics' parts, FSDP's settings
    ptgpo_algos.rollouts          the rollout stage: strategies and their settings, episodes, evaluation
    ptgpo_algos.updates           the update stage: samples, losses, the updater, the optimiser, settings
    ptgpo_algos.config            the run config: the stages' sections composed (and the training stage's
                                  own section; building a policy from the config)
    ptgpo_algos.training          the training stage: trainer, placement, collectors, callbacks, checkpoint,
                                  run folder, pre-flight, memory plan; the critics the trainer trains; the
                                  pages a run's callbacks write
    ptgpo_algos.distributed, ...  ranks (FSDP2), the verl bridge, the export of recorded rollouts
    baselines                     random, expert, SB3 PPO, zero-shot
    leaderboard                   records, statistics, tables (of ptgpo_algos: only files and yaml_safe)
    ptgpo_harness.bench           the benchmark harness: may import all of the above
    ptgpo_harness.commands, .cli  the command line

Every import counts: one inside a function (a cycle hidden in a function is still a cycle) and one
under ``if TYPE_CHECKING:`` (a type-only import still ties the two modules: neither can be read, moved
or tested without the other). The graph and the lengths are ``scripts/code_shape.py``'s.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
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
    # FSDP's settings are a section's field (optim.fsdp); the work split is arithmetic the collectors share.
    ("ptgpo_algos", "ptgpo_algos.distributed.fsdp_config", "ptgpo_algos.distributed.work_split"),
    ("ptgpo_algos.rollouts",),
    ("ptgpo_algos.updates",),
    # The run section's checks need nothing of the trainer; a policy is built from the whole config.
    ("ptgpo_algos.config", "ptgpo_algos.training.settings", "ptgpo_algos.policy.backends"),
    # The critics are trained beside the policy by the trainer, with the update's samples.
    ("ptgpo_algos.training", "ptgpo_algos.critic.component", "ptgpo_algos.hiper.critic", "ptgpo_algos.viewer"),
    ("ptgpo_algos.distributed", "ptgpo_algos.integrations", "ptgpo_algos.export"),
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


#: Modules over the length that hold data, not code: literals a reader looks up, not reads through.
DATA_TABLES = {
    "ptgpo_envs.webshop.catalog_tables": "the bundled WebShop catalogue's product types, brands and phrases",
}


def test_modules_are_at_most_600_lines_but_data_tables():
    lengths = code_shape.module_lines(SOURCES)
    long = {module: lines for module, lines in lengths.items()
            if lines > code_shape.MAX_MODULE_LINES and module not in DATA_TABLES}
    assert long == {}, "modules over 600 lines: split them along their concepts"
    assert set(DATA_TABLES) <= set(lengths), "a data table listed here is no module"


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


#: The modules moved into the stage packages: older path -> the module it is now (docs/architecture.md).
MOVED = {
    "ptgpo_algos.data": "ptgpo_algos.records",
    "ptgpo_algos.rollout": "ptgpo_algos.rollouts.collection",
    "ptgpo_algos.strategies": "ptgpo_algos.rollouts.registry",
    "ptgpo_algos.patr": "ptgpo_algos.rollouts.patr.collection",
    "ptgpo_algos.patr_settings": "ptgpo_algos.rollouts.patr.settings",
    "ptgpo_algos.spo3": "ptgpo_algos.rollouts.spo3.search",
    "ptgpo_algos.spo3_rollout": "ptgpo_algos.rollouts.spo3.collection",
    "ptgpo_algos.spo3_settings": "ptgpo_algos.rollouts.spo3.settings",
    "ptgpo_algos.bpo_rollout": "ptgpo_algos.rollouts.bpo.collection",
    "ptgpo_algos.bpo_settings": "ptgpo_algos.rollouts.bpo.settings",
    "ptgpo_algos.episodes": "ptgpo_algos.rollouts.episodes",
    "ptgpo_algos.evaluation": "ptgpo_algos.rollouts.evaluation",
    "ptgpo_algos.rollout_records": "ptgpo_algos.rollouts.recordings",
    "ptgpo_algos.policy.agent": "ptgpo_algos.rollouts.agent",
    "ptgpo_algos.losses": "ptgpo_algos.updates.losses",
    "ptgpo_algos.update": "ptgpo_algos.updates.samples",
    "ptgpo_algos.updater": "ptgpo_algos.updates.updater",
    "ptgpo_algos.optimizer": "ptgpo_algos.updates.optimizer",
    "ptgpo_algos.trainer": "ptgpo_algos.training.trainer",
    "ptgpo_algos.collectors": "ptgpo_algos.training.collectors",
    "ptgpo_algos.callbacks": "ptgpo_algos.training.callbacks",
    "ptgpo_algos.checkpoint": "ptgpo_algos.training.checkpoint",
    "ptgpo_algos.run_folder": "ptgpo_algos.training.run_folder",
    "ptgpo_algos.preflight": "ptgpo_algos.training.preflight",
    "ptgpo_algos.memory": "ptgpo_algos.training.memory_plan",
    "ptgpo_algos.train_state": "ptgpo_algos.training.state",
    "ptgpo_algos.placement": "ptgpo_algos.training.placement",
    "ptgpo_algos.run_evaluation": "ptgpo_algos.training.run_evaluation",
}


def test_every_older_path_imports_as_the_module_it_moved_to():
    # A fresh interpreter, so that each older path is imported for the first time: the module object
    # is the moved one (so every name is the same object, and a patch on either is seen by both), the
    # names import from it, and each import warns once, naming the new path.
    code = ("import importlib, json, sys, warnings\n"
            "warnings.simplefilter('always')\n"
            f"moved = {MOVED!r}\n"
            "out = {}\n"
            "for old, new in moved.items():\n"
            "    with warnings.catch_warnings(record=True) as caught:\n"
            "        module = importlib.import_module(old)\n"
            "    target = importlib.import_module(new)\n"
            "    names = [n for n in vars(target) if not n.startswith('_')]\n"
            "    same = all(getattr(module, n) is getattr(target, n) for n in names)\n"
            "    parent, _, leaf = old.rpartition('.')\n"
            "    out[old] = [module is target, same, getattr(sys.modules[parent], leaf) is target,\n"
            "                [str(w.message) for w in caught if w.category is DeprecationWarning]]\n"
            "from ptgpo_algos.trainer import Trainer\n"
            "from ptgpo_algos.training.trainer import Trainer as moved_trainer\n"
            "out['from-import'] = Trainer is moved_trainer\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found.pop("from-import") is True
    assert found == {old: [True, True, True, [f"{old} moved to {new}; import it from there"]]
                     for old, new in MOVED.items()}


def test_the_older_paths_are_the_packages_table_and_hold_no_file():
    # A file at an older path would shadow the move (and git would no longer see a rename).
    from ptgpo_algos.old_paths import MOVED as listed

    assert listed == MOVED
    assert [old for old in MOVED if old in SOURCES] == []
    assert set(MOVED.values()) <= set(SOURCES)


def test_nothing_imports_a_module_by_its_older_path():
    # The code, the scripts, the examples and the tests name the moved modules where they are now;
    # only this file names the older paths, to check them.
    pattern = re.compile(r"\b(" + "|".join(re.escape(old) for old in sorted(MOVED, key=len, reverse=True)) + r")\b(?![.\w])")
    named = re.compile(r"\b(?:from\s+(ptgpo_algos(?:\.\w+)*)\s+import\s+([\w, ()\n]+)|import\s+(ptgpo_algos(?:\.\w+)+))")
    found = []
    for path in [path for folder in (*code_shape.PACKAGES, "scripts", "examples", "tests")
                 for path in (ROOT / folder).rglob("*.py")]:
        if path.name in ("test_architecture.py", "old_paths.py"):
            continue
        text = path.read_text(encoding="utf-8")
        for match in named.finditer(text):
            module = match.group(1) or match.group(3)
            modules = [module] + ([f"{module}.{name.strip()}" for name in re.split(r"[,\s()]+", match.group(2)) if name.strip()]
                                  if match.group(2) else [])
            found += [f"{path.relative_to(ROOT)}: {m}" for m in modules if pattern.fullmatch(m)]
    assert found == []


def test_an_older_path_warns_at_the_line_that_imports_it():
    # Python shows a DeprecationWarning of the main script by default: it must name the user's import
    # line, not a frame of the import machinery.
    done = subprocess.run([sys.executable, "-c", "import ptgpo_algos.trainer"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert ("<string>:1: DeprecationWarning: ptgpo_algos.trainer moved to ptgpo_algos.training.trainer; "
            "import it from there") in done.stderr
