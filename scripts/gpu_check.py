"""The phases of ``scripts/gpu_check.sh``; each runs in its own process, so that GPU memory is returned
and a phase that fails or runs out of time costs only itself. Each writes ``OUT/<phase>_<model>.json``
(``OUT/tiny.json``) as it goes (``"complete": true`` once it has finished); ``summary`` reads whatever exists.

    python scripts/gpu_check.py env OUT               # versions, GPU, disk: OUT/environment.json
    python scripts/gpu_check.py build OUT MODEL       # random-init MODEL (configs/models/MODEL), saved in bf16
    python scripts/gpu_check.py update OUT MODEL      # sync-check floor, the update cold and warm, micro-batch gradient
    python scripts/gpu_check.py rollout OUT MODEL     # fixed-shape decoding per KV cache against its bandwidth floor
    python scripts/gpu_check.py tiny OUT              # one embedded-benchmark cell on the GPU and on the CPU
    python scripts/gpu_check.py iteration OUT MODEL   # one training iteration, rollouts on transformers (by hand)
    python scripts/gpu_check.py vllm_iteration OUT MODEL  # the same with vLLM rollouts (weight sync)
    python scripts/gpu_check.py shapes OUT MODEL      # prompt, response and request counts, for vllm bench
    python scripts/gpu_check.py summary OUT           # the one summary table, OUT/summary.md

MODEL is ``qwen2.5-1.5b`` or ``qwen2.5-7b``: the architecture of ``configs/models/MODEL`` with random
weights (nothing downloaded), trained as ``configs/bench/alfworld_MODEL.yaml`` says (full fine-tuning
of 1.5B, LoRA r 64 on 7B; micro-batches of 8). The tokenizer is the tiny model's, trained locally on
the suite's environments' text; the model keeps Qwen2.5's vocabulary, so the output layer is the real one.

``update`` and ``rollout`` build the model's random weights in their own process
(:func:`in_process_policy`: nothing saved or reloaded); ``build`` saves them for the phases that read
a folder (``iteration``, vLLM's).

* ``update``: (1) the sync check's statistic with the same weights on both sides, before any update:
  :data:`~ptgpo_algos.policy.backends.SYNC_PROMPTS` prompts of 1,500 tokens, 32 tokens sampled through
  the cached generation path and scored by one full forward pass, both at the recipe's precision (the
  noise floor a sync check is held to); (2) one PPO update of 128 samples (16 tasks x 8) of 1,500-token
  prompts and 512-token responses through the trainer's update (:class:`~ptgpo_algos.updates.updater.Updater`:
  pi_old, the KL reference, micro-batches, lr of the recipe), cold and then warm (AdamW's moments
  exist): ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` next to the planner's
  trainer figure, seconds, tokens/s, MFU over every pass (:func:`update_passes`), the share of weights
  changed; (3) the micro-batched gradient of 8 samples against one pass over them.
* ``rollout``: see :func:`rollout`. ``tiny``: see :func:`tiny_cells`.
* ``iteration``: the recipe's PTGPO cell for one iteration on ``ptgpo/Household-v0`` (the ALFWorld-like
  environment that needs no game files) with the transformers rollout backend, responses forced to
  :data:`TRANSFORMERS_RESPONSE_TOKENS` tokens, episodes of :data:`ITERATION_STEPS` steps, one
  evaluation episode: decisions/s, tokens/s, update seconds, the checkpoint's size and write time,
  ``final_model/``'s size; its JSON also records each evaluation and the iteration's row as they
  happen. The run folder is removed at the end.
* ``vllm_iteration`` and ``vllm bench throughput`` (gpu_check.sh) need vLLM: rollout tokens/s, the
  weight sync's time and its check against its floor.

``--layers N --vocab V --device cpu`` runs a phase on a model of N layers on the CPU: the CPU test of
the phases (``gpu_check.sh --dry-run``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ptgpo_algos.training.callbacks import Callback  # noqa: E402
from ptgpo_algos.files import atomic_write_text  # noqa: E402
from ptgpo_algos.metrics import current_row  # noqa: E402

MODELS = ("qwen2.5-1.5b", "qwen2.5-7b")
#: The recipe's batch (16 tasks x 8) at ALFWorld's prompt length and a forced 512-token response.
TASKS, GROUP, PROMPT_TOKENS, RESPONSE_TOKENS = 16, 8, 1500, 512
#: Steps per episode in the iteration phases (the recipe's 50 would take an hour at 512 tokens).
ITERATION_STEPS = 2
#: Forced response length of the transformers iteration: its cached decoding ran at ~20-50 ms a token
#: step on an H200 (fp32 masters cast to bf16 at every step), so 512 tokens over the tree's rounds and
#: two evaluations outran a 2-minute limit; vLLM's iteration keeps the recipe's 512.
TRANSFORMERS_RESPONSE_TOKENS = 64
#: Forced new tokens of the fixed-shape rollout phase (its prompts: the update's 128 x 1,500 tokens).
ROLLOUT_NEW_TOKENS = 128
#: Iterations of each tiny benchmark cell (GPU and CPU).
TINY_ITERATIONS = 2
#: Samples of the micro-batch gradient check (cut into micro-batches of 2, against one pass).
GRADIENT_SAMPLES, GRADIENT_MICRO_BATCH = 8, 2
GIB = 2**30
TINY_TOKENIZER = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=8192, seed=0, pretrain_steps=0)


def _write(out: Path, name: str, data: dict) -> None:
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=1))


def _read(out: Path, name: str) -> dict:
    path = out / f"{name}.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        return {}


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None


def environment(out: Path) -> None:
    """What the check ran on: versions, the GPU, free disk."""
    import torch

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for module in ("torch", "transformers", "peft", "vllm", "numpy", "gymnasium"):
        info[module] = _version(module)
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info.update(gpu=properties.name, gpu_memory_gib=properties.total_memory / GIB,
                    multiprocessors=properties.multi_processor_count)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["driver"] = smi.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["driver"] = None
    info["disk_free_gib"] = {str(p): shutil.disk_usage(p).free / GIB for p in (out, models_dir(out)) if p.exists()}
    _write(out, "environment", info)


def models_dir(out: Path) -> Path:
    """Where built models go: ``$GPU_CHECK_MODELS`` (gpu_check.sh points it at a RAM disk when one has room)."""
    return Path(os.environ.get("GPU_CHECK_MODELS") or out / "models")


def recipe(model: str) -> dict:
    """The first PTGPO cell of ``configs/bench/alfworld_<model>.yaml``, as a flat training spec."""
    from ptgpo_harness.bench.config import load_config
    from ptgpo_harness.bench.plan import plan_cells

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
    target = models_dir(out) / model
    network.save_pretrained(str(target))
    parameters = sum(p.numel() for p in network.parameters())
    del network
    tokenizer = build_tiny_model(TinyModelSpec(**TINY_TOKENIZER), cache_dir=out / "cache")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", TINY_MARKER):
        if (tokenizer / name).exists():
            shutil.copy(tokenizer / name, target / name)
    _write(out, f"build_{model}", {"path": str(target), "parameters": parameters, "layers": config.num_hidden_layers,
                                   "seconds": time.perf_counter() - start, "complete": True})


def update_spec(out: Path, model: str, device: str) -> dict:
    """The recipe at the update phase's shapes, on ``device``; the model is the architecture's folder
    (the phase builds its random weights in the process, :func:`in_process_policy`)."""
    from ptgpo_algos.config import merge_overrides

    return merge_overrides(recipe(model), dict(
        model=str(ROOT / "configs" / "models" / model), device=device, max_prompt_tokens=PROMPT_TOKENS,
        max_new_tokens=RESPONSE_TOKENS, rollout_backend="transformers"))


def planned(spec: dict, device: str, total_bytes: int, rollouts: bool = False) -> dict:
    """The planner's figures for a flat training spec (the transformers rollouts' KV cache only with
    ``rollouts``)."""
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.memory_plan import model_shape, plan_memory, run_shape

    config = TrainConfig.from_dict(spec)
    run = run_shape(config, device, total_bytes)
    if not rollouts:
        run = dataclasses.replace(run, rollout_batch=0)
    plan = plan_memory(model_shape(config), run)
    items = {item.name: item.bytes / GIB for item in plan.items}
    return {"trainer_gib": plan.trainer_bytes / GIB, "peak_gib": plan.peak_bytes / GIB, "fits": plan.fits,
            "engine_gib": items.get("vLLM engine (its share)", 0.0), "table": plan.table()}


def _peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / GIB if device.startswith("cuda") else None


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


#: Dense bf16 tensor-core FLOP/s and memory bandwidth (bytes/s) from NVIDIA's data sheets, by the first
#: part of the GPU's name that matches; what MFU and the decode floor divide by (None: a GPU not listed).
GPU_PEAKS = (("H200", 989e12, 4.8e12), ("H100 PCIe", 756e12, 2.0e12), ("H100", 989e12, 3.35e12),
             ("A100", 312e12, 2.0e12))


def gpu_peaks(name: str | None) -> tuple[float, float] | None:
    """``(FLOP/s, bytes/s)`` of the GPU called ``name`` (:data:`GPU_PEAKS`), or None."""
    for part, flops, bandwidth in GPU_PEAKS:
        if name and part in name:
            return flops, bandwidth
    return None


def pass_flops(matrix_params: int, head_params: int, sequence_tokens: int, scored_tokens: int) -> float:
    """Matrix FLOPs of one forward pass: 2 per weight of the decoder's linear layers (``matrix_params``)
    per token, and of the output layer (``head_params``) per scored token only, which is all the
    scoring sends through it. Attention's score products are left out (~7 % of 1.5B's at 2k tokens)."""
    return 2.0 * matrix_params * sequence_tokens + 2.0 * head_params * scored_tokens


def update_passes(*, old_share: float, reference: bool, checkpointing: bool, lora: bool) -> dict[str, float]:
    """Forward-pass equivalents of an update, by kind: pi_old's pass over ``old_share`` of the samples
    (the first mini-batch takes its own, :class:`~ptgpo_algos.updates.samples.TrainingSample`), the KL
    reference's, the training forward, its recomputation under gradient checkpointing, and the
    backward (two forwards' worth with weight gradients, one for a frozen LoRA base: input gradients only)."""
    return {"pi_old": old_share, "reference": 1.0 if reference else 0.0, "forward": 1.0,
            "recompute": 1.0 if checkpointing else 0.0, "backward": 1.0 if lora else 2.0}


def decode_floor_s(weight_bytes: float, kv_bytes: float, bandwidth: float) -> float:
    """The memory-bandwidth floor of one decode step: every weight and the KV cache read once."""
    return (weight_bytes + kv_bytes) / bandwidth


def _matrix_params(network) -> tuple[int, int]:
    """``(decoder linear weights, output layer weights)`` of ``network`` (embeddings are lookups)."""
    import torch

    base = network.get_base_model() if hasattr(network, "get_base_model") else network
    head = base.get_output_embeddings().weight
    linear = sum(m.weight.numel() for m in base.get_decoder().modules() if isinstance(m, torch.nn.Linear))
    return linear, head.numel()


def in_process_policy(out: Path, model: str, spec, device: str, checkpointing: bool, *,
                      layers: int | None = None, vocab: int | None = None):
    """The trainer's policy around random weights in ``model``'s architecture, built on ``device`` in
    this process (nothing saved or reloaded), stored and made trainable as a loaded model would be
    (:func:`~ptgpo_algos.policy.hf.prepare_model`); the tokenizer is the tiny model's."""
    import torch
    from transformers import AutoModelForCausalLM

    from ptgpo_algos.policy.hf import CausalLMPolicy, load_tokenizer, prepare_model
    from ptgpo_algos.policy.precision import precision_for
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model
    from scale_rehearsal import architecture

    config = architecture(ROOT / "configs" / "models" / model, layers, vocab)
    precision = precision_for(device, spec.dtype)
    torch.manual_seed(0)
    with torch.device(device):
        network = AutoModelForCausalLM.from_config(
            config, dtype=getattr(torch, precision.frozen if spec.lora else precision.trainable))
    network = prepare_model(network, lora=spec.lora, gradient_checkpointing=checkpointing)
    tokenizer = load_tokenizer(build_tiny_model(TinyModelSpec(**TINY_TOKENIZER), cache_dir=out / "cache"))
    return CausalLMPolicy(network, tokenizer, mode="generate", max_prompt_tokens=10**6, max_new_tokens=RESPONSE_TOKENS,
                          autocast_dtype=precision.autocast, frozen_dtype=precision.frozen,
                          logprob_chunk=spec.logprob_chunk)


def _memory(device: str) -> dict[str, float | None]:
    import torch

    if not device.startswith("cuda"):
        return {"max_memory_allocated_gib": None, "max_memory_reserved_gib": None}
    return {"max_memory_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "max_memory_reserved_gib": torch.cuda.max_memory_reserved() / GIB}


def update(out: Path, model: str, device: str, samples: int, prompt_tokens: int,
           response_tokens: int = RESPONSE_TOKENS, *, warm: bool = True, layers: int | None = None,
           vocab: int | None = None) -> None:
    """The update phase (see the module docstring); its JSON grows after each of its parts."""
    import numpy as np
    import torch

    from ptgpo_algos.config import TrainConfig, merge_overrides
    from ptgpo_algos.training.memory_plan import run_shape, total_device_memory
    from ptgpo_algos.policy.backends import SYNC_PROMPTS, SYNC_TOKENS
    from ptgpo_algos.updates.updater import Updater
    from scale_rehearsal import random_samples

    name = f"update_{model}"
    spec = merge_overrides(update_spec(out, model, device), {"max_prompt_tokens": prompt_tokens,
                                                             "max_new_tokens": response_tokens})
    config = TrainConfig.from_dict(spec)
    optim, policy_spec = config.optim, config.policy
    total = total_device_memory(device) if device.startswith("cuda") else 141 * GIB
    checkpointing = run_shape(config, device, total).gradient_checkpointing  # as the planner assumes
    start = time.perf_counter()
    policy = in_process_policy(out, model, policy_spec, device, checkpointing, layers=layers, vocab=vocab)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    vocab_size = policy.model.get_input_embeddings().weight.shape[0]
    matrix, head = _matrix_params(policy.model)
    result = {"planned": planned(spec, device, total), "samples": samples, "prompt_tokens": prompt_tokens,
              "response_tokens": response_tokens, "build_seconds": time.perf_counter() - start, "lr": optim.lr,
              "lora": bool(policy.has_adapters), "gradient_checkpointing": checkpointing,
              "parameters": sum(p.numel() for p in policy.model.parameters()),
              "layers": policy._base().config.num_hidden_layers, "gpu": _gpu_name(device)}
    _write(out, name, result)
    prompts = [s.decision.prompt_ids for s in random_samples(vocab_size, SYNC_PROMPTS, prompt_tokens, 1, seed=1)]
    begin = time.perf_counter()
    report = policy.verify_sync(policy, prompts, max_tokens=SYNC_TOKENS)
    result["sync_floor"] = {"mean_logprob_diff": report.mean_logprob_diff, "max_logprob_diff": report.max_logprob_diff,
                            "prompts": len(prompts), "tokens": SYNC_TOKENS, "seconds": time.perf_counter() - begin}
    _write(out, name, result)

    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=optim.lr)
    before = {n: p.detach().to("cpu", copy=True) for n, p in policy.named_trainable().items()}
    peaks = gpu_peaks(result["gpu"])
    reference = policy.reference_policy() if optim.kl_coef else None
    for step in ("cold", "warm") if warm else ("cold",):
        # The trainer's update: pi_old and the reference scored first (the first mini-batch's pi_old
        # from its own forward), then the mini-batches. The cold step's backward runs before AdamW's
        # moments exist; the warm one's is the steady state.
        batch = random_samples(vocab_size, samples, prompt_tokens, response_tokens, seed=0)
        updater = Updater(policy, optimizer, dataclasses.replace(optim, epochs=1), config.algorithm,
                          rng=np.random.default_rng(0), reference=reference, old_logprobs="recompute")
        _reset_peak(device)
        begin = time.perf_counter()
        updater.prepare(batch)
        stats = updater.run(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - begin
        old_share = sum(not s.old_from_first_step for s in batch) / len(batch)
        passes = update_passes(old_share=old_share, reference=updater.reference is not None,
                               checkpointing=checkpointing, lora=bool(policy.has_adapters))
        flops = sum(passes.values()) * pass_flops(matrix, head, samples * (prompt_tokens + response_tokens),
                                                  samples * response_tokens)
        result[step] = {**_memory(device), "seconds": seconds, "updates": stats["updates"],
                        "train_tokens": stats["train_tokens"], "train_tokens_per_s": stats["train_tokens"] / seconds,
                        "grad_norm": stats.get("grad_norm"), "passes": passes, "tflops": flops / 1e12,
                        "mfu": flops / seconds / peaks[0] if peaks else None}
        if step == "cold":
            changed = sum(int((p.detach().cpu() != before[n]).sum()) for n, p in policy.named_trainable().items())
            result["weights_changed_frac"] = changed / sum(w.numel() for w in before.values())
            del before
        _write(out, name, result)

    result["grad_rel_err_microbatch"] = micro_batch_gradient_error(
        policy, random_samples(vocab_size, GRADIENT_SAMPLES, prompt_tokens, response_tokens, seed=0))
    result["complete"] = True
    _write(out, name, result)


def _gpu_name(device: str) -> str | None:
    from ptgpo_algos.provenance import gpu_model

    return gpu_model(device)


def rollout(out: Path, model: str, device: str, rows: int, prompt_tokens: int, new_tokens: int, *,
            layers: int | None = None, vocab: int | None = None) -> None:
    """The fixed-shape rollout phase: ``rows`` random prompts of ``prompt_tokens`` through the policy's
    own generation (its precision, no gradients, autocast's cast cache; greedy, ``new_tokens`` forced),
    once per KV cache (:data:`~ptgpo_algos.policy.batching.DECODE_CACHES`) and, on a GPU, with the
    static cache's steps under ``torch.compile`` (CUDA graphs): the prefill's seconds, a decode step's
    milliseconds and generated tokens/s, against the step's memory-bandwidth floor (:func:`decode_floor_s`)."""
    import torch

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.policy.batching import forward_with_cache, left_pad, position_ids

    config = TrainConfig.from_dict(update_spec(out, model, device))
    start = time.perf_counter()
    policy = in_process_policy(out, model, config.policy, device, False, layers=layers, vocab=vocab)
    policy.max_new_tokens = policy.min_new_tokens = new_tokens
    network, base = policy.model, policy._base()
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    name, gpu = f"rollout_{model}", _gpu_name(device)
    bytes_per = 2 if policy.autocast_dtype is not None else 4
    weights = sum(p.numel() for p in network.parameters())
    if not base.config.tie_word_embeddings:
        weights -= network.get_input_embeddings().weight.numel()  # a lookup reads only its rows
    text = base.config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    context = prompt_tokens + new_tokens / 2  # the mean context of the decode steps
    kv = 2 * text.num_hidden_layers * rows * text.num_key_value_heads * head_dim * context * bytes_per
    peaks = gpu_peaks(gpu)
    floor = decode_floor_s(weights * bytes_per, kv, peaks[1]) if peaks else None
    result = {"rows": rows, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "gpu": gpu,
              "build_seconds": time.perf_counter() - start, "weight_gib": weights * bytes_per / GIB,
              "kv_cache_gib": kv / GIB, "floor_step_ms": floor * 1e3 if floor else None}
    _write(out, name, result)
    vocab_size = network.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab_size - 2, (rows, prompt_tokens), generator=generator).tolist()
    network.eval()
    with torch.no_grad(), policy.computing():
        ids, mask = left_pad(prompts, policy.pad_id, policy.device)
        sync()
        begin = time.perf_counter()
        forward_with_cache(network, input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True,
                           logits_to_keep=1)
        sync()
        result["prefill_s"] = prefill = time.perf_counter() - begin
        del ids, mask
    variants = [("dynamic", False), ("static", False)] + ([("static", True)] if cuda else [])
    reference = None
    for cache, compiled in variants:
        label = cache + (" compiled" if compiled else "")
        policy.decode_cache = cache
        if compiled:
            # The decode steps' shapes are fixed by the static cache: CUDA graphs replay them. The
            # first decoding compiles; the second is the one timed.
            base.forward = torch.compile(base.forward, mode="reduce-overhead", dynamic=False)
        for attempt in range(2 if compiled else 1):
            _reset_peak(device)
            begin = time.perf_counter()
            decisions = policy._decide_generate(prompts, True, None, 1.0)
            sync()
            seconds = time.perf_counter() - begin
        tokens = [d.response_ids for d in decisions]
        reference = reference or tokens
        step_s = max(seconds - prefill, 0.0) / (new_tokens - 1)
        result.setdefault("decode", {})[label] = {
            **_memory(device), "seconds": seconds, "decode_step_ms": step_s * 1e3,
            "generated_tokens_per_s": rows * new_tokens / seconds,
            "over_floor": step_s / floor if floor else None,
            "tokens_as_dynamic": sum(a == b for a, b in zip(tokens, reference)) / rows}
        _write(out, name, result)
    result["complete"] = True
    _write(out, name, result)


def tiny_cells(out: Path, devices: list[str], iterations: int) -> None:
    """One cell of the embedded benchmark (its first RL cell, the tiny model without pretraining, a few
    iterations) on each of ``devices``, the records side by side: what a cell on a GPU machine records."""
    from ptgpo_harness.bench import load_config, plan_cells
    from ptgpo_harness.bench.records import run_cell

    cell = next(c for c in plan_cells(load_config(quick=True)) if c.kind == "rl")
    result: dict = {"cell": cell.name, "iterations": iterations}
    for device in devices:
        spec = {**cell.spec, "policy.device": device, "run.iterations": iterations,
                "policy.tiny": {**cell.spec["policy.tiny"], "pretrain_steps": 0}}
        spec.pop("run.total_decisions", None)
        record = run_cell(dataclasses.replace(cell, spec=spec), out / f"tiny_{device.replace(':', '')}")
        provenance = record.provenance or {}
        result[device] = {"status": record.status, "error": record.error, "wall_time_s": record.wall_time_s,
                          "decisions": record.decisions, "final_success": record.final_success,
                          "device": provenance.get("device"), "gpu": provenance.get("gpu")}
        _write(out, "tiny", result)
    result["complete"] = True
    _write(out, "tiny", result)


def micro_batch_gradient_error(policy, samples: list) -> float:
    """``|g_micro - g_whole| / |g_whole|``: the gradient accumulated over micro-batches of
    :data:`GRADIENT_MICRO_BATCH` against one pass over ``samples``."""
    from ptgpo_algos.updates.samples import accumulate_gradients, units
    from scale_rehearsal import rehearsal_loss, relative_error

    total = sum(s.weight * units(s.decision, policy.mode) for s in samples)
    gradients, loss = [], rehearsal_loss()
    for micro_batch in (None, GRADIENT_MICRO_BATCH):
        policy.model.zero_grad(set_to_none=True)
        accumulate_gradients(policy, samples, loss, total, micro_batch)
        gradients.append([p.grad.detach().clone() for p in policy.named_trainable().values()])
    policy.model.zero_grad(set_to_none=True)
    return float(f"{relative_error(gradients[1], gradients[0]):.3g}")


def iteration_spec(out: Path, model: str, backend: str = "transformers", device: str = "cuda", tasks: int = TASKS,
                   response_tokens: int = RESPONSE_TOKENS) -> dict:
    """The recipe's PTGPO cell for one iteration on Household with responses forced to ``response_tokens``."""
    from ptgpo_algos.config import merge_overrides

    spec = recipe(model)
    for key in ("total_decisions", "train_seeds", "eval_env_kwargs"):
        spec.pop(key, None)
    return merge_overrides(spec, dict(
        model=_read(out, f"build_{model}")["path"], env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "hard"},
        max_steps=ITERATION_STEPS, max_new_tokens=response_tokens, min_new_tokens=response_tokens, iterations=1,
        tasks_per_iteration=tasks,
        eval_every=1, eval_seeds=[10**6], eval_batch_size=1, checkpoint_every=1, device=device,
        keep_final_model=True,  # measured here, whatever the recipe keeps
        rollout_backend=backend, out_dir=str(out / f"run_{backend}_{model}"),
        # The CPU test's two cores hold neither the recipe's environment workers beside the model nor
        # full prompts through a 7B-wide layer: prompts are cut to their last 96 tokens there.
        **({"env_workers": {"backend": "in-process"}, "max_prompt_tokens": 96} if device == "cpu" else {})))


def _folder_gib(path: Path) -> float | None:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GIB if path.exists() else None


class _Progress(Callback):
    """Writes what an iteration phase has seen so far (evaluations, the iteration's row) to its JSON, so
    that a phase stopped by its time limit still says where its time went."""

    def __init__(self, out: Path, name: str, start: float):
        self.out, self.name, self.start, self.seen = out, name, start, {"evaluations": []}

    def _write(self, **figures) -> None:
        self.seen.update(figures, seconds=time.perf_counter() - self.start)
        _write(self.out, self.name, self.seen)

    def on_evaluation(self, trainer, row) -> None:
        self.seen["evaluations"].append({"iteration": row["iteration"], "wall_time_s": row["wall_time_s"]})
        self._write()

    def on_iteration_end(self, trainer, row) -> None:
        self._write(row=row)


def iteration(out: Path, model: str, backend: str, device: str, tasks: int = TASKS,
              response_tokens: int | None = None) -> None:
    """One training iteration of the recipe (see the module docstring)."""
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.memory_plan import total_device_memory
    from ptgpo_algos.training.trainer import Trainer

    name = "iteration" if backend == "transformers" else "vllm_iteration"
    if response_tokens is None:
        response_tokens = TRANSFORMERS_RESPONSE_TOKENS if backend == "transformers" else RESPONSE_TOKENS
    spec = iteration_spec(out, model, backend, device, tasks, response_tokens)
    config = TrainConfig.from_dict(spec)
    total = total_device_memory(device) if device.startswith("cuda") else 141 * GIB
    start = time.perf_counter()
    progress = _Progress(out, f"{name}_{model}", start)
    trainer = Trainer(config, progress=False, callbacks=[progress])
    summary = trainer.train()
    row = current_row(json.loads(Path(summary.metrics_path).read_text().splitlines()[-1]))
    rollout_s = row.get("rollout/time_s") or row.get("rollout/wait_s")
    final = config.run_dir / "final_model"
    result = {
        **progress.seen, "seconds": time.perf_counter() - start, "row": row, "backend": backend,
        "response_tokens": response_tokens,
        "decisions_per_s": row["rollout/decisions"] / rollout_s if rollout_s else None,
        "tokens_per_s": row["rollout/tokens"] / rollout_s if rollout_s else None,
        "update_seconds": row.get("update/train_time_s"),
        "checkpoint_seconds": trainer.last_checkpoint.get("seconds"),
        "checkpoint_gib": trainer.last_checkpoint.get("bytes", 0) / GIB if trainer.last_checkpoint else None,
        "final_model_gib": _folder_gib(final), "final_model_files": sorted(p.name for p in final.iterdir()),
        "max_memory_allocated_gib": _peak_gib(device),
        "planned": planned(spec, device, total, rollouts=backend == "transformers"), "complete": True,
    }
    _write(out, f"{name}_{model}", result)
    shutil.rmtree(config.run_dir, ignore_errors=True)  # tens of GB of checkpoint and model


def _fmt(value, spec: str = ",.0f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


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


def _phase_cell(data: dict, text: str) -> str:
    """A cell's text, marked where its phase did not finish."""
    if not data:
        return "not run"
    return text if data.get("complete") else f"{text} (incomplete)"


def summary_rows(out: Path, model: str, vllm: bool) -> list[tuple[str, str]]:
    """One column of the summary table: the figures of ``model``'s phases."""
    upd, roll, vit, bench = (_read(out, f"{phase}_{model}") for phase in ("update", "rollout", "vllm_iteration",
                                                                          "vllm_bench"))
    plan, floor = upd.get("planned", {}), upd.get("sync_floor", {})
    cold, warm = upd.get("cold", {}), upd.get("warm", {})
    vrow = current_row(vit.get("row", {}))  # a metrics row, of either naming
    no_vllm = "vLLM not installed"
    rows = [
        ("parameters (random init) / build s", _phase_cell(
            upd, f"{_fmt(upd.get('parameters'))} / {_fmt(upd.get('build_seconds'), '.1f')}")),
        ("sync-check floor, bf16: mean / max abs dlogp", _phase_cell(
            upd, f"{_fmt(floor.get('mean_logprob_diff'), '.3g')} / {_fmt(floor.get('max_logprob_diff'), '.3g')}")),
        ("update: planned trainer GiB", _fmt(plan.get("trainer_gib"), ".1f")),
        ("update, cold: s / train tok/s / max allocated GiB", _phase_cell(
            upd, f"{_fmt(cold.get('seconds'), '.1f')} / {_fmt(cold.get('train_tokens_per_s'))} / "
                 f"{_fmt(cold.get('max_memory_allocated_gib'), '.1f')}")),
        ("update, warm: max allocated / reserved GiB", _phase_cell(
            upd, f"{_fmt(warm.get('max_memory_allocated_gib'), '.1f')} / "
                 f"{_fmt(warm.get('max_memory_reserved_gib'), '.1f')}"
                 if warm else "not run")),
        ("update, warm: s / train tok/s / MFU", _phase_cell(
            upd, f"{_fmt(warm.get('seconds'), '.1f')} / {_fmt(warm.get('train_tokens_per_s'))} / "
                 f"{_fmt(warm.get('mfu'), '.1%')}" if warm else "not run")),
        ("update: weights changed / micro-batch grad rel. err.", _phase_cell(
            upd, f"{_fmt(upd.get('weights_changed_frac'), '.4f')} / {_fmt(upd.get('grad_rel_err_microbatch'), '.2g')}")),
        ("rollout: prefill s / bandwidth floor ms a step", _phase_cell(
            roll, f"{_fmt(roll.get('prefill_s'), '.2f')} / {_fmt(roll.get('floor_step_ms'), '.1f')}")),
    ] + [(f"rollout, {label} cache: ms a step / tok/s / x floor", _phase_cell(
            roll, f"{_fmt(decode.get('decode_step_ms'), '.1f')} / {_fmt(decode.get('generated_tokens_per_s'))} / "
                  f"{_fmt(decode.get('over_floor'), '.2f')}" if decode else "not run"))
         for label, decode in ((label, roll.get("decode", {}).get(label, {}))
                               for label in ("dynamic", "static", "static compiled"))]
    if not vllm:
        return rows + [(label, no_vllm) for label in (
            "vLLM iteration: weight sync s / mean dlogp (floor)", "vLLM rollout: generated tok/s",
            "vllm bench throughput: output tok/s")]
    rollout_tps = vrow.get("rollout/tokens") / vrow["rollout/time_s"] if vrow.get("rollout/time_s") else None
    return rows + [
        ("vLLM iteration: weight sync s / mean dlogp (floor)", _phase_cell(
            vit, f"{_fmt(vrow.get('sync/time_s'), '.2f')} / {_fmt(vrow.get('sync/mean_logprob_diff'), '.3g')} "
                 f"({_fmt(vrow.get('sync/floor'), '.3g')})")),
        ("vLLM rollout: generated tok/s", _phase_cell(vit, _fmt(rollout_tps))),
        ("vllm bench throughput: output tok/s", _phase_cell(bench and {**bench, "complete": True},
                                                            _fmt(_bench_output_tokens_per_s(bench)))),
    ]


def tiny_line(out: Path) -> str | None:
    """The tiny cells' line under the table: each device's wall seconds and what its record says."""
    tiny = _read(out, "tiny")
    if not tiny:
        return None
    cells = [f"{device} {_fmt(cell.get('wall_time_s'), '.1f')} s ({cell.get('status')}, record: device "
             f"{cell.get('device')}, GPU {cell.get('gpu') or 'none'})"
             for device, cell in tiny.items() if isinstance(cell, dict)]
    state = "" if tiny.get("complete") else " (incomplete)"
    return (f"Tiny benchmark cell {tiny.get('cell')}, {tiny.get('iterations')} iterations{state}: "
            + "; ".join(cells) + ".")


def summary(out: Path) -> str:
    env = _read(out, "environment")
    vllm = bool(env.get("vllm"))
    columns = {model: summary_rows(out, model, vllm) for model in MODELS}
    names = [name for name, _ in columns[MODELS[0]]]
    width = max(map(len, names))
    lines = [f"| {'check':<{width}} | " + " | ".join(MODELS) + " |",
             f"|{'-' * (width + 2)}|" + "|".join("-" * (len(m) + 2) for m in MODELS) + "|"]
    for k, name in enumerate(names):
        lines.append(f"| {name:<{width}} | " + " | ".join(columns[m][k][1] for m in MODELS) + " |")
    tiny = tiny_line(out)
    if tiny:
        lines += ["", tiny]
    if env:
        lines.append("")
        lines.append(f"{env.get('gpu', 'no GPU')}, driver {env.get('driver')}, CUDA {env.get('cuda')}; Python "
                     f"{env.get('python')}, torch {env.get('torch')}, transformers {env.get('transformers')}, "
                     f"peft {env.get('peft')}, vLLM {env.get('vllm') or 'not installed'}.")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("env", "build", "shapes", "update", "rollout", "tiny", "iteration",
                                          "vllm_iteration", "summary"))
    parser.add_argument("out", type=Path)
    parser.add_argument("model", nargs="?", choices=MODELS)
    parser.add_argument("--layers", type=int, help="build, update, rollout: fewer decoder layers (the CPU test)")
    parser.add_argument("--vocab", type=int, help="build, update, rollout: a smaller vocabulary, at least 8192 "
                        "(the CPU test)")
    parser.add_argument("--cold-only", action="store_true", help="update phase: no second, warm update")
    parser.add_argument("--rows", type=int, default=TASKS * GROUP, help="rollout phase: prompts [128]")
    parser.add_argument("--new-tokens", type=int, default=ROLLOUT_NEW_TOKENS, help="rollout phase: forced new "
                        f"tokens [{ROLLOUT_NEW_TOKENS}]")
    parser.add_argument("--iterations", type=int, default=TINY_ITERATIONS, help="tiny phase: iterations per cell "
                        f"[{TINY_ITERATIONS}]")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for the CPU test [cuda]")
    parser.add_argument("--samples", type=int, default=TASKS * GROUP, help="update phase: samples [128]")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="update phase [1500]")
    parser.add_argument("--response-tokens", type=int, help="update [512], transformers iteration [64], vLLM "
                        "iteration [512]")
    parser.add_argument("--tasks", type=int, default=TASKS, help="iterations: tasks of 8 rollouts [16]")
    args = parser.parse_args(argv)
    if args.phase not in ("summary", "env", "tiny") and args.model is None:
        parser.error(f"the {args.phase} phase needs a MODEL: one of {', '.join(MODELS)}")
    if args.vocab is not None and args.vocab < TINY_TOKENIZER["vocab_size"]:
        parser.error(f"--vocab must be at least the tokenizer's {TINY_TOKENIZER['vocab_size']}")
    if args.samples < GRADIENT_SAMPLES or min(args.prompt_tokens, args.response_tokens or 1, args.tasks, args.rows,
                                              args.iterations) < 1 or args.new_tokens < 2:
        parser.error(f"--samples must be at least {GRADIENT_SAMPLES}, --new-tokens at least 2, --prompt-tokens, "
                     "--response-tokens, --tasks, --rows and --iterations at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phase == "env":
        environment(args.out)
    elif args.phase == "build":
        build(args.out, args.model, args.layers, args.device, args.vocab)
    elif args.phase == "shapes":
        print(PROMPT_TOKENS, RESPONSE_TOKENS, TASKS * GROUP)
    elif args.phase == "update":
        update(args.out, args.model, args.device, args.samples, args.prompt_tokens,
               args.response_tokens or RESPONSE_TOKENS, warm=not args.cold_only, layers=args.layers, vocab=args.vocab)
    elif args.phase == "rollout":
        rollout(args.out, args.model, args.device, args.rows, args.prompt_tokens, args.new_tokens,
                layers=args.layers, vocab=args.vocab)
    elif args.phase == "tiny":
        tiny_cells(args.out, ["cuda", "cpu"] if args.device.startswith("cuda") else ["cpu"], args.iterations)
    elif args.phase in ("iteration", "vllm_iteration"):
        backend = "transformers" if args.phase == "iteration" else "vllm"
        iteration(args.out, args.model, backend, args.device, args.tasks, args.response_tokens)
    else:
        table = summary(args.out)
        atomic_write_text(args.out / "summary.md", table + "\n")
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
