"""What a household contains: ALFWorld's rooms, receptacles, objects and where objects belong.

This is the common sense both the generator and the expert use: the generator places objects only
where :data:`SCENES` says they belong, and the expert searches those places first, as a person would.
Everything here is immutable and iterated in its written order, so generation is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ReceptacleKind",
    "Scene",
    "SCENES",
    "LAMP",
    "LAMP_HOLDERS",
    "HEATABLE",
    "COOLABLE",
    "CLEANABLE",
]

#: The one non-pickupable object: ``use desklamp 1`` lights it for the look_at_obj_in_light task.
LAMP = "desklamp"


@dataclass(frozen=True)
class ReceptacleKind:
    """A kind of receptacle: its name, whether it opens, and how many instances a room may have."""

    name: str
    openable: bool
    max_count: int


@dataclass(frozen=True)
class Scene:
    """A room type: its receptacle kinds, the kinds every instance has, and where each object belongs."""

    name: str
    receptacles: tuple[ReceptacleKind, ...]
    required: tuple[str, ...]
    #: object kind -> receptacle kinds it may start in (and may be asked to go to).
    places: Mapping[str, tuple[str, ...]]
    has_lamp: bool

    def kind(self, name: str) -> ReceptacleKind:
        """The receptacle kind called ``name`` in this scene; KeyError if there is none."""
        for kind in self.receptacles:
            if kind.name == name:
                return kind
        raise KeyError(name)


def _kinds(*specs: tuple[str, bool, int]) -> tuple[ReceptacleKind, ...]:
    return tuple(ReceptacleKind(name, openable, count) for name, openable, count in specs)


def _places(table: dict[str, str]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({obj: tuple(where.split()) for obj, where in table.items()})


_SURFACE_FOOD = "countertop diningtable fridge garbagecan sinkbasin microwave"
_UTENSIL = "countertop diningtable drawer sinkbasin"

KITCHEN = Scene(
    name="kitchen",
    receptacles=_kinds(
        ("cabinet", True, 12),
        ("coffeemachine", False, 1),
        ("countertop", False, 3),
        ("diningtable", False, 1),
        ("drawer", True, 8),
        ("fridge", True, 1),
        ("garbagecan", False, 1),
        ("microwave", True, 1),
        ("shelf", False, 3),
        ("sinkbasin", False, 1),
        ("stoveburner", False, 4),
        ("toaster", False, 1),
    ),
    required=("countertop", "fridge", "microwave", "sinkbasin"),
    places=_places(
        {
            "apple": _SURFACE_FOOD,
            "bowl": "countertop diningtable cabinet fridge sinkbasin shelf microwave",
            "bread": "countertop diningtable fridge cabinet toaster",
            "butterknife": _UTENSIL,
            "cup": "countertop diningtable cabinet fridge sinkbasin shelf microwave",
            "dishsponge": "countertop sinkbasin cabinet drawer",
            "egg": _SURFACE_FOOD,
            "fork": _UTENSIL,
            "kettle": "stoveburner countertop cabinet",
            "knife": _UTENSIL,
            "ladle": _UTENSIL,
            "lettuce": "countertop diningtable fridge sinkbasin",
            "mug": "countertop diningtable cabinet coffeemachine sinkbasin shelf microwave",
            "pan": "countertop stoveburner cabinet sinkbasin",
            "peppershaker": "countertop diningtable cabinet shelf drawer",
            "plate": "countertop diningtable cabinet fridge sinkbasin shelf",
            "pot": "countertop stoveburner cabinet sinkbasin fridge",
            "potato": _SURFACE_FOOD,
            "saltshaker": "countertop diningtable cabinet shelf drawer",
            "soapbottle": "countertop cabinet shelf",
            "spatula": _UTENSIL,
            "spoon": _UTENSIL,
            "tomato": _SURFACE_FOOD,
            "winebottle": "countertop diningtable cabinet fridge shelf",
        }
    ),
    has_lamp=False,
)

BATHROOM = Scene(
    name="bathroom",
    receptacles=_kinds(
        ("bathtubbasin", False, 1),
        ("cabinet", True, 6),
        ("countertop", False, 2),
        ("drawer", True, 6),
        ("garbagecan", False, 1),
        ("handtowelholder", False, 1),
        ("shelf", False, 4),
        ("sinkbasin", False, 2),
        ("toilet", False, 1),
        ("toiletpaperhanger", False, 1),
        ("towelholder", False, 1),
    ),
    required=("countertop", "sinkbasin", "toilet"),
    places=_places(
        {
            "candle": "countertop toilet cabinet shelf bathtubbasin",
            "cloth": "countertop bathtubbasin cabinet sinkbasin drawer",
            "handtowel": "handtowelholder countertop cabinet",
            "soapbar": "sinkbasin bathtubbasin countertop toilet cabinet garbagecan",
            "soapbottle": "countertop toilet cabinet shelf garbagecan",
            "spraybottle": "toilet cabinet countertop shelf garbagecan",
            "tissuebox": "countertop toilet shelf cabinet",
            "toiletpaper": "toilet toiletpaperhanger cabinet countertop garbagecan shelf",
            "towel": "towelholder bathtubbasin countertop",
        }
    ),
    has_lamp=False,
)

BEDROOM = Scene(
    name="bedroom",
    receptacles=_kinds(
        ("armchair", False, 1),
        ("bed", False, 1),
        ("desk", False, 2),
        ("drawer", True, 10),
        ("dresser", False, 1),
        ("garbagecan", False, 1),
        ("laundryhamper", False, 1),
        ("safe", True, 1),
        ("shelf", False, 6),
        ("sidetable", False, 2),
    ),
    required=("bed", "desk"),
    places=_places(
        {
            "alarmclock": "desk sidetable shelf dresser",
            "book": "bed desk sidetable shelf drawer dresser",
            "bowl": "desk shelf sidetable dresser",
            "cd": "desk drawer shelf sidetable garbagecan safe",
            "cellphone": "bed desk drawer sidetable dresser shelf",
            "cloth": "laundryhamper dresser garbagecan drawer",
            "creditcard": "desk drawer shelf sidetable dresser",
            "keychain": "desk drawer sidetable shelf dresser safe",
            "laptop": "bed desk sidetable dresser",
            "mug": "desk shelf sidetable dresser",
            "pen": "desk drawer sidetable shelf garbagecan",
            "pencil": "desk drawer sidetable shelf garbagecan",
            "pillow": "bed armchair",
            "statue": "shelf desk dresser sidetable",
            "teddybear": "bed armchair shelf",
            "vase": "shelf desk dresser safe",
            "watch": "sidetable drawer desk dresser safe",
        }
    ),
    has_lamp=True,
)

LIVINGROOM = Scene(
    name="livingroom",
    receptacles=_kinds(
        ("armchair", False, 2),
        ("cabinet", True, 4),
        ("coffeetable", False, 1),
        ("diningtable", False, 1),
        ("drawer", True, 6),
        ("dresser", False, 1),
        ("garbagecan", False, 1),
        ("shelf", False, 6),
        ("sidetable", False, 3),
        ("sofa", False, 1),
        ("tvstand", False, 1),
    ),
    required=("coffeetable", "sidetable", "sofa"),
    places=_places(
        {
            "book": "sofa coffeetable sidetable shelf drawer",
            "box": "sofa coffeetable diningtable tvstand dresser sidetable",
            "candle": "coffeetable shelf sidetable diningtable cabinet",
            "creditcard": "sofa armchair coffeetable sidetable drawer dresser",
            "keychain": "sofa coffeetable sidetable drawer dresser shelf tvstand",
            "laptop": "sofa coffeetable diningtable sidetable",
            "newspaper": "sofa armchair coffeetable sidetable diningtable garbagecan",
            "pillow": "sofa armchair",
            "plate": "diningtable coffeetable cabinet shelf",
            "remotecontrol": "sofa armchair coffeetable sidetable tvstand dresser",
            "statue": "shelf coffeetable sidetable diningtable dresser",
            "vase": "shelf coffeetable sidetable diningtable tvstand cabinet",
            "watch": "coffeetable sidetable drawer dresser shelf",
        }
    ),
    has_lamp=True,
)

SCENES: tuple[Scene, ...] = (KITCHEN, BATHROOM, BEDROOM, LIVINGROOM)

#: Receptacle kinds a desk lamp may stand on (all are open surfaces, so the lamp is always visible).
LAMP_HOLDERS: tuple[str, ...] = ("desk", "sidetable", "dresser")

# ALFWorld's object lists for its heat, cool and clean tasks.
HEATABLE = frozenset("apple bread cup egg mug plate potato tomato".split())
COOLABLE = frozenset(
    "apple bowl bread cup egg lettuce mug pan plate pot potato tomato winebottle".split()
)
CLEANABLE = frozenset(
    (
        "apple bowl butterknife cloth cup dishsponge egg fork kettle knife ladle lettuce mug pan "
        "plate pot potato soapbar spatula spoon tomato"
    ).split()
)
