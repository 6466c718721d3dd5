"""A griffe extension: the code's Sphinx-style cross-references become links in the API reference.

The docstrings are written for readers of the source and use Sphinx roles (``:class:`TextEnv```,
``:func:`~ptgpo_algos.advantages.compute_advantages```) and reST literal blocks (``text::``).
mkdocstrings renders Markdown, where a role would show as raw text. This extension rewrites each role
into an autorefs link when its target is a public object of this project (so ``mkdocs build
--strict`` fails on a reference to something that is not documented), and into plain code otherwise
(Gymnasium, NumPy, private helpers). Targets resolve as Sphinx resolves them: absolute, relative to
the current class, module or package, or with a leading ``.``; ``title <target>`` shows the title.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ptgpo_envs", "ptgpo_algos", "baselines", "leaderboard", "ptgpo_harness")
ROLE = re.compile(r":(?:py:)?(class|mod|func|meth|data|attr|exc|obj):`(~?)([^`<>]+?)(?:\s*<([^`<>]+)>)?`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::(?=\n)")


@lru_cache(maxsize=1)
def _project() -> dict[str, griffe.Module]:
    """All five packages, loaded once on their own for resolving targets across packages."""
    collection = griffe.ModulesCollection()
    return {name: griffe.load(name, search_paths=[str(ROOT)], modules_collection=collection,
                              allow_inspection=False, resolve_aliases=True) for name in PACKAGES}


def _lookup(path: str) -> griffe.Object | None:
    head, _, rest = path.partition(".")
    package = _project().get(head)
    if package is None:
        return None
    try:
        found = package[rest] if rest else package
        return found.final_target if isinstance(found, griffe.Alias) else found
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve(target: str, context: griffe.Object) -> str | None:
    """The canonical path of ``target`` seen from ``context``, or None where it is not ours or private."""
    module = context if context.is_module else context.module
    scopes = [context.path] if context.is_class else []
    if context.parent is not None and context.parent.is_class:
        scopes.append(context.parent.path)
    scopes += [module.path, module.package.path if not module.is_package else module.path]
    if target.startswith("."):
        base = module.path if module.is_package else module.parent.path
        candidates = [base + target]
    else:
        candidates = [target] + [f"{scope}.{target}" for scope in scopes]
    for candidate in candidates:
        found = _lookup(candidate)
        if found is not None:
            if any(part.startswith("_") and part != "__init__" for part in found.path.split(".")):
                return None
            return found.path
    return None


def rewrite(text: str, context: griffe.Object) -> str:
    """``text`` with its roles as Markdown links or code, and reST's ``::`` as a plain colon."""

    def link(match: re.Match[str]) -> str:
        short, target = match.group(2) == "~", match.group(3).strip()
        if match.group(4):  # ``title <target>``: the title is shown as written
            shown, target = target, match.group(4).strip()
        else:
            shown = target.lstrip(".").rsplit(".", 1)[-1] if short else target.lstrip(".")
            if match.group(1) in ("func", "meth"):
                shown += "()"
        path = resolve(target, context)
        return f"[`{shown}`][{path}]" if path else f"`{shown}`"

    return LITERAL_BLOCK.sub(":", ROLE.sub(link, text))


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of a loaded package of this project (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        if pkg.name in PACKAGES:
            self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)
