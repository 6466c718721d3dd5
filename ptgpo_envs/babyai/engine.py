"""The minigrid environment behind a level, set up for text play and forking.

* :func:`build` makes the level's minigrid environment with one change: its ``gen_obs`` returns None.
  minigrid computes the agent's image after every step and reset, which costs most of a step and which
  the text does not use (:mod:`ptgpo_envs.babyai.view` reads the grid directly). Grid generation,
  dynamics, missions and their verification are minigrid's own.
* :func:`reset` resets it with a seed, without the lines BabyAI's level generator prints for every
  rejected sample.
* :func:`get_state` / :func:`set_state` copy everything that changes during an episode: the grid and
  its objects, the agent's position, heading and load, the mission's verifier and the random generator
  (``np_random``). Walls, goals, floor and lava are never changed by minigrid, so copies share them
  instead of duplicating a grid's worth of objects; references to the environment itself (BabyAI's
  verifiers keep one) are re-pointed at the environment restored into, which may be another instance
  of the same level.
"""

from __future__ import annotations

import contextlib
import copy
import io
from functools import lru_cache
from typing import Any

import numpy as np
from minigrid.core.world_object import Floor, Goal, Lava, Wall

from ptgpo_envs.babyai.levels import Level

__all__ = ["build", "reset", "get_state", "set_state"]

#: Attributes fixed at construction (spaces are costly to copy); everything else is episode state.
_STATIC_ATTRIBUTES = frozenset({"action_space", "observation_space", "actions", "window", "clock"})
_IMMUTABLE_CELLS = (Wall, Goal, Floor, Lava)


class _EnvironmentItself:
    """Stands in a state for the environment it was taken from."""

    def __reduce__(self) -> str:
        return "_ENVIRONMENT_ITSELF"  # unpickles as the one instance, so pickled states restore too


_ENVIRONMENT_ITSELF = _EnvironmentItself()


def _no_image(self) -> None:
    return None


@lru_cache(maxsize=None)
def _text_class(cls: type) -> type:
    """``cls`` with ``gen_obs`` returning None (named like ``cls``, so reprs and errors read the same)."""
    return type(cls.__name__, (cls,), {"gen_obs": _no_image, "__module__": cls.__module__})


def build(level: Level, max_steps: int):
    """The minigrid environment of ``level``, with minigrid's own ``max_steps`` set to ``max_steps``."""
    return _text_class(level.environment_class())(**level.kwargs, max_steps=max_steps)


def reset(env, seed: int) -> None:
    """Reset ``env`` with ``seed``, silencing the lines BabyAI's level generator prints for rejected
    samples."""
    with contextlib.redirect_stdout(io.StringIO()):
        env.reset(seed=seed)


def _copy_object(obj: Any, memo: dict[int, Any]) -> Any:
    # minigrid reassigns object attributes (positions, door states) but never mutates them in place,
    # so a shallow copy is a full one, except for a box's contents.
    twin = copy.copy(obj)
    if obj.contains is not None:
        twin.contains = copy.deepcopy(obj.contains, memo)
    return twin


def _copy_generator(generator: np.random.Generator) -> np.random.Generator:
    bit_generator = type(generator.bit_generator)()
    bit_generator.state = generator.bit_generator.state
    return np.random.Generator(bit_generator)


def _copy_state(state: dict[str, Any], this: Any, that: Any) -> dict[str, Any]:
    """A deep copy of ``state`` in which references to ``this`` point to ``that``.

    The grid, its objects and the random generator are copied by hand (``deepcopy`` is ten times
    slower on them) and handed to ``deepcopy`` in its memo, so every other reference to them (the
    verifier's, the rooms') points to the copies.
    """
    memo: dict[int, Any] = {id(this): that}
    grid = state["grid"]
    for obj in (*grid.grid, state["carrying"]):
        if obj is not None and id(obj) not in memo:
            memo[id(obj)] = obj if isinstance(obj, _IMMUTABLE_CELLS) else _copy_object(obj, memo)
    twin = copy.copy(grid)
    twin.grid = [None if obj is None else memo[id(obj)] for obj in grid.grid]
    memo[id(grid)] = twin
    generator = state.get("_np_random")
    if generator is not None:
        memo[id(generator)] = _copy_generator(generator)
    return copy.deepcopy(state, memo)


def get_state(env) -> dict[str, Any]:
    """A deep copy of ``env``'s episode state (see the module docstring)."""
    state = {name: value for name, value in vars(env).items() if name not in _STATIC_ATTRIBUTES}
    return _copy_state(state, env, _ENVIRONMENT_ITSELF)


def set_state(env, state: dict[str, Any]) -> None:
    """Put ``env`` (the same level as the one ``state`` was taken from) in ``state``."""
    vars(env).update(_copy_state(state, _ENVIRONMENT_ITSELF, env))
