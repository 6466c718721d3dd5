"""Rollout strategies by name (``rollouts.strategy``): how one iteration's groups are played.

A strategy is a :class:`RolloutStrategy`: a ``collect`` function over the shared collection
(:class:`~ptgpo_algos.rollouts.collection.Collection`, which PATR's extends) and what it ``needs`` of the
environment (:data:`ptgpo_envs.FEATURES`: ``snapshot`` to fork episodes, ``progress``...), checked
once before the run, and the most decisions one task's group can spend (``most_decisions``), which
sizes each task's share of a decision budget. A strategy that learns across iterations declares its
``memory``: a factory of the state it keeps (given the ``rollouts`` section), with
``state_dict()``/``load_state_dict()`` of plain data; the trainer holds it, checkpoints it and hands
it to every ``collect`` as ``memory=``.
A strategy with settings of its own declares their dataclass (``settings``): the config reads them
from ``rollouts.<name>`` (or the ``section`` it names), refuses a key the dataclass lacks, and hands
them to ``collect`` within the ``rollouts`` section, as ``rollouts.<name>``; ``ptgpo algos`` lists
their defaults, ``ptgpo train --help`` each one's default and help. The built-in strategies' settings
live apart from their collections (:mod:`ptgpo_algos.rollouts.patr.settings`...), which are imported
when a run first collects: checking a config imports none of them.
The built-in ones: ``linear`` (independent episodes), ``tree`` (a prefix tree branched from earlier
steps; :mod:`ptgpo_algos.rollouts.collection`), ``patr`` (PATR's process-scored tree; :mod:`ptgpo_algos.rollouts.patr.collection`)
``3spo`` (3SPO's ranked backtracking over states scored across iterations;
:mod:`ptgpo_algos.rollouts.spo3.collection`) and ``bpo`` (BPO's forks at high-entropy decisions;
:mod:`ptgpo_algos.rollouts.bpo.collection`). Another package adds one with one line, through the
``ptgpo.rollout_strategies`` entry points::

    ROLLOUT_STRATEGIES.register("mine", RolloutStrategy("mine", collect, needs, settings=MySettings,
                                                        slots=..., most_decisions=...))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ptgpo_algos.rollouts.bpo.settings import BpoConfig
from ptgpo_algos.records import Batch, Task
from ptgpo_algos.rollouts.patr.settings import PatrConfig
from ptgpo_algos.rollouts.spo3.settings import Spo3Config
from ptgpo_envs.plugins import Registry

if TYPE_CHECKING:
    from ptgpo_algos.rollouts.collection import RolloutStats
    from ptgpo_algos.rollouts.spo3.search import StateStats

__all__ = ["ROLLOUT_STRATEGIES", "RolloutStrategy", "collect_with", "new_memory", "settings_sections"]

#: ``collect(policy, tasks, rollouts, **common)``: ``rollouts`` is the config's section and ``common``
#: the keywords every strategy takes (``rng``, ``generator``, ``env_backend``, ``env_workers``,
#: ``env_options``, ``max_decisions``, ``expert``; see :func:`~ptgpo_algos.rollouts.collection.collect_rollouts`).
Collect = Callable[..., "tuple[Batch, RolloutStats]"]
#: ``most_decisions(rollouts, horizon)``: the most decisions one task's group can spend under the config's
#: ``rollouts`` section with episodes of at most ``horizon`` steps.
DecisionBound = Callable[[Any, int], int]


def _no_needs(rollouts: Any) -> dict[str, str]:
    return {}


def _episodes_of_group_size(rollouts: Any, horizon: int) -> int:
    return rollouts.group_size * horizon


@dataclass(frozen=True)
class RolloutStrategy:
    """A registered rollout strategy: its collection, what it needs of the environment under a given
    ``rollouts`` section (feature -> who needs it, for messages), for one that keeps state across
    iterations the factory of that state (None: it keeps none), and for one with settings of its own:

    - ``settings``: their frozen dataclass, built from the config's mapping at ``rollouts.<section>``
      (every field with a default; its ``__post_init__`` checks the values);
    - ``section``: that key (None: the strategy's name; 3SPO's is ``spo3``);
    - ``flat``: older flat config files spell the section at the top level (``patr: {...}``);
    - ``slots``: the episodes one task's group plays, by the setting that sizes them (checked against
      the bound on an iteration's episodes), for a strategy whose groups ``group_size`` does not size;
    - ``resolve``: the settings with what depends on the environment's id filled in, when a config is built;

    and ``most_decisions(rollouts, horizon)``: the most decisions one task's group can spend under the
    ``rollouts`` section with episodes of at most ``horizon`` steps, every decision the collection
    counts (expansions and forks as well as finished episodes' steps). A decision budget is shared
    among an iteration's tasks in proportion to it, and a task's group is capped at it, so it must
    never under-state. Left out, it is ``group_size x horizon``: right for a strategy whose groups are
    ``group_size`` episodes and nothing else; one that declares ``slots`` must declare it.
    """

    name: str
    collect: Collect
    needs: Callable[[Any], Mapping[str, str]] = _no_needs
    summary: str = ""
    memory: Callable[[Any], Any] | None = None
    settings: type | None = None
    section: str | None = None
    flat: bool = False
    slots: Callable[[Any], Mapping[str, int]] | None = None
    resolve: Callable[[Any, str], Any] | None = None
    most_decisions: DecisionBound | None = None

    def __post_init__(self) -> None:
        if self.slots is not None and self.most_decisions is None:
            raise ValueError(f"rollout strategy {self.name!r}: declare most_decisions(rollouts, horizon), the most "
                             "decisions one task's group can spend; a strategy that declares slots has no default")

    def group_decisions(self, rollouts: Any, horizon: int) -> int:
        """The most decisions one task's group can spend under ``rollouts`` with episodes of at most
        ``horizon`` steps: its ``most_decisions``, else ``group_size x horizon``."""
        bound = self.most_decisions or _episodes_of_group_size
        most = bound(rollouts, horizon)
        if not isinstance(most, int) or isinstance(most, bool) or most < 0:
            raise ValueError(f"rollout strategy {self.name!r}: most_decisions gave {most!r} for a horizon of "
                             f"{horizon}; it must return an integer >= 0")
        return most

    @property
    def settings_key(self) -> str:
        """The key of its settings under ``rollouts``."""
        return self.section or self.name

    def default_settings(self) -> dict[str, Any]:
        """Its settings' defaults as plain data (empty: it has none)."""
        return {} if self.settings is None else dataclasses.asdict(self.settings())

    def documented_settings(self) -> list[tuple[str, Any, str]]:
        """Its settings as ``(key under rollouts, default, help)``, ``("patr.top_k", 2, "branches expanded...")``:
        the help is the field's (:func:`~ptgpo_algos.validation.setting`), "" where it gives none."""
        if self.settings is None:
            return []
        defaults = self.default_settings()
        return [(f"{self.settings_key}.{field.name}", defaults[field.name], field.metadata.get("help", ""))
                for field in dataclasses.fields(self.settings)]


#: Rollout strategies by name; other packages add theirs through the ``ptgpo.rollout_strategies`` entry points.
ROLLOUT_STRATEGIES: Registry[RolloutStrategy] = Registry("rollout strategy", "ptgpo.rollout_strategies")


def settings_sections() -> dict[str, RolloutStrategy]:
    """The strategies with settings, by the key of their settings under ``rollouts``, in registration order."""
    sections: dict[str, RolloutStrategy] = {}
    for name, strategy in ROLLOUT_STRATEGIES.items():
        if strategy.settings is None:
            continue
        key = strategy.settings_key
        if key in sections:
            raise ValueError(f"the rollout strategies {sections[key].name} and {name} both read rollouts.{key}; "
                             f"give {name} a section of its own")
        sections[key] = strategy
    return sections


def new_memory(name: str, rollouts: Any) -> Any:
    """A fresh memory of the strategy ``name`` under the ``rollouts`` section (None: it keeps none)."""
    strategy = ROLLOUT_STRATEGIES.get(name)
    return None if strategy.memory is None else strategy.memory(rollouts)


def collect_with(name: str, policy: Any, tasks: Sequence[Task], rollouts: Any, *, memory: Any = None,
                 **common: Any) -> tuple[Batch, RolloutStats]:
    """One iteration's rollouts of ``tasks`` by the strategy ``name``; ``memory`` is its state across
    iterations (updated in place), a fresh one where it keeps one and none is given."""
    strategy = ROLLOUT_STRATEGIES.get(name)
    if strategy.memory is None:
        return strategy.collect(policy, tasks, rollouts, **common)
    return strategy.collect(policy, tasks, rollouts, memory=memory if memory is not None else strategy.memory(rollouts),
                            **common)


# Every strategy's collection is imported when a run collects, not when a config naming it is checked:
# the built-in ones' settings live apart (patr_settings, spo3_settings, bpo_settings).
def _groups(mode: str) -> Collect:
    def collect(policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
        from ptgpo_algos.rollouts.collection import collect_rollouts

        return collect_rollouts(policy, tasks, group_size=rollouts.group_size, mode=mode,
                                initial_rollouts=rollouts.initial_rollouts, branch=rollouts.branch, **common)

    return collect


def _patr(policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
    from ptgpo_algos.rollouts.patr.collection import collect_patr_rollouts

    return collect_patr_rollouts(policy, tasks, rollouts.patr, **common)


def _spo3(policy: Any, tasks: Sequence[Task], rollouts: Any, *, memory: StateStats, rng: Any = None,
          **common: Any) -> tuple[Batch, RolloutStats]:
    from ptgpo_algos.rollouts.spo3.collection import collect_spo3_rollouts

    # The search draws nothing of its own (ties keep the sampled order): rng is not needed.
    return collect_spo3_rollouts(policy, tasks, rollouts.spo3, memory, **common)


def _spo3_memory(rollouts: Any) -> StateStats:
    from ptgpo_algos.rollouts.spo3.search import StateStats

    return StateStats()


def _bpo(policy: Any, tasks: Sequence[Task], rollouts: Any, **common: Any) -> tuple[Batch, RolloutStats]:
    from ptgpo_algos.rollouts.bpo.collection import collect_bpo_rollouts

    return collect_bpo_rollouts(policy, tasks, rollouts.bpo, **common)


def _forks(name: str) -> Callable[[Any], dict[str, str]]:
    return lambda rollouts: {"snapshot": f"rollouts.strategy (rollout): {name} rollouts"}


def _patr_needs(rollouts: Any) -> dict[str, str]:
    needs = _forks("patr")(rollouts)
    if "progress" in (rollouts.patr.scorer, rollouts.patr.judge):
        needs["progress"] = "rollouts.patr.scorer: PATR's progress scorer (use scorer: value or auto)"
    return needs


# A tree's leaves share their prefixes, so its group_size leaves spend at most group_size x horizon, as
# linear episodes do; a PATR group's forks likewise, over at most max_leaves leaves.
ROLLOUT_STRATEGIES.register("linear", RolloutStrategy("linear", _groups("linear"), summary="independent episodes",
                                                      most_decisions=_episodes_of_group_size))
ROLLOUT_STRATEGIES.register("tree", RolloutStrategy("tree", _groups("tree"), _forks("tree"),
                                                    "a prefix tree branched from earlier steps",
                                                    most_decisions=_episodes_of_group_size))
ROLLOUT_STRATEGIES.register("patr", RolloutStrategy(
    "patr", _patr, _patr_needs, "PATR's process-scored tree of up to max_leaves leaves", settings=PatrConfig,
    flat=True, slots=lambda patr: {"patr.max_leaves": patr.max_leaves},
    resolve=lambda patr, env_id: patr.resolved(env_id),
    most_decisions=lambda rollouts, horizon: rollouts.patr.max_leaves * horizon))
ROLLOUT_STRATEGIES.register("3spo", RolloutStrategy(
    "3spo", _spo3, _forks("3spo"), "3SPO's ranked backtracking over states scored across iterations",
    memory=_spo3_memory, settings=Spo3Config, section="spo3", flat=True,
    slots=lambda spo3: {"spo3.g_max": spo3.g_max, "spo3.trajectories": spo3.trajectories},
    most_decisions=lambda rollouts, horizon: rollouts.spo3.most_decisions(horizon)))
ROLLOUT_STRATEGIES.register("bpo", RolloutStrategy(
    "bpo", _bpo, _forks("bpo"), "BPO's K forks at each trunk's highest-entropy decisions", settings=BpoConfig,
    flat=True, slots=lambda bpo: {"bpo leaves (trunks x (1 + branch_points x forks))": bpo.leaves},
    most_decisions=lambda rollouts, horizon: rollouts.bpo.most_decisions(horizon)))
