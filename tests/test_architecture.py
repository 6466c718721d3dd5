"""The package's structure, checked from its source with ``ast``: layers, no import cycles, short functions.

The layers, bottom to top (a module imports only from its own layer or below)::

    ptgpo_envs                  environments, the vector interface, the open registries' class
    ptgpo_algos (core)          data, estimators, losses, policies, episodes, rollouts, config, trainer
    baselines                   random, expert, SB3 PPO, zero-shot
    leaderboard                 records, statistics, tables (of ptgpo_algos: only ptgpo_algos.files)
    ptgpo_algos.bench           the benchmark harness: may import all of the above
    ptgpo_algos.commands, .cli  the command line

Every import counts, also one inside a function (a cycle hidden in a function is still a cycle); only
imports under ``if TYPE_CHECKING:`` are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ptgpo_envs", "ptgpo_algos", "baselines", "leaderboard")
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _runtime_nodes(tree: ast.AST):
    """Every node, except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _imports(name: str, path: Path) -> set[str]:
    """The modules of ours that module ``name`` imports (``from package import submodule`` counts as the
    submodule, not the package)."""
    out = set()
    is_package = path.name == "__init__.py"
    for node in _runtime_nodes(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in GRAPH[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    assert _cycles() == []


def _layer(module: str) -> int:
    if module.startswith(("ptgpo_algos.commands", "ptgpo_algos.cli")):
        return 5
    if module.startswith("ptgpo_algos.bench"):
        return 4
    return {"ptgpo_envs": 0, "ptgpo_algos": 1, "baselines": 2, "leaderboard": 3}[module.split(".")[0]]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_only_go_down_the_layers(module):
    up = sorted(other for other in GRAPH[module] if _layer(other) > _layer(module))
    if module.startswith("leaderboard"):
        core = {other for other in GRAPH[module] if other.startswith("ptgpo_algos")}
        assert core <= {"ptgpo_algos.files", "ptgpo_algos.yaml_safe"}
    # The leaderboard only reads records: the core may name it (no import), the harness writes them.
    assert up == [], f"{module} imports from a higher layer: {up}"


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring left out (documentation is not length)."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        length -= first.end_lineno - first.lineno + 1
    return length


def test_functions_are_short_or_say_why():
    long = []
    for name, path in MODULES.items():
        if not name.startswith("ptgpo_algos"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = _code_lines(node)
                docstring = ast.get_docstring(node) or ""
                if length > MAX_FUNCTION_LINES and "Long because" not in docstring:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert long == [], "functions over 60 lines without a reason ('Long because ...') in their docstring"
