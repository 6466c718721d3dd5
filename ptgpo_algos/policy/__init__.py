"""Policies: one protocol (:mod:`.base`), the transformers backend (:mod:`.hf`), the tiny model
(:mod:`.tiny`), pretrained models by name and GGUF files (:mod:`.pretrained`), the prompt every backend renders (:mod:`.prompts`), prompt templates (:mod:`.templates`)
and the recipes that ship some (:mod:`.recipes`), ReAct parsing (:mod:`.parsing`) and the evaluation
adapter (:mod:`.agent`).

Only the light modules are imported here; :func:`load_policy` imports torch when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptgpo_algos.records import Context, Decision
from ptgpo_algos.policy.base import ACTION_MODES, SCORE_MODES, Policy, ScoredBatch
from ptgpo_algos.policy.parsing import ParsedResponse, format_response, parse_response

__all__ = [
    "ACTION_MODES",
    "SCORE_MODES",
    "Context",
    "Decision",
    "ParsedResponse",
    "Policy",
    "ScoredBatch",
    "format_response",
    "load_policy",
    "parse_response",
]


def load_policy(
    model: str | Path = "tiny",
    *,
    tiny_spec: dict[str, Any] | None = None,
    tiny_env_ids: list[str] | None = None,
    **kwargs: Any,
):
    """A :class:`~ptgpo_algos.policy.hf.CausalLMPolicy` for ``"tiny"`` (built locally), a pretrained model's
    name or a GGUF file (:mod:`.pretrained`: converted once into a model folder), or a folder/hub name.

    The tiny model's tokenizer is trained on the text of ``tiny_env_ids`` (default: all built-in
    environments); a run on one environment passes just that one.

    ``kwargs`` go to :meth:`CausalLMPolicy.from_pretrained` (``mode``, ``score``, ``device``, ``dtype``,
    ``lora``, ``gradient_checkpointing``, ``history_length``, ``max_prompt_tokens``...).
    """
    from ptgpo_algos.policy.hf import CausalLMPolicy
    from ptgpo_algos.policy.pretrained import resolve_model
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    if str(model) == "tiny":
        model = build_tiny_model(TinyModelSpec(**(tiny_spec or {})), env_ids=tiny_env_ids)
    model = resolve_model(model)
    return CausalLMPolicy.from_pretrained(model, **kwargs)
