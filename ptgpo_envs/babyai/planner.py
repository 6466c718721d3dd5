"""A shortest-plan expert for MiniGrid's "get to the goal" levels (DoorKey, MultiRoom).

minigrid's BabyAI bot follows BabyAI instructions, which these levels do not have. This planner knows
the whole grid and searches (Dijkstra) over the agent's cell, its heading and the key it has picked up,
with minigrid's moves: turning, stepping forward, picking up a key, and toggling a closed door open
(one more step before going through; a locked one only with its key in hand). It returns the first
action of a fewest-actions plan onto the goal. Doors, once opened, stay open in a plan, so a plan that
passes a door twice pays for opening it twice: plans are optimal whenever no door is crossed twice,
as in these levels.

It is stateless: it plans from whatever state the environment is in, so it needs no care after
``restore()``. :func:`distance_to_goal` is the same search's cost (the environment's ``progress()``).
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Any

from minigrid.core.actions import Actions
from minigrid.core.constants import DIR_TO_VEC
from minigrid.core.world_object import Door, Key

__all__ = ["distance_to_goal", "plan_to_goal", "NoPlanError"]

#: Search node: x, y, heading, cell the carried key was picked up from (None: carrying what it started with).
_Node = tuple[int, int, int, "tuple[int, int] | None"]


class NoPlanError(RuntimeError):
    """The goal cannot be reached from this state."""


def _holding(env, picked: tuple[int, int] | None) -> Any:
    return env.carrying if picked is None else env.grid.get(*picked)


def _cell(env, x: int, y: int, picked: tuple[int, int] | None) -> Any:
    return None if picked == (x, y) else env.grid.get(x, y)


def _moves(env, node: _Node):
    """``(cost, first action, next node)`` for each move from ``node``."""
    x, y, heading, picked = node
    yield 1, Actions.left, (x, y, (heading - 1) % 4, picked)
    yield 1, Actions.right, (x, y, (heading + 1) % 4, picked)
    dx, dy = DIR_TO_VEC[heading]
    fx, fy = x + int(dx), y + int(dy)
    ahead = _cell(env, fx, fy, picked)
    if ahead is None or (ahead.can_overlap() and ahead.type != "lava"):
        yield 1, Actions.forward, (fx, fy, heading, picked)
    elif isinstance(ahead, Door):
        held = _holding(env, picked)
        if not ahead.is_locked or (isinstance(held, Key) and held.color == ahead.color):
            yield 2, Actions.toggle, (fx, fy, heading, picked)
    elif isinstance(ahead, Key) and env.carrying is None and picked is None:
        yield 1, Actions.pickup, (x, y, heading, (fx, fy))


def plan_to_goal(env) -> Actions:
    """The first action of a fewest-actions plan that walks the agent of ``env`` onto a goal cell."""
    cost, first = _search(env)
    if first is None:
        raise NoPlanError("the agent already stands on the goal")
    return first


def distance_to_goal(env) -> int:
    """The cost of a fewest-actions plan onto a goal cell (a door opened and passed counts 2; 0 on the goal)."""
    return _search(env)[0]


def _search(env) -> tuple[int, Actions | None]:
    """Dijkstra from the agent's state: the cheapest plan's cost and first action (None: on the goal)."""
    start: _Node = (int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir), None)
    tie = count()  # equal costs pop in insertion order, so plans are deterministic
    frontier: list[tuple[int, int, _Node, Actions | None]] = [(0, next(tie), start, None)]
    settled: set[_Node] = set()
    while frontier:
        cost, _, node, first = heapq.heappop(frontier)
        if node in settled:
            continue
        settled.add(node)
        here = _cell(env, node[0], node[1], node[3])
        if here is not None and here.type == "goal":
            return cost, first
        for step_cost, action, following in _moves(env, node):
            if following not in settled:
                heapq.heappush(frontier, (cost + step_cost, next(tie), following, first if first is not None else action))
    raise NoPlanError("no sequence of moves reaches the goal from here")
