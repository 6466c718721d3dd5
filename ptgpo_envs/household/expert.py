"""The household expert: the next action of a near-optimal plan, recomputed from any state.

The plan is the obvious one (fetch the goal object, condition it at its appliance, bring it to the
goal receptacle or the lamp), replanned at every call so it recovers from any detour. What the expert
may know is a choice: by default only the contents of receptacles the agent has seen (the state keeps
that record, and since only the agent moves things, what it saw is still true), so it searches the
unexplored receptacles where the object plausibly is, cheapest first (an open surface costs one step,
a closed container two). With ``omniscient=True`` it knows every location and never searches.
"""

from __future__ import annotations

from ptgpo_envs.household.catalog import LAMP_HOLDERS, SCENES
from ptgpo_envs.household.world import APPLIANCES, Layout, State

__all__ = ["next_action"]

_PLACES = {scene.name: scene.places for scene in SCENES}


def next_action(layout: Layout, state: State, *, omniscient: bool = False) -> str:
    """The expert's admissible action for ``state`` (which must not be won yet)."""
    return _Plan(layout, state, omniscient).next_action()


class _Plan:
    """Queries about one state, shared by the steps of the decision."""

    def __init__(self, layout: Layout, state: State, omniscient: bool):
        self.layout, self.state, self.omniscient = layout, state, omniscient
        self.where = [-1] * len(layout.objects)  # receptacle of each object, -1 when held
        for receptacle, contents in enumerate(state.contents):
            for obj in contents:
                self.where[obj] = receptacle

    # ----------------------------------------------------------------- facts
    def known(self, receptacle: int) -> bool:
        return self.omniscient or bool(self.state.seen >> receptacle & 1)

    def visible(self, receptacle: int) -> bool:
        return not self.layout.openable[receptacle] or bool(self.state.opened >> receptacle & 1)

    def cost(self, receptacle: int) -> int:
        """Steps before the agent can act on ``receptacle``'s contents."""
        return (self.state.location != receptacle) + (not self.visible(receptacle))

    def approach(self, receptacle: int) -> str | None:
        """The action that brings ``receptacle``'s contents within reach, None if they are."""
        name = self.layout.receptacles[receptacle]
        if self.state.location != receptacle:
            return f"go to {name}"
        if not self.visible(receptacle):
            return f"open {name}"
        return None

    def nearest(self, receptacles: list[int]) -> int:
        return min(receptacles, key=lambda r: (self.cost(r), r))

    # ----------------------------------------------------------------- decision
    def next_action(self) -> str:
        layout, state, task = self.layout, self.state, self.layout.task
        held = state.held
        if held >= 0 and layout.object_kinds[held] != task.obj:
            return self.put_down(held)
        if task.type.short == "Look":
            if held < 0:
                return self.fetch(exclude=-1)
            lamp_at = self.where[layout.lamp]
            if not self.known(lamp_at):
                return self.search(LAMP_HOLDERS)
            return self.approach(lamp_at) or f"use {layout.objects[layout.lamp]}"
        destination = self.destination()
        if held < 0:
            return self.fetch(exclude=destination if task.type.short == "Pick2" else -1)
        condition = task.type.condition
        if state.conditions[held] & condition != condition:
            appliance = self.nearest(
                [r for r, kind in enumerate(layout.receptacle_kinds) if kind == task.type.appliance]
            )
            if state.location != appliance:
                return f"go to {layout.receptacles[appliance]}"
            verb = APPLIANCES[task.type.appliance][0]
            return f"{verb} {layout.objects[held]} with {layout.receptacles[appliance]}"
        return self.approach(destination) or (
            f"move {layout.objects[held]} to {layout.receptacles[destination]}"
        )

    def destination(self) -> int:
        """The goal receptacle to fill: for Pick2 the one already holding a goal object, if any."""
        layout, task = self.layout, self.layout.task
        targets = [r for r, kind in enumerate(layout.receptacle_kinds) if kind == task.target]
        if task.type.short != "Pick2":
            return self.nearest(targets)
        kinds = layout.object_kinds

        def filled(r: int) -> int:
            return sum(kinds[o] == task.obj for o in self.state.contents[r])

        return min(targets, key=lambda r: (-filled(r), self.cost(r), r))

    def fetch(self, exclude: int) -> str:
        """Go for the cheapest known goal object outside ``exclude``, or search for one."""
        layout, task, state = self.layout, self.layout.task, self.state
        condition = task.type.condition
        candidates = [
            o for o, kind in enumerate(layout.object_kinds)
            if kind == task.obj and self.where[o] != exclude and self.known(self.where[o])
        ]
        if not candidates:
            return self.search(_PLACES[layout.scene][task.obj])

        def effort(o: int) -> tuple[int, int]:
            # Conditioning an object costs two steps (go to the appliance, use it).
            missing = state.conditions[o] & condition != condition
            return self.cost(self.where[o]) + 2 * missing, o

        obj = min(candidates, key=effort)
        receptacle = self.where[obj]
        return self.approach(receptacle) or (
            f"take {layout.objects[obj]} from {layout.receptacles[receptacle]}"
        )

    def search(self, likely_kinds: tuple[str, ...]) -> str:
        """Look into the cheapest unexplored receptacle, preferring kinds the thing is usually in."""
        layout = self.layout
        unexplored = [r for r in range(len(layout.receptacles)) if not self.known(r)]
        if not unexplored:
            raise RuntimeError("the expert searched every receptacle without finding what it needs")
        likely = [r for r in unexplored if layout.receptacle_kinds[r] in likely_kinds]
        receptacle = self.nearest(likely or unexplored)
        return self.approach(receptacle) or f"examine {layout.receptacles[receptacle]}"

    def put_down(self, held: int) -> str:
        """Free the hands: put the object here, or on the first open surface when in mid-room."""
        layout, here = self.layout, self.state.location
        if here < 0:
            surface = next(r for r, openable in enumerate(layout.openable) if not openable)
            return f"go to {layout.receptacles[surface]}"
        return self.approach(here) or f"move {layout.objects[held]} to {layout.receptacles[here]}"
