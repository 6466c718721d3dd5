"""``ptgpo/Sokoban-v0``: text Sokoban on generated rooms that are solvable by construction.

Kwargs: ``size``, the side of the square room including its border walls (6 to 10, default 6), and
``num_boxes`` (1 to 3, default 1): the 6x6 one-box setting of RAGEN and GiGPO. Each
``reset(seed=...)`` generates a room (see :mod:`ptgpo_envs.sokoban.generator`);
``reset(options={"level": text})`` plays a given level instead, drawn in the notation below (it must
be solvable).

Actions, per direction ``up``/``down``/``left``/``right``, each with its own distinct effect:

* ``move <direction>`` walks one cell; admissible only onto a free cell (floor or target, no box).
* ``push <direction>`` walks into the neighbouring box and pushes it one cell further; admissible only
  when there is a box there and the cell behind it is free.

So at most one action per direction is admissible, and walking into a wall or an immovable box is not
an action at all. Reward 1 when every box is on a target (which ends the episode), else 0; ``info``
adds ``score``, the share of boxes on targets (also ``progress()``). The observation is the grid in the usual Sokoban
notation (``#`` wall, ``_`` floor, ``@`` player, ``+`` player on a target, ``$`` box, ``*`` box on a
target, ``.`` empty target) plus a sentence; the grid text is also the ``state_key``.

:meth:`SokobanEnv.expert_action` follows a push-optimal solution (:mod:`ptgpo_envs.sokoban.solver`)
from the current position; ``optimal_pushes`` is the fewest pushes that solve the episode's start.
"""

from __future__ import annotations

from typing import Any

from ptgpo_envs.core import TextEnv
from ptgpo_envs.sokoban.generator import MAX_BOXES, MAX_SIZE, MIN_SIZE, generate_puzzle
from ptgpo_envs.sokoban.room import Room, parse_level
from ptgpo_envs.sokoban.solver import solve, solve_pushes

__all__ = ["SokobanEnv"]

_LEGEND = (
    "Legend: # wall, _ floor, @ you, + you on a target, $ box, * box on a target, . empty target."
)


class SokobanEnv(TextEnv):
    """Text Sokoban (see the module docstring)."""

    default_max_steps = 100

    def __init__(
        self,
        size: int = 6,
        num_boxes: int = 1,
        *,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if not isinstance(size, int) or isinstance(size, bool) or not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"size (room side, walls included) must be an integer from {MIN_SIZE} to {MAX_SIZE}, got {size!r}")
        if not isinstance(num_boxes, int) or isinstance(num_boxes, bool) or not 1 <= num_boxes <= MAX_BOXES:
            raise ValueError(f"num_boxes must be an integer from 1 to {MAX_BOXES}, got {num_boxes!r}")
        self.size = size
        self.num_boxes = num_boxes
        self._room: Room | None = None
        self._player = 0
        self._boxes: frozenset[int] = frozenset()
        self._grid = ""
        self.optimal_pushes = 0
        #: The expert's plan: state key -> next action along its last solution.
        self._plan: dict[str, str] = {}

    # ----------------------------------------------------------------- world
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        level = (options or {}).get("level")
        if level is None:
            puzzle = generate_puzzle(self.np_random, self.size, self.num_boxes)
            room, player, boxes, self.optimal_pushes = puzzle.room, puzzle.player, puzzle.boxes, puzzle.optimal_pushes
        else:
            room, player, boxes = parse_level(level)
            if boxes == room.targets:
                raise ValueError(f"this level is already solved: every box is on a target\n{level}")
            pushes = solve_pushes(room, boxes, player)
            if pushes is None:
                raise ValueError(f"this level cannot be solved (or needs a very long search):\n{level}")
            self.optimal_pushes = len(pushes)
        self._room, self._plan = room, {}
        self._place(player, boxes)
        if len(room.targets) == 1:
            return self._describe("Push the box ($) onto the target (.).")
        return self._describe("Push the boxes ($) onto the targets (.).")

    def _place(self, player: int, boxes: frozenset[int]) -> None:
        self._player, self._boxes = player, boxes
        self._grid = self._room.render(player, boxes)

    def _admissible_actions(self) -> list[str]:
        room, boxes, actions = self._room, self._boxes, []
        for name, step in room.offsets:
            nxt = self._player + step
            if nxt in boxes:
                behind = nxt + step
                if behind in room.floor and behind not in boxes:
                    actions.append(f"push {name}")
            elif nxt in room.floor:
                actions.append(f"move {name}")
        return actions

    def _apply(self, action: str) -> tuple[str, float, bool]:
        verb, name = action.split(" ")
        step = self._room.offset(name)
        player = self._player + step
        if verb == "push":
            self._place(player, (self._boxes - {player}) | {player + step})
            sentence = f"You pushed the box {name}."
        else:
            self._place(player, self._boxes)
            sentence = f"You moved {name}."
        if self._won():
            return self._describe("Every box is on a target: you solved the puzzle!"), 1.0, True
        return self._describe(sentence), 0.0, False

    def _on_targets(self) -> int:
        return len(self._boxes & self._room.targets)

    def _describe(self, sentence: str) -> str:
        return f"{sentence} Boxes on targets: {self._on_targets()} of {len(self._room.targets)}.\n{self._grid}\n{_LEGEND}"

    def _state_key(self) -> str:
        return self._grid

    def _task(self) -> str:
        boxes = len(self._room.targets)
        if boxes == 1:
            return "Push the box onto the target. You can push a box but never pull it."
        return f"Push all {boxes} boxes onto the targets. You can push a box but never pull it."

    def _won(self) -> bool:
        return self._boxes == self._room.targets

    def _extra_info(self) -> dict[str, Any]:
        return {"score": self.progress()}

    def progress(self) -> float:
        """The share of boxes on targets (``info["score"]``)."""
        return self._on_targets() / len(self._room.targets)

    # Rooms and box sets are immutable, so a snapshot needs no deep copy.
    def _get_state(self) -> Any:
        return (self._room, self._player, self._boxes, self.optimal_pushes)

    def _set_state(self, state: Any) -> None:
        room, player, boxes, self.optimal_pushes = state
        if room is not self._room:
            self._room, self._plan = room, {}
        self._place(player, boxes)

    # ----------------------------------------------------------------- expert
    def expert_action(self) -> str:
        """The next action of a push-optimal solution from here (see :mod:`ptgpo_envs.sokoban.solver`).

        A solution is computed once and followed while the episode stays on it. From a position that
        cannot be solved any more, the expert plays the first admissible action.
        """
        if self._grid not in self._plan:
            self._plan = {}
            actions = solve(self._room, self._boxes, self._player)
            if actions is None:
                admissible = self.admissible_actions()
                return admissible[0] if admissible else "move up"
            player, boxes = self._player, self._boxes
            for action in actions:
                self._plan[self._room.render(player, boxes)] = action
                verb, name = action.split(" ")
                player += self._room.offset(name)
                if verb == "push":
                    boxes = (boxes - {player}) | {player + self._room.offset(name)}
        return self._plan[self._grid]
