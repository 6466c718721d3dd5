"""Sokoban rooms and states on a flat grid, shared by the generator, the solver and the environment.

A room ``width`` cells wide numbers its cells ``row * width + column``; its border is always wall, so
moving by a direction's offset never wraps around a row. A position is the player's cell plus the set of box
cells; everything else (walls, targets) belongs to the :class:`Room`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

__all__ = ["DIRECTIONS", "Room", "Puzzle", "parse_level"]

#: Direction name -> (row step, column step), in the order actions are listed.
DIRECTIONS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


@dataclass(frozen=True)
class Room:
    """The fixed part of a puzzle: which cells are floor and which floor cells are targets."""

    width: int
    height: int
    floor: frozenset[int]
    targets: frozenset[int]

    def offset(self, direction: str) -> int:
        """The change of flat cell index for one move in ``direction``."""
        dr, dc = DIRECTIONS[direction]
        return dr * self.width + dc

    @cached_property
    def offsets(self) -> tuple[tuple[str, int], ...]:
        """``(direction, offset)`` for every direction."""
        return tuple((name, self.offset(name)) for name in DIRECTIONS)

    @cached_property
    def neighbours(self) -> dict[int, tuple[int, ...]]:
        """Floor cells next to each floor cell."""
        return {
            cell: tuple(cell + step for _, step in self.offsets if cell + step in self.floor)
            for cell in self.floor
        }

    @cached_property
    def push_distance(self) -> dict[int, int]:
        """Fewest pushes that bring a lone box from each cell to the nearest target.

        Cells missing here are dead squares: a box there can never reach a target. The distance ignores
        the other boxes and whether the player can walk around, so it never overestimates.
        """
        distance = {target: 0 for target in self.targets}
        frontier = deque(sorted(self.targets))
        while frontier:
            cell = frontier.popleft()
            for _, step in self.offsets:
                # A box pushed by `step` arrives at `cell` from `cell - step`, the player standing behind it.
                source, player = cell - step, cell - 2 * step
                if source in self.floor and player in self.floor and source not in distance:
                    distance[source] = distance[cell] + 1
                    frontier.append(source)
        return distance

    def reachable(self, player: int, boxes: frozenset[int] | set[int]) -> set[int]:
        """Cells the player can walk to without pushing anything."""
        seen = {player}
        stack = [player]
        neighbours = self.neighbours
        while stack:
            for nxt in neighbours[stack.pop()]:
                if nxt not in seen and nxt not in boxes:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    @cached_property
    def _background(self) -> list[str]:
        """The empty room's characters, rows separated by newlines."""
        chars = []
        for cell in range(self.width * self.height):
            if cell and cell % self.width == 0:
                chars.append("\n")
            if cell not in self.floor:
                chars.append("#")
            else:
                chars.append("." if cell in self.targets else "_")
        return chars

    def render(self, player: int, boxes: frozenset[int] | set[int]) -> str:
        """The grid in Sokoban's usual text notation, with ``_`` for plain floor."""
        chars = self._background.copy()
        width, targets = self.width, self.targets
        for box in boxes:
            chars[box + box // width] = "*" if box in targets else "$"
        chars[player + player // width] = "+" if player in targets else "@"
        return "".join(chars)


@dataclass(frozen=True)
class Puzzle:
    """A room, where the boxes and the player start, and the fewest pushes that solve it."""

    room: Room
    boxes: frozenset[int]
    player: int
    optimal_pushes: int


#: Level characters -> (floor, target, box, player); " " and "-" are floor too, as in the XSB format.
_LEVEL_CHARS = {
    "#": (False, False, False, False),
    "_": (True, False, False, False),
    " ": (True, False, False, False),
    "-": (True, False, False, False),
    ".": (True, True, False, False),
    "$": (True, False, True, False),
    "*": (True, True, True, False),
    "@": (True, False, False, True),
    "+": (True, True, False, True),
}


def parse_level(text: str) -> tuple[Room, int, frozenset[int]]:
    """``(room, player, boxes)`` from a level drawn as :meth:`Room.render` draws it.

    Rows may differ in length (the missing cells are wall); the floor must be enclosed by walls.
    """
    if not isinstance(text, str):
        raise TypeError(f"a level is text, got {type(text).__name__}")
    rows = text.strip("\n").split("\n")
    width, height = max(len(row) for row in rows), len(rows)
    floor, targets, boxes, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, char in enumerate(row.ljust(width, "#")):
            if char not in _LEVEL_CHARS:
                raise ValueError(f"unknown level character {char!r} at row {r + 1}; use one of {''.join(_LEVEL_CHARS)!r}")
            is_floor, is_target, is_box, is_player = _LEVEL_CHARS[char]
            cell = r * width + c
            if is_floor and (r in (0, height - 1) or c in (0, width - 1)):
                raise ValueError(f"the level must be enclosed by walls; row {r + 1}, column {c + 1} is open")
            if is_floor:
                floor.add(cell)
            if is_target:
                targets.add(cell)
            if is_box:
                boxes.add(cell)
            if is_player:
                players.append(cell)
    if len(players) != 1:
        raise ValueError(f"a level needs exactly one player (@ or +), found {len(players)}")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"a level needs as many targets as boxes (at least one); found {len(boxes)} boxes, {len(targets)} targets")
    return Room(width=width, height=height, floor=frozenset(floor), targets=frozenset(targets)), players[0], frozenset(boxes)
