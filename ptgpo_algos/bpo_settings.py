"""BPO's settings (``rollouts.bpo``), apart from its collection (:mod:`ptgpo_algos.bpo_rollout`):
checking a config that names BPO imports none of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ptgpo_algos.validation import check_int, setting, settings_from_mapping

__all__ = ["BpoConfig"]


@dataclass(frozen=True)
class BpoConfig:
    """BPO's settings (``rollouts.bpo``). The paper's text was not available: K = 4 is the value the
    method is described with; the number of trunks and of branch points per trunk are this suite's
    choice (docs/algorithms/bpo.md says why)."""

    trunks: int = setting(2, "episodes from reset per group (>= 2: their credit is leave-one-out)")
    branch_points: int = setting(1, "highest-entropy decisions of each trunk that are forked")
    forks: int = setting(4, "K: fresh continuations from each branch point (>= 2: siblings compare)")

    def __post_init__(self) -> None:
        where = "rollouts.bpo."
        check_int(where + "trunks", self.trunks, 1)
        check_int(where + "branch_points", self.branch_points, 0)
        check_int(where + "forks", self.forks, 2, hint="a fork's baseline is the mean of its siblings' returns")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> BpoConfig:
        """The settings from ``rollouts.bpo`` (unknown keys refused, naming the valid ones)."""
        return settings_from_mapping(cls, values, "rollouts.bpo (bpo)")

    @property
    def leaves(self) -> int:
        """The most leaves a group has."""
        return self.trunks * (1 + self.branch_points * self.forks)

    def most_decisions(self, horizon: int) -> int:
        """The most decisions a group can spend with episodes of at most ``horizon`` steps: each trunk's
        own, and at each of its branch points (distinct steps, so at most ``horizon`` of them) ``forks``
        continuations deciding from that step to the horizon (the prefix before it is the trunk's)."""
        points = min(self.branch_points, horizon)
        fork_decisions = sum(horizon - step for step in range(points))
        return self.trunks * (horizon + self.forks * fork_decisions)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain mapping."""
        return dataclasses.asdict(self)
