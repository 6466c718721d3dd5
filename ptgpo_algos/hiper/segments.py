"""An episode's decisions cut into subgoal segments (HiPER's options), from the recorded switch markers.

In HiPER's plan/execute format every response states whether it keeps the subgoal in force or
switches to a new one (:mod:`ptgpo_algos.hiper.plan_format`). A *segment* is a maximal run of
decisions under one subgoal: it starts at the episode's first decision, whatever that decision says,
and at every later decision that switches; it ends just before the next start or at the episode's
last decision. The high level of HiPER makes one decision per segment (at its start), the low level
one per turn.

Everything here is a pure function of a boolean per decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Segment", "segment_starts", "segments", "segment_index"]


@dataclass(frozen=True)
class Segment:
    """Decisions ``start .. end`` (both included) of one episode, under one subgoal."""

    start: int
    end: int

    @property
    def length(self) -> int:
        """How many decisions (environment steps) the segment lasts."""
        return self.end - self.start + 1


def segment_starts(switches: Sequence[bool]) -> np.ndarray:
    """Boolean per decision: whether a segment starts there (the first decision always does).

    ``switches[t]`` is the marker decision ``t`` recorded (True: it switched to a new subgoal); the
    first decision's marker is ignored, as there is no subgoal before it to keep.
    """
    starts = np.asarray(switches, dtype=bool).copy()
    if starts.ndim != 1:
        raise ValueError(f"switches must be one flag per decision, got shape {starts.shape}")
    if starts.size:
        starts[0] = True
    return starts


def segments(switches: Sequence[bool]) -> list[Segment]:
    """The episode's segments, in order; they tile ``0 .. len(switches) - 1`` without overlap."""
    starts = np.flatnonzero(segment_starts(switches))
    ends = np.append(starts[1:] - 1, len(switches) - 1)
    return [Segment(int(s), int(e)) for s, e in zip(starts, ends)]


def segment_index(switches: Sequence[bool]) -> np.ndarray:
    """For each decision, the index of the segment it belongs to (0 for the first segment)."""
    return np.cumsum(segment_starts(switches)) - 1
