"""Parse the ReAct-style responses of ``generate`` mode: ``<think>...</think><action>...</action>``.

The rules are strict on purpose, because an unparsable response is an invalid step that the
estimators penalise (``invalid_penalty``), and the policy must learn to avoid it:

* exactly one ``<action>...</action>`` pair with non-empty content; its stripped text is the action;
* at most one ``<think>...</think>`` pair, closed before the action opens (thinking is optional);
* no tag may be unclosed, nested, or appear twice, and nothing but whitespace may follow
  ``</action>`` (a model that keeps talking after acting has not committed to that action).

Tags are matched case-insensitively.

``require_think=True`` (a recipe's response rule, verl-agent's) also requires the ``<think>`` pair. A
response that breaks only that rule keeps its action, which is played, and its ``error``: the step is
invalid (penalised like an inadmissible action) as verl-agent counts it, though the environment acts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedResponse", "parse_response", "format_response", "ACTION_STOP"]

#: Generation stops once a response contains this.
ACTION_STOP = "</action>"

_TAG = re.compile(r"</?(think|action)>", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedResponse:
    """A generated response, parsed: ``action`` is what to play (None: nothing parsable), ``error`` why
    the response is invalid."""

    action: str | None
    think: str | None
    error: str | None

    @property
    def valid(self) -> bool:
        """Whether the response named an action and broke no rule (``require_think``)."""
        return self.action is not None and self.error is None


def format_response(action: str, think: str = "") -> str:
    """The canonical response for ``action`` (what a perfect ``generate`` policy would write)."""
    return f"<think>{think}</think><action>{action}</action>"


def parse_response(text: str, *, require_think: bool = False) -> ParsedResponse:
    """Extract the action of a response, or say why there is none (see the module docstring)."""
    tags = [(m.group(0).lower(), m.start(), m.end()) for m in _TAG.finditer(text)]
    names = [t for t, _, _ in tags]
    for name in ("<think>", "</think>", "<action>", "</action>"):
        if names.count(name) > 1:
            return ParsedResponse(None, None, f"duplicated {name} tag")
    if "<action>" not in names or "</action>" not in names:
        return ParsedResponse(None, None, "missing <action>...</action>")
    position = {name: (start, end) for name, start, end in tags}
    if position["<action>"][0] > position["</action>"][0]:
        return ParsedResponse(None, None, "</action> before <action>")
    think = None
    if "<think>" in names or "</think>" in names:
        if "<think>" not in names or "</think>" not in names:
            return ParsedResponse(None, None, "unclosed <think> tag")
        if not position["<think>"][0] < position["</think>"][0] <= position["<action>"][0]:
            return ParsedResponse(None, None, "<think> must be closed before <action>")
        think = text[position["<think>"][1] : position["</think>"][0]].strip()
    if text[position["</action>"][1] :].strip():
        return ParsedResponse(None, think, "text after </action>")
    action = text[position["<action>"][1] : position["</action>"][0]].strip()
    if not action:
        return ParsedResponse(None, think, "empty action")
    if require_think and think is None:
        return ParsedResponse(action, None, "missing <think>...</think>")
    return ParsedResponse(action, think, None)
