"""PATR's settings (``rollouts.patr``) and its process scorers' registry, apart from the collection
(:mod:`ptgpo_algos.rollouts.patr.collection`): checking a config that names PATR imports none of it.

The built-in scorers are named by import string (``progress``, ``value``, ``auto``: functions of
:mod:`ptgpo_algos.rollouts.patr.collection`), imported the first time a run asks for one; another package adds one through
the ``ptgpo.scorers`` entry points.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ptgpo_algos.validation import check_int, check_number, check_registered, setting, settings_from_mapping
from ptgpo_envs.plugins import Registry

__all__ = ["DEFAULT_EVERY", "EVERY", "SCORERS", "PatrConfig", "Scorer"]

#: K, the turns between checkpoints, by environment where it is not the paper's FrozenLake value, 5.
#: 5 also suits Household, ALFWorld, Sokoban and BabyAI (solutions of 5-20 turns, horizons of 30-100:
#: the expansions the 10-leaf cap allows fall within the solving window); WebShop's episodes end
#: within 15 turns (a purchase takes 4-6), so its checkpoints come every 3.
DEFAULT_EVERY: dict[str, int] = {"ptgpo/WebShop-v0": 3}
EVERY = 5

#: A process scorer: ``scorer(branches, finished) -> one score per branch`` (:class:`ptgpo_algos.rollouts.patr.collection.Branch`).
Scorer = Callable[[Sequence[Any], Sequence[Sequence[Any]]], Sequence[float]]
#: Process scorers by name (see :mod:`ptgpo_algos.rollouts.patr.collection`); the built-in ones are imported when first asked for.
SCORERS: Registry[Scorer] = Registry("process scorer", "ptgpo.scorers")
SCORERS.register_lazy("progress", "ptgpo_algos.rollouts.patr.collection:progress_scorer")
SCORERS.register_lazy("value", "ptgpo_algos.rollouts.patr.collection:value_scorer")
SCORERS.register_lazy("auto", "ptgpo_algos.rollouts.patr.collection:auto_scorer")


@dataclass(frozen=True)
class PatrConfig:
    """PATR's settings (``rollouts.patr``); the defaults are the paper's Table 3 where it gives them."""

    initial_branches: int = setting(4, "B0: branches started from reset")
    children: int = setting(2, "M: branches that replace an expanded one (it goes on as the first)")
    top_k: int = setting(2, "branches expanded at a checkpoint (0: prune only)")
    every: int | None = setting(None, "K: turns between checkpoints [5, the paper's FrozenLake value; WebShop 3]")
    alpha: float = setting(0.5, "a checkpoint prunes the branches scoring below median - alpha")
    repeat_limit: int | None = setting(6, "Θ: prune a branch whose last repeat_limit actions were the same (None: "
                                       "never)")
    max_leaves: int = setting(10, "no expansion beyond this many leaves in a group (the paper's <= 10 under a "
                              "50-turn cap)")
    pruned_reward: float = setting(0.0, "added to a pruned leaf's last reward (0: a negative like a failure)")
    scorer: str = setting("auto", "process scorer: progress, value, auto (progress where the environment reports "
                          "it, else value) or a registered one")
    judge: str | None = setting(None, "a second scorer blended in: s = lam * judge + (1 - lam) * scorer")
    lam: float = setting(0.5, "the judge's weight in the blend")

    def __post_init__(self) -> None:
        where = "rollouts.patr."
        check_int(where + "initial_branches", self.initial_branches, 1)
        check_int(where + "children", self.children, 2, hint="an expanded branch is replaced by >= 2")
        check_int(where + "top_k", self.top_k, 0)
        if self.every is not None:
            check_int(where + "every", self.every, 1)
        check_number(where + "alpha", self.alpha, 0.0)
        if self.repeat_limit is not None:
            check_int(where + "repeat_limit", self.repeat_limit, 2)
        check_int(where + "max_leaves", self.max_leaves, self.initial_branches,
                  hint="at least initial_branches")
        check_number(where + "pruned_reward", self.pruned_reward, -math.inf)
        check_registered(where + "scorer", self.scorer, SCORERS)
        if self.judge is not None:
            check_registered(where + "judge", self.judge, SCORERS)
        check_number(where + "lam", self.lam, 0.0, 1.0)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PatrConfig:
        """The settings from ``rollouts.patr`` (unknown keys refused, naming the valid ones)."""
        return settings_from_mapping(cls, values, "rollouts.patr (patr)")

    def resolved(self, env_id: str) -> PatrConfig:
        """With ``every`` set: the environment's default where none was given (:data:`DEFAULT_EVERY`)."""
        return self if self.every is not None else dataclasses.replace(self, every=DEFAULT_EVERY.get(env_id, EVERY))

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain mapping."""
        return dataclasses.asdict(self)
