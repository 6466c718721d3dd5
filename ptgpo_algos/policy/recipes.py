"""Recipes: a published protocol as data, a named set of config defaults and prompt templates.

A recipe is a folder of :data:`PRESETS` named after it: ``recipe.yaml`` holds its rules, the other
YAML files its prompt templates (:mod:`ptgpo_algos.policy.templates`). ``policy.recipe: NAME`` in a
training config applies the rules when the config is built (:meth:`ptgpo_algos.config.TrainConfig.from_dict`):
each sets config paths the config does not set itself, so every explicit setting still wins and the
saved ``config.json`` holds the values the run used.

``recipe.yaml``::

    description: one line
    rules:                              # in order, later rules over earlier ones
      - set: {optim.lr: 1.0e-6, ...}    # dotted config paths (as --set takes them) -> values
      - when: {env.id: ptgpo/WebShop-v0, algorithm.name: gigpo}    # all must equal the config's
        set: {algorithm.config.norm: mean_norm}

``policy.prompt_template`` in a rule names a template file of the recipe's folder. Estimator keys
(``algorithm.config.*``) are set for the estimators that take them only, so one rule serves them all.

Shipped: ``verl-agent`` (the GiGPO paper's protocol; the docs' Recipes page lists every setting
with the line of verl-agent it comes from).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["PRESETS", "Recipe", "load_recipe", "recipe_names"]

#: The folder of the shipped recipes, one subfolder each.
PRESETS = Path(__file__).resolve().parent / "presets"
#: The config values a rule's ``when`` may compare.
WHEN_KEYS = ("env.id", "algorithm.name")


@dataclass(frozen=True)
class Recipe:
    """A recipe: its name, description, rules (a condition on the environment or estimator, and config paths to set)
    and folder."""
    name: str
    description: str
    rules: tuple[tuple[dict[str, Any], dict[str, Any]], ...]  # (when, set)
    folder: Path

    def defaults(self, env_id: str, algorithm: str) -> dict[str, Any]:
        """The config paths this recipe sets for a run of ``algorithm`` on ``env_id`` (template files
        as paths)."""
        facts = {"env.id": env_id, "algorithm.name": algorithm}
        out: dict[str, Any] = {}
        for when, values in self.rules:
            if all(facts[key] == value for key, value in when.items()):
                out.update(values)
        if "policy.prompt_template" in out:
            out["policy.prompt_template"] = str(self.folder / out["policy.prompt_template"])
        return out


def recipe_names() -> list[str]:
    """The shipped recipes."""
    return sorted(path.parent.name for path in PRESETS.glob("*/recipe.yaml"))


@lru_cache(maxsize=None)
def load_recipe(name: str) -> Recipe:
    """The recipe called ``name``; ``ValueError`` names the known ones, or what is wrong in its file."""
    import yaml

    from ptgpo_algos.yaml_safe import load_yaml

    if name not in recipe_names():
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(recipe_names())}")
    folder = PRESETS / name
    where = f"recipe {name!r} ({folder / 'recipe.yaml'})"
    try:
        data = load_yaml((folder / "recipe.yaml").read_text(encoding="utf-8"), name=str(folder / "recipe.yaml"))
    except yaml.YAMLError as error:
        raise ValueError(f"{where}: not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict) or set(data) - {"description", "rules"} or not isinstance(data.get("rules"), list):
        raise ValueError(f"{where}: expected a mapping with description and a list of rules")
    rules = []
    for index, rule in enumerate(data["rules"]):
        if not isinstance(rule, dict) or set(rule) - {"when", "set"} or not isinstance(rule.get("set"), dict):
            raise ValueError(f"{where}: rules[{index}] must be {{when: {{...}}, set: {{...}}}}")
        when = rule.get("when") or {}
        if not isinstance(when, dict) or set(when) - set(WHEN_KEYS):
            raise ValueError(f"{where}: rules[{index}].when may compare {', '.join(WHEN_KEYS)}, got {when!r}")
        template = rule["set"].get("policy.prompt_template")
        if template is not None and not (folder / str(template)).is_file():
            raise ValueError(f"{where}: rules[{index}] names the prompt template {template!r}, which is not in "
                             f"{folder}")
        rules.append((dict(when), dict(rule["set"])))
    return Recipe(name, str(data.get("description", "")), tuple(rules), folder)
