"""The Hugging Face transformers backend (also serves the tiny model, which is a local checkpoint).

:class:`CausalLMPolicy` implements both sides of :class:`ptgpo_algos.policy.base.Policy` for any
``AutoModelForCausalLM``. Everything is batched: one call to :meth:`CausalLMPolicy.decide` runs the
prompts of all live episodes in one forward pass. In ``choose`` mode the prompts' KV cache is computed
once, then all candidates of a prompt are scored in one row after it: packed end to end, each with
positions that restart where the prompt ends and an attention mask that lets it see only the prompt
and its own earlier tokens, which gives each candidate exactly the log-probabilities it would get
alone. So scoring ten candidates costs little more than scoring one; training uses the same
computation with gradients (or, under gradient checkpointing, which disables the cache, full
prompt+candidate sequences).

Scores with gradients of generated responses, and of candidates under gradient checkpointing (the
GPU default for pretrained models), are taken at the response positions only: the decoder's hidden
states there go through the output layer a chunk at a time
(:func:`~ptgpo_algos.policy.token_logprobs.token_logprobs`), so no (batch x length x vocabulary)
tensor is ever formed. The cached candidate path (rollouts; training without gradient checkpointing,
the tiny model's) forms the logits of the candidate tokens only and takes their float32 log-softmax a
few prompts at a time. Precision follows
:mod:`ptgpo_algos.policy.precision`: trainable weights in float32, frozen ones and the forward passes
at the configured dtype on GPUs (autocast).
"""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from ptgpo_algos.data import Context, Decision
from ptgpo_algos.policy.base import SYNC_TOKENS, ScoredBatch, SyncReport, call_temperature, check_sampling_settings
from ptgpo_algos.policy.parsing import ACTION_STOP, parse_response
from ptgpo_algos.policy.precision import Precision, precision_for
from ptgpo_algos.policy.prompts import PromptBuilder
from ptgpo_algos.policy.templates import PromptTemplate
from ptgpo_algos.policy.token_logprobs import token_logprobs

__all__ = ["CausalLMPolicy", "POLICY_SETTINGS_FILE", "load_model_and_tokenizer", "saved_policy_settings"]

#: Written by :meth:`CausalLMPolicy.save_pretrained` beside the weights; read back by ``from_pretrained``.
POLICY_SETTINGS_FILE = "ptgpo_policy.json"
SAVED_SETTINGS = ("mode", "score", "temperature", "history_length", "max_prompt_tokens", "max_new_tokens",
                  "prompt_template", "require_think")


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
    tokenizer = _load_tokenizer(path if not adapters or (path / "tokenizer_config.json").exists() else base_name)
    precision = precision or precision_for(device, dtype)
    stored = precision.frozen if lora or adapters else precision.trainable
    model = AutoModelForCausalLM.from_pretrained(base_name, dtype=getattr(torch, stored))
    model.to(device)
    if gradient_checkpointing:
        # transformers 5.x renamed it; 4.x only has the old name.
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if adapters:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
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
    if lora or adapters:
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
    return model, tokenizer


#: What a saved LoRA policy's folder holds instead of full weights (peft's adapter format).
ADAPTER_CONFIG = "adapter_config.json"


def _adapter_base(path: Path) -> str:
    """The base model a folder of saved adapters names."""
    base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path / ADAPTER_CONFIG}: names no base_model_name_or_path, so the adapters have no model "
                         "to go on; write the base model's folder or hub name there")
    return str(base)


def _load_tokenizer(name_or_path: str | Path):
    from transformers import AutoTokenizer

    from ptgpo_algos.policy.tiny import TINY_MARKER, load_tiny_tokenizer

    path = Path(name_or_path)
    tokenizer = load_tiny_tokenizer(path) if (path / TINY_MARKER).exists() else AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _left_pad(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def _distinct(items, key) -> tuple[list[int], list[int]]:
    """``(index, first)``: item ``i`` equals item ``first[index[i]]``. The rollouts of a group share
    their first context and often later ones (the states GiGPO anchors on), and the trainer puts
    steps with the same prompt in one mini-batch, so each distinct context is computed once."""
    seen: dict[Any, int] = {}
    index, first = [], []
    for i, item in enumerate(items):
        k = key(item)
        j = seen.get(k)
        if j is None:
            j = seen[k] = len(first)
            first.append(i)
        index.append(j)
    return index, first


def _device_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """The generator token sampling draws from on ``device``: ``generator`` itself on a CPU; on an
    accelerator one of its own, seeded from ``generator``, so that a vocabulary's probabilities
    never cross to the host at every token (151,936 x rows floats a step)."""
    if device.type == "cpu" or generator is None:
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def _sample(logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``logp`` (``(rows, vocabulary)`` log-probabilities), on ``logp``'s device
    (``generator`` from :func:`_device_generator`)."""
    return torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)


def _right_pad(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _forward(model, cache=None, **inputs):
    """Call ``model`` with a KV cache under the keyword its transformers version uses.

    Returns ``(logits, cache)`` (a decoder without its output layer: ``(hidden states, cache)``).
    transformers 5.x renamed ``past_key_values`` to ``cache``.
    """
    # A peft model passes keywords through to its base model, whose name for the cache counts.
    names = _cache_names(type(model.get_base_model() if hasattr(model, "get_base_model") else model))
    if cache is not None:
        inputs[names[0]] = cache
    out = model(**inputs)
    first = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return first, getattr(out, names[1], None)


_CACHE_NAMES: dict[type, tuple[str, str]] = {}


def _cache_names(model_type: type) -> tuple[str, str]:
    if model_type not in _CACHE_NAMES:
        import inspect

        new = "cache" in inspect.signature(model_type.forward).parameters
        _CACHE_NAMES[model_type] = ("cache", "cache") if new else ("past_key_values", "past_key_values")
    return _CACHE_NAMES[model_type]


def saved_policy_settings(name_or_path: str | Path) -> dict[str, Any]:
    """The acting settings a saved policy folder records (empty for a plain model folder or a hub name).

    A policy acts on the prompt it was trained on: loading it with other settings (another history
    length, ``choose`` for a ``generate`` policy) silently changes what it does.
    """
    path = Path(name_or_path) / POLICY_SETTINGS_FILE
    if not path.is_file():
        return {}
    saved = json.loads(path.read_text())
    return {key: saved[key] for key in SAVED_SETTINGS if key in saved}


class CausalLMPolicy:
    """A causal LM acting in ``choose`` or ``generate`` mode (see :mod:`ptgpo_algos.policy.base`)."""

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
        prompt_template: dict[str, str] | None = None,
        require_think: bool = False,
        min_new_tokens: int = 0,
        autocast_dtype: str | None = None,
        frozen_dtype: str = "float32",
        logprob_chunk: int = 512,
    ):
        check_sampling_settings(mode, score, temperature)
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.score_mode = score
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.min_new_tokens = min(int(min_new_tokens), int(max_new_tokens))
        self.max_rows = max_rows
        #: Forward passes run under torch.autocast at this dtype (None: at the weights' own).
        self.autocast_dtype = getattr(torch, autocast_dtype) if autocast_dtype else None
        #: Weights that never train (the KL reference's copy) are stored at this dtype.
        self.frozen_dtype = getattr(torch, frozen_dtype)
        #: Response positions sent through the output layer at a time (memory: ~4 x chunk x vocabulary floats).
        self.logprob_chunk = int(logprob_chunk)
        #: True on the KL reference of a LoRA policy: the same model with its adapters switched off.
        self.adapters_disabled = False
        self.require_think = bool(require_think)
        template = None if prompt_template is None else PromptTemplate.from_mapping(prompt_template)
        self.prompts = PromptBuilder(tokenizer, mode, history_length, max_prompt_tokens, template)
        self.pad_id = tokenizer.pad_token_id
        self.eos_id = tokenizer.eos_token_id
        #: FSDP's root unit around ``model`` when it is sharded across ranks
        #: (:func:`ptgpo_algos.distributed.policy.shard_policy`); None otherwise.
        self.root: torch.nn.Module | None = None

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
    def computing(self) -> Iterator[None]:
        """The context every forward pass runs in: autocast at the compute dtype (GPUs), and the
        adapters switched off on a LoRA policy's reference."""
        with contextlib.ExitStack() as stack:
            if self.autocast_dtype is not None:
                stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast_dtype))
            if self.adapters_disabled:
                stack.enter_context(self.model.disable_adapter())
            yield

    def _hidden(self, cache=None, **inputs) -> tuple[torch.Tensor, Any]:
        """The decoder's last hidden states (after the final norm) and its cache: no output layer."""
        return _forward(self._base().get_decoder(), cache, **inputs)

    def _token_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
        """``(log p, entropy)`` of ``targets`` (``(N,)``) predicted from ``hidden`` (``(N, H)``)."""
        head = self._base().get_output_embeddings()
        if not isinstance(head, torch.nn.Linear):
            raise TypeError(f"the model's output layer is a {type(head).__name__}, not a linear layer: adapters on "
                            "lm_head are not supported; leave lm_head out of lora.target_modules")
        return token_logprobs(hidden, head.weight, targets, bias=head.bias, temperature=temperature,
                              chunk=self.logprob_chunk, compute_dtype=self.autocast_dtype or head.weight.dtype)

    def _through_root(self, compute, *args: Any, **kwargs: Any) -> Any:
        """``compute(*args, **kwargs)``, run as the forward of the FSDP root when the model is sharded:
        scoring calls the decoder and the output layer directly, and only the root's forward gathers
        the root unit's parameters (embeddings, final norm, output layer) and reduces their gradients."""
        if self.root is None:
            return compute(*args, **kwargs)
        return self.root(compute, *args, **kwargs)

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
        """One :class:`~ptgpo_algos.data.Decision` per context, sampled (or greedy) in one batched pass."""
        if not contexts:
            return []
        temperature = call_temperature(self.mode, self.score_mode, self.temperature, temperature)
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        # Eval mode: under gradient checkpointing, train mode would switch the KV cache off.
        self.model.eval()
        with torch.inference_mode(), self.computing():
            if self.mode == "choose":
                return self._decide_choose(contexts, prompts, greedy, generator, temperature)
            return self._decide_generate(prompts, greedy, generator, temperature)

    def action_distribution(self, contexts: Sequence[Context]) -> list[torch.Tensor]:
        """``choose`` mode: the probability of each admissible action, per context (what ``decide``
        samples from)."""
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        self.model.eval()
        with torch.inference_mode(), self.computing():
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

    def _decide_generate(self, prompts, greedy, generator, temperature) -> list[Decision]:
        sampler = _device_generator(generator, self.device)
        ids, mask = _left_pad(prompts, self.pad_id, self.device)
        logits, cache = _forward(
            self.model, input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=True, logits_to_keep=1
        )
        logits = logits[:, -1, :]
        batch = len(prompts)
        generated: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        entropies: list[list[float]] = [[] for _ in range(batch)]
        done = [False] * batch
        position = _positions(mask)[:, -1]
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
                tokens = _sample(logp, sampler)
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
            mask = torch.cat([mask, step_mask], dim=1)
            position = position + 1
            logits, cache = _forward(
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
        sampler = _device_generator(torch.Generator().manual_seed(seed), self.device)
        ids, mask = _left_pad(prompts, self.pad_id, self.device)
        position = _positions(mask)[:, -1]
        sampled: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        with torch.no_grad(), self.computing():
            logits, cache = _forward(self.model, input_ids=ids, attention_mask=mask, position_ids=_positions(mask),
                                     use_cache=True, logits_to_keep=1)
            for step in range(max_tokens):
                logp = F.log_softmax(logits[:, -1, :].float(), dim=-1)
                tokens = _sample(logp, sampler)
                chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)
                for row, row_logprobs, token, value in zip(sampled, logprobs, tokens.tolist(), chosen.tolist()):
                    row.append(token)
                    row_logprobs.append(value)
                if step + 1 == max_tokens:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                position = position + 1
                logits, cache = _forward(self.model, cache, input_ids=tokens[:, None], attention_mask=mask,
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
        parsed = parse_response(text, require_think=self.require_think)
        return Decision(text=text, action=parsed.action, prompt_ids=prompt, response_ids=tokens, logprobs=logprobs,
                        entropy=float(sum(entropies) / max(1, len(entropies))), format_error=parsed.error)

    # ================================================================== shared computations
    def _candidate_logprobs(
        self, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], cached: bool
    ) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        """Per-token log-probs of each candidate given its prompt, and each candidate's score.

        Returns ``token_logprobs[i][k]`` (1-D tensor) and ``scores[i]`` (1-D, one per candidate).
        Contexts are processed in chunks of at most ``max_rows`` candidate rows. Identical contexts
        are computed once and share their tensors (gradients add up through them).
        """
        index, first = _distinct(zip(prompts, candidates), lambda pc: (tuple(pc[0]), tuple(map(tuple, pc[1]))))
        if len(first) < len(prompts):
            lp, sc = self._candidate_logprobs([prompts[i] for i in first], [candidates[i] for i in first], cached)
            return [lp[j] for j in index], [sc[j] for j in index]
        token_logprobs: list[list[torch.Tensor]] = []
        scores: list[torch.Tensor] = []
        start = 0
        while start < len(prompts):
            rows, stop = 0, start
            while stop < len(prompts) and (stop == start or rows + len(candidates[stop]) <= self.max_rows):
                rows += len(candidates[stop])
                stop += 1
            compute = self._cached_candidates if cached and not self.gradient_checkpointing else self._packed_candidates
            lp, sc = compute(prompts[start:stop], candidates[start:stop])
            token_logprobs += lp
            scores += sc
            start = stop
        return token_logprobs, scores

    def _flatten(self, candidates):
        owner, flat = [], []
        for i, cands in enumerate(candidates):
            for cand in cands:
                owner.append(i)
                flat.append(cand)
        return owner, flat

    def _split(self, logp: torch.Tensor, cmask: torch.Tensor, candidates):
        counts = cmask.sum(-1)
        total = (logp * cmask).sum(-1)
        score = total / counts.clamp(min=1) if self.score_mode == "mean" else total
        token_logprobs, scores, row = [], [], 0
        for cands in candidates:
            k = len(cands)
            token_logprobs.append([logp[row + j, : len(cands[j])] for j in range(k)])
            scores.append(score[row : row + k])
            row += k
        return token_logprobs, scores

    def _cached_candidates(self, prompts, candidates):
        ids, mask = _left_pad(prompts, self.pad_id, self.device)
        last, cache = _forward(
            self.model, input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=True, logits_to_keep=1
        )
        # One row per prompt holding all its candidates end to end (rather than one row per
        # candidate, which would copy the prompt's KV cache once per candidate): ``segment`` says
        # which candidate a token belongs to (-1: padding), ``offset`` its index within it.
        width = max(1, max(sum(len(c) for c in cands) for cands in candidates))
        packed_ids, segments, offsets, starts = [], [], [], []
        for cands in candidates:
            row_ids, row_segment, row_offset = [], [], []
            for k, cand in enumerate(cands):
                starts.append(len(row_ids))
                row_ids += cand
                row_segment += [k] * len(cand)
                row_offset += range(len(cand))
            padding = width - len(row_ids)
            packed_ids.append(row_ids + [self.pad_id] * padding)
            segments.append(row_segment + [-1] * padding)
            offsets.append(row_offset + [0] * padding)
        cids = torch.tensor(packed_ids, dtype=torch.long, device=self.device)
        segment = torch.tensor(segments, dtype=torch.long, device=self.device)
        offset = torch.tensor(offsets, dtype=torch.long, device=self.device)
        # A token sees the prompt and the earlier tokens of its own candidate; a padding token sees
        # itself only (a query row with nothing to attend to would give NaNs).
        index = torch.arange(width, device=self.device)
        own = (segment[:, :, None] == segment[:, None, :]) & (index[None, :, None] >= index[None, None, :])
        own &= (segment[:, :, None] >= 0) | (index[None, :, None] == index[None, None, :])
        prompt_seen = mask.bool()[:, None, :].expand(-1, width, -1) & (segment >= 0)[:, :, None]
        attention = torch.cat([prompt_seen, own], dim=-1)[:, None]
        position = mask.sum(-1, keepdim=True) + offset
        logits, _ = _forward(
            self.model, cache, input_ids=cids, attention_mask=attention, position_ids=position, use_cache=True
        )
        # A candidate's first token is predicted by the prompt's last position, each later one by
        # the token before it in the packed row. The float32 log-softmax runs a few prompts at a
        # time (about logprob_chunk positions), so without gradients (rollouts) one slice of it lives.
        logits = torch.cat([last[:, -1:, :], logits], dim=1)
        source = torch.where(offset > 0, index[None, :], torch.zeros_like(offset))
        step = max(1, self.logprob_chunk // width)
        packed = torch.cat([
            F.log_softmax(logits[r : r + step].gather(1, source[r : r + step, :, None].expand(-1, -1, logits.shape[-1]))
                          .float(), dim=-1).gather(-1, cids[r : r + step, :, None]).squeeze(-1)
            for r in range(0, len(candidates), step)
        ])
        owner, flat = self._flatten(candidates)
        lengths = torch.tensor([len(c) for c in flat], dtype=torch.long, device=self.device)
        column = torch.arange(max(1, int(lengths.max())), device=self.device)
        cmask = (column[None, :] < lengths[:, None]).long()
        columns = (torch.tensor(starts, dtype=torch.long, device=self.device)[:, None] + column).clamp(max=width - 1)
        rows = torch.tensor(owner, dtype=torch.long, device=self.device)[:, None]
        logp = packed[rows, columns] * cmask
        return self._split(logp, cmask, candidates)

    def _packed_candidates(self, prompts, candidates):
        owner, flat = self._flatten(candidates)
        # A candidate's score is its tokens' log-probabilities at temperature 1, as in the cached
        # path: the policy's temperature applies once, to the softmax over the scores.
        logp, _, cmask = self._response_logprobs([prompts[i] for i in owner], flat, temperature=1.0,
                                                 with_entropy=False)
        return self._split(logp, cmask, candidates)

    def _response_logprobs(self, prompts, responses, *, temperature: float, with_entropy: bool,
                           entropy_grad: bool = True):
        """Per-token log-probs (and entropies) of ``responses`` given ``prompts`` at ``temperature``, full
        sequences; identical (prompt, response) rows are computed once. Returns ``(B, width)`` tensors:
        log-probs, entropies (None without ``with_entropy``; detached without ``entropy_grad``), mask."""
        index, first = _distinct(zip(prompts, responses), lambda pr: (tuple(pr[0]), tuple(pr[1])))
        if len(first) < len(prompts):
            logp, entropy, rmask = self._response_logprobs(
                [prompts[i] for i in first], [responses[i] for i in first], temperature=temperature,
                with_entropy=with_entropy, entropy_grad=entropy_grad,
            )
            take = torch.tensor(index, dtype=torch.long, device=self.device)
            return logp[take], (entropy[take] if entropy is not None else None), rmask[take]
        rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
        ids, mask = _right_pad(rows, self.pad_id, self.device)
        hidden, _ = self._hidden(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False)
        # Position p predicts token p+1: the response's tokens are predicted from len(prompt)-1 on.
        row_index, positions, columns, targets = [], [], [], []
        for i, (p, r) in enumerate(zip(prompts, responses)):
            row_index += [i] * len(r)
            positions += range(len(p) - 1, len(p) - 1 + len(r))
            columns += range(len(r))
            targets += r
        place = (torch.tensor(row_index, dtype=torch.long, device=self.device),
                 torch.tensor(columns, dtype=torch.long, device=self.device))
        positions = torch.tensor(positions, dtype=torch.long, device=self.device)
        token_logp, token_entropy = self._token_logprobs(
            hidden[place[0], positions], torch.tensor(targets, dtype=torch.long, device=self.device), temperature)
        shape = (len(rows), max(1, max(len(r) for r in responses)))
        rmask = torch.zeros(shape, dtype=torch.long, device=self.device).index_put(place, torch.tensor(1, device=self.device))
        logp = torch.zeros(shape, dtype=token_logp.dtype, device=self.device).index_put(place, token_logp)
        entropy = None
        if with_entropy:
            token_entropy = token_entropy if entropy_grad else token_entropy.detach()
            entropy = torch.zeros(shape, dtype=token_entropy.dtype, device=self.device).index_put(place, token_entropy)
        return logp, entropy, rmask

    # ================================================================== trainer side
    def score(self, decisions: Sequence[Decision], *, entropy_grad: bool = True) -> ScoredBatch:
        """Log-probabilities and entropies of ``decisions`` under the current weights, with gradients
        (the entropies' only with ``entropy_grad``: an update without an entropy bonus skips them)."""
        return self._through_root(self._score, decisions, entropy_grad)

    def _score(self, decisions: Sequence[Decision], entropy_grad: bool) -> ScoredBatch:
        if self.gradient_checkpointing:
            self.model.train()
        with self.computing():
            if self.mode == "choose":
                return self._score_choices(decisions, entropy_grad)
            logp, entropy, rmask = self._response_logprobs(
                [d.prompt_ids for d in decisions], [d.response_ids for d in decisions], temperature=self.temperature,
                with_entropy=True, entropy_grad=entropy_grad,
            )
        return ScoredBatch(logp, entropy, rmask.float())

    def _score_choices(self, decisions: Sequence[Decision], entropy_grad: bool) -> ScoredBatch:
        prompts = [d.prompt_ids for d in decisions]
        candidates = [d.candidate_ids for d in decisions]
        if any(c is None for c in candidates):
            raise ValueError("choose-mode scoring needs decisions with candidate_ids")
        _, scores = self._candidate_logprobs(prompts, candidates, cached=True)
        logps, ents = [], []
        for d, s in zip(decisions, scores):
            logp = F.log_softmax(s.float() / self.temperature, dim=-1)
            logps.append(logp[d.choice])
            ents.append(-(logp.exp() * logp).sum())
        logprobs = torch.stack(logps)[:, None]
        entropy = torch.stack(ents)[:, None]
        return ScoredBatch(logprobs, entropy if entropy_grad else entropy.detach(), torch.ones_like(logprobs))

    def response_logprobs(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        """Each response's token log-probabilities given its prompt at ``temperature``, without
        gradients (what a rollout engine's own tokens are checked against after a weight sync)."""
        self.model.eval()
        with torch.no_grad(), self.computing():
            logp, _, rmask = self._through_root(self._response_logprobs, prompts, responses, temperature=temperature,
                                                with_entropy=False)
        return [row[: int(m.sum())].tolist() for row, m in zip(logp.float().cpu(), rmask.cpu())]

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable parameters (the LoRA adapters' with LoRA)."""
        return (p for p in self.model.parameters() if p.requires_grad)

    def named_trainable(self) -> dict[str, torch.nn.Parameter]:
        """The trainable parameters by name."""
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The full model's weights under the base model's names, ``state_dict`` style.

        A LoRA policy's adapters are merged into *copies* of the base weights, one layer at a time
        (the sum in float32, stored at the base's dtype): the model itself is never touched, so its
        frozen base stays exactly as loaded (merging in place and back in bf16 would perturb it at
        every sync).
        """
        if not self.has_adapters:
            for name, tensor in self.model.state_dict().items():
                yield name, tensor.detach()
            return
        base = self.model.get_base_model()
        modules = dict(base.named_modules())
        with torch.no_grad():
            for name, tensor in base.state_dict().items():
                if "lora_" in name:
                    continue
                owner, _, leaf = name.rpartition(".")
                layer = modules.get(owner.removesuffix(".base_layer")) if owner.endswith(".base_layer") else None
                if leaf == "weight" and layer is not None and hasattr(layer, "get_delta_weight"):
                    delta = sum(layer.get_delta_weight(a).float() for a in layer.active_adapters if a in layer.lora_A)
                    tensor = (tensor.float() + delta).to(tensor.dtype)
                yield name.replace(".base_layer", ""), tensor.detach()

    def save_adapter(self, folder: str | Path) -> None:
        """A LoRA policy's adapters alone, in peft's format (what vLLM's LoRA support loads)."""
        if not self.has_adapters:
            raise ValueError("save_adapter: this policy trains no LoRA adapters")
        self.model.save_pretrained(str(folder))

    @property
    def lora_rank(self) -> int | None:
        """The adapters' rank (None without adapters)."""
        return int(self.model.peft_config["default"].r) if self.has_adapters else None

    def tied_weights(self) -> dict[str, str]:
        """``{alias: name}`` of the weights :meth:`export_weights` yields twice as one tensor (a
        tied-embedding model's ``lm_head.weight`` is its embedding), by the base model's names."""
        seen: dict[tuple[int, tuple[int, ...]], str] = {}
        aliases = {}
        for name, tensor in self._base().state_dict().items():
            if "lora_" in name:
                continue
            key = (tensor.data_ptr(), tuple(tensor.shape))
            if key in seen:
                aliases[name.replace(".base_layer", "")] = seen[key]
            else:
                seen[key] = name.replace(".base_layer", "")
        return aliases

    def load_weights(self, weights: Iterator[tuple[str, torch.Tensor]], aliases: dict[str, str] | None = None) -> None:
        """Take ``(name, tensor)`` pairs, ``state_dict`` style; ``aliases`` (``{alias: name}``) fill tied
        weights that were not sent."""
        state = dict(weights)
        for alias, source in (aliases or {}).items():
            state.setdefault(alias, state[source])
        self.model.load_state_dict(state, strict=True)

    def reference_policy(self) -> "CausalLMPolicy":
        """The KL term's reference, frozen at the current weights. A LoRA policy's is the same model
        with its adapters switched off (peft's ``disable_adapter``: the base weights, no copy);
        otherwise a copy stored at the frozen dtype."""
        clone = copy.copy(self)
        if self.has_adapters:
            clone.adapters_disabled = True
            return clone
        clone.model = copy.deepcopy(self.model).to(self.frozen_dtype)
        for p in clone.model.parameters():
            p.requires_grad_(False)
        return clone

    def save_pretrained(self, folder: str | Path) -> None:
        """Save the model and tokenizer, with the acting settings in ``ptgpo_policy.json``.

        A LoRA policy saves its adapters alone (float32, peft's format, the base model's name in
        ``adapter_config.json``): merging them into a bf16 base would round small trained deltas away,
        and a merged 7B model weighs 15 GB. A fully trained model is saved at its compute dtype (bf16 on
        GPUs: half the float32 masters' size), as it is served."""
        folder = Path(folder)
        if self.has_adapters:
            self.model.save_pretrained(folder)
        else:
            dtype = self.autocast_dtype
            state = None if dtype is None else {k: v.detach().to(dtype) for k, v in self.model.state_dict().items()}
            self.model.save_pretrained(folder, state_dict=state)
        self.tokenizer.save_pretrained(folder)
        from ptgpo_algos.policy.tiny import TINY_MARKER

        source = Path(getattr(self.model, "name_or_path", "") or "")
        if (source / TINY_MARKER).exists():
            (folder / TINY_MARKER).write_text((source / TINY_MARKER).read_text())
        template = None if self.prompts.template is None else self.prompts.template.to_mapping()
        values = (self.mode, self.score_mode, self.temperature, self.prompts.history_length,
                  self.prompts.max_tokens, self.max_new_tokens, template, self.require_think)
        settings = dict(zip(SAVED_SETTINGS, values, strict=True))
        (folder / POLICY_SETTINGS_FILE).write_text(json.dumps(settings, indent=1))
