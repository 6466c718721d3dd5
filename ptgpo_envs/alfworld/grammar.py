"""The two command grammars in circulation for placing an object, and how to match one to the other.

ALFWorld's release game files (``json_2.1.1``) say ``put X in/on Y``; the grammar shipped with
``alfworld`` >= 0.4 (and its handcoded expert) says ``move X to Y``. Agents trained or prompted on either
must be understood by games written in either, so a placement command is reduced to its object and
receptacle and matched against whatever the engine lists as admissible.
"""

from __future__ import annotations

import re

__all__ = ["placement_key", "match_command"]

_PLACEMENT = re.compile(r"^(?:put|move|place)\s+(?P<object>.+?)\s+(?:in/on|into|in|on|to)\s+(?P<receptacle>.+)$")


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def placement_key(command: str) -> tuple[str, str] | None:
    """``(object, receptacle)`` when ``command`` places an object, in any grammar; else ``None``.

    >>> placement_key("move apple 1 to countertop 2") == placement_key("put apple 1 in/on countertop 2")
    True
    """
    found = _PLACEMENT.match(_normalise(command))
    if found is None:
        return None
    return found["object"], found["receptacle"]


def match_command(command: str, admissible: list[str]) -> str | None:
    """The admissible command that ``command`` names, exactly (case/spacing aside) or by placement."""
    wanted = _normalise(command)
    if not wanted:
        return None
    for candidate in admissible:
        if _normalise(candidate) == wanted:
            return candidate
    key = placement_key(wanted)
    if key is None:
        return None
    for candidate in admissible:
        if placement_key(candidate) == key:
            return candidate
    return None
