"""ALFWorld's text engine: TextWorld's PDDL environment with ``alfworld``'s own wrappers.

:class:`ALFWorldEngine` is the stack ``alfworld`` builds in ``AlfredTWEnv.init_env`` (``tw-pddl`` engine,
:class:`AlfredDemangler`, :class:`AlfredInfos`, and :class:`AlfredExpert` with the *planner* expert passed
by keyword), created once and reloaded for each game: every TextWorld engine loads its own copy of
fast-downward's shared library, so one engine per environment keeps memory flat.

Speed. Loading or resetting a game translates its PDDL to fast-downward's SAS format twice (1-4 s,
nearly all of the reset time) although the result depends only on the game file. The translation is
memoised per game (:func:`_memoised_translation`), which makes a reset of an already-seen game, and so a
replay-based restore, cost a few engine steps instead. Engines are pooled per process
(:meth:`ALFWorldEngine.acquire` / :meth:`ALFWorldEngine.release`) because their fast-downward library
copies cannot safely be unloaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import OrderedDict
from typing import Any, Iterator

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import (
    AlfredDemangler,
    AlfredExpert,
    AlfredExpertType,
    AlfredInfos,
)
from textworld.envs.pddl import PddlEnv

__all__ = ["ALFWorldEngine"]

#: Translations kept per process (each is a few hundred KB of SAS text).
TRANSLATION_CACHE_SIZE = 64


class _TranslationCache:
    """An LRU memo of ``fast_downward.pddl2sas`` keyed by the digest of its inputs."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[str, Any] = OrderedDict()

    def translate(self, original, domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = hashlib.sha1(f"{optimize}\0{domain}\0{problem}".encode()).hexdigest()
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        result = original(domain, problem, verbose=verbose, optimize=optimize)
        self._entries[key] = result
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return result


_CACHE = _TranslationCache(TRANSLATION_CACHE_SIZE)


@contextlib.contextmanager
def _memoised_translation() -> Iterator[None]:
    """Within the block, TextWorld's ``PddlState`` gets cached SAS translations.

    ``PddlState`` only reads the translated task, so sharing one translation between resets of the
    same game changes nothing but the time. The swap is undone on exit.
    """
    original = fast_downward.pddl2sas
    fast_downward.pddl2sas = functools.partial(_CACHE.translate, original)
    try:
        yield
    finally:
        fast_downward.pddl2sas = original


class ALFWorldEngine:
    """One ALFWorld game engine (TextWorld ``tw-pddl`` + alfworld's wrappers), reloadable per game.

    With ``planner_infos=True`` the :class:`AlfredExpert` planner wrapper is in the stack and every
    state carries ``extra.expert_plan`` (a fresh plan each step, as ALFWorld's DAgger training gets it;
    0.1-10 s a step). Without it :meth:`plan` asks the same planner only when called.
    """

    def __init__(self, planner_infos: bool = False):
        request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        engine: Any = PddlEnv(request_infos)
        wrappers: list[Any] = [AlfredDemangler(shuffle=False), AlfredInfos]
        if planner_infos:
            request_infos.extras.append("expert_plan")
            wrappers.append(AlfredExpert(expert_type=AlfredExpertType.PLANNER))
        for wrapper in wrappers:
            engine = wrapper(engine)
        self._engine = engine
        self.planner_infos = planner_infos
        self.game_path: str | None = None
        self.state: Any = None

    def load(self, game_path: str) -> None:
        """Load a game file; a file the engine cannot read raises ``ValueError`` naming it."""
        self.game_path = None
        try:
            with _memoised_translation():
                self._engine.load(game_path)
        except Exception as error:  # noqa: BLE001 - TextWorld raises many types for a bad file
            raise ValueError(f"{game_path}: not a loadable ALFWorld game ({type(error).__name__}: "
                             f"{str(error)[:200]}); the file is empty or damaged: restore it from the "
                             "ALFWorld download, or remove its folder from the split") from None
        self.game_path = game_path

    def reset(self) -> Any:
        """Start the game; the engine's state."""
        with _memoised_translation():
            self.state = self._engine.reset()
        return self.state

    def step(self, command: str) -> Any:
        """Play ``command``; the engine's state after it."""
        self.state, _score, _done = self._engine.step(command)
        return self.state

    @property
    def admissible_commands(self) -> list[str]:
        """The commands the engine accepts now."""
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        """Whether the game's goal is reached."""
        return bool(self.state["won"])

    @property
    def feedback(self) -> str:
        """The engine's text after the last command."""
        return str(self.state.feedback)

    def plan(self) -> list[str]:
        """The planner's optimal command sequence from the current state ([] when none exists)."""
        if self.planner_infos:
            return list(self.state["extra.expert_plan"])
        # The same call TextWorld's PddlEnv makes for ``policy_commands``.
        pddl_env = self._engine.unwrapped
        return list(pddl_env._pddl_state.replan(pddl_env._entity_infos))

    @classmethod
    def acquire(cls, planner_infos: bool = False) -> ALFWorldEngine:
        """An idle engine of this process (or a new one): see :meth:`release`."""
        for engine in _IDLE_ENGINES:
            if engine.planner_infos == planner_infos:
                _IDLE_ENGINES.remove(engine)
                return engine
        return cls(planner_infos)

    def release(self) -> None:
        """Hand the engine back to the process's pool for the next environment to reuse.

        Engines are pooled rather than freed: unloading fast-downward's library copy
        (``fast_downward.close_lib``) and loading another one crashes the process (measured here after
        a handful of cycles), and keeping every copy would leak 34 MB (the library) per environment ever made.
        """
        if self not in _IDLE_ENGINES:
            _IDLE_ENGINES.append(self)


_IDLE_ENGINES: list[ALFWorldEngine] = []
