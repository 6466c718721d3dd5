"""Open registries: named entries that this suite and other packages add to, looked up with "did you mean".

Every extensible part of the suite is a :class:`Registry` of this one kind: environments
(:data:`ptgpo_envs.ENVIRONMENTS`), advantage estimators, policy losses, rollout backends and baselines.
An entry is added in code::

    ESTIMATORS.register("my_estimator", spec)

or by another installed package, without editing this one, through the registry's entry-point group
(``pyproject.toml`` of that package)::

    [project.entry-points."ptgpo.estimators"]
    my_package = "my_package.advantages:register"

Each entry point is loaded the first time its registry is asked for an entry; a loaded object that is
callable is called with no arguments (a ``register()`` function), a module registers on import. A
registry is queried at the moment a config is validated, never frozen at import, so entries added
later (plugins, tests, notebooks) are seen.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

__all__ = ["Registry", "RegistryError"]

T = TypeVar("T")


class RegistryError(ValueError):
    """An unknown name (with the known ones and the closest match), or a name registered twice."""


class Registry(Generic[T]):
    """Named entries of one kind (``kind`` names them in messages), extensible through ``group``."""

    def __init__(self, kind: str, group: str | None = None):
        self.kind = kind
        self.group = group
        self._entries: dict[str, T] = {}
        self._plugins_loaded = group is None

    def register(self, name: str, entry: T, *, replace: bool = False) -> T:
        """Add ``entry`` under ``name``; a second entry under the same name needs ``replace=True``."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries and not replace and self._entries[name] is not entry:
            raise RegistryError(f"a {self.kind} named {name!r} is already registered; choose another name, or "
                                "pass replace=True to override it")
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
            return self._entries[name]
        except (KeyError, TypeError):
            raise RegistryError(self.unknown(name)) from None

    def unknown(self, name: object) -> str:
        """The message for an unknown ``name``: the closest known name and all of them."""
        names = self.names()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.kind} {name!r}{hint}; choose one of {', '.join(names)}"

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
        return list(self._entries.items())

    def load_plugins(self) -> None:
        """Load the entry points of ``group`` once (installed packages that extend this registry)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group):
            loaded = point.load()
            if callable(loaded):
                loaded()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"
