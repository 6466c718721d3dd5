"""The BabyAI and MiniGrid levels that ``ptgpo/BabyAI-v0`` plays, by name.

A level's name is its id in minigrid's own registry without the ``BabyAI-``/``MiniGrid-`` prefix and
the version: ``level="GoToLocalS6N3"`` is ``BabyAI-GoToLocalS6N3-v0``, ``level="DoorKey-6x6"`` is
``MiniGrid-DoorKey-6x6-v0``. The size is part of the name, as minigrid spells it: ``S6N3`` a 6x6 room
(walls included) with 3 distractors, ``S3R1`` rooms of side 3 in one row, ``N2-S4`` two rooms of side at
most 4. Names are matched ignoring case, and a full minigrid id is accepted too.

Each level is built from its minigrid class with the kwargs minigrid registers for that id, except two:

* ``PickupLocal`` is not registered by minigrid; it is BabyAI's original ``Level_PickupLocal`` (pick up
  an object in a single room with 8 distractors), built on minigrid's ``LevelGen`` with that level's
  settings (BabyAI's ``force_colors``, which minigrid's ``LevelGen`` lacks, is left out).
* ``MultiRoom-N4-S5`` has four rooms, as its name says (minigrid's ``-v1``; its ``-v0`` keeps six rooms
  under this name for backward compatibility).

The horizon of each level is the ``max_steps`` minigrid gives it: room side squared times rooms times
navigations for BabyAI levels (64 for GoToLocal, 128 for PutNextLocal), ``30 * side**2`` for
KeyCorridor, ``10 * size**2`` for DoorKey, ``20 * rooms`` for MultiRoom.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

__all__ = ["Level", "LEVELS", "DEFAULT_LEVEL", "get_level", "level_names"]

#: Which expert plays a level (see :mod:`ptgpo_envs.babyai.expert`).
ExpertKind = Literal["bot", "planner"]


@dataclass(frozen=True)
class Level:
    """One playable level: how to build its minigrid environment, its horizon and its expert."""

    name: str
    #: ``"module:Class"`` of the minigrid environment (imported only when a level is built).
    entry_point: str
    #: Constructor kwargs, as minigrid registers them for this level.
    kwargs: Mapping[str, Any]
    #: Default episode length: the ``max_steps`` minigrid gives the level.
    horizon: int
    #: ``"bot"``: minigrid's BabyAI bot follows the mission; ``"planner"``: a shortest path to the goal.
    expert: ExpertKind
    #: The id minigrid registers for the same level, or None where minigrid has none.
    minigrid_id: str | None = field(default=None)

    def environment_class(self) -> type:
        """The minigrid environment class of this level, imported from its entry point."""
        module, _, name = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), name)


def _babyai(name: str, cls: str, horizon: int, **kwargs: Any) -> Level:
    return Level(name, f"minigrid.envs.babyai:{cls}", MappingProxyType(kwargs), horizon, "bot", f"BabyAI-{name}-v0")


def _minigrid(name: str, cls: str, horizon: int, minigrid_id: str, **kwargs: Any) -> Level:
    return Level(name, f"minigrid.envs:{cls}", MappingProxyType(kwargs), horizon, "planner", minigrid_id)


_GOTO_LOCAL_SIZES = ((5, 2), (6, 2), (6, 3), (6, 4), (7, 4), (7, 5), (8, 2), (8, 3), (8, 4), (8, 5), (8, 6), (8, 7))

_LEVELS: tuple[Level, ...] = (
    _babyai("GoToObjS4", "GoToObj", 16, room_size=4),
    _babyai("GoToObj", "GoToObj", 64),
    _babyai("GoToRedBallNoDists", "GoToRedBallNoDists", 64),
    _babyai("GoToLocal", "GoToLocal", 64),
    *(_babyai(f"GoToLocalS{s}N{n}", "GoToLocal", s * s, room_size=s, num_dists=n) for s, n in _GOTO_LOCAL_SIZES),
    Level(
        "PickupLocal",
        "minigrid.envs.babyai.core.levelgen:LevelGen",
        MappingProxyType({
            "room_size": 8, "num_rows": 1, "num_cols": 1, "num_dists": 8, "locked_room_prob": 0,
            "locations": False, "unblocking": False, "implicit_unlock": False,
            "action_kinds": ("pickup",), "instr_kinds": ("action",),
        }),
        64,
        "bot",
    ),
    _babyai("PutNextLocalS5N3", "PutNextLocal", 50, room_size=5, num_objs=3),
    _babyai("PutNextLocalS6N4", "PutNextLocal", 72, room_size=6, num_objs=4),
    _babyai("PutNextLocal", "PutNextLocal", 128),
    _babyai("OpenRedDoor", "OpenRedDoor", 50),
    _babyai("OpenDoor", "OpenDoor", 576),
    _babyai("UnlockLocal", "UnlockLocal", 576),
    _babyai("UnlockLocalDist", "UnlockLocal", 576, distractors=True),
    _babyai("Unlock", "Unlock", 576),
    _babyai("KeyCorridorS3R1", "KeyCorridor", 270, room_size=3, num_rows=1),
    _babyai("KeyCorridorS3R2", "KeyCorridor", 270, room_size=3, num_rows=2),
    _babyai("KeyCorridorS3R3", "KeyCorridor", 270, room_size=3, num_rows=3),
    _babyai("KeyCorridorS4R3", "KeyCorridor", 480, room_size=4, num_rows=3),
    _babyai("KeyCorridorS5R3", "KeyCorridor", 750, room_size=5, num_rows=3),
    _babyai("KeyCorridorS6R3", "KeyCorridor", 1080, room_size=6, num_rows=3),
    *(_minigrid(f"DoorKey-{s}x{s}", "DoorKeyEnv", 10 * s * s, f"MiniGrid-DoorKey-{s}x{s}-v0", size=s) for s in (5, 6, 8, 16)),
    _minigrid("MultiRoom-N2-S4", "MultiRoomEnv", 40, "MiniGrid-MultiRoom-N2-S4-v0",
              minNumRooms=2, maxNumRooms=2, maxRoomSize=4),
    _minigrid("MultiRoom-N4-S5", "MultiRoomEnv", 80, "MiniGrid-MultiRoom-N4-S5-v1",
              minNumRooms=4, maxNumRooms=4, maxRoomSize=5),
    _minigrid("MultiRoom-N6", "MultiRoomEnv", 120, "MiniGrid-MultiRoom-N6-v0", minNumRooms=6, maxNumRooms=6),
)

#: Every level by its name, in the order of the documentation's table.
LEVELS: Mapping[str, Level] = MappingProxyType({level.name: level for level in _LEVELS})
DEFAULT_LEVEL = "GoToLocal"

_BY_FOLDED_NAME = {name.casefold(): level for name, level in LEVELS.items()}
_BY_FOLDED_NAME.update({level.minigrid_id.casefold(): level for level in _LEVELS if level.minigrid_id})


def level_names() -> list[str]:
    """The names of every supported level, in :data:`LEVELS` order."""
    return list(LEVELS)


def get_level(name: Any) -> Level:
    """The level called ``name`` (its name here or its minigrid id, any case); ValueError otherwise."""
    if not isinstance(name, str) or name.strip().casefold() not in _BY_FOLDED_NAME:
        raise ValueError(
            f"level must be one of {', '.join(LEVELS)} (or the minigrid id of one of them, such as "
            f"'BabyAI-GoToLocal-v0'); got {name!r}"
        )
    return _BY_FOLDED_NAME[name.strip().casefold()]
