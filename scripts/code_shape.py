"""The code's shape, measured from its source with ``ast``: import cycles, the longest functions and modules.

An import counts wherever it stands: at the top of a module, inside a function (deferred) or under
``if TYPE_CHECKING:`` (type-only). A type-only or deferred import still ties the two modules: neither
can be read, moved or tested without the other. ``tests/test_architecture.py`` checks the same graph.

Usage::

    python scripts/code_shape.py                 # the working tree
    python scripts/code_shape.py --rev f9fedc7   # a commit, read through git (nothing is checked out)

Prints one JSON object: ``cycles`` (each a sorted list of the modules of one strongly connected
component, with ``kinds``: which kinds of import close it), ``longest`` (per package, the longest
function and its lines, docstrings left out), ``over_60`` (per package, functions over 60 lines) and
``over_600`` (modules over 600 lines, with their lines).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ptgpo_envs", "ptgpo_algos", "baselines", "leaderboard", "ptgpo_harness")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600


def read_sources(rev: str | None) -> dict[str, str]:
    """Module name -> source of every module of the packages, in the working tree or at ``rev``."""
    if rev is None:
        paths = {p.relative_to(ROOT).as_posix(): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
        return {module_name(rel): path.read_text(encoding="utf-8") for rel, path in sorted(paths.items())}
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", *PACKAGES], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    return {module_name(rel): subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, check=True,
                                             capture_output=True, text=True).stdout
            for rel in sorted(listing) if rel.endswith(".py")}


def module_name(relative_path: str) -> str:
    return relative_path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _walk(tree: ast.AST, kind: str = "top"):
    """``(node, kind)`` for every node: kind is ``type-only`` under ``if TYPE_CHECKING:``, ``deferred``
    inside a function, ``top`` otherwise."""
    for child in ast.iter_child_nodes(tree):
        inner = kind
        if isinstance(tree, ast.If) and "TYPE_CHECKING" in ast.unparse(tree.test) and child is not tree.test:
            inner = "type-only"
        elif isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "top":
            inner = "deferred"
        yield child, inner
        yield from _walk(child, inner)


def import_edges(name: str, source: str, modules: set[str], is_package: bool) -> dict[str, str]:
    """The modules of ours that ``name`` imports -> the strongest kind of import (top > deferred > type-only).

    ``from package import submodule`` counts as the submodule, not the package.
    """
    rank = {"top": 2, "deferred": 1, "type-only": 0}
    out: dict[str, str] = {}
    for node, kind in _walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and rank[kind] >= rank.get(out.get(target, "type-only"), 0):
                out[target] = kind
    return out


def import_graph(sources: dict[str, str], packages: set[str] | None = None) -> dict[str, dict[str, str]]:
    modules = set(sources)
    packages = packages or {m for m in modules if any(o.startswith(m + ".") for o in modules)}
    return {name: import_edges(name, source, modules, name in packages) for name, source in sources.items()}


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for other in children:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(graph[other])))
                    break
                if other in on_stack:
                    low[node] = min(low[node], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return sorted(found)


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring left out (documentation is not length)."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        length -= first.end_lineno - first.lineno + 1
    return length


def functions(sources: dict[str, str]):
    """``(module, function, line, length, docstring)`` of every function and method."""
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield name, node.name, node.lineno, code_lines(node), ast.get_docstring(node) or ""


def module_lines(sources: dict[str, str]) -> dict[str, int]:
    """Each module's lines as a reader scrolls through them, documentation included."""
    return {name: len(source.splitlines()) for name, source in sources.items()}


def shape(sources: dict[str, str]) -> dict:
    graph = import_graph(sources)
    found = cycles(graph)
    longest: dict[str, dict] = {}
    over: dict[str, int] = {package: 0 for package in PACKAGES}
    for module, function, line, length, _ in functions(sources):
        package = module.split(".")[0]
        if length > MAX_FUNCTION_LINES:
            over[package] += 1
        if length > longest.get(package, {}).get("lines", 0):
            longest[package] = {"function": f"{module}.{function}", "line": line, "lines": length}
    return {
        "cycles": [{"modules": c, "kinds": sorted({graph[a][b] for a in c for b in graph[a] if b in c})}
                   for c in found],
        "longest": longest,
        "over_60": over,
        "over_600": {module: lines for module, lines in module_lines(sources).items() if lines > MAX_MODULE_LINES},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", help="a git commit to measure instead of the working tree")
    args = parser.parse_args()
    print(json.dumps(shape(read_sources(args.rev)), indent=1))


if __name__ == "__main__":
    main()
