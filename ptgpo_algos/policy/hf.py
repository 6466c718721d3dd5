"""The Hugging Face transformers backend (also serves the tiny model, which is a local checkpoint).

:class:`CausalLMPolicy` implements both sides of :class:`ptgpo_algos.policy.base.Policy` for any
``AutoModelForCausalLM``. Everything is batched: one call to :meth:`CausalLMPolicy.decide` runs the
prompts of all live episodes in one forward pass. In ``choose`` mode the prompts' KV cache is computed
once, then all candidates of a prompt are scored in one row after it: packed end to end, each with
positions that restart where the prompt ends and an attention mask that lets it see only the prompt
and its own earlier tokens, which gives each candidate exactly the log-probabilities it would get
alone. So scoring ten candidates costs little more than scoring one. Training (``share_prefixes``,
the default) packs the decisions' prompt+candidate or prompt+response rows into a token trie and
computes every prefix they share once, siblings' contexts and a group's system text and task
included (:mod:`~ptgpo_algos.policy.shared_prefix`); without it, the candidates' computation above
with gradients, or, under gradient checkpointing, which disables the cache, full prompt+candidate
sequences.

Scores with gradients of generated responses, and of candidates under gradient checkpointing (the
GPU default for pretrained models), are taken at the response positions only: the decoder's hidden
states there go through the output layer a chunk at a time
(:func:`~ptgpo_algos.policy.token_logprobs.token_logprobs`), so no (batch x length x vocabulary)
tensor is ever formed. The cached candidate path (rollouts; training without gradient checkpointing,
the tiny model's) forms the logits of the candidate tokens only and takes their float32 log-softmax a
few prompts at a time. Precision follows
:mod:`ptgpo_algos.policy.precision`: trainable weights in float32, frozen ones and the forward passes
at the configured dtype on GPUs (autocast), and rollouts at ``rollout_dtype`` where it is given.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from ptgpo_algos.records import Context, Decision
from ptgpo_algos.policy.base import SYNC_TOKENS, SyncReport, call_temperature, check_sampling_settings
from ptgpo_algos.policy.batching import (DECODE_CACHES, device_generator, forward_with_cache, left_pad,
                                         new_decode_cache, position_ids, sample_next)
from ptgpo_algos.policy.hf_scoring import PolicyScoring
from ptgpo_algos.policy.hf_weights import POLICY_SETTINGS_FILE, PolicyWeights, saved_policy_settings
from ptgpo_algos.hiper.plan_format import PlanPromptBuilder, parse_plan_response
from ptgpo_algos.policy.parsing import ACTION_STOP, parse_response
from ptgpo_algos.policy.precision import Precision, precision_for, rollout_autocast
from ptgpo_algos.policy.prompts import PromptBuilder
from ptgpo_algos.policy.templates import PromptTemplate

__all__ = ["CausalLMPolicy", "POLICY_SETTINGS_FILE", "load_model_and_tokenizer", "load_tokenizer", "prepare_model",
           "saved_policy_settings"]



def load_model_and_tokenizer(
    name_or_path: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    lora: dict[str, Any] | None = None,
    gradient_checkpointing: bool = False,
    precision: Precision | None = None,
):
    """Load a causal LM and its tokenizer from a local folder or a hub name (no remote code).

    Weights are stored as ``precision`` says (default: :func:`~ptgpo_algos.policy.precision.precision_for`
    the device and dtype): the trainable ones in float32, a LoRA model's frozen base at the compute
    dtype. Passing a GPU's precision on a CPU rehearses the GPU path there (slowly). A folder of saved
    LoRA adapters (:data:`ADAPTER_CONFIG`) loads its base model with those adapters, trainable.
    """
    from transformers import AutoModelForCausalLM

    path = Path(name_or_path)
    adapters = (path / ADAPTER_CONFIG).exists()
    base_name = _adapter_base(path) if adapters else str(name_or_path)
    tokenizer = load_tokenizer(path if not adapters or (path / "tokenizer_config.json").exists() else base_name)
    precision = precision or precision_for(device, dtype)
    stored = precision.frozen if lora or adapters else precision.trainable
    model = AutoModelForCausalLM.from_pretrained(base_name, dtype=getattr(torch, stored))
    model.to(device)
    return prepare_model(model, lora=lora, gradient_checkpointing=gradient_checkpointing,
                         adapters=path if adapters else None), tokenizer


def prepare_model(model, *, lora: dict[str, Any] | None = None, gradient_checkpointing: bool = False,
                  adapters: Path | None = None):
    """``model`` (its weights already stored as the precision says: see :func:`load_model_and_tokenizer`)
    made trainable as the policy trains it: gradient checkpointing, then the saved ``adapters``'
    folder or new LoRA adapters, trainable in float32. A model built in the process (random weights
    at a benchmark's shape) goes through this as a loaded one does."""
    if gradient_checkpointing:
        # transformers 5.x renamed it; 4.x only has the old name.
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if adapters is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapters), is_trainable=True)
    elif lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=int(lora.get("r", 16)),
            lora_alpha=int(lora.get("alpha", 32)),
            lora_dropout=float(lora.get("dropout", 0.0)),
            target_modules=lora.get("target_modules", "all-linear"),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, config)
    if lora or adapters is not None:
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
    return model


#: What a saved LoRA policy's folder holds instead of full weights (peft's adapter format).
ADAPTER_CONFIG = "adapter_config.json"


def _adapter_base(path: Path) -> str:
    """The base model a folder of saved adapters names."""
    base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path / ADAPTER_CONFIG}: names no base_model_name_or_path, so the adapters have no model "
                         "to go on; write the base model's folder or hub name there")
    return str(base)


def load_tokenizer(name_or_path: str | Path):
    """The tokenizer of a model folder or hub name (the tiny model's own class for a tiny folder), with
    a padding token (end of text when it has none)."""
    from transformers import AutoTokenizer

    from ptgpo_algos.policy.tiny import TINY_MARKER, load_tiny_tokenizer

    path = Path(name_or_path)
    tokenizer = load_tiny_tokenizer(path) if (path / TINY_MARKER).exists() else AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class CausalLMPolicy(PolicyScoring, PolicyWeights):
    """A causal LM acting in ``choose`` or ``generate`` mode (see :mod:`ptgpo_algos.policy.base`).

    Split by concept: this class loads the model and acts (``decide``, generation, the sync check's
    sampling); scoring is :class:`~ptgpo_algos.policy.hf_scoring.PolicyScoring`'s, the weights (export,
    reference, saving) :class:`~ptgpo_algos.policy.hf_weights.PolicyWeights`'. ``plan_format``: HiPER's
    plan/execute prompt and parser (:mod:`ptgpo_algos.hiper.plan_format`) in ``generate`` mode."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        mode: str = "choose",
        score: str = "mean",
        history_length: int = 2,
        max_prompt_tokens: int = 1024,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        max_rows: int = 512,
        share_prefixes: bool = True,
        prompt_template: dict[str, str] | None = None,
        require_think: bool = False,
        min_new_tokens: int = 0,
        autocast_dtype: str | None = None,
        frozen_dtype: str = "float32",
        logprob_chunk: int = 512,
        decode_cache: str = "dynamic",
        rollout_dtype: str | None = None,
        plan_format: bool = False,
    ):
        check_sampling_settings(mode, score, temperature)
        if decode_cache not in DECODE_CACHES:
            raise ValueError(f"decode_cache: one of {', '.join(DECODE_CACHES)}, got {decode_cache!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.score_mode = score
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.min_new_tokens = min(int(min_new_tokens), int(max_new_tokens))
        self.max_rows = max_rows
        #: Scoring computes each prefix the decisions share once (:mod:`~ptgpo_algos.policy.shared_prefix`).
        self.share_prefixes = bool(share_prefixes)
        #: Forward passes run under torch.autocast at this dtype (None: at the weights' own).
        self.autocast_dtype = getattr(torch, autocast_dtype) if autocast_dtype else None
        #: Rollouts' forward passes (``decide``) run under autocast at this dtype instead (None: none).
        rollout = rollout_autocast(Precision("float32", frozen_dtype, autocast_dtype), rollout_dtype)
        self.rollout_autocast_dtype = getattr(torch, rollout) if rollout else None
        #: Weights that never train (the KL reference's copy) are stored at this dtype.
        self.frozen_dtype = getattr(torch, frozen_dtype)
        #: Response positions sent through the output layer at a time (memory: ~4 x chunk x vocabulary floats).
        self.logprob_chunk = int(logprob_chunk)
        #: The KV cache of generation (:data:`~ptgpo_algos.policy.batching.DECODE_CACHES`).
        self.decode_cache = decode_cache
        #: True on the KL reference of a LoRA policy: the same model with its adapters switched off.
        self.adapters_disabled = False
        self.require_think, self.plan_format = bool(require_think), bool(plan_format)
        template = None if prompt_template is None else PromptTemplate.from_mapping(prompt_template)
        self.prompts = (PlanPromptBuilder if self.plan_format else PromptBuilder)(
            tokenizer, mode, history_length, max_prompt_tokens, template)
        self.pad_id, self.eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        #: FSDP's root unit around ``model`` when it is sharded across ranks
        #: (:func:`ptgpo_algos.distributed.policy.shard_policy`); None otherwise.
        self.root: torch.nn.Module | None = None
        #: Across ranks, the number of shared-prefix forward passes every rank runs in one scoring
        #: call, given this rank's (the most of any rank's); None in one process.
        self.agree_passes: Callable[[int], int] | None = None

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        lora: dict[str, Any] | None = None,
        gradient_checkpointing: bool = False,
        precision: Precision | None = None,
        **kwargs: Any,
    ) -> "CausalLMPolicy":
        """Load a model folder or hub name; the acting settings a saved policy recorded
        (:data:`POLICY_SETTINGS_FILE`) are the defaults, and keyword arguments override them."""
        precision = precision or precision_for(device, dtype)
        model, tokenizer = load_model_and_tokenizer(
            name_or_path, device=device, dtype=dtype, lora=lora, gradient_checkpointing=gradient_checkpointing,
            precision=precision,
        )
        settings = {"autocast_dtype": precision.autocast, "frozen_dtype": precision.frozen}
        return cls(model, tokenizer, **{**settings, **saved_policy_settings(name_or_path), **kwargs})

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

    @property
    def has_adapters(self) -> bool:
        """Whether the model trains LoRA adapters (peft) on a frozen base."""
        return hasattr(self.model, "peft_config")

    def _base(self):
        return self.model.get_base_model() if self.has_adapters else self.model

    @contextlib.contextmanager
    def computing(self, rollout: bool = False) -> Iterator[None]:
        """The context every forward pass runs in: autocast at the compute dtype (GPUs), or at the
        rollouts' for a ``rollout``, and the adapters switched off on a LoRA policy's reference."""
        dtype = self.rollout_autocast_dtype if rollout else self.autocast_dtype
        with contextlib.ExitStack() as stack:
            if dtype is not None:
                stack.enter_context(torch.autocast(self.device.type, dtype=dtype))
            if self.adapters_disabled:
                stack.enter_context(self.model.disable_adapter())
            yield

    @property
    def gradient_checkpointing(self) -> bool:
        """Whether gradient checkpointing is on."""
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        flag = "is_activation_checkpointing"  # transformers 5.x; 4.x has is_gradient_checkpointing
        if not hasattr(type(model), flag):
            flag = "is_gradient_checkpointing"
        return bool(getattr(model, flag, False))

    # ================================================================== rollout side
    def decide(
        self, contexts: Sequence[Context], *, greedy: bool = False, generator: torch.Generator | None = None,
        temperature: float | None = None,
    ) -> list[Decision]:
        """One :class:`~ptgpo_algos.records.Decision` per context, sampled (or greedy) in one batched pass."""
        if not contexts:
            return []
        temperature = call_temperature(self.mode, self.score_mode, self.temperature, temperature)
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        # Eval mode: under gradient checkpointing, train mode would switch the KV cache off.
        self.model.eval()
        # no_grad, not inference_mode: autocast keeps no cast cache in inference mode, so every
        # float32 weight would be cast to the compute dtype again at every decoded token.
        with torch.no_grad(), self.computing(rollout=True):
            if self.mode == "choose":
                return self._decide_choose(contexts, prompts, greedy, generator, temperature)
            return self._decide_generate(prompts, greedy, generator, temperature)

    def action_distribution(self, contexts: Sequence[Context]) -> list[torch.Tensor]:
        """``choose`` mode: the probability of each admissible action, per context (what ``decide``
        samples from)."""
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        self.model.eval()
        with torch.no_grad(), self.computing(rollout=True):  # no_grad: autocast's cast cache (see decide)
            _, scores = self._candidate_logprobs(prompts, self._candidates(contexts), cached=True)
        return [F.softmax(s.float() / self.temperature, dim=-1) for s in scores]

    def _candidates(self, contexts: Sequence[Context]) -> list[list[list[int]]]:
        candidates = []
        for c in contexts:
            if not c.admissible_actions:
                raise ValueError("choose mode needs at least one admissible action per context")
            candidates.append([self.prompts.candidate_ids(a) for a in c.admissible_actions])
        return candidates

    def _decide_choose(self, contexts, prompts, greedy, generator, temperature) -> list[Decision]:
        candidates = self._candidates(contexts)
        token_logprobs, scores = self._candidate_logprobs(prompts, candidates, cached=True)
        decisions = []
        for i, context in enumerate(contexts):
            logits = scores[i] / temperature
            logp = F.log_softmax(logits.float(), dim=-1)
            if greedy:
                choice = int(torch.argmax(logp))
            else:
                choice = int(torch.multinomial(logp.exp().cpu(), 1, generator=generator))
            entropy = float(-(logp.exp() * logp).sum())
            decisions.append(
                Decision(
                    text=context.admissible_actions[choice],
                    action=context.admissible_actions[choice],
                    prompt_ids=prompts[i],
                    response_ids=candidates[i][choice],
                    logprobs=token_logprobs[i][choice].tolist(),
                    entropy=entropy,
                    candidate_ids=candidates[i],
                    choice=choice,
                    choice_logprob=float(logp[choice]),
                )
            )
        return decisions

    def _prefill(self, prompts):
        """The prompts' forward pass into a fresh KV cache (:attr:`decode_cache`): ``(last logits, cache,
        attention mask, last positions, prompt width)``. With a static cache the mask is at the cache's
        full length, to be filled a column a step, so that every decode step has the same shapes."""
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        width = ids.shape[1]
        cache = new_decode_cache(self._base(), self.decode_cache, width + self.max_new_tokens)
        logits, cache = forward_with_cache(
            self.model, cache, input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True,
            logits_to_keep=1,
        )
        position = position_ids(mask)[:, -1]
        if self.decode_cache == "static":
            mask = torch.cat([mask, mask.new_zeros(len(prompts), self.max_new_tokens)], dim=1)
        return logits[:, -1, :], cache, mask, position, width

    def _decide_generate(self, prompts, greedy, generator, temperature) -> list[Decision]:
        sampler = device_generator(generator, self.device)
        logits, cache, mask, position, width = self._prefill(prompts)
        batch, static = len(prompts), self.decode_cache == "static"
        generated: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        entropies: list[list[float]] = [[] for _ in range(batch)]
        done = [False] * batch
        for step in range(self.max_new_tokens):
            early = step < self.min_new_tokens
            if early and self.eos_id is not None:
                # A response may not end before min_new_tokens (benchmarks of a fixed length), as
                # vLLM's min_tokens: the end-of-text token is masked out.
                logits = logits.clone()
                logits[:, self.eos_id] = float("-inf")
            logp = F.log_softmax(logits.float() / temperature, dim=-1)
            if greedy:
                tokens = logp.argmax(-1)
            else:
                tokens = sample_next(logp, sampler)
            chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)
            entropy = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)  # a masked token: 0 * -inf
            # One device-to-host copy per step, not one per row: on a GPU each row's read is a sync.
            step_tokens, step_logprobs, step_entropies = tokens.tolist(), chosen.tolist(), entropy.tolist()
            for i in range(batch):
                if done[i]:
                    continue
                token = step_tokens[i]
                generated[i].append(token)
                logprobs[i].append(step_logprobs[i])
                entropies[i].append(step_entropies[i])
                if not early and (token == self.eos_id or ACTION_STOP in self.tokenizer.decode(generated[i][-8:])):
                    done[i] = True
            if all(done):
                break
            step_mask = torch.tensor([[0 if d else 1] for d in done], dtype=torch.long, device=self.device)
            # Finished rows keep being fed (padding, masked out) so the batch stays rectangular.
            tokens = torch.where(step_mask[:, 0].bool(), tokens, torch.full_like(tokens, self.pad_id))
            if static:
                mask[:, width + step] = step_mask[:, 0]
            else:
                mask = torch.cat([mask, step_mask], dim=1)
            position = position + 1
            logits, cache = forward_with_cache(
                self.model,
                cache,
                input_ids=tokens[:, None],
                attention_mask=mask,
                position_ids=position[:, None],
                use_cache=True,
            )
            logits = logits[:, -1, :]
        return [self._generated_decision(*row) for row in zip(prompts, generated, logprobs, entropies)]

    def sample_tokens(self, prompts: Sequence[Sequence[int]], max_tokens: int,
                      seed: int = 0) -> list[tuple[list[int], list[float]]]:
        """``max_tokens`` tokens per prompt sampled at temperature 1 through the generation path (the
        KV cache, end of text ignored) and their log-probabilities: the rollout side of a sync check."""
        self.model.eval()
        sampler = device_generator(torch.Generator().manual_seed(seed), self.device)
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        position = position_ids(mask)[:, -1]
        sampled: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        with torch.no_grad(), self.computing():
            logits, cache = forward_with_cache(self.model, input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                                     use_cache=True, logits_to_keep=1)
            for step in range(max_tokens):
                logp = F.log_softmax(logits[:, -1, :].float(), dim=-1)
                tokens = sample_next(logp, sampler)
                chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)
                for row, row_logprobs, token, value in zip(sampled, logprobs, tokens.tolist(), chosen.tolist()):
                    row.append(token)
                    row_logprobs.append(value)
                if step + 1 == max_tokens:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                position = position + 1
                logits, cache = forward_with_cache(self.model, cache, input_ids=tokens[:, None], attention_mask=mask,
                                         position_ids=position[:, None], use_cache=True)
        return list(zip(sampled, logprobs))

    def verify_sync(self, reference: Any, prompts: Sequence[Sequence[int]], max_tokens: int = SYNC_TOKENS) -> SyncReport:
        """The sync check's statistic between this policy's generation path and ``reference``'s scoring
        (:meth:`response_logprobs`): with the same weights on both sides, the noise floor of the two
        compute paths (cached decoding against one full forward pass) at the policy's precision."""
        return SyncReport.compare(self.sample_tokens(prompts, max_tokens), reference, prompts)

    def _generated_decision(self, prompt: list[int], tokens: list[int], logprobs: list[float],
                            entropies: list[float]) -> Decision:
        """A generated response as a decision: its text, the action parsed from it (None if none)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=False).replace(self.tokenizer.eos_token or "\0", "")
        parsed = parse_plan_response(text) if self.plan_format else parse_response(text, require_think=self.require_think)
        return Decision(text=text, action=parsed.action, prompt_ids=prompt, response_ids=tokens, logprobs=logprobs,
                        entropy=float(sum(entropies) / max(1, len(entropies))), format_error=parsed.error)
