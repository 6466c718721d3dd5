"""A household episode's data and its procedural generation.

An episode is a :class:`Layout` (what never changes: names, kinds, the task) and a :class:`State`
(what actions change: where the agent is, what it holds, what is where, what is open). The layout is
immutable and shared by every snapshot; the state is a handful of ints and a list of tuples, so
copying it for a fork costs microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ptgpo_envs.household.catalog import (
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    LAMP,
    LAMP_HOLDERS,
    SCENES,
    Scene,
)

__all__ = [
    "APPLIANCES",
    "CLEAN",
    "HOT",
    "COOL",
    "TaskType",
    "TASK_TYPES",
    "Difficulty",
    "DIFFICULTIES",
    "DEFAULT_DIFFICULTY",
    "Task",
    "Layout",
    "State",
    "parse_task_type",
    "parse_difficulty",
    "generate",
]

# Object conditions, as bit flags of State.conditions.
CLEAN, HOT, COOL = 1, 2, 4

#: receptacle kind -> (verb, condition it gives, condition it removes)
APPLIANCES: dict[str, tuple[str, int, int]] = {
    "sinkbasin": ("clean", CLEAN, 0),
    "microwave": ("heat", HOT, COOL),
    "fridge": ("cool", COOL, HOT),
}


@dataclass(frozen=True)
class TaskType:
    """One of ALFWorld's six task types."""

    short: str  # the name info["task_type"] reports (ALFWorld's leaderboard columns)
    alfworld: str  # ALFWorld's task-type directory name
    appliance: str | None  # receptacle kind that applies ``condition``
    condition: int
    eligible: frozenset[str] | None  # object kinds this task may ask for (None: any pickupable)
    templates: tuple[str, ...]  # ALFWorld's two wordings of the goal


TASK_TYPES: tuple[TaskType, ...] = (
    TaskType(
        "Pick", "pick_and_place", None, 0, None,
        ("put a {obj} in {recep}.", "put some {obj} on {recep}."),
    ),
    TaskType(
        "Look", "look_at_obj_in_light", None, 0, None,
        ("look at {obj} under the desklamp.", "examine the {obj} with the desklamp."),
    ),
    TaskType(
        "Clean", "pick_clean_then_place", "sinkbasin", CLEAN, CLEANABLE,
        ("put a clean {obj} in {recep}.", "clean some {obj} and put it in {recep}."),
    ),
    TaskType(
        "Heat", "pick_heat_then_place", "microwave", HOT, HEATABLE,
        ("put a hot {obj} in {recep}.", "heat some {obj} and put it in {recep}."),
    ),
    TaskType(
        "Cool", "pick_cool_then_place", "fridge", COOL, COOLABLE,
        ("put a cool {obj} in {recep}.", "cool some {obj} and put it in {recep}."),
    ),
    TaskType(
        "Pick2", "pick_two_obj_and_place", None, 0, None,
        ("put two {obj} in {recep}.", "find two {obj} and put them in {recep}."),
    ),
)


def parse_task_type(value: object) -> TaskType | None:
    """The task type named ``value`` (ALFWorld's or the short name, any case); None means all six."""
    if value is None:
        return None
    if isinstance(value, str):
        wanted = value.strip().casefold()
        for task_type in TASK_TYPES:
            if wanted in (task_type.short.casefold(), task_type.alfworld):
                return task_type
    names = ", ".join(f"{t.alfworld} ({t.short})" for t in TASK_TYPES)
    raise ValueError(f"task_type must be None (all six) or one of {names}; got {value!r}")


@dataclass(frozen=True)
class Difficulty:
    """How big and how hidden a household is."""

    name: str
    receptacles: tuple[int, int]  # inclusive range of receptacle instances
    distractors: tuple[int, int]  # inclusive range of objects unrelated to the task
    goal_copies: tuple[int, int]  # instances of the goal object (Pick2 gets one more)
    container_weight: float  # odds of adding a cabinet/drawer/... rather than an open surface
    hide_weight: float  # odds of an object starting in a (closed) container rather than on a surface
    hide_goal: bool  # the goal objects start in closed containers (so asks only for kinds that can)
    max_steps: int


DIFFICULTIES: tuple[Difficulty, ...] = (
    Difficulty("easy", (5, 7), (2, 4), (2, 2), 0.3, 0.2, False, 30),
    Difficulty("medium", (11, 15), (8, 14), (1, 2), 1.0, 1.0, False, 40),
    Difficulty("hard", (19, 25), (16, 26), (1, 1), 2.0, 3.0, True, 50),
)
DEFAULT_DIFFICULTY = "medium"


def parse_difficulty(value: object) -> Difficulty:
    """The :class:`Difficulty` named by ``value`` (case and surrounding space ignored); ValueError
    otherwise."""
    if isinstance(value, str):
        for difficulty in DIFFICULTIES:
            if value.strip().casefold() == difficulty.name:
                return difficulty
    names = ", ".join(d.name for d in DIFFICULTIES)
    raise ValueError(f"difficulty must be one of {names}; got {value!r}")


@dataclass(frozen=True)
class Task:
    """An episode's goal: its type, the object kind, the target receptacle kind (None for Look) and its
    sentence."""

    type: TaskType
    obj: str  # object kind, e.g. "apple"
    target: str | None  # receptacle kind, e.g. "fridge" (None for Look)
    sentence: str


@dataclass(frozen=True, eq=False)
class Layout:
    """The parts of an episode no action changes, with lookups precomputed for the step loop."""

    scene: str
    receptacles: tuple[str, ...]  # names, e.g. "cabinet 1", sorted by kind then number
    receptacle_kinds: tuple[str, ...]
    openable: tuple[bool, ...]
    objects: tuple[str, ...]  # names, sorted by kind then number
    object_kinds: tuple[str, ...]
    lamp: int  # object index of the desk lamp, -1 if the room has none
    task: Task
    receptacle_index: dict[str, int] = field(init=False)
    object_index: dict[str, int] = field(init=False)
    #: go_actions[r + 1]: the sorted "go to" actions from receptacle r (from the room's middle: r = -1).
    go_actions: tuple[tuple[str, ...], ...] = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "receptacle_index", {name: i for i, name in enumerate(self.receptacles)})
        set_(self, "object_index", {name: i for i, name in enumerate(self.objects)})
        go = sorted(f"go to {name}" for name in self.receptacles)
        from_each = tuple(tuple(a for a in go if a != f"go to {name}") for name in self.receptacles)
        set_(self, "go_actions", (tuple(go),) + from_each)


@dataclass(slots=True)
class State:
    """Everything that changes during an episode, in compact integer form; :meth:`copy` forks it."""

    location: int  # receptacle index, -1 in the middle of the room
    held: int  # object index, -1 when the hands are empty
    contents: list[tuple[int, ...]]  # per receptacle, sorted object indices
    opened: int  # bit r set: receptacle r is open
    conditions: list[int]  # per object, CLEAN/HOT/COOL flags
    seen: int  # bit r set: the agent has seen inside r (only it moves things, so what it saw holds)
    lamp_on: bool  # ALFWorld's look goal: the lamp is on and the object is in hand, in either order
    won: bool
    subgoals: int = 0  # bit set of the task's subgoals reached so far (household/env.py's _HOLD...)

    def copy(self) -> State:
        """An independent copy (the lists copied), for forking."""
        return State(
            self.location, self.held, list(self.contents), self.opened,
            list(self.conditions), self.seen, self.lamp_on, self.won, self.subgoals,
        )


# ----------------------------------------------------------------------------- generation
def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(len(items)))]


def _pick_weighted(rng: np.random.Generator, items: list, weights: list[float]):
    threshold = float(rng.random()) * sum(weights)
    for item, weight in zip(items, weights, strict=True):
        threshold -= weight
        if threshold < 0:
            return item
    return items[-1]


def _eligible_scenes(task_type: TaskType) -> list[Scene]:
    scenes = []
    for scene in SCENES:
        if task_type.appliance is not None and task_type.appliance not in scene.required:
            continue
        if task_type.short == "Look" and not scene.has_lamp:
            continue
        if task_type.eligible is not None and not any(o in task_type.eligible for o in scene.places):
            continue
        scenes.append(scene)
    return scenes


def _receptacle_counts(rng: np.random.Generator, scene: Scene, difficulty: Difficulty) -> dict[str, int]:
    counts = {kind.name: 0 for kind in scene.receptacles}
    for name in scene.required:
        counts[name] = 1
    total = int(rng.integers(difficulty.receptacles[0], difficulty.receptacles[1] + 1))
    while sum(counts.values()) < total:
        room = [kind for kind in scene.receptacles if counts[kind.name] < kind.max_count]
        if not room:
            break
        weights = [difficulty.container_weight if kind.openable else 1.0 for kind in room]
        counts[_pick_weighted(rng, room, weights).name] += 1
    return counts


def _choose_goal(
    rng: np.random.Generator, scene: Scene, task_type: TaskType, present: set[str], hidden: bool
) -> tuple[str, str | None] | None:
    """A goal object kind and target kind that the room can pose (None when it can pose none).

    The object must be able to start somewhere other than the target (in a container if ``hidden``).
    """
    options: list[tuple[str, list[str | None]]] = []
    for obj, places in scene.places.items():
        if task_type.eligible is not None and obj not in task_type.eligible:
            continue
        reachable = [kind for kind in places if kind in present]
        starts = [kind for kind in reachable if not hidden or scene.kind(kind).openable]
        if task_type.short == "Look":
            targets: list[str | None] = [None] if starts else []
        else:
            targets = [
                kind for kind in reachable
                if kind != task_type.appliance and any(start != kind for start in starts)
            ]
        if targets:
            options.append((obj, targets))
    if not options:
        return None
    obj, targets = _pick(rng, options)
    return obj, _pick(rng, targets)


def _place_objects(rng: np.random.Generator, difficulty: Difficulty, task_type: TaskType, scene: Scene,
                   receptacles: list[tuple[str, int]], openable: list[bool], present: set[str],
                   goal: tuple[str, str]) -> list[tuple[str, int]]:
    """``(object kind, receptacle index)`` of every object: the goal's copies, the distractors, the lamp."""
    goal_obj, target = goal

    def place(allowed: tuple[str, ...], hidden: bool = False) -> int:
        spots = [
            r for r, (kind, _) in enumerate(receptacles)
            if kind in allowed and kind != target and (openable[r] or not hidden)
        ]
        weights = [difficulty.hide_weight if openable[r] else 1.0 for r in spots]
        return _pick_weighted(rng, spots, weights)

    placed: list[tuple[str, int]] = []
    copies = int(rng.integers(difficulty.goal_copies[0], difficulty.goal_copies[1] + 1))
    copies += task_type.short == "Pick2"
    for _ in range(copies):
        placed.append((goal_obj, place(scene.places[goal_obj], difficulty.hide_goal)))
    distractor_kinds = [
        obj for obj, places in scene.places.items()
        if obj != goal_obj and any(kind in present and kind != target for kind in places)
    ]
    for _ in range(int(rng.integers(difficulty.distractors[0], difficulty.distractors[1] + 1))):
        obj = _pick(rng, distractor_kinds)
        placed.append((obj, place(scene.places[obj])))
    if scene.has_lamp:
        holders = [r for r, (kind, _) in enumerate(receptacles) if kind in LAMP_HOLDERS]
        placed.append((LAMP, _pick(rng, holders)))
    return placed


def _numbered(
    placed: list[tuple[str, int]], n_receptacles: int
) -> tuple[list[tuple[str, int, int]], list[list[int]]]:
    """The objects numbered per kind (``(kind, number, receptacle)``, sorted) and each receptacle's
    object indices."""
    numbered: dict[str, int] = {}
    objects: list[tuple[str, int, int]] = []
    for obj, where in placed:
        numbered[obj] = numbered.get(obj, 0) + 1
        objects.append((obj, numbered[obj], where))
    objects.sort()
    contents: list[list[int]] = [[] for _ in range(n_receptacles)]
    for index, (_, _, where) in enumerate(objects):
        contents[where].append(index)
    return objects, contents


def generate(
    rng: np.random.Generator, difficulty: Difficulty, task_type: TaskType | None
) -> tuple[Layout, State]:
    """A new household and task drawn from ``rng`` (all closed, the agent in the middle of the room)."""
    if task_type is None:
        task_type = _pick(rng, list(TASK_TYPES))
    scenes = _eligible_scenes(task_type)
    while True:
        scene = _pick(rng, scenes)
        counts = _receptacle_counts(rng, scene, difficulty)
        present = {kind for kind, n in counts.items() if n}
        goal = _choose_goal(rng, scene, task_type, present, difficulty.hide_goal)
        if goal is not None:
            break
    goal_obj, target = goal
    receptacles = [(kind, i) for kind in counts for i in range(1, counts[kind] + 1)]
    openable = [scene.kind(kind).openable for kind, _ in receptacles]
    placed = _place_objects(rng, difficulty, task_type, scene, receptacles, openable, present, goal)
    objects, contents = _numbered(placed, len(receptacles))

    sentence = _pick(rng, list(task_type.templates)).format(obj=goal_obj, recep=target)
    object_kinds = tuple(kind for kind, _, _ in objects)
    layout = Layout(
        scene=scene.name,
        receptacles=tuple(f"{kind} {i}" for kind, i in receptacles),
        receptacle_kinds=tuple(kind for kind, _ in receptacles),
        openable=tuple(openable),
        objects=tuple(f"{kind} {i}" for kind, i, _ in objects),
        object_kinds=object_kinds,
        lamp=object_kinds.index(LAMP) if LAMP in object_kinds else -1,
        task=Task(task_type, goal_obj, target, sentence),
    )
    state = State(
        location=-1,
        held=-1,
        contents=[tuple(c) for c in contents],
        opened=0,
        conditions=[0] * len(objects),
        seen=0,
        lamp_on=False,
        won=False,
    )
    return layout, state
