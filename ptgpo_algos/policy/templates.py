"""Prompt templates: the text of a prompt as data, loaded from a file and checked where it enters.

PTGPO's own prompt (:mod:`ptgpo_algos.policy.prompts`) needs no template. A template replaces it with
one user message built from two texts, as the literature's agent recipes prompt (verl-agent's ALFWorld
and WebShop prompts are of this kind):

``no_history``
    the first step, or any step shown without earlier steps (``history_length`` 0, or a prompt over
    its token budget);
``with_history``
    every later step.

Both are ``str.format`` texts over these placeholders (a literal brace is written twice, ``{{``)::

    {task_description}     the task, in the environment's words
    {step_count}           steps taken before this one (0 on the first)
    {current_step}         this step's number (step_count + 1)
    {history_length}       how many earlier steps the history shows
    {action_history}       those steps, each written as ``history_item``, joined by ``history_separator``
    {current_observation}  the observation now
    {admissible_actions}   the actions offered now, each written as ``action_item``, joined by
                           ``action_separator`` ({available_actions} is the same text)

``no_history`` must hold ``{current_observation}`` and the actions; ``with_history`` also the task
and ``{action_history}``. ``history_item`` is written with ``{step}``, ``{observation}`` and
``{action}`` (the last two required), ``action_item`` with ``{action}``.

``page_view`` names how an environment's pages are shown (:data:`PAGE_VIEWS`): ``plain`` (as they
come) or ``webshop`` (each page from the instruction on, its ``[SEP]`` parts quoted one by one, and
``search[<your query>]`` as the one action of the search page, clicks elsewhere), as verl-agent shows
WebShop's pages. The view applies to the history's observations too.

A template file is YAML with these keys (:func:`load_prompt_template`); every mistake is a
``ValueError`` naming the file, the key and what is missing or unknown.
"""

from __future__ import annotations

import dataclasses
import os
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["PAGE_VIEWS", "PLACEHOLDERS", "PageView", "PromptTemplate", "load_prompt_template"]

#: Every placeholder a template text may use, with what it holds.
PLACEHOLDERS = {
    "task_description": "the task",
    "step_count": "steps taken before this one",
    "current_step": "this step's number",
    "history_length": "how many earlier steps are shown",
    "action_history": "the earlier steps",
    "current_observation": "the observation now",
    "admissible_actions": "the actions offered now",
    "available_actions": "the actions offered now (the same text as admissible_actions)",
}
_ACTIONS = ("admissible_actions", "available_actions")
_REQUIRED = {
    "no_history": ("current_observation",),
    "with_history": ("task_description", "action_history", "current_observation"),
}
_ITEMS = {
    "action_item": (("action",), ("action",)),
    "history_item": (("step", "observation", "action"), ("observation", "action")),
}


@dataclass(frozen=True)
class PageView:
    """How a prompt shows an environment's page: ``observation(text, task)`` and ``actions(list)``."""

    observation: Callable[[str, str], str]
    actions: Callable[[Sequence[str]], list[str]]


_SEP = " [SEP] "
#: What WebShop's search page offers in a prompt: the grammar of a search, not one query.
SEARCH_PLACEHOLDER = "search[<your query>]"


def _webshop_observation(page: str, task: str) -> str:
    # Everything up to the instruction is the same on every page; a page without the instruction
    # (another style, a shop of another make) is shown as it is.
    parts = page.split(_SEP)
    if task not in parts:
        return page
    return _SEP.join(f"'{part}'" for part in parts[parts.index(task) + 1 :])


def _webshop_actions(actions: Sequence[str]) -> list[str]:
    # The environment lists one concrete search (the instruction) wherever searching is accepted; the
    # prompt offers the search grammar on the search page, where it is the only action, and the
    # clicks on every other page.
    clicks = [action for action in actions if not action.startswith("search[")]
    if clicks or not actions:
        return clicks
    return [SEARCH_PLACEHOLDER]


PAGE_VIEWS: dict[str, PageView] = {
    "plain": PageView(lambda page, task: page, list),
    "webshop": PageView(_webshop_observation, _webshop_actions),
}


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt's texts (see the module docstring); build with :meth:`from_mapping` to have it checked."""

    no_history: str
    with_history: str
    action_item: str = "'{action}'"
    action_separator: str = ", "
    history_item: str = "Step {step}: observation '{observation}', action '{action}'"
    history_separator: str = "\n"
    page_view: str = "plain"

    @classmethod
    def from_mapping(cls, data: Any, where: str = "prompt template") -> PromptTemplate:
        """A checked template from its keys; ``ValueError`` names ``where``, the key and the fix."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping of template keys (no_history, with_history, ...), "
                             f"got {type(data).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; template keys: {', '.join(known)}")
        missing = [name for name in ("no_history", "with_history") if name not in data]
        if missing:
            raise ValueError(f"{where}: missing {' and '.join(missing)} (the prompt of the first step and of "
                             "later steps)")
        for key, value in data.items():
            if not isinstance(value, str):
                raise ValueError(f"{where}: {key} must be text, got {value!r}")
        template = cls(**data)
        for name, required in _REQUIRED.items():
            _check_text(f"{where}: {name}", getattr(template, name), PLACEHOLDERS, required, actions=True)
        for name, (allowed, required) in _ITEMS.items():
            _check_text(f"{where}: {name}", getattr(template, name), allowed, required, actions=False)
        if template.page_view not in PAGE_VIEWS:
            raise ValueError(f"{where}: page_view {template.page_view!r} is not one of {', '.join(PAGE_VIEWS)}")
        return template

    def to_mapping(self) -> dict[str, str]:
        """The template's fields as a mapping (as in its YAML file)."""
        return dataclasses.asdict(self)

    @property
    def view(self) -> PageView:
        """The page view the template names (``plain`` or ``webshop``)."""
        return PAGE_VIEWS[self.page_view]

    def render(self, task: str, observation: str, actions: Sequence[str], history: Sequence[tuple[str, str]],
               step_count: int) -> str:
        """The prompt text of a step: ``history`` is the shown tail of the ``step_count`` earlier steps."""
        view = self.view
        listed = self.action_separator.join(self.action_item.format(action=a) for a in view.actions(actions))
        values = {"task_description": task, "step_count": step_count, "current_step": step_count + 1,
                  "current_observation": view.observation(observation, task), "admissible_actions": listed,
                  "available_actions": listed}
        if not history:
            return self.no_history.format(**values, history_length=0, action_history="")
        first = step_count - len(history) + 1
        lines = [self.history_item.format(step=first + i, observation=view.observation(o, task), action=a)
                 for i, (o, a) in enumerate(history)]
        return self.with_history.format(**values, history_length=len(history),
                                        action_history=self.history_separator.join(lines))


def _check_text(where: str, text: str, allowed: Any, required: Sequence[str], actions: bool) -> None:
    """``text`` is a format string whose fields are plain names among ``allowed``, holding ``required``
    (and, for a prompt text, one of the action placeholders)."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ValueError(f"{where}: not a valid template text ({error}); write a literal brace twice, {{{{ "
                         "or }}") from None
    names = []
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if not name or spec or conversion:
            raise ValueError(f"{where}: placeholder {{{name}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}} must be a plain {{name}}")
        if name not in allowed:
            raise ValueError(f"{where}: unknown placeholder {{{name}}}; known: "
                             + ", ".join(f"{{{known}}}" for known in allowed))
        names.append(name)
    missing = [f"{{{name}}}" for name in required if name not in names]
    if actions and not any(name in names for name in _ACTIONS):
        missing.append("{admissible_actions} (or {available_actions})")
    if missing:
        raise ValueError(f"{where}: missing placeholder(s) {', '.join(missing)}")


def load_prompt_template(path: str | os.PathLike) -> PromptTemplate:
    """Read and check a template file (YAML with the keys of :class:`PromptTemplate`)."""
    import yaml

    from ptgpo_algos.yaml_safe import load_yaml

    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"prompt template {str(path)!r} does not exist (a YAML file with no_history and "
                         "with_history; see ptgpo_algos/policy/templates.py)")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), name=str(path))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({error})") from None
    return PromptTemplate.from_mapping(data, str(path))
