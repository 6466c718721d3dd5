"""Protocols: what a leaderboard number was measured or reported under, and where two differ.

A number is worth comparing with a paper's only when the agent saw the same kind of prompt under the
same protocol. A reported number's protocol is a name (``leaderboard/reported.yaml``: a row's
``protocol``, else its source's; none given: ``not stated``). A measured record's protocol is its
recipe (:mod:`ptgpo_algos.policy.recipes`; without one, ``PTGPO's own``), qualified by what its
environment reported where that is not the originals': pages other than the ``original`` ones, a
WebShop reward by the ``stand-in`` rather than spaCy. So ``verl-agent``, ``verl-agent, annotated
pages``, ``PTGPO's own, stand-in reward``; a record written before protocols were recorded is ``not
recorded``. Two protocols are the same when these descriptions are equal: a measured cell in a column
that holds a reported number of another protocol gets :data:`MARK` and a legend line; it is never
shown as the number's equal.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MARK", "NOT_RECORDED", "NOT_STATED", "OWN", "column_key", "measured_protocol", "reported_protocol"]

MARK = "‡"
NOT_RECORDED = "not recorded"
NOT_STATED = "not stated"
OWN = "PTGPO's own"


def measured_protocol(protocol: Mapping[str, str | None] | None) -> str:
    """The description of a record's ``protocol`` field (see the module docstring)."""
    if protocol is None:
        return NOT_RECORDED
    parts = [protocol.get("recipe") or OWN]
    style = protocol.get("observation_style")
    if style not in (None, "original"):
        parts.append(f"{style} pages")
    reward = protocol.get("reward_impl")
    if reward not in (None, "spacy"):
        parts.append(f"{reward} reward")
    if protocol.get("alfworld_version"):
        parts.append(f"ALFWorld {protocol['alfworld_version']}")
    if protocol.get("webshop_set"):
        parts.append(f"WebShop {protocol['webshop_set']}")
    return ", ".join(parts)


def reported_protocol(name: str | None, conditions: Mapping[str, str] | None = None) -> str:
    """The description of a reported number's protocol: its name, then its stated conditions
    (``verl-agent; split valid_seen; episodes 128; selection final``)."""
    if not conditions:
        return name or NOT_STATED
    return f"{name or NOT_STATED}; " + "; ".join(f"{key.replace('_', ' ')} {value}" for key, value in conditions.items())


def column_key(env_label: str, metric: str) -> tuple[str, str]:
    """Columns of the measured and the reported tables are the same column when these are equal: papers
    spell environments their way (ALFWorld), benchmarks theirs (alfworld)."""
    return env_label.casefold(), metric
