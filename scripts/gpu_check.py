"""The phases of ``scripts/gpu_check.sh``; each runs in its own process so that GPU memory is returned.

    python scripts/gpu_check.py build OUT MODEL       # random-init MODEL (configs/models/MODEL), saved in bf16
    python scripts/gpu_check.py shapes OUT MODEL      # prompt, response and request counts, for vllm bench
    python scripts/gpu_check.py update OUT MODEL      # one PPO update at the recipe's shapes, planner vs measured
    python scripts/gpu_check.py iteration OUT MODEL   # one full iteration of the recipe, rollouts on vLLM
    python scripts/gpu_check.py summary OUT           # the one summary table

MODEL is ``qwen2.5-1.5b`` or ``qwen2.5-7b``: the architecture of ``configs/models/MODEL`` with random
weights (nothing downloaded), trained as ``configs/bench/alfworld_MODEL.yaml`` says (full fine-tuning
of 1.5B, LoRA r 64 on 7B; micro-batches of 8; vLLM keeps 35 % of the GPU). The tokenizer is the tiny
model's, trained locally on the suite's environments' text; the model's vocabulary keeps Qwen2.5's
size, so the output layer is the real one.

* ``update``: 128 samples (16 tasks x 8) of ALFWorld-length prompts (1,500 tokens) and 512-token
  responses through the trainer's memory path (pi_old recomputed, the KL reference, micro-batched
  PPO update at lr 1e-6), without vLLM: ``torch.cuda.max_memory_allocated`` next to the planner's
  trainer figure for the same shapes;
* ``iteration``: the recipe's PTGPO cell for one iteration on ``ptgpo/Household-v0`` (the ALFWorld-like
  environment that needs no game files), responses forced to 512 tokens with ``min_new_tokens``,
  episodes of :data:`ITERATION_STEPS` steps so that the check stays short: rollout tokens/s, weight
  sync time and its check, the memory high-water mark with vLLM in the process;
* ``vllm bench throughput`` (gpu_check.sh) runs on the same model and shapes as ``update``.

``--layers N --device cpu`` builds and updates a model of N layers on the CPU: the CPU-side test of
every phase but the two that need vLLM (``gpu_check.sh --dry-run`` runs those).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ptgpo_algos.files import atomic_write_text  # noqa: E402

MODELS = ("qwen2.5-1.5b", "qwen2.5-7b")
#: The recipe's batch (16 tasks x 8) at ALFWorld's prompt length and a forced 512-token response.
TASKS, GROUP, PROMPT_TOKENS, RESPONSE_TOKENS = 16, 8, 1500, 512
#: Steps per episode in the ``iteration`` phase (the recipe's 50 would take an hour at 512 tokens).
ITERATION_STEPS = 2
GIB = 2**30
TINY_TOKENIZER = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=8192, seed=0, pretrain_steps=0)


def _write(out: Path, name: str, data: dict) -> None:
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=1))


def _read(out: Path, name: str) -> dict:
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def recipe(model: str) -> dict:
    """The first PTGPO cell of ``configs/bench/alfworld_<model>.yaml``, as a flat training spec."""
    from ptgpo_algos.bench.config import load_config
    from ptgpo_algos.bench.plan import plan_cells

    cells = [c for c in plan_cells(load_config(ROOT / "configs" / "bench" / f"alfworld_{model}.yaml"))
             if c.kind == "rl" and c.spec["algo"] == "ptgpo"]
    return dict(cells[0].spec)


def build(out: Path, model: str, layers: int | None, device: str, vocab: int | None = None) -> None:
    """Random weights in the model's architecture (fewer layers or a smaller vocabulary for the CPU
    test), saved in bf16 with the tiny model's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from ptgpo_algos.policy.tiny import TINY_MARKER, TinyModelSpec, build_tiny_model
    from scale_rehearsal import architecture

    start = time.perf_counter()
    config = architecture(ROOT / "configs" / "models" / model, layers, vocab)
    torch.manual_seed(0)
    with torch.device(device):
        network = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    target = out / "models" / model
    network.save_pretrained(str(target))
    parameters = sum(p.numel() for p in network.parameters())
    del network
    tokenizer = build_tiny_model(TinyModelSpec(**TINY_TOKENIZER), cache_dir=out / "cache")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", TINY_MARKER):
        if (tokenizer / name).exists():
            shutil.copy(tokenizer / name, target / name)
    _write(out, f"build_{model}", {"path": str(target), "parameters": parameters, "layers": config.num_hidden_layers,
                                   "seconds": time.perf_counter() - start})


def update_spec(out: Path, model: str, device: str) -> dict:
    """The recipe at the update phase's shapes, on ``device``, for the built model."""
    from ptgpo_algos.config import merge_overrides

    return merge_overrides(recipe(model), dict(
        model=_read(out, f"build_{model}")["path"], device=device, max_prompt_tokens=PROMPT_TOKENS,
        max_new_tokens=RESPONSE_TOKENS, rollout_backend="transformers"))


def planned(spec: dict, device: str, total_bytes: int) -> dict:
    """The planner's figures for a flat training spec; the rollout KV cache is left out (the update
    phase plays no rollouts)."""
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.memory import model_shape, plan_memory, run_shape

    config = TrainConfig.from_dict(spec)
    run = dataclasses.replace(run_shape(config, device, total_bytes), rollout_batch=0)
    plan = plan_memory(model_shape(config), run)
    items = {item.name: item.bytes / GIB for item in plan.items}
    return {"trainer_gib": plan.trainer_bytes / GIB, "peak_gib": plan.peak_bytes / GIB, "fits": plan.fits,
            "engine_gib": items.get("vLLM engine (its share)", 0.0), "table": plan.table()}


def update(out: Path, model: str, device: str, samples: int, prompt_tokens: int) -> None:
    """One PPO update through the trainer's memory path at the recipe's settings (see the docstring)."""
    import numpy as np
    import torch

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.memory import run_shape, total_device_memory
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.update import ppo_update, recompute_old_logprobs, reference_logprobs
    from scale_rehearsal import random_samples

    from ptgpo_algos.config import merge_overrides

    spec = merge_overrides(update_spec(out, model, device), {"max_prompt_tokens": prompt_tokens})
    config = TrainConfig.from_dict(spec)
    policy_spec, optim = config.policy, config.optim
    total = total_device_memory(device) if device.startswith("cuda") else 141 * GIB
    checkpointing = run_shape(config, device, total).gradient_checkpointing  # as the planner assumes
    start = time.perf_counter()
    policy = load_policy(policy_spec.model, mode="generate", device=device, dtype=policy_spec.dtype,
                         lora=policy_spec.lora, gradient_checkpointing=checkpointing,
                         logprob_chunk=policy_spec.logprob_chunk, max_new_tokens=RESPONSE_TOKENS)
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    batch = random_samples(vocab, samples, prompt_tokens, RESPONSE_TOKENS, seed=0)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    begin = time.perf_counter()
    recompute_old_logprobs(policy, batch, optim.micro_batch_size)
    reference_logprobs(policy.reference_policy(), batch, optim.micro_batch_size)
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=optim.lr)
    stats = ppo_update(policy, optimizer, batch, clip_ratio=optim.clip_ratio, entropy_coef=optim.entropy_coef,
                       kl_coef=optim.kl_coef, max_grad_norm=optim.max_grad_norm, epochs=1,
                       minibatch_size=optim.minibatch_size, rng=np.random.default_rng(0),
                       micro_batch_size=optim.micro_batch_size, clip_ratio_c=optim.clip_ratio_c)
    seconds = time.perf_counter() - begin
    measured = torch.cuda.max_memory_allocated() / GIB if device.startswith("cuda") else None
    _write(out, f"update_{model}", {
        "planned": planned(spec, device, total), "measured_trainer_gib": measured, "seconds": seconds,
        "load_seconds": begin - start, "updates": stats["updates"], "train_tokens": stats["train_tokens"],
        "train_tokens_per_s": stats["train_tokens"] / seconds, "samples": samples, "prompt_tokens": prompt_tokens,
    })


def iteration_spec(out: Path, model: str) -> dict:
    """The recipe's PTGPO cell for one iteration on Household with 512-token responses."""
    from ptgpo_algos.config import merge_overrides

    spec = recipe(model)
    for key in ("total_decisions", "train_seeds", "eval_env_kwargs"):
        spec.pop(key, None)
    return merge_overrides(spec, dict(
        model=_read(out, f"build_{model}")["path"], env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "hard"},
        max_steps=ITERATION_STEPS, max_new_tokens=RESPONSE_TOKENS, min_new_tokens=RESPONSE_TOKENS, iterations=1,
        eval_every=1, eval_seeds=[10**6, 10**6 + 1], eval_batch_size=2, checkpoint_every=1,
        out_dir=str(out / f"run_{model}")))


def iteration(out: Path, model: str) -> None:
    import torch

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.memory import total_device_memory
    from ptgpo_algos.trainer import run_training

    spec = iteration_spec(out, model)
    start = time.perf_counter()
    summary = run_training(TrainConfig.from_dict(spec), progress=False)
    row = json.loads(Path(summary.metrics_path).read_text().splitlines()[-1])
    _write(out, f"iteration_{model}", {
        "seconds": time.perf_counter() - start, "row": row,
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "planned": planned(spec, "cuda", total_device_memory("cuda")),
    })


def _fmt(value, spec: str = ",.0f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def _bench_output_tokens_per_s(bench: dict) -> float | None:
    """``vllm bench throughput``'s output tokens/s (its JSON gives total tokens/s over prompt + output)."""
    if "output_throughput" in bench:
        return bench["output_throughput"]
    total = bench.get("tokens_per_second")
    return total * RESPONSE_TOKENS / (PROMPT_TOKENS + RESPONSE_TOKENS) if total else None


def _smi_peak_gib(out: Path, model: str) -> float | None:
    path = out / f"gpu_memory_{model}.csv"
    values = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            values.append(float(line.strip().split()[0]))
        except (ValueError, IndexError):
            continue
    return max(values) / 1024 if values else None


def summary_rows(out: Path, model: str) -> list[tuple[str, str]]:
    """One column of the summary table: the figures of ``model``'s phases (n/a where one failed)."""
    built, upd, it, bench = (_read(out, f"{phase}_{model}") for phase in ("build", "update", "iteration", "vllm_bench"))
    plan, row = upd.get("planned", {}), it.get("row", {})
    rollout_tps = row.get("tokens") / row["rollout_time_s"] if row.get("rollout_time_s") else None
    return [
        ("parameters (random init)", _fmt(built.get("parameters"))),
        ("update: planned trainer GiB", _fmt(plan.get("trainer_gib"), ".1f")),
        ("update: max_memory_allocated GiB", _fmt(upd.get("measured_trainer_gib"), ".1f")),
        ("update: s / train tok/s", f"{_fmt(upd.get('seconds'), '.1f')} / {_fmt(upd.get('train_tokens_per_s'))}"),
        ("iteration: planned peak GiB (vLLM's share)",
         f"{_fmt(it.get('planned', {}).get('peak_gib'), '.1f')} ({_fmt(it.get('planned', {}).get('engine_gib'), '.1f')})"),
        ("iteration: max_memory_allocated GiB (with vLLM)", _fmt(it.get("max_memory_allocated_gib"), ".1f")),
        ("iteration: nvidia-smi high-water GiB", _fmt(_smi_peak_gib(out, model), ".1f")),
        ("iteration: weight sync s / max abs dlogp",
         f"{_fmt(row.get('sync_time_s'), '.2f')} / {_fmt(row.get('sync_max_logprob_diff'), '.2g')}"),
        ("rollout: generated tok/s (ours)", _fmt(rollout_tps)),
        ("vllm bench throughput: output tok/s", _fmt(_bench_output_tokens_per_s(bench))),
        ("iteration: wall s (start-up, rollout, update, sync, 2 evals)", _fmt(it.get("seconds"), ".1f")),
    ]


def summary(out: Path) -> str:
    columns = {model: summary_rows(out, model) for model in MODELS}
    names = [name for name, _ in columns[MODELS[0]]]
    width = max(map(len, names))
    lines = [f"| {'check':<{width}} | " + " | ".join(MODELS) + " |",
             f"|{'-' * (width + 2)}|" + "|".join("-" * (len(m) + 2) for m in MODELS) + "|"]
    for k, name in enumerate(names):
        lines.append(f"| {name:<{width}} | " + " | ".join(columns[m][k][1] for m in MODELS) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("build", "shapes", "update", "iteration", "summary"))
    parser.add_argument("out", type=Path)
    parser.add_argument("model", nargs="?", choices=MODELS)
    parser.add_argument("--layers", type=int, help="build phase: fewer decoder layers (the CPU test)")
    parser.add_argument("--vocab", type=int, help="build phase: a smaller vocabulary, at least 8192 (the CPU test)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for the CPU test [cuda]")
    parser.add_argument("--samples", type=int, default=TASKS * GROUP, help="update phase: samples [128]")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="update phase [1500]")
    args = parser.parse_args(argv)
    if args.phase != "summary" and args.model is None:
        parser.error(f"the {args.phase} phase needs a MODEL: one of {', '.join(MODELS)}")
    if args.vocab is not None and args.vocab < TINY_TOKENIZER["vocab_size"]:
        parser.error(f"--vocab must be at least the tokenizer's {TINY_TOKENIZER['vocab_size']}")
    if args.samples < 1 or args.prompt_tokens < 1:
        parser.error("--samples and --prompt-tokens must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phase == "build":
        build(args.out, args.model, args.layers, args.device, args.vocab)
    elif args.phase == "shapes":
        print(PROMPT_TOKENS, RESPONSE_TOKENS, TASKS * GROUP)
    elif args.phase == "update":
        update(args.out, args.model, args.device, args.samples, args.prompt_tokens)
    elif args.phase == "iteration":
        iteration(args.out, args.model)
    else:
        table = summary(args.out)
        atomic_write_text(args.out / "summary.md", table + "\n")
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
