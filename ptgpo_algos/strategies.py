"""Rollout strategies by name (``rollouts.strategy``): how one iteration's groups are played.

A strategy is a :class:`RolloutStrategy`: a ``collect`` function over the shared collection
(:class:`~ptgpo_algos.rollout.Collection`, which PATR's extends) and what it ``needs`` of the
environment (:data:`ptgpo_envs.FEATURES`: ``snapshot`` to fork episodes, ``progress``...), checked
once before the run. The built-in ones: ``linear`` (independent episodes), ``tree`` (a prefix tree
branched from earlier steps; :mod:`ptgpo_algos.rollout`) and ``patr`` (PATR's process-scored tree;
:mod:`ptgpo_algos.patr`). Another package adds one with one line, through the
``ptgpo.rollout_strategies`` entry points::

    ROLLOUT_STRATEGIES.register("mine", RolloutStrategy("mine", collect, needs))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ptgpo_algos.data import Batch, Task
from ptgpo_algos.patr import collect_patr_rollouts
from ptgpo_algos.rollout import RolloutStats, collect_rollouts
from ptgpo_envs.plugins import Registry

__all__ = ["ROLLOUT_STRATEGIES", "RolloutStrategy", "collect_with"]

#: ``collect(policy, tasks, rollouts, **common)``: ``rollouts`` is the config's section and ``common``
#: the keywords every strategy takes (``rng``, ``generator``, ``env_backend``, ``env_workers``,
#: ``env_options``, ``max_decisions``, ``expert``; see :func:`~ptgpo_algos.rollout.collect_rollouts`).
Collect = Callable[..., tuple[Batch, RolloutStats]]


def _no_needs(rollouts: Any) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class RolloutStrategy:
    """A registered rollout strategy: its collection and what it needs of the environment under a
    given ``rollouts`` section (feature -> who needs it, for messages)."""

    name: str
    collect: Collect
    needs: Callable[[Any], Mapping[str, str]] = _no_needs
    summary: str = ""


#: Rollout strategies by name; other packages add theirs through the ``ptgpo.rollout_strategies`` entry points.
ROLLOUT_STRATEGIES: Registry[RolloutStrategy] = Registry("rollout strategy", "ptgpo.rollout_strategies")


def collect_with(name: str, policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
    """One iteration's rollouts of ``tasks`` by the strategy ``name``."""
    return ROLLOUT_STRATEGIES.get(name).collect(policy, tasks, rollouts, **common)


def _groups(mode: str) -> Collect:
    def collect(policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
        return collect_rollouts(policy, tasks, group_size=rollouts.group_size, mode=mode,
                                initial_rollouts=rollouts.initial_rollouts, branch=rollouts.branch, **common)

    return collect


def _patr(policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
    return collect_patr_rollouts(policy, tasks, rollouts.patr, **common)


def _forks(name: str) -> Callable[[Any], dict[str, str]]:
    return lambda rollouts: {"snapshot": f"rollouts.strategy (rollout): {name} rollouts"}


def _patr_needs(rollouts: Any) -> dict[str, str]:
    needs = _forks("patr")(rollouts)
    if "progress" in (rollouts.patr.scorer, rollouts.patr.judge):
        needs["progress"] = "rollouts.patr.scorer: PATR's progress scorer (use scorer: value or auto)"
    return needs


ROLLOUT_STRATEGIES.register("linear", RolloutStrategy("linear", _groups("linear"), summary="independent episodes"))
ROLLOUT_STRATEGIES.register("tree", RolloutStrategy("tree", _groups("tree"), _forks("tree"),
                                                    "a prefix tree branched from earlier steps"))
ROLLOUT_STRATEGIES.register("patr", RolloutStrategy("patr", _patr, _patr_needs,
                                                    "PATR's process-scored tree of up to max_leaves leaves"))
