"""``ptgpo plan``: predict a run's peak memory from its config, before any model is loaded.

Examples::

    ptgpo plan configs/train_household_hard_qwen7b.yaml                   # on this machine's GPU
    ptgpo plan configs/bench/alfworld_qwen2.5-7b.yaml --gpu-memory 141 \\
        --set policy.model=configs/models/qwen2.5-7b                       # anywhere: the shipped architecture
    ptgpo plan my.yaml --device cpu                                       # resident memory of a CPU run
    ptgpo plan configs/bench/alfworld_qwen2.5-7b.yaml --gpu-memory 80 --nproc 8 \
        --set policy.model=configs/models/qwen2.5-7b --set policy.lora=null # one rank of 8 (FSDP), full fine-tuning

CONFIG is a training config (as ``ptgpo train --config``) or a benchmark config (its first RL cell is
planned). The model's ``config.json`` is read from its folder or the Hugging Face cache; the
``configs/models/`` folders hold the architectures of the benchmark's models. Prints the plan item by
item (:mod:`ptgpo_algos.training.memory_plan`), one rank's with ``--nproc N`` (the model sharded over N GPUs),
and on a GPU the fewest GPUs the run fits on; exits 2 when it cannot fit, with what to change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "predict a training run's peak GPU (or CPU) memory from its config, and say what to change if it cannot fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ptgpo plan``: a config, ``--set`` overrides, the device and the GPU's memory."""
    parser.add_argument("config", help="a training config or a benchmark config (YAML)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any training config field, as in ptgpo train (repeatable)")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="plan for a GPU or a CPU [the config's device]")
    parser.add_argument("--gpu-memory", type=float, metavar="GIB",
                        help="the GPU's memory in GiB [this machine's GPU's]; plans a GPU without one here")
    parser.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="plan one rank of N, the model sharded over N GPUs with FSDP [1]")


#: No accelerator holds a pebibyte; beyond it (or at inf) the planner's byte counts overflow.
_MAX_GPU_GIB = 1_048_576


def _training_config(path: str, overrides: dict):
    """The training config at ``path``, or the first RL cell of the benchmark config there."""
    import yaml

    from ptgpo_algos.config import TrainConfig, merge_overrides
    from ptgpo_algos.yaml_safe import load_yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = load_yaml(handle) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: cannot be read ({error})") from None
    if isinstance(data, dict) and "methods" in data and "environments" in data:
        from ptgpo_harness.bench.config import load_config
        from ptgpo_harness.bench.plan import plan_cells

        cells = [cell for cell in plan_cells(load_config(path)) if cell.kind == "rl"]
        if not cells:
            raise ValueError(f"{path}: the benchmark has no RL cell to plan")
        return TrainConfig.from_dict(merge_overrides(cells[0].spec, overrides))
    return TrainConfig.from_yaml(path, overrides)


#: The GPU planned for when this machine has none and ``--gpu-memory`` is not given: an 80 GB H100's
#: usable memory, the most common training GPU.
DEFAULT_GPU_GIB = 79.6

#: The architectures shipped with the repository (``config.json`` only), read when a hub model's own
#: ``config.json`` is not on this machine, so that planning needs neither a download nor the network.
SHIPPED_ARCHITECTURES = Path(__file__).resolve().parents[2] / "configs" / "models"


def _device_and_memory(args: argparse.Namespace, config) -> tuple[str, int, str | None]:
    """The device planned for, its memory in bytes, and a note when either was not this machine's."""
    import torch

    from ptgpo_algos.training.memory_plan import GIB, total_device_memory

    device = args.device or ("cpu" if config.policy.device == "cpu" else "cuda")
    if device == "cpu":
        return "cpu", total_device_memory("cpu"), None
    if args.gpu_memory is not None:
        if not 0 < args.gpu_memory <= _MAX_GPU_GIB:
            raise ValueError(f"--gpu-memory must be a number of GiB in (0, {_MAX_GPU_GIB}], got {args.gpu_memory}")
        return "cuda", int(args.gpu_memory * GIB), None
    if not torch.cuda.is_available():
        return "cuda", int(DEFAULT_GPU_GIB * GIB), (
            f"there is no GPU here: planned for one of {DEFAULT_GPU_GIB} GiB (an 80 GB H100); "
            "--gpu-memory GIB plans another, --device cpu this machine")
    return "cuda", total_device_memory("cuda"), None


def shipped_architecture(model: str) -> Path | None:
    """The shipped architecture folder for a hub name whose ``config.json`` is neither a local folder nor
    in the Hugging Face cache (``Qwen/Qwen2.5-7B-Instruct`` -> ``configs/models/qwen2.5-7b``); None when
    the model is on this machine or no shipped architecture matches."""
    import re

    from ptgpo_algos.training.preflight import is_hub_name

    if model == "tiny" or Path(model).expanduser().exists() or not is_hub_name(model):
        return None
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return None
    name = re.sub(r"-(instruct|chat|base)$", "", model.split("/")[-1].lower())
    folder = SHIPPED_ARCHITECTURES / name
    return folder if (folder / "config.json").is_file() else None


def _fewest_gpus(plan) -> str:
    """The line naming the fewest GPUs of this memory the run fits on, and its peak on each."""
    import dataclasses

    from ptgpo_algos.training.memory_plan import GIB, plan_memory, smallest_world_size

    n = smallest_world_size(plan.model, plan.run)
    if n is None:
        return "no number of these GPUs fits it: what does not shrink with more GPUs is too large alone"
    peak = plan_memory(plan.model, dataclasses.replace(plan.run, world_size=n)).peak_bytes
    return f"fewest GPUs of {plan.run.total_bytes / GIB:.0f} GiB it fits on: {n} (--nproc {n}: {peak / GIB:.1f} GiB each)"


def run(args: argparse.Namespace) -> int:
    """Print the config's memory plan; exit code 0 when it fits, 2 when it does not or the config cannot be planned."""
    from ptgpo_harness.commands.train import parse_set
    from ptgpo_algos.training.memory_plan import plan_for_config
    from ptgpo_algos.training.preflight import check_model_source

    try:
        if args.nproc < 1:
            raise ValueError(f"--nproc must be a positive number of GPUs, got {args.nproc}")
        config = _training_config(args.config, parse_set(args.set))
        notes = []
        shipped = shipped_architecture(config.policy.model)
        if shipped is not None:
            notes.append(f"{config.policy.model} is not on this machine: planned with its architecture in {shipped}")
            config = config.replace(**{"policy.model": str(shipped)})
        check_model_source(config.policy.model)  # the plan reads the model's config.json
        device, total, note = _device_and_memory(args, config)
        notes += [note] if note else []
        if device == "cpu" and args.nproc > 1:
            raise ValueError("--nproc plans GPUs (ranks on CPUs share one machine's memory): leave --device cpu out")
        plan = plan_for_config(config, device, total, args.nproc)
    except (ValueError, OSError) as error:
        hint = ""
        if "policy.model" in str(error) or "config.json" in str(error):
            hint = " (configs/models/ holds the Qwen2.5 architectures: --set policy.model=configs/models/qwen2.5-7b)"
        print(f"ptgpo plan: {error}{hint}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    print(plan.table())
    if device == "cuda":
        print(_fewest_gpus(plan))
    if plan.fits:
        print(f"fits: {plan.peak_bytes / plan.run.total_bytes:.0%} of the {'GPU' if device == 'cuda' else 'memory'}")
        return 0
    print(f"does not fit: {plan.refusal()}", file=sys.stderr)
    return 2
