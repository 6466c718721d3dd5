"""Open registries: named entries that this suite and other packages add to, looked up with "did you mean".

Every extensible part of the suite is a :class:`Registry` of this one kind: environments
(:data:`ptgpo_envs.ENVIRONMENTS`), advantage estimators, policy losses, rollout backends and baselines.
An entry is added in code::

    ESTIMATORS.register("my_estimator", spec)

or named by its import string, imported the first time the entry itself is asked for, so that checking
a name imports nothing of its implementation::

    SCORERS.register_lazy("value", "ptgpo_algos.rollouts.patr.collection:value_scorer")

or by another installed package, without editing this one, through the registry's entry-point group
(``pyproject.toml`` of that package)::

    [project.entry-points."ptgpo.estimators"]
    my_package = "my_package.advantages:register"

Each entry point is loaded the first time its registry is asked for an entry (environments: when
``ptgpo_envs`` is imported, so that ``gymnasium.make`` sees them); a loaded object that is callable is
called with no arguments (a ``register()`` function), a module registers on import. A registry is
queried at the moment a config is validated, never frozen at import, so entries added later (plugins,
tests, notebooks) are seen.

A plugin that fails to load breaks nothing else: the built-in entries and the other plugins keep
working, a warning names the distribution, the entry point and its group, and a name that is then
missing fails with that plugin's error beside the usual "did you mean". A benchmark pins the list of
installed entry points when it starts (:func:`pinned_plugins`): its cells load that list, so a plugin
installed or removed while it runs changes none of them.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import os
import warnings
from importlib import metadata
from typing import Any, Callable, Generic, Iterator, TypeVar

__all__ = ["PINNED_PLUGINS_ENV", "PluginWarning", "Registry", "RegistryError", "imported", "installed_plugins", "pinned_plugins"]

#: The environment variable that holds a pinned list of entry points (JSON); see :func:`pinned_plugins`.
PINNED_PLUGINS_ENV = "PTGPO_PLUGINS"
#: Entry-point groups of this suite start so.
_GROUP_PREFIX = "ptgpo."

T = TypeVar("T")


def imported(target: str) -> Any:
    """The object at ``target`` (``"module:attribute"``), its module imported now: how a registry's entry
    named by import string, or a spec's implementation named so, is resolved."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class _Lazy:
    """An entry named by its import string (``"module:attribute"``), not imported yet."""

    def __init__(self, target: str):
        self.target = target


class RegistryError(ValueError):
    """An unknown name (with the known ones and the closest match), or a name registered twice."""


class PluginWarning(UserWarning):
    """An installed plugin failed to load; the rest of the registry works."""


def installed_plugins() -> list[dict[str, str]]:
    """Every entry point of this suite's groups (``ptgpo.*``) that installed packages declare, or the
    pinned list when one is set: ``{"group", "name", "value", "dist"}`` each."""
    pinned = os.environ.get(PINNED_PLUGINS_ENV)
    if pinned:
        return json.loads(pinned)
    found, seen = [], set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or "?"
        if name.lower() in seen:  # a distribution shadowed by an earlier copy on the path
            continue
        seen.add(name.lower())
        found += [{"group": point.group, "name": point.name, "value": point.value, "dist": name}
                  for point in dist.entry_points if point.group.startswith(_GROUP_PREFIX)]
    return found


@contextlib.contextmanager
def pinned_plugins() -> Iterator[str]:
    """Pin the installed entry points for the duration (in :data:`PINNED_PLUGINS_ENV`, which child
    processes inherit): every process then loads the same plugins, whatever is installed meanwhile.
    Yields the pinned JSON; an outer pin is kept."""
    saved = os.environ.get(PINNED_PLUGINS_ENV)
    text = saved or json.dumps(installed_plugins())
    os.environ[PINNED_PLUGINS_ENV] = text
    try:
        yield text
    finally:
        if saved is None:
            os.environ.pop(PINNED_PLUGINS_ENV, None)


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` names them in messages), extensible through ``group``."""

    def __init__(self, kind: str, group: str | None = None):
        self.kind = kind
        self.group = group
        self._entries: dict[str, T] = {}
        self._plugins_loaded = group is None
        #: Plugins of ``group`` that failed to load: entry-point name -> why (distribution, entry point, error).
        self.broken: dict[str, str] = {}
        #: The entries plugins registered: name -> the distribution that did.
        self.origins: dict[str, str] = {}

    def register(self, name: str, entry: T, *, replace: bool = False) -> T:
        """Add ``entry`` under ``name``; a second entry under the same name needs ``replace=True``."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries and not replace and self._entries[name] is not entry:
            raise RegistryError(f"a {self.kind} named {name!r} is already registered; choose another name, or "
                                "pass replace=True to override it")
        self._entries[name] = entry
        return entry

    def register_lazy(self, name: str, target: str, *, replace: bool = False) -> None:
        """Add the entry at ``target`` (``"module:attribute"``) under ``name``, imported the first time
        :meth:`get` or :meth:`items` gives it: its name is known, checked and listed without importing it."""
        module, _, attribute = target.partition(":") if isinstance(target, str) else ("", "", "")
        if not module or not attribute:
            raise RegistryError(f"a lazy {self.kind} is named by 'module:attribute', got {target!r}")
        self.register(name, _Lazy(target), replace=replace)  # type: ignore[arg-type]

    def _resolved(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, _Lazy):
            entry = imported(entry.target)
            self._entries[name] = entry
        return entry

    def decorator(self, name: str, wrap: Callable[[Callable], T] | None = None) -> Callable[[Callable], Callable]:
        """``@registry.decorator("name")`` registers the decorated function (through ``wrap`` if given)."""

        def decorate(function: Callable) -> Callable:
            self.register(name, wrap(function) if wrap is not None else function)
            return function

        return decorate

    def unregister(self, name: str) -> None:
        """Remove the entry ``name``, if there is one."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry registered as ``name``; an unknown name raises :class:`RegistryError` naming the closest
        one and all of them."""
        self.load_plugins()
        try:
            known = name in self._entries
        except TypeError:  # an unhashable name
            known = False
        if not known:
            raise RegistryError(self.unknown(name))
        return self._resolved(name)

    def resolve(self, name: str) -> str:
        """The registered spelling of ``name``: itself, else the one entry equal to it ignoring case
        (``GiGPO`` -> ``gigpo``); otherwise ``name`` unchanged, for :meth:`get` to refuse."""
        if not isinstance(name, str) or name in self:
            return name
        same = [known for known in self._entries if known.lower() == name.lower()]
        return same[0] if len(same) == 1 else name

    def unknown(self, name: object) -> str:
        """The message for an unknown ``name``: the closest known name (ignoring case) and all of them,
        and the plugins that failed to load (the name may be theirs)."""
        names = self.names()
        by_lower = {known.lower(): known for known in names}
        close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
        broken = "".join(f"; {why}" for why in self.broken.values())
        return f"unknown {self.kind} {name!r}{hint}; choose one of {', '.join(names)}{broken}"

    def names(self) -> list[str]:
        """Every registered name, in registration order (plugins loaded first)."""
        self.load_plugins()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def items(self) -> list[tuple[str, T]]:
        """Every ``(name, entry)``, in registration order (plugins loaded first)."""
        self.load_plugins()
        return [(name, self._resolved(name)) for name in list(self._entries)]

    def load_plugins(self) -> None:
        """Load the entry points of ``group`` once (installed packages that extend this registry)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for plugin in installed_plugins():
            if plugin["group"] != self.group:
                continue
            point = metadata.EntryPoint(plugin["name"], plugin["value"], plugin["group"])
            before = set(self._entries)
            try:
                loaded = point.load()
                if callable(loaded):
                    loaded()
                self.origins.update({name: plugin["dist"] for name in self._entries if name not in before})
            except Exception as error:  # a plugin's own bug: reported, and the rest of the registry works
                why = (f"the plugin {plugin['name']} = {plugin['value']} of {plugin['dist']} (entry-point group "
                       f"{self.group!r}) failed to load: {type(error).__name__}: {error}; fix it or uninstall "
                       f"{plugin['dist']}")
                self.broken[plugin["name"]] = why
                warnings.warn(why, PluginWarning, stacklevel=2)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"
