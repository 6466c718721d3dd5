"""New ALFWorld games for training, without the 3,553-game download and without AI2-THOR.

ALFWorld's own generator (``alfworld-generate``) samples object placements by running AI2-THOR, which
cannot run here (Unity, a display, ``ai2thor==2.1.0``). This module builds the same kind of game from
what ships inside the ``alfworld`` package:

* the floor plans' receptacles and the poses they are reached from (``alfworld/gen/layouts/
  FloorPlan*-openable.json``) and the object types each plan holds (``FloorPlan*-objects.json``);
* ALFRED's constants (``alfworld.gen.constants``): which object types each receptacle type can hold,
  which are heatable/coolable/cleanable/sliceable/toggleable, which rooms suit which task type;
* the TextWorld domain and grammar ``alfworld`` plays (``alfred.pddl``, ``alfred.twl2``) and its
  templated task sentences (``get_templated_task_desc``), exactly as ``alfworld-generate`` writes them.

A game places 1-3 instances of each of the plan's object types in receptacles that can hold them,
draws a task of the requested type whose goal does not hold at the start, writes the PDDL problem in
the layout of the release files (``Type|x|y|z`` names, mangled as ALFWorld does, so the demangler
names them ``mug 1``, ``sinkbasin 1``...), and keeps the game only when TextWorld's engine loads it, the
PDDL planner finds a plan of at most ``MAX_PLAN_LENGTH`` steps, and playing that plan wins.

Each game folder holds ``initial_state.pddl``, ``traj_data.json`` and ``game.tw-pddl`` in the official
layout ``<task folder>/<trial>/``, so :class:`~ptgpo_envs.alfworld.env.ALFWorldEnv` reads a generated
set like an official split (``data_path=<folder>``, ``split="train"`` reading ``<folder>/train``).

What differs from the official games: object positions are synthetic (the text never shows them), and
the agent starts at a location of its own; the grammar is ``alfworld``'s current one (``move X to Y``;
the environment accepts both placement grammars).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ptgpo_envs.alfworld.data import TASK_TYPES

__all__ = ["GameSpec", "generate_games", "build_game", "MAX_PLAN_LENGTH"]

#: Plans longer than this are rejected: the environment's horizon is 50 steps.
MAX_PLAN_LENGTH = 30
#: Short task type (Pick...) -> ALFRED's name (pick_and_place_simple...).
TASK_SHORT_TO_LONG = {short: long for long, short in TASK_TYPES.items()}
#: Instances per object type in a scene, drawn in [1, MAX_INSTANCES] (ALFRED's MAX_NUM_OF_OBJ_INSTANCES).
MAX_INSTANCES = 3
#: Receptacle ids of the layouts -> the receptacle the text game uses (ALFRED names basins this way).
BASINS = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
#: Where desk lamps are put for Look tasks (the release games have them on desks and side tables).
LAMP_RECEPTACLES = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "Bed", "DiningTable")


@dataclass(frozen=True)
class GameSpec:
    """What one generated game is: the task, its targets, the floor plan and the placement seed."""

    task_type: str  # ALFRED name, e.g. "pick_heat_then_place_in_recep"
    object_target: str
    parent_target: str
    toggle_target: str
    floor_plan: str
    seed: int


def _mangle(name: str) -> str:
    """ALFRED's PDDL-safe names (``Mug|+00.10|...`` -> ``Mug_bar__plus_00_dot_10...``)."""
    for char, word in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        name = name.replace(char, word)
    return name


def _coord(value: float) -> str:
    return f"{value:+06.2f}"


def _layouts_dir() -> Path:
    import alfworld.gen

    return Path(alfworld.gen.__file__).parent / "layouts"


def _scene_type(floor_plan: str) -> str:
    from alfworld.gen import constants

    number = int(floor_plan.replace("FloorPlan", ""))
    for room, numbers in constants.SCENE_TYPE.items():
        if number in numbers:
            return room
    raise ValueError(f"{floor_plan} is in no ALFRED room type")


def _floor_plans() -> list[str]:
    return sorted(
        path.name[: -len("-openable.json")]
        for path in _layouts_dir().glob("FloorPlan*-openable.json")
        if (path.parent / path.name.replace("-openable", "-objects")).exists()
    )


class _Scene:
    """A floor plan's receptacles, their access locations, and a random placement of its objects."""

    def __init__(self, floor_plan: str, rng: random.Random):
        from alfworld.gen import constants

        layouts = _layouts_dir()
        poses = json.loads((layouts / f"{floor_plan}-openable.json").read_text())
        scene_types = json.loads((layouts / f"{floor_plan}-objects.json").read_text())
        self.floor_plan = floor_plan
        self.receptacles: dict[str, str] = {}  # id -> receptacle type
        self.location_of: dict[str, str] = {}  # receptacle id -> location name
        for raw_id, (x, z, rotation, horizon) in sorted(poses.items()):
            kind = raw_id.split("|", 1)[0]
            kind_in_game = BASINS.get(kind, kind)
            if kind_in_game not in constants.RECEPTACLES or kind_in_game in constants.MOVABLE_RECEPTACLES_SET:
                continue
            # ALFRED names a basin "Sink|x|y|z|SinkBasin"; some layouts list it without the suffix.
            rid = raw_id if kind not in BASINS or raw_id.endswith(kind_in_game) else f"{raw_id}|{kind_in_game}"
            self.receptacles[rid] = kind_in_game
            self.location_of[rid] = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{int(rotation) // 90 % 4}|{int(horizon)}"
        receptacle_types = set(self.receptacles.values())
        holders = {
            otype: sorted(rid for rid, rtype in self.receptacles.items() if otype in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ()))
            for otype in constants.OBJECTS
        }
        self.objects: dict[str, str] = {}  # id -> object type
        self.inside: dict[str, str] = {}  # object id -> receptacle id
        used_ids: set[str] = set()
        for otype in sorted(set(scene_types)):
            if otype in receptacle_types or otype in BASINS or not holders.get(otype):
                continue
            if otype in constants.VAL_ACTION_OBJECTS["Toggleable"]:
                continue  # lamps are placed below, only where a Look task may use them
            for _ in range(rng.randint(1, MAX_INSTANCES)):
                self._place(otype, rng.choice(holders[otype]), rng, used_ids)
        self.scene_types = set(scene_types)

    def _place(self, otype: str, receptacle: str, rng: random.Random, used_ids: set[str]) -> str:
        _, rx, ry, rz = receptacle.split("|")[:4]
        while True:
            oid = "|".join(
                [otype, _coord(float(rx) + rng.uniform(-0.4, 0.4)), _coord(float(ry) + rng.uniform(0.0, 0.3)),
                 _coord(float(rz) + rng.uniform(-0.4, 0.4))]
            )
            if oid not in used_ids:
                used_ids.add(oid)
                break
        self.objects[oid] = otype
        self.inside[oid] = receptacle
        return oid

    def add_lamps(self, rng: random.Random) -> bool:
        """Put the plan's desk lamps on tables (False when the plan has none or no table)."""
        tables = sorted(rid for rid, rtype in self.receptacles.items() if rtype in LAMP_RECEPTACLES)
        if "DeskLamp" not in self.scene_types or not tables:
            return False
        used = set(self.objects)
        for _ in range(rng.randint(1, 2)):
            self._place("DeskLamp", rng.choice(tables), rng, used)
        return True


def _task_candidates(scene: _Scene, task_type: str) -> list[tuple[str, str, str]]:
    """``(object_target, parent_target, toggle_target)`` choices whose goal is not already met."""
    from alfworld.gen import constants

    types_present = {}
    for oid, otype in scene.objects.items():
        types_present.setdefault(otype, []).append(oid)
    receptacle_types = sorted(set(scene.receptacles.values()))
    action = {
        "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
        "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
        "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
    }
    candidates = []
    for otype, instances in sorted(types_present.items()):
        if otype in constants.VAL_ACTION_OBJECTS["Toggleable"]:
            continue
        if task_type == "look_at_obj_in_light":
            if "DeskLamp" in types_present:
                candidates.append((otype, "", "DeskLamp"))
            continue
        if task_type in action:
            prop, tool = action[task_type]
            if otype not in constants.VAL_ACTION_OBJECTS[prop] or tool not in receptacle_types:
                continue
        if task_type == "pick_two_obj_and_place" and len(instances) < 2:
            continue
        for rtype in receptacle_types:
            if otype not in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ()) or rtype in ("SinkBasin", "BathtubBasin"):
                continue
            if task_type in action and rtype == action[task_type][1]:
                continue
            # The goal must not already hold: no instance starts in a receptacle of that type.
            if any(scene.receptacles[scene.inside[oid]] == rtype for oid in instances):
                continue
            candidates.append((otype, rtype, ""))
    return candidates


def _goal(task_type: str, otype: str, rtype: str, toggle: str) -> str:
    if task_type == "pick_and_place_simple":
        body = f"(inReceptacle ?o ?r) (objectType ?o {otype}Type) (receptacleType ?r {rtype}Type)"
        return f"(exists (?r - receptacle) (exists (?o - object) (and {body})))"
    if task_type == "pick_two_obj_and_place":
        second = (
            f"(exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 {otype}Type) "
            f"(receptacleType ?r {rtype}Type) (inReceptacle ?o2 ?r)))"
        )
        body = f"(objectType ?o1 {otype}Type) (receptacleType ?r {rtype}Type) (inReceptacle ?o1 ?r) {second}"
        return f"(exists (?r - receptacle) (exists (?o1 - object) (and {body})))"
    if task_type == "look_at_obj_in_light":
        lamp = (
            f"(exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot {toggle}Type) "
            f"(toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))"
        )
        held = f"(exists (?o - object ?a - agent) (and (objectType ?o {otype}Type) (holds ?a ?o)))"
        return f"{lamp} {held}"
    prop, state = {
        "pick_clean_then_place_in_recep": ("cleanable", "isClean"),
        "pick_heat_then_place_in_recep": ("heatable", "isHot"),
        "pick_cool_then_place_in_recep": ("coolable", "isCool"),
    }[task_type]
    body = f"({prop} ?o) (objectType ?o {otype}Type) (receptacleType ?r {rtype}Type) ({state} ?o) (inReceptacle ?o ?r)"
    return f"(exists (?r - receptacle) (exists (?o - object) (and {body})))"


def _problem(scene: _Scene, spec: GameSpec, name: str, agent_location: str) -> str:
    from alfworld.gen import constants

    receptacle_types = set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES)
    object_constants = sorted(set(constants.OBJECTS_SET) - receptacle_types)
    locations = sorted(set(scene.location_of.values()) | {agent_location})
    present_rtypes = sorted(set(scene.receptacles.values()))
    actions = constants.VAL_ACTION_OBJECTS
    m = _mangle
    objects = (
        ["agent1 - agent"]
        + [f"{o} - object" for o in object_constants]
        + [f"{o}Type - otype" for o in object_constants]
        + [f"{r}Type - rtype" for r in sorted(receptacle_types)]
        + [f"{m(oid)} - object" for oid in sorted(scene.objects)]
        + [f"{m(rid)} - receptacle" for rid in sorted(scene.receptacles)]
        + [f"{m(loc)} - location" for loc in locations]
    )
    facts = [f"(receptacleType {m(rid)} {rtype}Type)" for rid, rtype in sorted(scene.receptacles.items())]
    facts += [f"(objectType {m(oid)} {otype}Type)" for oid, otype in sorted(scene.objects.items())]
    facts += [
        f"(canContain {rtype}Type {otype}Type)"
        for rtype in present_rtypes
        for otype in sorted(constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ()))
        if otype in object_constants  # sliced variants are not objects of these games
    ]
    for oid, otype in sorted(scene.objects.items()):
        if otype not in actions["Toggleable"]:
            facts.append(f"(pickupable {m(oid)})")
        if otype in constants.MOVABLE_RECEPTACLES_SET:
            facts.append(f"(isReceptacleObject {m(oid)})")
        for prop, predicate in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                                ("Sliceable", "sliceable"), ("Toggleable", "toggleable")):
            if otype in actions[prop]:
                facts.append(f"({predicate} {m(oid)})")
    facts += [
        f"(openable {m(rid)})" for rid, rtype in sorted(scene.receptacles.items()) if rtype in constants.OPENABLE_CLASS_SET
    ]
    facts.append(f"(atLocation agent1 {m(agent_location)})")
    facts += [f"(inReceptacle {m(oid)} {m(rid)})" for oid, rid in sorted(scene.inside.items())]
    facts += [f"(receptacleAtLocation {m(rid)} {m(loc)})" for rid, loc in sorted(scene.location_of.items())]
    facts += [
        f"(objectAtLocation {m(oid)} {m(scene.location_of[rid])})" for oid, rid in sorted(scene.inside.items())
    ]
    goal = _goal(spec.task_type, spec.object_target, spec.parent_target, spec.toggle_target)
    newline = "\n        "
    return (
        f"\n(define (problem plan_{name})\n(:domain alfred)\n(:objects\n{newline.join(objects)}\n        )\n\n"
        f"(:init\n        {newline.join(facts)}\n        )\n\n(:goal\n    (and\n        {goal}\n    )\n)\n)\n"
    )


def build_game(spec: GameSpec) -> dict | None:
    """The files of one game (``problem``, ``traj_data``, ``game``), or ``None`` if it is not playable."""
    from alfworld.agents.utils.misc import add_task_to_grammar
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    rng = random.Random(spec.seed)
    scene = _Scene(spec.floor_plan, rng)
    if spec.task_type == "look_at_obj_in_light" and not scene.add_lamps(rng):
        return None
    if spec.object_target not in scene.objects.values():
        return None
    location_points = sorted(scene.location_of.values())
    x, z = rng.randint(-12, 12), rng.randint(-12, 12)
    agent_location = f"loc|{x}|{z}|{rng.randint(0, 3)}|30"
    if agent_location in location_points:
        return None
    name = f"trial_G{spec.seed:012d}"
    traj_data = {
        "task_id": name,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": spec.floor_plan, "scene_num": int(spec.floor_plan[len("FloorPlan"):]), "random_seed": spec.seed},
        "turk_annotations": {"anns": []},
        "generator": "ptgpo_envs.alfworld.generator",
    }
    # alfworld draws the sentence template with the global ``random``: seed it for this game.
    state = random.getstate()
    random.seed(spec.seed)
    try:
        grammar = add_task_to_grammar(Path(ALFRED_TWL2_PATH).read_text(), traj_data)
    finally:
        random.setstate(state)
    problem = _problem(scene, spec, name, agent_location)
    game = {
        "pddl_domain": Path(ALFRED_PDDL_PATH).read_text(),
        "grammar": grammar,
        "pddl_problem": problem,
        "solvable": False,
    }
    return {"problem": problem, "traj_data": traj_data, "game": game, "name": name}


def _folder_name(spec: GameSpec) -> str:
    return "-".join([spec.task_type, spec.object_target, "None", spec.parent_target or spec.toggle_target,
                     spec.floor_plan[len("FloorPlan"):]])


def _validate(game_path: str) -> list[str] | None:
    """The planner's plan when the game loads, is not won at the start and the plan wins it."""
    from ptgpo_envs.alfworld.engine import ALFWorldEngine

    engine = ALFWorldEngine.acquire()
    try:
        engine.load(game_path)
        engine.reset()
        if engine.won:
            return None
        plan = engine.plan()
        if not plan or len(plan) > MAX_PLAN_LENGTH:
            return None
        for command in plan:
            if command not in engine.admissible_commands:
                return None
            engine.step(command)
        return plan if engine.won else None
    except Exception:  # noqa: BLE001  (an engine that rejects the game means the game is unusable)
        return None
    finally:
        engine.game_path = None  # the file may be deleted; never reuse it without reloading
        engine.release()


def generate_games(
    count: int,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    task_types: Sequence[str] | None = None,
    split: str = "train",
    progress: bool = False,
    max_attempts_per_game: int = 50,
) -> list[Path]:
    """Write ``count`` planner-checked games under ``out/<split>/``, task types in turn; their paths."""
    from alfworld.gen import constants

    short_types = list(task_types) if task_types else list(TASK_TYPES.values())
    unknown = set(short_types) - set(TASK_SHORT_TO_LONG)
    if unknown:
        raise ValueError(f"unknown task types {sorted(unknown)}; choose among {', '.join(TASK_SHORT_TO_LONG)}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    root = Path(out).expanduser() / split
    root.mkdir(parents=True, exist_ok=True)
    plans_by_room: dict[str, list[str]] = {}
    for plan in _floor_plans():
        plans_by_room.setdefault(_scene_type(plan), []).append(plan)
    rng = random.Random(seed)
    bar = None
    if progress:
        from ptgpo_envs.progress import progress_bar

        bar = progress_bar(total=count, desc="generate ALFWorld games")
    written: list[Path] = []
    for index in range(count):
        task_type = TASK_SHORT_TO_LONG[short_types[index % len(short_types)]]
        rooms = sorted(constants.GOALS_VALID[task_type])
        for _attempt in range(max_attempts_per_game):
            game_path = _attempt_game(rng.randrange(10**12), task_type, rooms, plans_by_room, root)
            if game_path is not None:
                written.append(game_path)
                break
        else:
            raise RuntimeError(
                f"no playable {task_type} game in {max_attempts_per_game} attempts (seed {seed}, game {index})"
            )
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return written


def _attempt_game(game_seed: int, task_type: str, rooms: list[str], plans_by_room: dict[str, list[str]],
                  root: Path) -> Path | None:
    """One try at a game of ``task_type`` from ``game_seed``: its ``game.tw-pddl`` once the planner has
    solved it, or None (no room for the task, no candidate objects, or no plan; nothing is left behind)."""
    pick = random.Random(game_seed)
    floor_plan = pick.choice(plans_by_room[pick.choice(rooms)])
    scene_rng = random.Random(game_seed)
    scene = _Scene(floor_plan, scene_rng)
    if task_type == "look_at_obj_in_light" and not scene.add_lamps(scene_rng):
        return None
    candidates = _task_candidates(scene, task_type)
    if not candidates:
        return None
    otype, rtype, toggle = pick.choice(candidates)
    spec = GameSpec(task_type, otype, rtype, toggle, floor_plan, game_seed)
    files = build_game(spec)
    if files is None:
        return None
    folder = root / _folder_name(spec) / files["name"]
    folder.mkdir(parents=True, exist_ok=True)
    game_path = folder / "game.tw-pddl"
    _write_json(game_path, files["game"])
    plan = _validate(str(game_path))
    if plan is None:
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
        return None
    files["game"].update(solvable=True, walkthrough=plan)
    _write_text(folder / "initial_state.pddl", files["problem"])
    _write_json(folder / "traj_data.json", files["traj_data"])
    _write_json(game_path, files["game"])
    return game_path


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _write_json(path: Path, data: dict) -> None:
    _write_text(path, json.dumps(data, indent=2) + "\n")
