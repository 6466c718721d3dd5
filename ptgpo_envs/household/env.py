"""``ptgpo/Household-v0``: the game's rules and its ALFWorld-style text, as a :class:`TextEnv`."""

from __future__ import annotations

from typing import Any

from ptgpo_envs.core import TextEnv
from ptgpo_envs.household import expert
from ptgpo_envs.household.world import (
    APPLIANCES,
    CLEAN,
    COOL,
    DEFAULT_DIFFICULTY,
    HOT,
    TASK_TYPES,
    Layout,
    State,
    generate,
    parse_difficulty,
    parse_task_type,
)

__all__ = ["HouseholdEnv"]

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"

# Indexed by a condition bit set: the words describing it and the tag state_key appends.
_CONDITION_WORDS = tuple(
    " and ".join(word for bit, word in ((CLEAN, "clean"), (HOT, "hot"), (COOL, "cool")) if flags & bit)
    for flags in range(8)
)
_CONDITION_TAGS = tuple(f":{words.replace(' and ', '+')}" if words else "" for words in _CONDITION_WORDS)


# Bits of State.subgoals: the subgoals HouseholdEnv's docstring lists under ``subgoal_reward``.
_HOLD, _CONDITIONED, _LAMP, _PLACED, _HOLD_SECOND = 1, 2, 4, 8, 16


def list_things(names: list[str]) -> str:
    """ALFWorld's enumeration: "nothing", "a apple 1", "a apple 1, and a egg 2", "a x, a y, and a z"."""
    if not names:
        return "nothing"
    if len(names) == 1:
        return f"a {names[0]}"
    return ", ".join(f"a {name}" for name in names[:-1]) + f", and a {names[-1]}"


class HouseholdEnv(TextEnv):
    """A procedurally generated ALFWorld-like room, played with ALFWorld's commands.

    Keyword arguments:

    * ``difficulty``: ``"easy"`` (5-7 receptacles, few containers, 30 steps), ``"medium"`` (the
      default: 11-15 receptacles, 40 steps) or ``"hard"`` (19-25 receptacles, mostly containers, the
      goal objects hidden in closed ones, 50 steps); see :data:`~ptgpo_envs.household.DIFFICULTIES`.
    * ``task_type``: None (any of the six) or one of ALFWorld's task types, by its name
      (``pick_heat_then_place``) or short name (``Heat``), case-insensitive.
    * ``max_steps``: the horizon; defaults to the difficulty's.
    * ``subgoal_reward``: reward for each subgoal of the task's plan, the first time the episode
      reaches it [0.0: the sparse outcome only]. The subgoals: holding an object of the goal's kind;
      holding it in the task's condition (Clean, Heat, Cool); the lamp on (Look); one of the two
      objects placed, then holding another while it is there (Pick2). Like TextWorld's intermediate
      rewards, they guide exploration; ``won`` and success are unchanged. ``progress()`` counts the
      same subgoals in the current state, whatever ``subgoal_reward`` is.

    ``info["task_type"]`` is the short name (Pick, Look, Clean, Heat, Cool, Pick2). The agent holds one
    object at a time; closed containers hide their contents until opened; heating, cooling and cleaning
    need the object in hand at the microwave, fridge or sink basin; the look task is done once the desk
    lamp is on (``use desklamp 1``) and the object is in hand, in either order, as in ALFWorld's PDDL.
    Reward is 1.0 when the task is done (plus ``subgoal_reward`` per new subgoal, when set).
    """

    default_max_steps = 50

    def __init__(
        self,
        *,
        difficulty: str = DEFAULT_DIFFICULTY,
        task_type: str | None = None,
        max_steps: int | None = None,
        subgoal_reward: float = 0.0,
        render_mode: str | None = None,
    ):
        self.difficulty = parse_difficulty(difficulty)
        self.task_type = parse_task_type(task_type)
        if (
            isinstance(subgoal_reward, bool)
            or not isinstance(subgoal_reward, (int, float))
            or not 0.0 <= subgoal_reward < 1.0
        ):
            raise ValueError(
                "subgoal_reward must be a number in [0, 1): the reward per subgoal reached, below the "
                f"task's 1.0 (0 for the sparse outcome only); got {subgoal_reward!r}"
            )
        self.subgoal_reward = float(subgoal_reward)
        super().__init__(
            max_steps=self.difficulty.max_steps if max_steps is None else max_steps,
            render_mode=render_mode,
        )
        self._layout: Layout | None = None
        self._state: State | None = None

    @property
    def layout(self) -> Layout:
        """The episode's unchanging part: receptacle and object names and kinds, scene, task."""
        if self._layout is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self._layout

    # ----------------------------------------------------------------- episode
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self._layout, self._state = generate(self.np_random, self.difficulty, self.task_type)
        return (
            f"{WELCOME}\n\n{self._room_description()}\n\n"
            f"Your task is to: {self._layout.task.sentence}"
        )

    def _get_state(self) -> tuple[Layout | None, State | None]:
        return self._layout, None if self._state is None else self._state.copy()

    def _set_state(self, state: tuple[Layout | None, State | None]) -> None:
        self._layout, saved = state
        self._state = None if saved is None else saved.copy()

    # ----------------------------------------------------------------- what can be done
    def _admissible_actions(self) -> list[str]:
        layout, state = self._layout, self._state
        here, held = state.location, state.held
        actions = list(layout.go_actions[here + 1])
        actions.append("inventory")
        actions.append("look")
        if held >= 0:
            actions.append(f"examine {layout.objects[held]}")
        if here >= 0:
            name = layout.receptacles[here]
            actions.append(f"examine {name}")
            visible = True
            if layout.openable[here]:
                if state.opened >> here & 1:
                    actions.append(f"close {name}")
                else:
                    actions.append(f"open {name}")
                    visible = False
            if visible:
                contents = state.contents[here]
                if held >= 0:
                    actions.append(f"move {layout.objects[held]} to {name}")
                else:
                    actions.extend(
                        f"take {layout.objects[o]} from {name}" for o in contents if o != layout.lamp
                    )
                if layout.lamp in contents:
                    actions.append(f"use {layout.objects[layout.lamp]}")
            appliance = APPLIANCES.get(layout.receptacle_kinds[here])
            if appliance is not None and held >= 0:
                actions.append(f"{appliance[0]} {layout.objects[held]} with {name}")
        actions.sort()
        return actions

    # ----------------------------------------------------------------- what happens
    def _apply(self, action: str) -> tuple[str, float, bool]:
        observation, reward, terminated = self._play(action)
        if self.subgoal_reward:
            reached = self._subgoals_reached()
            new = reached & ~self._state.subgoals
            self._state.subgoals |= reached
            reward += self.subgoal_reward * new.bit_count()
        return observation, reward, terminated

    def _subgoals_reached(self) -> int:
        """The subgoal bits that hold in the current state."""
        layout, state = self._layout, self._state
        task = layout.task
        reached = 0
        if task.type.short == "Look" and state.lamp_on:
            reached |= _LAMP
        placed = task.type.short == "Pick2" and any(
            kind == task.target and any(layout.object_kinds[o] == task.obj for o in state.contents[r])
            for r, kind in enumerate(layout.receptacle_kinds)
        )
        if placed:
            reached |= _PLACED
        if self._holds_goal_kind():
            reached |= _HOLD
            condition = task.type.condition
            if condition and state.conditions[state.held] & condition == condition:
                reached |= _CONDITIONED
            if placed:
                reached |= _HOLD_SECOND
        return reached

    def progress(self) -> float:
        """The share of the task's plan done now: 1 once won, else the subgoals of ``subgoal_reward``
        that hold in the current state over the plan's subgoals plus the final placing (so Pick
        holding its object is 1/2, Heat holding it hot 2/3, Pick2 with one placed and another held 3/4)."""
        if self._state.won:
            return 1.0
        task = self._layout.task.type
        plan = _HOLD | (_LAMP if task.short == "Look" else 0) | (_CONDITIONED if task.condition else 0)
        if task.short == "Pick2":
            plan |= _PLACED | _HOLD_SECOND
        return (self._subgoals_reached() & plan).bit_count() / (plan.bit_count() + 1)

    def _play(self, action: str) -> tuple[str, float, bool]:
        layout, state = self._layout, self._state
        verb, _, rest = action.partition(" ")
        if verb == "go":
            state.location = layout.receptacle_index[rest[3:]]
            return f"You arrive at {rest[3:]}. {self._describe(state.location)}", 0.0, False
        if verb == "inventory":
            if state.held < 0:
                return "You are not carrying anything.", 0.0, False
            return f"You are carrying: a {layout.objects[state.held]}.", 0.0, False
        here = state.location
        if verb == "look":
            if here < 0:
                return self._room_description(), 0.0, False
            return f"You are facing the {layout.receptacles[here]}. {self._describe(here)}", 0.0, False
        if verb == "examine":
            if rest in layout.receptacle_index:
                return self._describe(here), 0.0, False
            words = _CONDITION_WORDS[state.conditions[state.held]]
            if words:
                return f"The {rest} is {words}.", 0.0, False
            return f"There's nothing special about {rest}.", 0.0, False
        # Every other command acts on the receptacle the agent stands at.
        place = layout.receptacles[here]
        if verb == "take":
            obj_name = rest.partition(" from ")[0]
            obj = layout.object_index[obj_name]
            state.contents[here] = tuple(o for o in state.contents[here] if o != obj)
            state.held = obj
            state.won = state.lamp_on and self._holds_goal_to_look_at()
            return f"You pick up the {obj_name} from the {place}.", float(state.won), state.won
        if verb == "move":
            obj = state.held
            state.held = -1
            state.contents[here] = tuple(sorted(state.contents[here] + (obj,)))
            state.won = self._placed_goal(obj, here)
            return f"You move the {layout.objects[obj]} to the {place}.", float(state.won), state.won
        if verb == "open":
            state.opened |= 1 << here
            return f"You open the {place}. {self._describe(here)}", 0.0, False
        if verb == "close":
            state.opened &= ~(1 << here)
            return f"You close the {place}.", 0.0, False
        if verb in ("heat", "cool", "clean"):
            _, gives, removes = APPLIANCES[layout.receptacle_kinds[here]]
            obj = state.held
            state.conditions[obj] = (state.conditions[obj] | gives) & ~removes
            return f"You {verb} the {layout.objects[obj]} using the {place}.", 0.0, False
        if verb == "use":
            state.lamp_on = True
            state.won = self._holds_goal_to_look_at()
            return f"You turn on the {rest}.", float(state.won), state.won
        raise AssertionError(f"_apply got a non-admissible action {action!r}")

    def _holds_goal_kind(self) -> bool:
        """Whether the agent holds an object of the kind the task names."""
        held = self._state.held
        return held >= 0 and self._layout.object_kinds[held] == self._layout.task.obj

    def _holds_goal_to_look_at(self) -> bool:
        return self._layout.task.type.short == "Look" and self._holds_goal_kind()

    def _placed_goal(self, obj: int, receptacle: int) -> bool:
        """Whether moving ``obj`` into ``receptacle`` completed a placing task."""
        layout, task = self._layout, self._layout.task
        if task.target is None or layout.receptacle_kinds[receptacle] != task.target:
            return False
        if layout.object_kinds[obj] != task.obj:
            return False
        return self._placing_done(task.type, obj, receptacle)

    def _placing_done(self, task_type, obj: int, receptacle: int) -> bool:
        """Whether ``obj``, just moved into ``receptacle``, is placed as ``task_type`` asks, whatever
        the kinds: two of its kind there for Pick2, in the type's condition for the others."""
        if task_type.short == "Pick2":
            kinds = self._layout.object_kinds
            return sum(kinds[o] == kinds[obj] for o in self._state.contents[receptacle]) >= 2
        return self._state.conditions[obj] & task_type.condition == task_type.condition

    def achieved_tasks(self) -> dict[str, str]:
        """The tasks (both of ALFWorld's wordings of each) that the last action completed, mapped to
        their short type names (Pick, Look, Clean, Heat, Cool, Pick2).

        Moving an object into a receptacle completes "put a <object> in <receptacle>", and the clean,
        heat or cool task too when the object is in that condition (not into the appliance that gives
        it, which the game never asks), and "put two" when two of its kind are now there; taking an
        object while the lamp is on, or turning the lamp on while holding one, completes the look task.
        Empty after an invalid action, ``reset`` and ``restore``.
        """
        action = self._last_action
        if action is None:
            return {}
        layout, state = self._layout, self._state
        verb = action.partition(" ")[0]
        if verb == "move":
            obj = layout.object_index[action[len("move "):].partition(" to ")[0]]
            kind, target = layout.object_kinds[obj], layout.receptacle_kinds[state.location]
            done = {}
            for task_type in TASK_TYPES:
                if task_type.short == "Look" or not self._placing_done(task_type, obj, state.location):
                    continue
                if task_type.condition and (target == task_type.appliance or kind not in task_type.eligible):
                    continue  # a task the game never poses
                done.update((t.format(obj=kind, recep=target), task_type.short) for t in task_type.templates)
            return done
        if verb in ("take", "use") and state.lamp_on and state.held >= 0:
            look = next(t for t in TASK_TYPES if t.short == "Look")
            return {t.format(obj=layout.object_kinds[state.held]): look.short for t in look.templates}
        return {}

    # ----------------------------------------------------------------- text
    def _room_description(self) -> str:
        return (
            "You are in the middle of a room. Looking quickly around you, you see "
            f"{list_things(list(self._layout.receptacles))}."
        )

    def _describe(self, receptacle: int) -> str:
        """What the agent sees of ``receptacle`` from in front of it (marks its contents as seen)."""
        layout, state = self._layout, self._state
        name = layout.receptacles[receptacle]
        if layout.openable[receptacle]:
            if not state.opened >> receptacle & 1:
                return f"The {name} is closed."
            prefix = f"The {name} is open. In it, you see "
        else:
            prefix = f"On the {name}, you see "
        state.seen |= 1 << receptacle
        objects = layout.objects
        return prefix + list_things([objects[o] for o in state.contents[receptacle]]) + "."

    # ----------------------------------------------------------------- info
    def _state_key(self) -> str:
        """``place|what is visible there|what is held``, conditions tagged (``mug 1:clean+hot``).

        ``|desklamp on`` is appended once the lamp is on: it decides whether taking the object wins.
        """
        layout, state = self._layout, self._state
        here = state.location
        held = state.held
        carried = f"{layout.objects[held]}{_CONDITION_TAGS[state.conditions[held]]}" if held >= 0 else ""
        if here < 0:
            key = f"middle||{carried}"
        else:
            if layout.openable[here] and not state.opened >> here & 1:
                seen = "closed"
            else:
                objects, conditions = layout.objects, state.conditions
                seen = ",".join(
                    f"{objects[o]}{_CONDITION_TAGS[conditions[o]]}" for o in state.contents[here]
                )
            key = f"{layout.receptacles[here]}|{seen}|{carried}"
        return f"{key}|desklamp on" if state.lamp_on else key

    def _task(self) -> str:
        return self._layout.task.sentence if self._layout is not None else ""

    def _won(self) -> bool:
        return self._state is not None and self._state.won

    def _extra_info(self) -> dict[str, Any]:
        return {"task_type": self._layout.task.type.short}

    def expert_action(self, *, omniscient: bool = False) -> str:
        """The next action of a near-optimal solver from the current state.

        By default the expert knows only what the agent has seen so far (like ALFWorld's hand-coded
        expert): it searches unexplored receptacles where the object plausibly is, so its trajectories
        can be imitated. ``omniscient=True`` lets it go straight to hidden objects (a shortest plan).
        """
        if self._layout is None or self._done:
            raise RuntimeError("expert_action() needs a running episode: call reset() first")
        return expert.next_action(self._layout, self._state, omniscient=omniscient)
