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

Threads. TextWorld parses every game's text grammar with one parser per process (``textworld.envs.pddl.
textgen._PARSER``), which is not thread-safe: two engines loading or stepping at once in two threads (a
server's sessions) corrupt each other's parse. Every call into an engine holds :data:`ENGINE_LOCK`. The
translation, the seconds-long part of loading a new game, is done before taking it (under a lock of its
own: fast-downward's translator keeps its options in module globals), so a game loading in one thread
holds up another thread's steps for the engine's own short work only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
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

#: Held by every call into an engine: TextWorld's shared grammar parser serves one thread at a time.
ENGINE_LOCK = threading.RLock()
#: Held by every translation: fast-downward's translator reads its options from module globals.
_TRANSLATION_LOCK = threading.Lock()
#: The translator itself (``_memoised_translation`` swaps the module's name for the memo while a block runs).
_PDDL2SAS = fast_downward.pddl2sas


class _TranslationCache:
    """An LRU memo of ``fast_downward.pddl2sas`` keyed by the digest of its inputs; thread-safe."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def translate(self, original, domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = hashlib.sha1(f"{optimize}\0{domain}\0{problem}".encode()).hexdigest()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        with _TRANSLATION_LOCK:
            result = original(domain, problem, verbose=verbose, optimize=optimize)
        with self._lock:
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
    fast_downward.pddl2sas = functools.partial(_CACHE.translate, _PDDL2SAS)
    try:
        yield
    finally:
        fast_downward.pddl2sas = _PDDL2SAS


def _translate_ahead(game_path: str) -> None:
    """Put ``game_path``'s two translations (as ``PddlState`` asks for them) in the memo, outside
    :data:`ENGINE_LOCK`; a file that cannot be translated is left for the engine's load to report."""
    try:
        with open(game_path, encoding="utf-8") as handle:
            game = json.load(handle)
        domain, problem = game["pddl_domain"], game["pddl_problem"]
        for optimize in (False, True):
            _CACHE.translate(_PDDL2SAS, domain, problem, optimize=optimize)
    except Exception:  # noqa: BLE001,S110 - the load below names the file and the kind of error
        pass


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
        _translate_ahead(game_path)
        try:
            with ENGINE_LOCK, _memoised_translation():
                self._engine.load(game_path)
        except Exception as error:  # noqa: BLE001 - TextWorld raises many types for a bad file
            # The parsers' messages quote the file; only the kind of error is said.
            detail = f"missing key {error}" if isinstance(error, KeyError) else type(error).__name__
            raise ValueError(f"{game_path}: not a loadable ALFWorld game ({detail}): the file is empty, "
                             "damaged or not a TextWorld PDDL game; restore it from the ALFWorld download, or "
                             "remove its folder from the split") from None
        self.game_path = game_path

    def reset(self) -> Any:
        """Start the game; the engine's state."""
        with ENGINE_LOCK, _memoised_translation():
            self.state = self._engine.reset()
        return self.state

    def step(self, command: str) -> Any:
        """Play ``command``; the engine's state after it."""
        with ENGINE_LOCK:
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
        with ENGINE_LOCK:
            return list(pddl_env._pddl_state.replan(pddl_env._entity_infos))

    @classmethod
    def acquire(cls, planner_infos: bool = False) -> ALFWorldEngine:
        """An idle engine of this process (or a new one): see :meth:`release`."""
        with ENGINE_LOCK:
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
        with ENGINE_LOCK:
            if self not in _IDLE_ENGINES:
                _IDLE_ENGINES.append(self)


_IDLE_ENGINES: list[ALFWorldEngine] = []
