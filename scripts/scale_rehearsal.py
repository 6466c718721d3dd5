"""One PPO update of a randomly initialised Qwen2.5-0.5B at real shapes, on the CPU.

    python scripts/scale_rehearsal.py                     # 2 samples x (1,500 + 512) tokens, vocabulary 151,936
    python scripts/scale_rehearsal.py --prompt-tokens 800 # a shorter prompt where memory is short

The model has the exact architecture of ``configs/models/qwen2.5-0.5b/config.json`` (written locally,
nothing downloaded) with random weights; the config says bfloat16, which on a CPU means float32
weights and compute (:mod:`ptgpo_algos.policy.precision`), as the trainer does. The run goes through
the trainer's memory path: pi_old recomputed without gradients in micro-batches, then one PPO update
(AdamW, lr 1e-6) whose mini-batch of ``--samples`` samples is cut into micro-batches of
``--micro-batch``, scored through the chunked output layer, under gradient checkpointing as on GPUs.

Prints one JSON line:

* ``peak_rss_gib``: the process's peak resident memory during pi_old's recomputation and the update
  (``VmHWM``, reset before each; the checks' own copies are made outside those windows);
* ``planned_gib``: :func:`ptgpo_algos.training.memory_plan.plan_memory`'s CPU prediction for the same run (it
  counts AdamW's moments, which the first step allocates only at its end, so it is an upper bound
  for a first update);
* ``weights_changed_frac``: the share of weight entries the update changed (float32 weights at lr
  1e-6: nearly all; bf16 weights would keep most);
* ``grad_rel_err_microbatch``: ``|g_micro - g_whole| / |g_whole|`` between the update's accumulated
  gradient and one pass over the whole mini-batch;
* ``seconds``: wall time of pi_old's recomputation and the update.

``--layers``, ``--vocab`` and the token counts shrink the model and shapes for tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "models" / "qwen2.5-0.5b"


def architecture(folder: Path, layers: int | None = None, vocab: int | None = None):
    """The transformers config of ``folder/config.json``, with fewer layers or a smaller vocabulary."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder))
    if layers is not None:
        config.num_hidden_layers = layers
        config.max_window_layers = min(getattr(config, "max_window_layers", layers), layers)
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:layers]
    if vocab is not None:
        config.vocab_size = vocab
        for name in ("bos_token_id", "eos_token_id"):  # Qwen's special ids lie past a smaller vocabulary
            if (getattr(config, name, None) or 0) >= vocab:
                setattr(config, name, None)
    return config


def random_model(folder: Path, *, seed: int, layers: int | None = None, vocab: int | None = None):
    """A float32 causal LM with the architecture of ``folder/config.json`` and random weights."""
    import torch
    from transformers import AutoModelForCausalLM

    config = architecture(folder, layers, vocab)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32), config


def rehearsal_policy(model, vocab: int, chunk: int):
    """The trainer's policy around ``model``, acting in ``generate`` mode with the CPU's precision.

    The rehearsal scores token ids it draws itself and never encodes text, so the tokenizer is reduced
    to the two ids the policy reads (padding and end of text)."""
    from ptgpo_algos.policy.hf import CausalLMPolicy
    from ptgpo_algos.policy.precision import precision_for

    precision = precision_for("cpu", "bfloat16")
    tokenizer = SimpleNamespace(pad_token_id=vocab - 1, eos_token_id=vocab - 2, chat_template=None)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.config.use_cache = False
    return CausalLMPolicy(model, tokenizer, mode="generate", max_prompt_tokens=10**6, max_new_tokens=10**6,
                          autocast_dtype=precision.autocast, frozen_dtype=precision.frozen, logprob_chunk=chunk)


def random_samples(vocab: int, samples: int, prompt_tokens: int, response_tokens: int, seed: int):
    """``samples`` training samples with distinct random prompts and responses, advantages of both signs."""
    import numpy as np

    from ptgpo_algos.records import Decision
    from ptgpo_algos.updates.samples import TrainingSample

    rng = np.random.default_rng(seed)
    out = []
    for k in range(samples):
        prompt = rng.integers(0, vocab - 2, prompt_tokens).tolist()
        response = rng.integers(0, vocab - 2, response_tokens).tolist()
        # Behaviour log-probs near a random model's (-log vocab), a little off as an engine's would be.
        behaviour = (-math.log(vocab) + rng.normal(0, 0.05, response_tokens)).tolist()
        decision = Decision("", None, prompt, response, behaviour, 0.0)
        out.append(TrainingSample(decision, advantage=1.0 if k % 2 == 0 else -0.5, weight=1.0))
    return out


def planned_gib(config, samples: int, micro_batch: int, sequence: int, chunk: int) -> float:
    """The planner's CPU prediction for the rehearsal's run."""
    from ptgpo_algos.training.memory_plan import GIB, ModelShape, RunShape, plan_memory, total_device_memory
    from ptgpo_algos.policy.precision import precision_for

    run = RunShape(device="cpu", precision=precision_for("cpu", "bfloat16"), micro_batch=min(micro_batch, samples),
                   sequence=sequence, gradient_checkpointing=True, logprob_chunk=chunk,
                   total_bytes=total_device_memory("cpu"))
    return plan_memory(ModelShape.from_config(config.to_dict()), run).peak_bytes / GIB


def reset_peak_rss() -> None:
    """Start a new peak-resident-memory window (Linux: writing 5 to clear_refs resets VmHWM)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 2**30
    raise RuntimeError("/proc/self/status has no VmHWM line: the rehearsal measures memory on Linux only")


def relative_error(parts, wholes) -> float:
    """``|a - b| / |b|`` over pairs of tensors taken as one vector."""
    error = sum(float((a.double() - b.double()).pow(2).sum()) for a, b in zip(parts, wholes))
    norm = sum(float(b.double().pow(2).sum()) for b in wholes)
    return math.sqrt(error / norm) if norm else float("nan")


#: The update's settings in the rehearsal: PPO-clip, dual clip, no KL or entropy term.
OPTIM = dict(clip_ratio=0.2, clip_ratio_c=3.0, entropy_coef=0.0, kl_coef=0.0, tis_cap=None)


def rehearsal_loss():
    """The update's loss under :data:`OPTIM` (PPO-clip)."""
    from ptgpo_algos.updates.settings import AlgorithmConfig, OptimConfig
    from ptgpo_algos.updates.updater import policy_loss_for

    return policy_loss_for(OptimConfig(**OPTIM), AlgorithmConfig())
MAX_GRAD_NORM = 1.0


def whole_batch_gradient(policy, samples, scratch: Path) -> Path:
    """One pass over the whole mini-batch; its gradient is saved to disk (out of the measured memory)."""
    import torch

    from ptgpo_algos.updates.samples import accumulate_gradients, units

    total = sum(s.weight * units(s.decision, policy.mode) for s in samples)
    policy.model.zero_grad(set_to_none=True)
    accumulate_gradients(policy, samples, rehearsal_loss(), total, None)
    path = scratch / "whole_gradient.pt"
    torch.save({name: p.grad for name, p in policy.named_trainable().items()}, path)
    policy.model.zero_grad(set_to_none=True)
    return path


def measured_update(policy, samples, micro_batch: int, lr: float) -> dict[str, float]:
    """pi_old's recomputation and one PPO update, each in its own peak-memory window."""
    import numpy as np
    import torch

    from ptgpo_algos.updates.settings import OptimConfig
    from ptgpo_algos.updates.updater import ppo_update

    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=lr, weight_decay=0.0)
    optim = OptimConfig(max_grad_norm=MAX_GRAD_NORM, epochs=1, minibatch_size=len(samples),
                        micro_batch_size=micro_batch, **OPTIM)
    gc.collect()
    reset_peak_rss()
    start = time.perf_counter()
    stats = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    return {"seconds": time.perf_counter() - start, "peak": peak_rss_gib(), "grad_norm": stats["grad_norm"],
            "updates": stats["updates"]}


def run(args: argparse.Namespace) -> dict[str, float]:
    """The rehearsal (see the module docstring); returns the JSON line's figures."""
    import torch

    from ptgpo_algos.updates.samples import recompute_old_logprobs

    begin = time.perf_counter()
    model, config = random_model(args.config, seed=args.seed, layers=args.layers, vocab=args.vocab)
    policy = rehearsal_policy(model, config.vocab_size, args.chunk)
    samples = random_samples(config.vocab_size, args.samples, args.prompt_tokens, args.response_tokens, args.seed)
    with tempfile.TemporaryDirectory(prefix="scale_rehearsal_", dir=args.scratch) as scratch:
        scratch = Path(scratch)
        torch.save({name: p.detach() for name, p in policy.named_trainable().items()}, scratch / "before.pt")
        gc.collect()
        reset_peak_rss()
        start = time.perf_counter()
        recompute_old_logprobs(policy, samples, args.micro_batch)
        old_seconds, old_peak = time.perf_counter() - start, peak_rss_gib()
        whole = whole_batch_gradient(policy, samples, scratch)
        update = measured_update(policy, samples, args.micro_batch, args.lr)
        # clip_grad_norm_ scaled the accumulated gradient by min(1, max_norm / (norm + 1e-6)).
        scale = min(1.0, MAX_GRAD_NORM / (update["grad_norm"] + 1e-6))
        trainable = policy.named_trainable()
        reference = torch.load(whole, mmap=True)
        grad_error = relative_error([trainable[n].grad / scale for n in reference], reference.values())
        del reference
        policy.model.zero_grad(set_to_none=True)
        before = torch.load(scratch / "before.pt", mmap=True)
        changed = sum(int((trainable[n].detach() != w).sum()) for n, w in before.items())
        entries = sum(w.numel() for w in before.values())
        del before
    return {"peak_rss_gib": round(max(old_peak, update["peak"]), 3),
            "planned_gib": round(planned_gib(config, args.samples, args.micro_batch,
                                             args.prompt_tokens + args.response_tokens, args.chunk), 3),
            "weights_changed_frac": round(changed / entries, 6), "grad_rel_err_microbatch": float(f"{grad_error:.3g}"),
            "seconds": round(old_seconds + update["seconds"], 1),
            "total_seconds": round(time.perf_counter() - begin, 1),
            "parameters": entries, "shapes": f"{args.samples} x ({args.prompt_tokens} + {args.response_tokens}) tokens, "
                                             f"micro-batch {args.micro_batch}, vocabulary {config.vocab_size}"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="a folder with the model's config.json")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--response-tokens", type=int, default=512)
    parser.add_argument("--samples", type=int, default=2, help="the mini-batch's samples (at least 2)")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=512, help="policy.logprob_chunk")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, help="fewer decoder layers than the config's (tests)")
    parser.add_argument("--vocab", type=int, help="a smaller vocabulary than the config's (tests)")
    parser.add_argument("--scratch", type=Path, help="where the checks' copies go [the system's temp folder]")
    args = parser.parse_args(argv)
    for flag in ("prompt_tokens", "response_tokens", "micro_batch", "chunk"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.samples < 2 or args.micro_batch >= args.samples:
        parser.error("--samples must be at least 2 and above --micro-batch, so that the mini-batch is cut")
    if not (args.config / "config.json").exists():
        parser.error(f"--config {args.config}: no config.json there (configs/models/ holds the Qwen2.5 ones)")
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    print(json.dumps(run(parse_args(argv))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
