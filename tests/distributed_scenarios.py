"""What each rank runs in the multi-rank tests (tests/test_distributed.py): module-level functions,
so that spawned processes can import them by name. Each returns plain data (numpy arrays) to the test.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ptgpo_algos.distributed.fsdp import FsdpConfig, shard_model
from ptgpo_algos.distributed.gather import gathered_weights
from ptgpo_algos.distributed.step import PgSample, TokenScorer, policy_gradient_step
from ptgpo_algos.distributed.work_split import split_evenly

#: The two architectures the tests shard: the tiny model's (TinyModelSpec's defaults: tied
#: embeddings, 2 heads of 32, 1 key-value head) and a 2-layer Qwen2.5-7B look-alike (untied output
#: layer, grouped-query attention with 2 key-value heads of 4 query heads), both randomly initialised.
ARCHITECTURES = {
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=1024, tie_word_embeddings=True),
    "qwen2": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=320, tie_word_embeddings=False, rms_norm_eps=1e-6,
                  rope_theta=1000000.0),
}


def build_model(kind: str, seed: int = 0, lora: bool = False) -> torch.nn.Module:
    """A randomly initialised Qwen2ForCausalLM of ``ARCHITECTURES[kind]``, the same for a seed on every rank."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**ARCHITECTURES[kind], max_position_embeddings=256, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
        torch.manual_seed(seed + 1)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "lora_B" in name:  # peft starts B at zero: give the adapters something to gather
                    parameter.normal_(0.0, 0.02)
    return model


def make_samples(kind: str, count: int = 6, seed: int = 0) -> list[PgSample]:
    """``count`` samples of random tokens: prompts of 2-7 tokens, responses of 1-4, weights 1 or 2,
    advantages of both signs, pi_old near the model's (so that some ratios clip)."""
    rng = np.random.default_rng(seed)
    vocab = ARCHITECTURES[kind]["vocab_size"]
    samples = []
    for _ in range(count):
        prompt = tuple(int(t) for t in rng.integers(1, vocab, int(rng.integers(2, 8))))
        response = tuple(int(t) for t in rng.integers(1, vocab, int(rng.integers(1, 5))))
        old = tuple(float(v) for v in -np.log(vocab) + rng.normal(0.0, 0.3, len(response)))
        samples.append(PgSample(prompt, response, old, float(rng.normal()), float(rng.integers(1, 3))))
    return samples


def one_step(kind: str, samples: list[PgSample], sharded: bool, micro_batch_size: int | None = None) -> dict:
    """One SGD step of the policy-gradient loss; the weights after it and the step's figures.

    SGD, not AdamW: Adam's first step is about ``lr * sign(gradient)``, which would hide a gradient
    scaled wrongly; SGD's moves each weight by ``lr`` times its gradient."""
    scorer = TokenScorer(build_model(kind), chunk=3)
    if sharded:
        shard_model(scorer, FsdpConfig(), "cpu")
    optimizer = torch.optim.SGD(scorer.parameters(), lr=0.5)
    figures = policy_gradient_step(scorer, optimizer, samples, max_grad_norm=0.05, micro_batch_size=micro_batch_size)
    weights = {name: tensor.numpy().copy() for name, tensor in gathered_weights(scorer, prefix="model.")}
    return {"figures": figures, "weights": weights}


def step_on_rank(info, kind: str, count: int, micro_batch_size: int | None) -> dict:
    """This rank's block of the batch, one sharded step; the gathered weights (rank 0) and figures."""
    samples = make_samples(kind, count)
    mine = [samples[i] for i in split_evenly(len(samples), info.world_size)[info.rank]]
    out = one_step(kind, mine, sharded=True, micro_batch_size=micro_batch_size)
    if not info.is_main:
        out["weights"] = None
    out["threads"] = os.environ.get("OMP_NUM_THREADS")
    return out
