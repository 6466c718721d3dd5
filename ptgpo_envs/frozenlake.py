"""``ptgpo/FrozenLake-v0``: Gymnasium's own FrozenLake, played in words.

The dynamics are :class:`gymnasium.envs.toy_text.frozen_lake.FrozenLakeEnv`'s, untouched; this class
only draws the lake as text, names the four moves and adds an expert. Each ``reset(seed=...)`` draws a
new map with Gymnasium's :func:`generate_random_map` (which only returns maps with a path from start to
goal), so a group of episodes sharing a seed shares a lake.

Kwargs: ``size`` (side of the generated map, default 4), ``frozen_prob`` (chance that a generated
tile is safe ice, from 0.6 to 1, default 0.8 as in Gymnasium), ``is_slippery`` (default ``False``:
each move goes where it says, so the task is about reading the map; with ``True`` a move goes sideways
two times in three, as in Gymnasium), or a fixed ``desc`` (rows of ``S F H G``) instead of generated
maps.

Actions: ``go left``, ``go right``, ``go up``, ``go down``, all four always admissible: as in Gymnasium,
walking into the edge of the lake leaves the agent where it is. Reward 1 on reaching the goal; falling
into a hole ends the episode with 0. The observation is a sentence about the last move, the map with
the agent as ``P``, and a legend; ``state_key`` is the agent's ``"row,column"`` (0-based). Snapshots
hold the inner Gymnasium environment's position and random generator, so slips replay exactly.
The expert walks a shortest safe path, or on slippery ice follows the policy that value iteration on
Gymnasium's transition table finds. ``progress()`` is the share of the start's distance to the goal
already covered.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import DOWN, LEFT, RIGHT, UP, FrozenLakeEnv, generate_random_map

from ptgpo_envs.core import TextEnv

__all__ = ["TextFrozenLakeEnv", "ACTIONS"]

#: Action text -> Gymnasium action index, in the order they are listed as admissible.
ACTIONS: dict[str, int] = {"go left": LEFT, "go right": RIGHT, "go up": UP, "go down": DOWN}
_NAMES = {index: text.removeprefix("go ") for text, index in ACTIONS.items()}
_MOVES = {LEFT: (0, -1), RIGHT: (0, 1), UP: (-1, 0), DOWN: (1, 0)}
_TILES = frozenset("SFHG")
#: Value iteration for the slippery expert stops once no value changes by more than this.
_VALUE_TOLERANCE = 1e-9
#: Slightly below 1, so that among equally safe routes the expert prefers the shorter.
_DISCOUNT = 0.999


def _validate_desc(desc: Any) -> tuple[str, ...]:
    if isinstance(desc, str) or not isinstance(desc, (list, tuple)) or not desc:
        raise ValueError(f"desc must be a non-empty list of strings such as ['SFF', 'FHF', 'FFG'], got {desc!r}")
    rows = tuple(desc)
    if not all(isinstance(row, str) for row in rows) or len({len(row) for row in rows}) != 1 or not rows[0]:
        raise ValueError(f"desc rows must be strings of one common length, got {desc!r}")
    tiles = "".join(rows)
    if set(tiles) - _TILES:
        raise ValueError(f"desc may only use the tiles S, F, H, G; got {sorted(set(tiles) - _TILES)}")
    if tiles.count("S") != 1 or "G" not in tiles:
        raise ValueError("desc needs exactly one start S and at least one goal G")
    if _goal_distances(rows)[_find(rows, "S")] is None:
        raise ValueError("desc has no path from the start S to a goal G that avoids the holes H")
    return rows


def _find(rows: tuple[str, ...], tile: str) -> tuple[int, int]:
    for r, row in enumerate(rows):
        if tile in row:
            return r, row.index(tile)
    raise ValueError(f"no {tile} in the map")


def _goal_distances(rows: tuple[str, ...]) -> dict[tuple[int, int], int | None]:
    """Fewest moves from each tile to the nearest goal, walking on safe ice only (None: unreachable)."""
    nrow, ncol = len(rows), len(rows[0])
    distance: dict[tuple[int, int], int | None] = {(r, c): None for r in range(nrow) for c in range(ncol)}
    frontier = deque()
    for r in range(nrow):
        for c in range(ncol):
            if rows[r][c] == "G":
                distance[r, c] = 0
                frontier.append((r, c))
    while frontier:
        r, c = frontier.popleft()
        for dr, dc in _MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < nrow and 0 <= nc < ncol and rows[nr][nc] in "SF" and distance[nr, nc] is None:
                distance[nr, nc] = distance[r, c] + 1
                frontier.append((nr, nc))
    return distance


class TextFrozenLakeEnv(TextEnv):
    """FrozenLake as text (see the module docstring)."""

    default_max_steps = 100

    def __init__(
        self,
        size: int | None = None,
        is_slippery: bool = False,
        desc: list[str] | None = None,
        frozen_prob: float = 0.8,
        *,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if not isinstance(is_slippery, bool):
            raise ValueError(f"is_slippery must be True or False, got {is_slippery!r}")
        # Below about 0.6 (site percolation's threshold) large random maps almost never have a path, and
        # Gymnasium's generator redraws until one does.
        if not isinstance(frozen_prob, (int, float)) or isinstance(frozen_prob, bool) or not 0.6 <= frozen_prob <= 1:
            raise ValueError(f"frozen_prob must be a probability from 0.6 to 1, got {frozen_prob!r}")
        self.fixed_desc = None if desc is None else _validate_desc(desc)
        if self.fixed_desc is not None:
            if size is not None and size != len(self.fixed_desc):
                raise ValueError(f"size={size} contradicts the {len(self.fixed_desc)}-row desc; pass one of them")
            size = len(self.fixed_desc)
        else:
            size = 4 if size is None else size
            if not isinstance(size, int) or isinstance(size, bool) or not 2 <= size <= 32:
                raise ValueError(f"size must be an integer from 2 to 32, got {size!r}")
        self.size = size
        self.is_slippery = is_slippery
        self.frozen_prob = float(frozen_prob)
        self._lake: FrozenLakeEnv | None = None
        self._rows: tuple[str, ...] = ()
        self._spaced_rows: list[str] = []
        self._policy: dict[int, int] | None = None
        self._distances: dict[tuple[int, int], int | None] | None = None

    # ----------------------------------------------------------------- world
    def _load_map(self, rows: tuple[str, ...]) -> None:
        if rows == self._rows and self._lake is not None:
            return
        self._rows = rows
        self._spaced_rows = [" ".join(row) for row in rows]
        self._lake = FrozenLakeEnv(desc=list(rows), is_slippery=self.is_slippery)
        self._policy = None
        self._distances = None

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        if self.fixed_desc is not None:
            rows = self.fixed_desc
        else:
            map_seed = int(self.np_random.integers(2**31))
            rows = tuple(generate_random_map(size=self.size, p=self.frozen_prob, seed=map_seed))
        self._load_map(rows)
        self._lake.reset(seed=int(self.np_random.integers(2**31)))
        return self._describe("You stand on the start S.")

    def _admissible_actions(self) -> list[str]:
        return list(ACTIONS)

    def _apply(self, action: str) -> tuple[str, float, bool]:
        move = ACTIONS[action]
        before = self._position()
        intended = self._clip(before, move)
        _, reward, terminated, _, _ = self._lake.step(move)
        after = self._position()
        tile = self._rows[after[0]][after[1]]
        if tile == "H":
            return self._describe("You fell into a hole. The episode is over."), float(reward), True
        if tile == "G":
            return self._describe("You reached the goal!"), float(reward), True
        where = f"row {after[0] + 1}, column {after[1] + 1}"
        if after != intended:
            sentence = f"You tried to go {_NAMES[move]} but slid on the ice to {where}."
        elif after == before:
            sentence = f"You cannot go {_NAMES[move]}: that is the edge of the lake. You are still at {where}."
        else:
            sentence = f"You went {_NAMES[move]} to {where}."
        return self._describe(sentence), 0.0, terminated

    def _clip(self, position: tuple[int, int], move: int) -> tuple[int, int]:
        dr, dc = _MOVES[move]
        return (
            min(max(position[0] + dr, 0), self._lake.nrow - 1),
            min(max(position[1] + dc, 0), self._lake.ncol - 1),
        )

    def _position(self) -> tuple[int, int]:
        return divmod(int(self._lake.s), self._lake.ncol)

    def _tile(self) -> str:
        r, c = self._position()
        return self._rows[r][c]

    def _describe(self, sentence: str) -> str:
        r, c = self._position()
        grid = self._spaced_rows.copy()
        grid[r] = f"{grid[r][: 2 * c]}P{grid[r][2 * c + 1 :]}"
        return (
            f"{sentence}\n"
            + "\n".join(grid)
            + "\nLegend: P you, S start, F frozen ice (safe), H hole, G goal. Row 1 is the top."
        )

    def _state_key(self) -> str:
        r, c = self._position()
        return f"{r},{c}"

    def _layout_key(self) -> str:
        # The task and the start are the same on every map: the map itself tells layouts apart.
        return "\n".join(self._rows)

    def _task(self) -> str:
        return "Walk across the frozen lake from the start S to the goal G without stepping into a hole H."

    def _won(self) -> bool:
        return self._tile() == "G"

    def progress(self) -> float:
        """``max(0, 1 - d / d_start)``: ``d`` the fewest safe moves from here to a goal, ``d_start`` from
        the start S (1 on a goal, 0 in a hole or farther than the start). On slippery ice, the distance as
        if the ice held."""
        if self._distances is None:
            self._distances = _goal_distances(self._rows)
        here = self._distances[self._position()]
        if here is None:
            return 0.0
        return max(0.0, 1.0 - here / self._distances[_find(self._rows, "S")])

    def _get_state(self) -> Any:
        lake = self._lake
        return (self._rows, int(lake.s), lake.lastaction, lake.np_random.bit_generator.state)

    def _set_state(self, state: Any) -> None:
        rows, position, last_action, rng_state = state
        self._load_map(rows)
        self._lake.s = position
        self._lake.lastaction = last_action
        # The slippery dynamics draw from the inner environment's generator.
        self._lake.np_random.bit_generator.state = rng_state

    # ----------------------------------------------------------------- expert
    def expert_action(self) -> str:
        """Shortest safe path on a non-slippery lake; the success-maximising policy on a slippery one."""
        if self._policy is None:
            self._policy = self._slippery_policy() if self.is_slippery else self._shortest_path_policy()
        action = self._policy.get(int(self._lake.s), LEFT)
        return next(text for text, index in ACTIONS.items() if index == action)

    def _shortest_path_policy(self) -> dict[int, int]:
        distance = _goal_distances(self._rows)
        ncol = len(self._rows[0])
        policy = {}
        for (r, c), d in distance.items():
            if d is None or d == 0:
                continue
            for action, (dr, dc) in _MOVES.items():
                if distance.get((r + dr, c + dc)) == d - 1:
                    policy[r * ncol + c] = action
                    break
        return policy

    def _slippery_policy(self) -> dict[int, int]:
        """Value iteration on Gymnasium's own transition table ``P``."""
        table = self._lake.P
        states = len(table)
        # Gymnasium lists one outcome per move on plain ice and three on slippery ice; pad to three.
        prob = np.zeros((states, 4, 3))
        target = np.zeros((states, 4, 3), dtype=np.int64)
        reward = np.zeros((states, 4, 3))
        going_on = np.zeros((states, 4, 3))
        for s in range(states):
            for a in range(4):
                for k, (p, t, r, done) in enumerate(table[s][a]):
                    prob[s, a, k], target[s, a, k], reward[s, a, k], going_on[s, a, k] = p, t, r, not done
        values = np.zeros(states)
        while True:
            q = (prob * (reward + _DISCOUNT * going_on * values[target])).sum(axis=2)
            updated = q.max(axis=1)
            if np.max(np.abs(updated - values)) < _VALUE_TOLERANCE:
                break
            values = updated
        return {s: int(np.argmax(q[s])) for s in range(states)}
