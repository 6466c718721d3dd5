"""The ``policy`` section of the run config: the model and how it acts (:mod:`ptgpo_algos.policy`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ptgpo_algos.policy.base import ACTION_MODES, SCORE_MODES
from ptgpo_algos.policy.recipes import recipe_names
from ptgpo_algos.policy.templates import PromptTemplate, load_prompt_template
from ptgpo_algos.policy.tiny import TinyModelSpec
from ptgpo_algos.sections import field_labels, option
from ptgpo_algos.validation import check_bool, check_choice, check_int, check_mapping, check_number, unknown_keys

__all__ = ["MAX_NEW_TOKENS", "PolicyConfig"]

#: Tokens of one generated response: beyond every model's context window; a mistyped 1e12 would have a
#: model that never writes its end token generate for ever.
MAX_NEW_TOKENS = 2**24


@dataclass(frozen=True)
class PolicyConfig:
    """The model and how it acts (:mod:`ptgpo_algos.policy`)."""

    model: str = option("tiny", "'tiny' (built locally), a pretrained model by name (smollm2; "
                        "`ptgpo models list`), a model folder, a .gguf file or a hub name", flag="model")
    tiny: dict[str, Any] = option(help="the tiny model's spec (TinyModelSpec fields)", factory=dict)
    mode: str = option("choose", "choose (score admissible actions) or generate (ReAct text)",
                       flag="mode")
    score: str = option("mean", "choose mode: a candidate's mean or summed token log-probability")
    temperature: float = option(1.0, "sampling temperature of rollouts")
    history_length: int = option(2, "earlier observation/action pairs in the prompt")
    max_prompt_tokens: int = option(1024, "prompt budget in tokens")
    max_new_tokens: int = option(128, "generate mode: response budget in tokens")
    device: str = option("auto", "auto, cpu, cuda or cuda:N")
    dtype: str = option("auto", "compute dtype: auto (bf16 on GPUs, fp32 on CPUs), float32 or bfloat16; trainable "
                        "weights and the optimiser are float32 always, frozen weights (a LoRA base, the KL "
                        "reference) at this dtype on GPUs, and CPUs compute in float32")
    rollout_dtype: str | None = option(None, "the dtype rollouts and evaluations compute at (transformers backend): "
                                       "bfloat16 runs them under bf16 autocast, 1.4-3.5x as fast on CPUs with bf16 "
                                       "units (AMX, avx512_bf16), while the update stays at dtype and recomputes "
                                       "pi_old there; null: dtype's compute", flat=False)
    cpu_autocast: bool = option(False, "on a CPU, compute as a GPU does at dtype bfloat16: forward and backward "
                                "passes (update, rollouts, evaluation) under bf16 autocast and frozen weights in "
                                "bf16, while trainable weights, the optimiser and log-probabilities stay float32; "
                                "for CPUs with bf16 units (AMX, avx512_bf16), where bf16 is faster", flat=False)
    gradient_checkpointing: bool | None = option(None, "None: on for pretrained models on GPUs")
    lora: dict[str, Any] | None = option(None, "LoRA adapters (r, alpha, dropout, target_modules); None: full "
                                         "fine-tuning")
    recipe: str | None = option(None, "a published protocol as defaults and prompts (verl-agent); settings given "
                                "explicitly override it", flag="recipe")
    prompt_template: dict[str, str] | None = option(None, "a prompt template file (YAML) instead of PTGPO's prompt; "
                                                    "the config keeps its text",
                                                    flag="prompt-template")
    require_think: bool = option(False, "generate mode: a response without <think>...</think> is an invalid step")
    min_new_tokens: int = option(0, "generate mode: no response ends before this many tokens (fixed-length "
                                 "benchmarks; 0: any length)")
    logprob_chunk: int = option(512, "response positions sent through the output layer at a time when scoring "
                                "(memory: about 4 x chunk x vocabulary floats)")
    decode_cache: str = option("dynamic", "generate mode, transformers rollouts: the KV cache, dynamic or static "
                               "(allocated once at full length: fixed shapes a step)")
    share_prefixes: bool = option(True, "the update computes each prefix its rows share once (siblings' context, a "
                                  "context's candidates, a group's system text and task); false: every row whole")

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"{label('policy.model')}: give 'tiny', smollm2, a local model folder or a hub name, got "
                             f"{self.model!r}")
        object.__setattr__(self, "tiny", check_mapping(label("policy.tiny"), self.tiny))
        if self.is_tiny:
            unknown_keys(label("policy.tiny"), self.tiny, TinyModelSpec.FIELDS)
            TinyModelSpec(**self.tiny)
        check_choice(label("policy.mode"), self.mode, ACTION_MODES)
        check_choice(label("policy.score"), self.score, SCORE_MODES)
        check_number(label("policy.temperature"), self.temperature, 0.0, exclusive_low=True)
        check_int(label("policy.history_length"), self.history_length, 0)
        check_int(label("policy.max_prompt_tokens"), self.max_prompt_tokens, 1)
        check_int(label("policy.max_new_tokens"), self.max_new_tokens, 1, MAX_NEW_TOKENS)
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ValueError(f"{label('policy.device')}: expected auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype == "float16":
            raise ValueError(f"{label('policy.dtype')}: float16 trains only under loss scaling, which the trainer does "
                             "not do; use bfloat16 (GPUs since Ampere) or float32")
        check_choice(label("policy.dtype"), self.dtype, ("auto", "float32", "bfloat16"))
        if self.rollout_dtype is not None:
            check_choice(label("policy.rollout_dtype"), self.rollout_dtype, ("float32", "bfloat16"))
        check_bool(label("policy.cpu_autocast"), self.cpu_autocast)
        if self.cpu_autocast and self.dtype == "float32":
            raise ValueError(f"{label('policy.cpu_autocast')}: true computes in bfloat16, which policy.dtype: float32 "
                             "contradicts; set dtype to auto or bfloat16, or cpu_autocast to false")
        check_int(label("policy.min_new_tokens"), self.min_new_tokens, 0, self.max_new_tokens,
                  hint="at most max_new_tokens")
        check_int(label("policy.logprob_chunk"), self.logprob_chunk, 1)
        check_choice(label("policy.decode_cache"), self.decode_cache, ("dynamic", "static"))
        check_bool(label("policy.share_prefixes"), self.share_prefixes)
        if self.gradient_checkpointing is not None:
            check_bool(label("policy.gradient_checkpointing"), self.gradient_checkpointing)
        if self.lora is not None:
            object.__setattr__(self, "lora", check_mapping(label("policy.lora"), self.lora))
            targets = self.lora.get("target_modules", "all-linear")
            if "lm_head" in ([targets] if isinstance(targets, str) else list(targets)):
                raise ValueError(f"{label('policy.lora')}: adapters on lm_head are not supported (scores go through "
                                 "the output layer's weight directly); leave lm_head out of target_modules")
        if self.recipe is not None:
            check_choice(label("policy.recipe"), self.recipe, recipe_names())
        if self.prompt_template is not None:
            object.__setattr__(self, "prompt_template", _prompt_template(self.prompt_template))
        check_bool(label("policy.require_think"), self.require_think)

    @property
    def is_tiny(self) -> bool:
        """Whether the policy is the locally built tiny model."""
        return self.model == "tiny"


def _prompt_template(value: Any) -> dict[str, str]:
    """A template file's text (or a saved template, checked again), as the config keeps it."""
    where = f"{label('policy.prompt_template')}"
    try:
        if isinstance(value, (str, os.PathLike)):
            return load_prompt_template(value).to_mapping()
        return PromptTemplate.from_mapping(value, "the template").to_mapping()
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


#: How messages name a field of this module's sections: its path and the flat name files spell it by.
label = field_labels({"policy": PolicyConfig})
