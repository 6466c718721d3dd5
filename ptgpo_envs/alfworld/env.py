"""``ptgpo/ALFWorld-v0``: the ALFWorld benchmark on its real engine, under PTGPO's text contract.

Each episode plays one official (or generated) ALFWorld game in TextWorld's PDDL engine with
``alfworld``'s wrappers (:mod:`ptgpo_envs.alfworld.engine`):

* ``reset(seed=s)`` plays game ``s mod N`` of the split (sorted by path), so seeds ``0..N-1`` cover an
  evaluation split exactly once; ``reset()`` without a seed draws a game from the environment's RNG;
  ``options={"game": i}`` (index) or ``{"game": id}`` (``info["game_id"]``: the trial folder under the
  split folder, ``<task folder>/<trial>``) picks one of the split explicitly; ``{"game_path": path}`` plays
  any game file of this machine (a local option: ``ptgpo serve`` refuses it from clients).
* The first observation is the engine's intro (room and ``Your task is to: ...``); later ones are the
  engine's feedback. ``admissible_actions`` is the engine's list; ``state_key`` is the engine's observation text of the
  current state (an invalid action leaves it unchanged).
* ``info`` adds ``task_type`` (Pick, Look, Clean, Heat, Cool, Pick2), ``game_id``, ``gamefile`` and
  ``observation_style``; with ``expert_plan=True`` also ``expert_plan``, the planner's plan from the
  current state (planning costs 0.1-10 s a state, so it is opt-in). :meth:`ALFWorldEnv.expert_action` asks the same planner on demand.
* Both placement grammars (``put X in/on Y`` and ``move X to Y``) are accepted and mapped to the
  engine's admissible command.
* ``observation_style`` (:mod:`ptgpo_envs.observation_style`): every observation is the engine's own
  text in both styles, except after a command that is not admissible, which the engine never sees:
  ``"original"`` (default) answers the engine's own "Nothing happens.", ``"annotated"`` adds that
  the command was not understood (:data:`~ptgpo_envs.core.INVALID_ACTION_OBSERVATION`).
* The fast-downward state lives in C and cannot be copied, so ``snapshot()`` records the game and the
  commands played and ``restore()`` resets the engine and replays them: exact, since the engine is
  deterministic, and cheap for a game already seen (its PDDL translation is cached).
"""

from __future__ import annotations

import os
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from ptgpo_envs.alfworld.data import (
    SPLITS,
    GameRecord,
    default_generated_root,
    list_games,
    resolve_split_dir,
    task_type_of,
)
from ptgpo_envs.alfworld.grammar import match_command
from ptgpo_envs.core import MAX_ACTION_CHARS, TextEnv
from ptgpo_envs.observation_style import ORIGINAL, check_observation_style

__all__ = ["ALFWorldEnv"]

TASK_PREFIX = "Your task is to: "
#: What TextWorld's PDDL engine answers to a command it cannot apply.
ENGINE_INVALID_FEEDBACK = "Nothing happens."


def _default_data_path(split: str) -> str:
    """``$ALFWORLD_DATA``; for ``train`` without it, the generated set cached by ``ptgpo alfworld generate``."""
    env_value = os.environ.get("ALFWORLD_DATA")
    # Importing alfworld sets ALFWORLD_DATA to its own cache folder when unset: that one counts only
    # if alfworld-download filled it.
    alfworld_cache = os.path.join(os.path.expanduser("~"), ".cache", "alfworld")
    if env_value and os.path.abspath(env_value) != alfworld_cache:
        return env_value
    if env_value and (Path(env_value) / "json_2.1.1" / SPLITS[split]).is_dir():
        return env_value
    if split == "train":
        root = default_generated_root()
        if (root / "train").is_dir():
            return str(root)
        raise FileNotFoundError(
            f"no ALFWorld training games: pass data_path=..., set $ALFWORLD_DATA to the folder "
            f"alfworld-download filled, or generate a training set once with "
            f"`ptgpo alfworld generate 600 --out {root}`"
        )
    raise FileNotFoundError(
        f"ALFWorld split {split!r} needs the official game files: pass data_path=... or set "
        f"$ALFWORLD_DATA (the folder alfworld-download filled, or its json_2.1.1 folder)"
    )


def _require_engine_packages() -> None:
    """Fail at construction, not at the first reset, when the optional engine is not installed."""
    import importlib.util

    missing = [name for name in ("alfworld", "textworld", "fast_downward") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"ptgpo/ALFWorld-v0 needs the ALFWorld engine ({', '.join(missing)} not installed): "
                          'pip install -e ".[alfworld]" (it builds fast-downward: needs cmake and a C++ compiler)')


class ALFWorldEnv(TextEnv):
    """ALFWorld games on TextWorld's PDDL engine (see the module docstring for the contract)."""

    default_max_steps = 50
    file_options: ClassVar[frozenset[str]] = frozenset({"game_path"})

    def __init__(
        self,
        split: str = "train",
        data_path: str | os.PathLike | None = None,
        *,
        task_types: list[str] | tuple[str, ...] | None = None,
        expert_plan: bool = False,
        observation_style: str = ORIGINAL,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        _require_engine_packages()
        self.observation_style = check_observation_style(observation_style)
        if split not in SPLITS:
            raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {', '.join(SPLITS)}")
        if data_path is None:
            data_path = _default_data_path(split)
        self.split = split
        self.split_dir = resolve_split_dir(split, data_path)
        self._split_root = self.split_dir.resolve()  # games' paths are resolved ones
        self.games: list[GameRecord] = list_games(
            self.split_dir, tuple(task_types) if task_types is not None else None
        )
        self.game_ids: dict[str, int] = {self._game_id(game): index for index, game in enumerate(self.games)}
        self.expert_plan_in_info = bool(expert_plan)
        self._engine: Any = None  # created on first reset: importing alfworld costs ~1 s
        self._game: GameRecord | None = None
        self._commands: list[str] = []
        self._reset_seed: int | None = None
        self._plan: list[str] | None = None  # planner output cached for the current state
        self._task_text = ""

    # ----------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; ``seed`` chooses the game of the split (see the class docstring)."""
        self._reset_seed = seed
        return super().reset(seed=seed, options=options)

    def close(self) -> None:
        """Release the game engine, then close as Gymnasium does."""
        if self._engine is not None:
            self._release_engine()  # the finalizer: releases once, now
            self._engine = None
        super().close()

    # ----------------------------------------------------------------- world
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self._game = self._pick_game(options or {})
        self._start(self._game)
        intro = self._engine.feedback
        self._task_text = next(
            (line[len(TASK_PREFIX) :].strip() for line in intro.splitlines() if line.startswith(TASK_PREFIX)),
            "",
        )
        return intro

    def _pick_game(self, options: dict[str, Any]) -> GameRecord:
        unknown = set(options) - {"game", "game_path"}
        if unknown or len(options) > 1:
            raise ValueError(f"reset options {sorted(options)}: ALFWorld takes one of {{'game': index or id}} "
                             "or {'game_path': path}")
        if "game_path" in options:
            return self._game_at(options["game_path"])
        choice = options.get("game")
        if choice is None:
            if self._reset_seed is not None:
                return self.games[self._reset_seed % len(self.games)]
            return self.games[int(self.np_random.integers(len(self.games)))]
        if isinstance(choice, int) and not isinstance(choice, bool):
            if not 0 <= choice < len(self.games):
                raise ValueError(f"game index {choice} out of range: split {self.split!r} has {len(self.games)} games")
            return self.games[choice]
        if isinstance(choice, str):
            if choice not in self.game_ids:
                raise ValueError(f"no game {choice[:200]!r} in split {self.split!r}: give an index (0 to "
                                 f"{len(self.games) - 1}) or a game id as info['game_id'] shows it, e.g. "
                                 f"{self._game_id(self.games[0])!r}")
            return self.games[self.game_ids[choice]]
        raise ValueError(f"options['game'] must be a game index or id, got {type(choice).__name__}")

    def _game_id(self, game: GameRecord) -> str:
        """The game's trial folder under the split folder (``<task folder>/<trial>``); its own folder's
        path for a game outside the split."""
        folder = Path(game.path).parent
        try:
            return folder.relative_to(self._split_root).as_posix()
        except ValueError:
            return str(folder)

    def _game_at(self, choice: Any) -> GameRecord:
        """The game of a file (or its trial folder) anywhere on this machine."""
        if not isinstance(choice, (str, os.PathLike)):
            raise ValueError(f"options['game_path'] must be a path, got {type(choice).__name__}")
        path = str(Path(choice).resolve())
        if os.path.isdir(path):
            path = os.path.join(path, "game.tw-pddl")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ALFWorld game file at {path}")
        return GameRecord(path, task_type_of(path))

    def _start(self, game: GameRecord) -> None:
        """Put the engine at the start of ``game``."""
        if self._engine is None:
            from ptgpo_envs.alfworld.engine import ALFWorldEngine

            self._engine = ALFWorldEngine.acquire(planner_infos=self.expert_plan_in_info)
            # An environment dropped without close() still hands its engine back.
            self._release_engine = weakref.finalize(self, self._engine.release)
        if self._engine.game_path != game.path:
            self._engine.load(game.path)
        self._engine.reset()
        self._commands = []
        self._plan = None

    def _admissible_actions(self) -> list[str]:
        return self._engine.admissible_commands

    def match_action(self, action: str) -> str | None:
        """The admissible command that ``action`` names, exactly (case and spacing aside) or by placement
        (:func:`ptgpo_envs.alfworld.grammar.match_command`)."""
        if len(action) > MAX_ACTION_CHARS:
            return None
        return match_command(action, self.admissible_actions())

    def _apply(self, action: str) -> tuple[str, float, bool]:
        planned = self._plan
        self._engine.step(action)
        self._commands.append(action)
        # The rest of an optimal plan stays optimal in a deterministic game: reuse it when followed.
        self._plan = planned[1:] if planned and planned[0] == action and len(planned) > 1 else None
        won = self._engine.won
        return self._engine.feedback, float(won), won

    def _invalid_action_observation(self) -> str:
        if self.observation_style == ORIGINAL:
            return ENGINE_INVALID_FEEDBACK
        return super()._invalid_action_observation()

    def _state_key(self) -> str:
        # The engine's text of the current state: an action it never saw (invalid) leaves it as it was.
        return self._engine.feedback

    def _task(self) -> str:
        return self._task_text

    def _won(self) -> bool:
        return self._engine.won

    def _extra_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"task_type": self._game.task_type, "game_id": self._game_id(self._game),
                                "gamefile": self._game.path,
                                "observation_style": self.observation_style, "alfworld_version": _alfworld_version()}
        if self.expert_plan_in_info:
            info["expert_plan"] = self._engine.plan()
        return info

    def expert_action(self) -> str:
        """The first command of the PDDL planner's optimal plan from here (as ALFWorld's planner expert)."""
        if self._engine is None or self._done:
            raise RuntimeError("expert_action() needs a live episode: call reset() first")
        if not self._plan:
            self._plan = self._engine.plan()
        if not self._plan:
            raise RuntimeError(f"the planner found no plan from this state of {self._game.path}")
        return self._plan[0]

    # ----------------------------------------------------------------- forking
    def _get_state(self) -> Any:
        return (self._game, self._task_text, tuple(self._commands))

    def _set_state(self, state: Any) -> None:
        game, task_text, commands = state
        if self._game == game and tuple(self._commands) == commands:
            return
        self._game, self._task_text = game, task_text
        self._start(game)
        for command in commands:
            self._engine.step(command)
        self._commands = list(commands)


def _alfworld_version() -> str:
    """The installed ``alfworld`` package's version: 0.4.2 (verl-agent's) and 0.5.0 differ in grammar and
    receptacles, so a result is only comparable with one of the same version."""
    try:
        return metadata.version("alfworld")
    except metadata.PackageNotFoundError:  # imported from a source tree without its metadata
        return "unknown"
