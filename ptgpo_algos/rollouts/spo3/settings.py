"""3SPO's settings (``rollouts.spo3``), apart from its search (:mod:`ptgpo_algos.rollouts.spo3.collection`):
checking a config that names 3SPO imports none of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ptgpo_algos.rollouts.spo3.search import Spo3Settings
from ptgpo_algos.validation import check_choice, check_int, check_number, setting, settings_from_mapping

__all__ = ["EXPLORED_SCOPES", "Spo3Config"]

#: How long an explored ``(state, action)`` stays explored (``rollouts.spo3.explored``).
EXPLORED_SCOPES = ("iteration", "run")

@dataclass(frozen=True)
class Spo3Config:
    """3SPO's settings (``rollouts.spo3``); the defaults are the official code's and recipe's."""

    alpha: float = setting(50.0, "α: annealing rate of λ(t) = α log t in the state score")
    xi: float = setting(10.0, "ξ: failures after which a state whose success rate is <= zeta scores 0")
    zeta: float = setting(0.1, "ζ: the success rate that keeps a often failed state")
    omega_k: float = setting(0.1, "decay of the novelty weight w(N) = 0.5 exp(-omega_k N) with visits")
    g_max: int = setting(8, "G_max: most rollouts from one state, n(s) = ceil(G_max S(s))")
    epsilon: float = setting(1e-6, "guard of the success rate N_success / (N_total + epsilon)")
    trajectories: int = setting(8, "finished trajectories per group (the recipe's group size)")
    explored: str = setting("iteration", "an explored (state, action) is skipped for the rest of the iteration "
                            "(iteration) or of the run (run: the official collector's persisted set)")
    min_start: int = setting(1, "rollouts a group's start state gets at least, whatever its score (0: the paper's "
                             "rule, under which a task whose start failed xi times gives no trajectory at all)")

    def __post_init__(self) -> None:
        where = "rollouts.spo3."
        for name in ("alpha", "xi", "zeta", "omega_k"):
            check_number(where + name, getattr(self, name), 0.0)
        check_number(where + "epsilon", self.epsilon, 0.0, exclusive_low=True)
        check_int(where + "g_max", self.g_max, 1)
        check_int(where + "trajectories", self.trajectories, 1)
        check_choice(where + "explored", self.explored, EXPLORED_SCOPES)
        check_int(where + "min_start", self.min_start, 0, self.g_max, hint="at most g_max")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Spo3Config:
        """The settings from ``rollouts.spo3`` (unknown keys refused, naming the valid ones)."""
        return settings_from_mapping(cls, values, "rollouts.spo3 (spo3)")

    def most_decisions(self, horizon: int) -> int:
        """The most decisions a group can spend with episodes of at most ``horizon`` steps:
        ``g_max x (1 + trajectories x (horizon - 1))``.

        Only expansions spend decisions, each at most ``g_max`` (``n(s) = ceil(G_max S(s))`` with
        ``S(s) <= 1``; the start's ``min_start`` is at most ``g_max``), and they spend them whether or
        not a trajectory comes of the candidates (an explored action or a repeat is dropped after it
        was sampled). A state is expanded once per search, on the way down from the start or from
        the state the search backtracked to. The way down from the start expands states at depths
        ``0 .. horizon - 1`` (the step at ``horizon`` ends the episode: the step count travels in the
        snapshot), at most ``horizon`` of them; a way down after backtracking starts at depth 1 or
        deeper, at most ``horizon - 1``. Each way down ends in one trajectory (or the search ends),
        and the search expands nothing once ``trajectories`` are finished, so at most
        ``trajectories`` ways down expand anything. The bound is reached where the start has
        ``trajectories`` distinct actions and every later state one action sampled ``g_max`` times,
        all of them new to the search and no episode ending before the horizon."""
        return self.g_max * (1 + self.trajectories * (horizon - 1))

    @property
    def settings(self) -> Spo3Settings:
        """The constants of the pure parts (:class:`~ptgpo_algos.rollouts.spo3.search.Spo3Settings`)."""
        return Spo3Settings(alpha=float(self.alpha), xi=float(self.xi), zeta=float(self.zeta),
                            omega_k=float(self.omega_k), g_max=self.g_max, epsilon=float(self.epsilon))

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain mapping."""
        return dataclasses.asdict(self)
