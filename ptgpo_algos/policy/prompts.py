"""The prompt every backend renders: PTGPO's own template, shared by all algorithms, or a recipe's.

A prompt holds the system text (which depends only on the action mode), the task, the last
``history_length`` observation/action pairs, the current observation and the admissible actions. It
is rendered with the tokenizer's chat template when the tokenizer has one (pretrained instruct
models), and as plain text otherwise (the tiny model). When it exceeds ``max_tokens`` the oldest
history pairs go first, then the list of admissible actions, then the system text from its start; the
task and the current observation are never cut (a prompt whose observation alone exceeds the budget
stays over budget rather than lose the present).

With a :class:`~ptgpo_algos.policy.templates.PromptTemplate` (a recipe's prompt, or a user's file) the
prompt is instead the template's text as one user message, with no system text of ours (a chat
template may still add the model's own, as it does for any conversation without one). Over budget the
oldest history pairs go first; without any, the template's ``no_history`` text is used, as it is on the
first step; the rest is never cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptgpo_algos.records import Context
from ptgpo_algos.policy.templates import PromptTemplate

__all__ = ["PromptBuilder", "SYSTEM_TEXT"]

SYSTEM_TEXT = {
    "choose": "You are an agent in a text world. Read the task and the observation, then act.",
    "generate": (
        "You are an agent in a text world. Read the task and the observation, think briefly inside "
        "<think></think>, then give exactly one admissible action inside <action></action>."
    ),
}


@dataclass
class PromptBuilder:
    """Turns a :class:`Context` into prompt token ids, and actions into candidate token ids."""

    tokenizer: Any
    mode: str
    history_length: int = 2
    max_tokens: int = 1024
    template: PromptTemplate | None = None

    def __post_init__(self) -> None:
        self.use_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self._candidate_cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ rendering
    def system_text(self) -> str:
        """The system text of PTGPO's own prompt (a subclass with another response format replaces it)."""
        return SYSTEM_TEXT[self.mode]

    def _user_text(self, context: Context, history: list[tuple[str, str]], actions: bool) -> str:
        lines = [f"Task: {context.task}"]
        for observation, action in history:
            lines += [f"Observation: {observation}", f"Action: {action}"]
        lines.append(f"Current observation: {context.observation}")
        if actions:
            lines.append("Admissible actions: " + " | ".join(context.admissible_actions))
        return "\n".join(lines)

    def _render(self, system: str | None, user: str) -> list[int]:
        if self.use_chat_template:
            messages = [{"role": "system", "content": system}] if system is not None else []
            messages.append({"role": "user", "content": user})
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return list(ids)
        if system is None:
            return self.tokenizer.encode(user, add_special_tokens=False)
        return self.tokenizer.encode(f"{system}\n{user}\nAction:", add_special_tokens=False)

    def prompt_ids(self, context: Context) -> list[int]:
        """Token ids of the prompt, truncated to ``max_tokens`` as the module docstring says."""
        history = list(context.history[-self.history_length :]) if self.history_length > 0 else []
        if self.template is not None:
            return self._template_ids(context, history)
        system = self.system_text()
        actions = True
        ids = self._render(system, self._user_text(context, history, actions))
        while len(ids) > self.max_tokens and history:
            history.pop(0)
            ids = self._render(system, self._user_text(context, history, actions))
        if len(ids) > self.max_tokens and actions:
            actions = False
            ids = self._render(system, self._user_text(context, history, actions))
        if len(ids) > self.max_tokens and system:
            # Cut the system text word by word from its start: it is the least specific part.
            words = system.split()
            while words and len(ids) > self.max_tokens:
                words = words[max(1, len(words) // 4) :]
                ids = self._render(" ".join(words), self._user_text(context, history, actions))
        return ids

    def _template_ids(self, context: Context, history: list[tuple[str, str]]) -> list[int]:
        def render() -> list[int]:
            text = self.template.render(context.task, context.observation, context.admissible_actions, history,
                                        len(context.history))
            return self._render(None, text)

        ids = render()
        while len(ids) > self.max_tokens and history:
            history.pop(0)
            ids = render()
        return ids

    def candidate_ids(self, action: str) -> list[int]:
        """Token ids of an action as a complete response in ``choose`` mode (ends with EOS)."""
        cached = self._candidate_cache.get(action)
        if cached is None:
            text = action if self.use_chat_template else " " + action
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            eos = self.tokenizer.eos_token_id
            cached = list(ids) + ([eos] if eos is not None else [])
            if len(self._candidate_cache) < 100_000:  # environments have finite action vocabularies
                self._candidate_cache[action] = cached
        return list(cached)
