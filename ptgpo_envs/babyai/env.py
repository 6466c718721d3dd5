"""``ptgpo/BabyAI-v0``: BabyAI and MiniGrid levels on the real ``minigrid`` package, played in words.

Kwargs: ``level``, a level name as minigrid registers it without prefix and version (``GoToLocal``,
``GoToLocalS6N3``, ``PutNextLocal``, ``OpenDoor``, ``KeyCorridorS3R1``, ``DoorKey-5x5``,
``MultiRoom-N2-S4``...; the list is :data:`ptgpo_envs.babyai.levels.LEVELS`), default ``GoToLocal``;
``max_steps``, the horizon, by default the level's own minigrid ``max_steps`` (64 for GoToLocal).

Each ``reset(seed=...)`` draws a seed for the minigrid environment from the episode's generator, so the
seed fixes the level's layout and mission. The dynamics, missions and their checking are minigrid's;
the text is the agent's partial 7x7 view in BabyAI-Text's words (:mod:`ptgpo_envs.babyai.text`), and
the actions are BabyAI-Text's six, each admissible only when it changes something
(:mod:`ptgpo_envs.babyai.actions`). Reward 1 when minigrid reports the mission done (BabyAI's
decaying reward is not used), which ends the episode. ``info["task"]`` is minigrid's mission
(``go to the red ball``), ``info["task_type"]`` the level's name, and ``state_key`` the view's
description: what the agent sees and carries, nothing of its history.

The horizon is counted here, not by minigrid (whose own ``max_steps`` is set to the same number, so
its reward stays positive) nor by a Gymnasium ``TimeLimit``: a restored episode truncates where the
original would have. Snapshots hold the minigrid environment's whole episode state, random generator
included (:mod:`ptgpo_envs.babyai.engine`), and the actions taken, from which the expert's memory is
rebuilt.

``expert_action()`` is minigrid's BabyAI bot on BabyAI levels (:mod:`ptgpo_envs.babyai.expert`) and a
shortest-plan search on DoorKey and MultiRoom (:mod:`ptgpo_envs.babyai.planner`), whose plan cost also
gives ``progress()`` there (None on BabyAI levels).
"""

from __future__ import annotations

import functools
from typing import Any

from ptgpo_envs.babyai import engine
from ptgpo_envs.babyai.actions import ACTION_TEXT, ACTIONS, admissible_actions
from ptgpo_envs.babyai.expert import BotAdvisor
from ptgpo_envs.babyai.levels import DEFAULT_LEVEL, get_level
from ptgpo_envs.babyai.planner import NoPlanError, distance_to_goal, plan_to_goal
from ptgpo_envs.babyai.text import describe
from ptgpo_envs.core import TextEnv

__all__ = ["BabyAIEnv", "MISSION_COMPLETE"]

MISSION_COMPLETE = "You completed the mission"


class BabyAIEnv(TextEnv):
    """BabyAI / MiniGrid levels as text (see the module docstring)."""

    def __init__(self, level: str = DEFAULT_LEVEL, *, max_steps: int | None = None, render_mode: str | None = None):
        self.level = get_level(level)
        super().__init__(max_steps=self.level.horizon if max_steps is None else max_steps, render_mode=render_mode)
        self._minigrid = engine.build(self.level, self.max_steps)
        #: The seed the episode's minigrid environment was reset with.
        self._minigrid_seed = 0
        #: The minigrid actions the episode has taken, from its start.
        self._trail: list[int] = []
        self._succeeded = False
        self._view: tuple[str, ...] = ()
        self._advisor: BotAdvisor | None = None

    @property
    def minigrid(self):
        """The minigrid environment being played (to read, or render; changing it desynchronises the text)."""
        return self._minigrid

    # ----------------------------------------------------------------- world
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self._minigrid_seed = int(self.np_random.integers(2**31))
        engine.reset(self._minigrid, self._minigrid_seed)
        self._trail = []
        self._succeeded = False
        self._advisor = None
        self._view = tuple(describe(self._minigrid))
        return "\n".join(self._view)

    def _admissible_actions(self) -> list[str]:
        return admissible_actions(self._minigrid)

    def _apply(self, action: str) -> tuple[str, float, bool]:
        move = ACTIONS[action]
        _, reward, terminated, _, _ = self._minigrid.step(move)
        self._trail.append(int(move))
        self._succeeded = bool(terminated and reward > 0)
        self._view = tuple(describe(self._minigrid))
        observation = "\n".join(self._view)
        if self._succeeded:
            return f"{MISSION_COMPLETE}\n{observation}", 1.0, True
        return observation, 0.0, bool(terminated)

    def _state_key(self) -> str:
        return "\n".join(self._view)

    def _layout_key(self) -> str:
        # The whole grid, not the agent's view: two starts that look alike may differ out of sight.
        grid = self._minigrid.grid
        start = (grid.width, grid.height, tuple(self._minigrid.agent_pos), int(self._minigrid.agent_dir))
        return f"{self._minigrid.mission}\n{start}\n{grid.encode().tobytes().hex()}"

    def _task(self) -> str:
        return self._minigrid.mission

    def _won(self) -> bool:
        return self._succeeded

    def _extra_info(self) -> dict[str, Any]:
        return {"task_type": self.level.name}

    def _get_state(self) -> Any:
        return (engine.get_state(self._minigrid), self._minigrid_seed, tuple(self._trail), self._succeeded, self._view)

    def _set_state(self, state: Any) -> None:
        minigrid_state, seed, trail, self._succeeded, self._view = state
        engine.set_state(self._minigrid, minigrid_state)
        if seed != self._minigrid_seed:
            self._advisor = None
        self._minigrid_seed, self._trail = seed, list(trail)

    def progress(self) -> float | None:
        """On DoorKey and MultiRoom (the planner's levels): ``max(0, 1 - d / d_start)``, ``d`` the cost of a
        fewest-actions plan onto the goal from here and ``d_start`` from the episode's start (1 once the
        mission is done). None on BabyAI levels, whose missions have no single goal cell."""
        if self.level.expert != "planner":
            return None
        if self._succeeded:
            return 1.0
        start = _start_distance(self.level.name, self.max_steps, self._minigrid_seed)
        try:
            here = distance_to_goal(self._minigrid)
        except NoPlanError:
            return 0.0
        return max(0.0, 1.0 - here / start) if start else 1.0

    # ----------------------------------------------------------------- expert
    def expert_action(self) -> str:
        """The BabyAI bot's action (BabyAI levels) or a shortest plan's (DoorKey, MultiRoom)."""
        if self.level.expert == "planner":
            return ACTION_TEXT[plan_to_goal(self._minigrid)]
        if self._advisor is None or not self._advisor.follows(self._trail):
            shadow = engine.build(self.level, self.max_steps)
            engine.reset(shadow, self._minigrid_seed)
            self._advisor = BotAdvisor(shadow)
        return self._advisor.advise(self._trail)


@functools.lru_cache(maxsize=4096)
def _start_distance(level: str, max_steps: int, seed: int) -> int:
    """The plan cost from the start of the planner level's episode of minigrid seed ``seed``, on a fresh
    copy of the level (the episode itself may have moved on); cached, as the slots of a group share it."""
    shadow = engine.build(get_level(level), max_steps)
    engine.reset(shadow, seed)
    return distance_to_goal(shadow)
