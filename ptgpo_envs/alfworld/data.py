"""Where ALFWorld's games are and which of them each split plays.

The data root follows the official layout that ``alfworld-download`` leaves::

    $ALFWORLD_DATA/json_2.1.1/<split folder>/<task folder>/<trial>/{game.tw-pddl, traj_data.json}

Either the root or its ``json_2.1.1`` folder may be given. A game is listed when both files exist, the
game file says ``"solvable": true`` and the folder is not a movable/sliced variant: the same filter as
``alfworld``'s own ``AlfredTWEnv.collect_game_files``. Lists are sorted by path, so the game a seed picks
is the same on every machine holding the same files.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SPLITS",
    "TASK_TYPES",
    "GameRecord",
    "default_generated_root",
    "list_games",
    "resolve_split_dir",
    "task_type_of",
]

#: Split name (as in ALFWorld's configs) -> folder of the official release.
SPLITS: dict[str, str] = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
    # A 200-game sample of the training distribution that ships with the evaluation splits.
    "valid_train": "valid_train",
}

#: ALFRED task folder prefix -> the short name used in result tables.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "Pick",
    "look_at_obj_in_light": "Look",
    "pick_clean_then_place_in_recep": "Clean",
    "pick_heat_then_place_in_recep": "Heat",
    "pick_cool_then_place_in_recep": "Cool",
    "pick_two_obj_and_place": "Pick2",
}

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
RELEASE_FOLDER = "json_2.1.1"


@dataclass(frozen=True)
class GameRecord:
    """One playable game: its ``game.tw-pddl`` path and task type (short name)."""

    path: str
    task_type: str


def task_type_of(game_path: str | os.PathLike) -> str:
    """The short task type of a game, read from its task folder's prefix (``pick_two_obj...-CD-...``)."""
    folder = Path(game_path).parent.parent.name
    prefix = folder.split("-", 1)[0]
    if prefix not in TASK_TYPES:
        raise ValueError(
            f"{game_path}: task folder {folder!r} does not start with an ALFRED task type "
            f"({', '.join(TASK_TYPES)})"
        )
    return TASK_TYPES[prefix]


def default_generated_root() -> Path:
    """Where ``ptgpo alfworld generate`` caches the default training set (``$PTGPO_CACHE`` or ~/.cache)."""
    base = os.environ.get("PTGPO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ptgpo")
    return Path(base) / "alfworld" / "generated"


def resolve_split_dir(split: str, data_path: str | os.PathLike | None) -> Path:
    """The folder holding ``split``'s task folders under ``data_path`` (root or its json_2.1.1)."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {', '.join(SPLITS)}")
    root = Path(os.path.expandvars(os.path.expanduser(str(data_path))))
    folder = SPLITS[split]
    for candidate in (root / folder, root / RELEASE_FOLDER / folder):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"no ALFWorld split folder {folder!r} under {root} (looked in {root / folder} and "
        f"{root / RELEASE_FOLDER / folder}). Point data_path (or $ALFWORLD_DATA) at the folder that "
        f"alfworld-download filled, or at its {RELEASE_FOLDER} folder."
    )


@functools.lru_cache(maxsize=16)
def _scan(split_dir: str) -> tuple[GameRecord, ...]:
    games = []
    for root, _dirs, files in os.walk(split_dir):
        if TRAJ_FILE not in files or GAME_FILE not in files:
            continue
        if "movable" in root or "Sliced" in root:
            continue
        game_path = os.path.join(root, GAME_FILE)
        try:
            with open(game_path, encoding="utf-8") as handle:
                game = json.load(handle)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            raise ValueError(f"{game_path}: not a readable ALFWorld game ({type(error).__name__}: "
                             f"{' '.join(str(error).split())[:200]}); restore it from the ALFWorld data, or remove "
                             "its task folder") from None
        if not isinstance(game, dict) or "pddl_problem" not in game:
            raise ValueError(f"{game_path}: not an ALFWorld game (a JSON object with its pddl_problem); restore it "
                             "from the ALFWorld data, or remove its task folder")
        if not game.get("solvable", False):
            continue
        games.append(GameRecord(game_path, task_type_of(game_path)))
    return tuple(sorted(games, key=lambda game: game.path))


def list_games(split_dir: str | os.PathLike, task_types: tuple[str, ...] | None = None) -> list[GameRecord]:
    """The solvable games under ``split_dir``, sorted by path, optionally of some task types only."""
    games = _scan(str(Path(split_dir).resolve()))
    if task_types is not None:
        unknown = set(task_types) - set(TASK_TYPES.values())
        if unknown:
            raise ValueError(
                f"unknown task types {sorted(unknown)}; choose among {', '.join(TASK_TYPES.values())}"
            )
        games = tuple(game for game in games if game.task_type in task_types)
    if not games:
        raise FileNotFoundError(f"no solvable ALFWorld games under {split_dir}")
    return list(games)
