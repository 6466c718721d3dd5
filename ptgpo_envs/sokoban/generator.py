"""Procedural Sokoban rooms that are solvable by construction.

Like gym-sokoban (Schrader, 2018), a room is dug by a random walk and the puzzle is found by playing
backwards from the solved position (every box on its target), where the player *pulls* boxes. Every
pull undoes one push, so each position reached backwards can be solved forwards. Here the backward
play is a breadth-first search over pulls, so it also gives each position's exact fewest pushes to
solve; the puzzle is a position among the deepest found (ties: fewest boxes left on a target, then the
seeded generator's choice). Everything draws from the ``numpy`` generator passed in, so a seed fixes
the puzzle.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ptgpo_envs.sokoban.room import DIRECTIONS, Puzzle, Room

__all__ = ["generate_puzzle", "MIN_SIZE", "MAX_SIZE", "MAX_BOXES"]

MIN_SIZE, MAX_SIZE, MAX_BOXES = 6, 10, 3
#: gym-sokoban's digging masks: 3x3 stamps centred on the walker, as (row, column) offsets.
_MASKS = (
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, -1), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
)
_TURN_PROBABILITY = 0.35
#: The walk digs until this share of the room's interior is floor: enough room to manoeuvre, and
#: enough wall to make corners and corridors.
_FLOOR_FRACTION = 0.6
#: Backward search stops after this many positions; the deepest found so far is then used.
_SEARCH_LIMIT = 1500
_MAX_ATTEMPTS = 100


def _dig(rng: np.random.Generator, size: int) -> frozenset[int]:
    """Floor cells carved by a random walk inside the border walls."""
    inner = size - 2
    row, col = (int(x) for x in rng.integers(1, size - 1, size=2))
    directions = list(DIRECTIONS.values())
    dr, dc = directions[int(rng.integers(4))]
    floor = set()
    wanted = round(_FLOOR_FRACTION * inner * inner)
    while len(floor) < wanted:
        if rng.random() < _TURN_PROBABILITY:
            dr, dc = directions[int(rng.integers(4))]
        row = min(max(row + dr, 1), size - 2)
        col = min(max(col + dc, 1), size - 2)
        for mr, mc in _MASKS[int(rng.integers(len(_MASKS)))]:
            r, c = row + mr, col + mc
            if 1 <= r <= size - 2 and 1 <= c <= size - 2:
                floor.add(r * size + c)
    return frozenset(floor)


def _components(room: Room, boxes: frozenset[int]) -> list[set[int]]:
    """The separate areas the player could be in, given the boxes."""
    remaining = set(room.floor - boxes)
    areas = []
    while remaining:
        area = room.reachable(min(remaining), boxes)
        areas.append(area)
        remaining -= area
    return areas


def _play_backwards(room: Room) -> list[tuple[int, frozenset[int], set[int]]]:
    """Breadth-first search over pulls from the solved position: ``(pushes to solve, boxes, area)``."""
    solved = room.targets
    frontier = deque((0, solved, min(area)) for area in _components(room, solved))
    seen: set[tuple[frozenset[int], int]] = set()
    found = []
    while frontier and len(found) < _SEARCH_LIMIT:
        depth, boxes, standing = frontier.popleft()
        area = room.reachable(standing, boxes)
        key = (boxes, min(area))
        if key in seen:
            continue
        seen.add(key)
        found.append((depth, boxes, area))
        for box in sorted(boxes):
            for _, step in room.offsets:
                # The player at box - step walks back to box - 2 * step, pulling the box onto box - step.
                if box - step in area and box - 2 * step in room.floor and box - 2 * step not in boxes:
                    frontier.append((depth + 1, (boxes - {box}) | {box - step}, box - 2 * step))
    return found


def generate_puzzle(rng: np.random.Generator, size: int, num_boxes: int) -> Puzzle:
    """A solvable puzzle in a ``size`` x ``size`` room (walls included) with ``num_boxes`` boxes.

    Rooms whose hardest position needs fewer than ``num_boxes + 1`` pushes are too easy and are dug
    again.
    """
    for _ in range(_MAX_ATTEMPTS):
        floor = _dig(rng, size)
        if len(floor) < num_boxes + 3:
            continue
        cells = sorted(floor)
        targets = frozenset(int(c) for c in rng.choice(cells, size=num_boxes, replace=False))
        room = Room(width=size, height=size, floor=floor, targets=targets)
        positions = _play_backwards(room)
        best = max((depth, -len(boxes & targets)) for depth, boxes, _ in positions)
        if best[0] < num_boxes + 1:
            continue
        candidates = [(boxes, area) for depth, boxes, area in positions if (depth, -len(boxes & targets)) == best]
        boxes, area = candidates[int(rng.integers(len(candidates)))]
        player = sorted(area)[int(rng.integers(len(area)))]
        return Puzzle(room=room, boxes=boxes, player=player, optimal_pushes=best[0])
    raise RuntimeError(
        f"could not generate a {size}x{size} room with {num_boxes} boxes in {_MAX_ATTEMPTS} attempts; "
        "use a larger size or fewer boxes"
    )
