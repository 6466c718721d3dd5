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
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from ptgpo_algos.data import Context, Decision
from ptgpo_algos.policy.base import ScoredBatch, call_temperature, check_sampling_settings
from ptgpo_algos.policy.parsing import ACTION_STOP, parse_response
from ptgpo_algos.policy.prompts import PromptBuilder

__all__ = ["CausalLMPolicy", "POLICY_SETTINGS_FILE", "load_model_and_tokenizer", "saved_policy_settings"]

#: Written by :meth:`CausalLMPolicy.save_pretrained` beside the weights; read back by ``from_pretrained``.
POLICY_SETTINGS_FILE = "ptgpo_policy.json"
SAVED_SETTINGS = ("mode", "score", "temperature", "history_length", "max_prompt_tokens", "max_new_tokens")


def load_model_and_tokenizer(
    name_or_path: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    lora: dict[str, Any] | None = None,
    gradient_checkpointing: bool = False,
):
    """Load a causal LM and its tokenizer from a local folder or a hub name (no remote code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ptgpo_algos.policy.tiny import TINY_MARKER, load_tiny_tokenizer

    path = Path(name_or_path)
    if (path / TINY_MARKER).exists():
        tokenizer = load_tiny_tokenizer(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=torch_dtype)
    model.to(device)
    if gradient_checkpointing:
        # transformers 5.x renamed it; 4.x only has the old name.
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=int(lora.get("r", 16)),
            lora_alpha=int(lora.get("alpha", 32)),
            lora_dropout=float(lora.get("dropout", 0.0)),
            target_modules=lora.get("target_modules", "all-linear"),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, config)
    return model, tokenizer


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

    Returns ``(logits, cache)``. transformers 5.x renamed ``past_key_values`` to ``cache``.
    """
    names = _cache_names(type(model))
    if cache is not None:
        inputs[names[0]] = cache
    out = model(**inputs)
    return out.logits, getattr(out, names[1], None)


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
    ):
        check_sampling_settings(mode, score, temperature)
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.score_mode = score
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.max_rows = max_rows
        self.prompts = PromptBuilder(tokenizer, mode, history_length, max_prompt_tokens)
        self.pad_id = tokenizer.pad_token_id
        self.eos_id = tokenizer.eos_token_id

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        lora: dict[str, Any] | None = None,
        gradient_checkpointing: bool = False,
        **kwargs: Any,
    ) -> "CausalLMPolicy":
        """Load a model folder or hub name; the acting settings a saved policy recorded
        (:data:`POLICY_SETTINGS_FILE`) are the defaults, and keyword arguments override them."""
        model, tokenizer = load_model_and_tokenizer(
            name_or_path, device=device, dtype=dtype, lora=lora, gradient_checkpointing=gradient_checkpointing
        )
        return cls(model, tokenizer, **{**saved_policy_settings(name_or_path), **kwargs})

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

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
        with torch.inference_mode():
            if self.mode == "choose":
                return self._decide_choose(contexts, prompts, greedy, generator, temperature)
            return self._decide_generate(prompts, greedy, generator, temperature)

    def action_distribution(self, contexts: Sequence[Context]) -> list[torch.Tensor]:
        """``choose`` mode: the probability of each admissible action, per context (what ``decide``
        samples from)."""
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        self.model.eval()
        with torch.inference_mode():
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
        for _ in range(self.max_new_tokens):
            logp = F.log_softmax(logits.float() / temperature, dim=-1)
            if greedy:
                tokens = logp.argmax(-1)
            else:
                tokens = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1).to(logp.device)
            chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            for i in range(batch):
                if done[i]:
                    continue
                token = int(tokens[i])
                generated[i].append(token)
                logprobs[i].append(float(chosen[i]))
                entropies[i].append(float(entropy[i]))
                if token == self.eos_id or ACTION_STOP in self.tokenizer.decode(generated[i][-8:]):
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

    def _generated_decision(self, prompt: list[int], tokens: list[int], logprobs: list[float],
                            entropies: list[float]) -> Decision:
        """A generated response as a decision: its text, the action parsed from it (None if none)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=False).replace(self.tokenizer.eos_token or "\0", "")
        return Decision(text=text, action=parse_response(text).action, prompt_ids=prompt, response_ids=tokens,
                        logprobs=logprobs, entropy=float(sum(entropies) / max(1, len(entropies))))

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
        # the token before it in the packed row.
        logits = torch.cat([last[:, -1:, :], logits], dim=1)
        source = torch.where(offset > 0, index[None, :], torch.zeros_like(offset))
        picked = logits.gather(1, source[..., None].expand(-1, -1, logits.shape[-1])).float()
        packed = F.log_softmax(picked, dim=-1).gather(-1, cids[..., None]).squeeze(-1)
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
        logp, _, cmask = self._response_logprobs([prompts[i] for i in owner], flat, with_entropy=False)
        return self._split(logp, cmask, candidates)

    def _response_logprobs(self, prompts, responses, with_entropy: bool):
        """Per-token log-probs (and entropies) of ``responses`` given ``prompts``, full sequences;
        identical (prompt, response) rows are computed once."""
        index, first = _distinct(zip(prompts, responses), lambda pr: (tuple(pr[0]), tuple(pr[1])))
        if len(first) < len(prompts):
            logp, entropy, rmask = self._response_logprobs(
                [prompts[i] for i in first], [responses[i] for i in first], with_entropy
            )
            take = torch.tensor(index, dtype=torch.long, device=self.device)
            return logp[take], (entropy[take] if entropy is not None else None), rmask[take]
        rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
        ids, mask = _right_pad(rows, self.pad_id, self.device)
        logits, _ = _forward(self.model, input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False)
        width = max(1, max(len(r) for r in responses))
        rmask = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        # Position p predicts token p+1: the response's tokens are predicted from len(prompt)-1 on.
        gather = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            rmask[i, : len(r)] = 1
            gather[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r), device=self.device)
        picked = logits.gather(1, gather[..., None].expand(-1, -1, logits.shape[-1])).float()
        targets, _ = _right_pad(responses, self.pad_id, self.device)
        all_logp = F.log_softmax(picked / self.temperature, dim=-1)
        logp = all_logp.gather(-1, targets[:, :width, None]).squeeze(-1) * rmask
        entropy = -(all_logp.exp() * all_logp).sum(-1) * rmask if with_entropy else None
        return logp, entropy, rmask

    # ================================================================== trainer side
    def score(self, decisions: Sequence[Decision]) -> ScoredBatch:
        """The decisions' log-probabilities (and entropies) under the current weights, with gradients."""
        if self.gradient_checkpointing:
            self.model.train()
        if self.mode == "choose":
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
            return ScoredBatch(logprobs, entropy, torch.ones_like(logprobs))
        logp, entropy, rmask = self._response_logprobs(
            [d.prompt_ids for d in decisions], [d.response_ids for d in decisions], with_entropy=True
        )
        return ScoredBatch(logp, entropy, rmask.float())

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable parameters (the LoRA adapters' with LoRA)."""
        return (p for p in self.model.parameters() if p.requires_grad)

    def named_trainable(self) -> dict[str, torch.nn.Parameter]:
        """The trainable parameters by name."""
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The full model's weights under the base model's names (LoRA adapters merged in)."""
        if hasattr(self.model, "merge_adapter"):
            self.model.merge_adapter()
            try:
                base = self.model.get_base_model()
                for name, tensor in base.state_dict().items():
                    if "lora_" in name:
                        continue
                    yield name.replace(".base_layer", ""), tensor.detach().clone()
            finally:
                self.model.unmerge_adapter()
            return
        for name, tensor in self.model.state_dict().items():
            yield name, tensor.detach()

    def load_weights(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Load ``(name, tensor)`` pairs into the model (every weight, strictly)."""
        self.model.load_state_dict(dict(weights), strict=True)

    def reference_policy(self) -> "CausalLMPolicy":
        """A copy with frozen weights: the KL term's reference."""
        clone = copy.copy(self)
        clone.model = copy.deepcopy(self.model)
        for p in clone.model.parameters():
            p.requires_grad_(False)
        return clone

    def save_pretrained(self, folder: str | Path) -> None:
        """Save model (LoRA merged) and tokenizer, with the acting settings in ``ptgpo_policy.json``."""
        folder = Path(folder)
        model = self.model
        if hasattr(model, "merge_and_unload"):
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        from ptgpo_algos.policy.tiny import TINY_MARKER

        source = Path(getattr(self.model, "name_or_path", "") or "")
        if (source / TINY_MARKER).exists():
            (folder / TINY_MARKER).write_text((source / TINY_MARKER).read_text())
        values = (self.mode, self.score_mode, self.temperature, self.prompts.history_length,
                  self.prompts.max_tokens, self.max_new_tokens)
        settings = dict(zip(SAVED_SETTINGS, values, strict=True))
        (folder / POLICY_SETTINGS_FILE).write_text(json.dumps(settings, indent=1))
