"""The auxiliary objectives by name (:data:`OBJECTIVES`), what ``algorithm.objectives`` names, checked with
their keys without importing torch or any objective's module.

An objective is registered by name with its configuration keys (each a
:class:`~ptgpo_algos.advantages.config.ConfigKey`, checked at the edge) and a builder::

    OBJECTIVES.register("my-objective", ObjectiveSpec("my-objective", build, defaults, keys))

``build(**params)`` returns an :class:`~ptgpo_algos.objectives.base.Objective` (how one joins an update:
:mod:`ptgpo_algos.objectives.base`). The built-in objectives are declared in one table here,
:data:`BUILT_IN_OBJECTIVES`: each by its name, its class's import string, and its keys with their
defaults and rules; its module is imported when a run builds it (``tests/test_registries.py`` holds each
declaration equal to its class's keyword parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ptgpo_algos.advantages.config import ConfigKey
from ptgpo_algos.objectives.rules import (
    choice_rule,
    count_rule,
    fraction_rule,
    optional_real_rule,
    real_rule,
    template_rule,
)
from ptgpo_algos.validation import as_number
from ptgpo_envs.plugins import Registry, imported

__all__ = ["BUILT_IN_OBJECTIVES", "MARGINS", "OBJECTIVES", "ObjectiveSpec", "RELABEL_TYPES", "RULE_SETS",
           "SKILL_SOURCES", "WEIGHT_KEY", "WEIGHT_RULE", "needs_expert", "objective_needs", "validate_objectives"]


@dataclass(frozen=True)
class ObjectiveSpec:
    """A registered objective: its builder (or the builder's ``"module:attribute"`` import string), every
    config key with its default, and their rules."""

    name: str
    build: Callable[..., Any] | str
    defaults: Mapping[str, Any]
    keys: Mapping[str, ConfigKey]
    summary: str = ""
    #: The weight when the config gives none (SEED's lambda_opd is 0.01).
    default_weight: float = 1.0
    #: What it needs of the run: ``expert``, ``full_weights``, or optional environment features
    #: (:data:`ptgpo_envs.FEATURES`), checked before the run.
    needs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        missing = sorted(set(self.defaults) - set(self.keys))
        if missing:
            raise RuntimeError(f"objective {self.name!r}: keys {missing} have no rule")

    @property
    def builder(self) -> Callable[..., Any]:
        """The builder, its module imported here the first time where it is named by import string."""
        return imported(self.build) if isinstance(self.build, str) else self.build


#: Auxiliary objectives by name; other packages add theirs through the ``ptgpo.objectives`` entry points.
OBJECTIVES: Registry[ObjectiveSpec] = Registry("objective", "ptgpo.objectives")
#: The key every objective takes: the factor on its loss.
WEIGHT_KEY = "weight"


def validate_objectives(where: str, value: Any) -> list[dict[str, Any]]:
    """The ``objectives`` list with every entry complete (name, weight and each key at its default),
    checked and converted; ``ValueError`` names the entry and the key to fix."""
    if value is None:
        return []
    if isinstance(value, Mapping) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of objectives, e.g. [{{name: isdpo, weight: 1.0}}], got "
                         f"{value!r}")
    checked, names = [], set()
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise ValueError(f"{where}[{i}]: expected a mapping with a name, e.g. {{name: isdpo}}, got {entry!r}")
        name = entry["name"]
        if name not in OBJECTIVES:
            raise ValueError(f"{where}[{i}]: {OBJECTIVES.unknown(name)}")
        if name in names:
            raise ValueError(f"{where}[{i}]: objective {name!r} is listed twice; keep one")
        names.add(name)
        checked.append({"name": name, **_checked_params(f"{where}[{i}]", OBJECTIVES.get(name), entry)})
    return checked


def _checked_params(where: str, spec: ObjectiveSpec, entry: Mapping[str, Any]) -> dict[str, Any]:
    given = {k: v for k, v in entry.items() if k != "name"}
    valid = [WEIGHT_KEY, *spec.defaults]
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for objective {spec.name!r}; "
                         f"valid keys: {', '.join(valid)}")
    out = {WEIGHT_KEY: spec.default_weight, **spec.defaults}
    rules = {WEIGHT_KEY: WEIGHT_RULE, **spec.keys}
    for key, item in given.items():
        try:
            out[key] = rules[key].convert(item)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {key}={item!r} is invalid for objective {spec.name!r}: {key} "
                             f"({rules[key].meaning}) must be {rules[key].expected}") from None
    return out


def _weight(value: Any) -> float:
    value = as_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError
    return float(value)


WEIGHT_RULE = ConfigKey("factor on the objective's loss, added to the RL loss", "a finite number >= 0", _weight)


def objective_needs(entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What the configured objectives need (``expert``, ``full_weights``, environment features), each
    with the first objective that needs it."""
    needs: dict[str, str] = {}
    for entry in entries:
        for need in sorted(OBJECTIVES.get(entry["name"]).needs):
            needs.setdefault(need, entry["name"])
    return needs


def needs_expert(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of the configured objectives needs the expert's next actions recorded in rollouts."""
    return "expert" in objective_needs(entries)


# ------------------------------------------------------------------------------------- the built-ins
#: hindsight: which completed tasks a failed rollout is relabelled into: of its own type, or of any.
RELABEL_TYPES = ("same", "any")
#: mcgpo: the context rules a key names, tried in order.
RULE_SETS = {"exact-coarse": ("exact", "coarse"), "exact": ("exact",), "coarse": ("coarse",)}
#: mcgpo: the log-probability margin, against the rollout policy's or absolute.
MARGINS = ("reference", "absolute")
#: seed: who writes the skills.
SKILL_SOURCES = ("auto", "template", "policy")

_HINDSIGHT_KEYS = {
    "updates": ConfigKey("cross-entropy steps after each PPO update", "an integer >= 0", count_rule(0)),
    "batch_size": ConfigKey("relabelled decisions per step", "an integer >= 1", count_rule(1)),
    "window": ConfigKey("steps up to a completion that are relabelled", "an integer >= 1", count_rule(1)),
    "buffer_size": ConfigKey("relabelled decisions kept", "an integer >= 1", count_rule(1)),
    "types": ConfigKey("relabel into tasks of the rollout's own type (same) or any type",
                       "one of " + ", ".join(RELABEL_TYPES), choice_rule(RELABEL_TYPES)),
}
_ISDPO_KEYS = {
    "alpha": ConfigKey("share of the reverse KL(pi || pi_tea) in the mixed KL", "a number in [0, 1]",
                       fraction_rule),
    "tau_ema": ConfigKey("EMA step of the teacher towards the policy after each update", "a number in (0, 1]",
                         real_rule(0.0, 1.0, open_low=True)),
    "beta": ConfigKey("sharpness of the teacher-entropy weights exp(-beta H)", "a finite number >= 0",
                      real_rule(0.0)),
    "is_clip": ConfigKey("cap on the importance ratio of a routed unit", "a number >= 1", real_rule(1.0)),
    "threshold": ConfigKey("a trajectory succeeded when its return reaches it (null: the environment's won)",
                           "null or a finite number", optional_real_rule),
    "hint_actions": ConfigKey("expert actions the teacher is shown (the next ones)", "an integer >= 1",
                              count_rule(1)),
    "hint_template": ConfigKey("the teacher's task line, with {task} and {plan}", "a string with {task} and {plan}",
                               template_rule("task", "plan")),
}
_MCGPO_KEYS = {
    "beta": ConfigKey("scale of the log-probability margin in the logistic loss", "a number > 0",
                      real_rule(0.0, open_low=True)),
    "folds": ConfigKey("fixed folds of a group's trajectories (by index): compared in one, oriented by the "
                       "others", "an integer >= 2", count_rule(2)),
    "rules": ConfigKey("context rules tried in order", "one of " + ", ".join(RULE_SETS), choice_rule(tuple(RULE_SETS))),
    "min_support": ConfigKey("distinct valued actions a context needs", "an integer >= 2", count_rule(2)),
    "min_gap": ConfigKey("smallest difference of values that makes a preference", "a finite number >= 0",
                         real_rule(0.0)),
    "support_prior": ConfigKey("kappa of the support weight n / (n + kappa)", "a finite number >= 0", real_rule(0.0)),
    "coarse_weight": ConfigKey("factor on pairs matched by the coarse rule", "a finite number >= 0", real_rule(0.0)),
    "max_pairs": ConfigKey("pairs kept per group (drawn at random when more)", "an integer >= 1", count_rule(1)),
    "margin": ConfigKey("the log-probability margin: against the rollout policy's (reference) or absolute",
                        "one of " + ", ".join(MARGINS), choice_rule(MARGINS)),
    "gamma": ConfigKey("discount of an orienting trajectory's return by the steps it had left", "a number in [0, 1]",
                       real_rule(0.0, 1.0)),
}
_SEED_KEYS = {
    "beta_opd": ConfigKey("sharpness of the gate sigmoid(beta (l_sk - l))", "a finite number >= 0", real_rule(0.0)),
    "max_skills": ConfigKey("lessons per trajectory's skill", "an integer >= 1", count_rule(1)),
    "skill_source": ConfigKey("who writes the skills: the policy, the template, or auto (the policy in generate "
                              "mode with a pretrained model, else the template)", "one of " + ", ".join(SKILL_SOURCES),
                              choice_rule(SKILL_SOURCES)),
    "skill_template": ConfigKey("the task line with the skill, with {task} and {skill}",
                                "a string with {task} and {skill}", template_rule("task", "skill")),
}

#: The built-in objectives, in the order ``ptgpo algos`` lists them; each one's class is imported when a
#: run builds it.
BUILT_IN_OBJECTIVES: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec("hindsight", "ptgpo_algos.objectives.hindsight:Hindsight",
                  {"updates": 1, "batch_size": 256, "window": 4, "buffer_size": 4096, "types": "same"},
                  _HINDSIGHT_KEYS, "failed rollouts relabelled with the tasks they completed, trained on by "
                  "cross-entropy in steps of their own after the update", needs=frozenset({"achieved_tasks"})),
    ObjectiveSpec("isdpo", "ptgpo_algos.objectives.isdpo:ISDPO",
                  {"alpha": 0.5, "tau_ema": 0.05, "beta": 1.0, "is_clip": 2.0, "threshold": None, "hint_actions": 1,
                   "hint_template": "{task} (an expert's next actions: {plan})"},
                  _ISDPO_KEYS, "all-failed groups distilled from an EMA teacher shown the expert's plan",
                  needs=frozenset({"expert", "full_weights"})),
    ObjectiveSpec("mcgpo", "ptgpo_algos.objectives.mcgpo:MCGPO",
                  {"beta": 1.0, "folds": 2, "rules": "exact-coarse", "min_support": 2, "min_gap": 0.0,
                   "support_prior": 1.0, "coarse_weight": 0.5, "max_pairs": 256, "gamma": 0.95, "margin": "reference"},
                  _MCGPO_KEYS, "pairwise preferences between actions in matched contexts, fold-oriented"),
    ObjectiveSpec("seed", "ptgpo_algos.objectives.seed:SEED",
                  {"beta_opd": 5.0, "max_skills": 5, "skill_source": "auto",
                   "skill_template": "{task} (skills from an earlier attempt: {skill})"},
                  _SEED_KEYS, "hindsight skills in context, their log-prob shift distilled (gated NLL)",
                  default_weight=0.01),
)

for _spec in BUILT_IN_OBJECTIVES:
    OBJECTIVES.register(_spec.name, _spec)
