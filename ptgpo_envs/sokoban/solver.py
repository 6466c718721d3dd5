"""A push-optimal Sokoban solver: A* over box configurations with deadlock pruning.

Search nodes are box sets with the player's reachable area (named by its smallest cell), edges are
single pushes. The heuristic (each box's push distance to its nearest target, summed) never
overestimates and changes by at most one per push, so the first solution found has the fewest pushes.
Two kinds of deadlock are pruned: a box on a dead square (from which no target is reachable) and a
2x2 block of walls and boxes holding a box off target (none of those boxes can ever move again).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from ptgpo_envs.sokoban.room import Room

__all__ = ["freeze_deadlock", "solve_pushes", "solve", "walk"]

#: Nodes A* may expand before giving up; generated rooms need far fewer (hundreds).
DEFAULT_NODE_LIMIT = 200_000

Push = tuple[int, str]  # (box cell, direction)


def freeze_deadlock(room: Room, boxes: frozenset[int], cell: int) -> bool:
    """Whether ``cell`` (holding a box) is part of a 2x2 block of walls and boxes with a box off target."""
    width = room.width
    for top_left in (cell, cell - 1, cell - width, cell - width - 1):
        square = (top_left, top_left + 1, top_left + width, top_left + width + 1)
        if all(c not in room.floor or c in boxes for c in square) and any(
            c in boxes and c not in room.targets for c in square
        ):
            return True
    return False


def _walk_distances(room: Room, start: int, boxes: frozenset[int]) -> dict[int, int]:
    """Steps from ``start`` to each cell the player can walk to without pushing."""
    distance = {start: 0}
    frontier = deque([start])
    neighbours = room.neighbours
    while frontier:
        cell = frontier.popleft()
        for nxt in neighbours[cell]:
            if nxt not in distance and nxt not in boxes:
                distance[nxt] = distance[cell] + 1
                frontier.append(nxt)
    return distance


def solve_pushes(
    room: Room, boxes: frozenset[int], player: int, node_limit: int = DEFAULT_NODE_LIMIT
) -> list[Push] | None:
    """The fewest pushes that put every box on a target, or ``None`` if there are none (or the
    search expanded ``node_limit`` nodes without finding them).

    Among equally short solutions the search prefers fewer walking steps (exactly so when it never
    has to merge two ways of reaching the same area), so that the expert fits short horizons.
    """
    distance = room.push_distance
    if any(box not in distance for box in boxes):
        return None
    offsets = room.offsets
    counter = itertools.count()
    start = (boxes, min(room.reachable(player, boxes)))
    parents: dict[tuple[frozenset[int], int], tuple[tuple[frozenset[int], int], Push] | None] = {start: None}
    best_cost = {start: (0, 0)}  # (pushes, walking steps)
    frontier = [(sum(distance[b] for b in boxes), 0, 0, next(counter), start, player)]
    expanded = 0
    while frontier:
        _, pushes, steps, _, node, standing = heapq.heappop(frontier)
        if (pushes, steps) > best_cost[node]:
            continue
        node_boxes = node[0]
        if node_boxes <= room.targets:
            return _path(parents, node)
        expanded += 1
        if expanded > node_limit:
            return None
        walk_to = _walk_distances(room, standing, node_boxes)
        for box in sorted(node_boxes):
            for name, step in offsets:
                destination = box + step
                if (
                    box - step not in walk_to
                    or destination not in distance
                    or destination in node_boxes
                ):
                    continue
                moved = (node_boxes - {box}) | {destination}
                if freeze_deadlock(room, moved, destination):
                    continue
                child = (moved, min(room.reachable(box, moved)))
                cost = (pushes + 1, steps + walk_to[box - step] + 1)
                if cost < best_cost.get(child, (pushes + 2, 0)):
                    best_cost[child] = cost
                    parents[child] = (node, (box, name))
                    estimate = cost[0] + sum(distance[b] for b in moved)
                    heapq.heappush(frontier, (estimate, *cost, next(counter), child, box))
    return None


def _path(parents, node) -> list[Push]:
    pushes = []
    while parents[node] is not None:
        node, push = parents[node]
        pushes.append(push)
    return pushes[::-1]


def walk(room: Room, start: int, goal: int, boxes: frozenset[int] | set[int]) -> list[str] | None:
    """Direction names of a shortest walk from ``start`` to ``goal`` around the boxes."""
    previous: dict[int, tuple[int, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if cell == goal:
            steps = []
            while previous[cell] is not None:
                cell, name = previous[cell]
                steps.append(name)
            return steps[::-1]
        for name, step in room.offsets:
            nxt = cell + step
            if nxt in room.floor and nxt not in boxes and nxt not in previous:
                previous[nxt] = (cell, name)
                frontier.append(nxt)
    return None


def solve(
    room: Room, boxes: frozenset[int], player: int, node_limit: int = DEFAULT_NODE_LIMIT
) -> list[str] | None:
    """A push-optimal solution as action texts (``move ...``/``push ...``), or ``None``."""
    pushes = solve_pushes(room, boxes, player, node_limit)
    if pushes is None:
        return None
    actions = []
    boxes = set(boxes)
    for box, name in pushes:
        step = room.offset(name)
        path = walk(room, player, box - step, boxes)
        if path is None:  # the search only pushes from cells the player can reach
            raise AssertionError(f"solver produced an unreachable push {name} of the box at {box}")
        actions.extend(f"move {direction}" for direction in path)
        actions.append(f"push {name}")
        boxes.remove(box)
        boxes.add(box + step)
        player = box
    return actions
