"""The memory planner: parameter counts, each item of a plan on hand-computed numbers, the advice of a
plan that does not fit, ``ptgpo plan`` and the trainer's check at start-up."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ptgpo_algos.training.memory_plan import (
    GIB,
    GpuDoesNotFit,
    ModelShape,
    RunShape,
    plan_for_config,
    plan_memory,
    run_shape,
    smallest_world_size,
)
from ptgpo_algos.policy.precision import Precision
from ptgpo_algos.updates.optimizer_registry import OptimizerState

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "configs" / "models"
FP32 = Precision("float32", "float32", None)
BF16 = Precision("float32", "bfloat16", "bfloat16")
#: hidden 8, 2 layers, 2 heads of 4 (one key/value head: kv width 4), MLP 16, vocabulary 100.
SMALL = ModelShape(hidden=8, layers=2, heads=2, kv_heads=1, intermediate=16, vocab=100)


def _items(plan) -> dict[str, float]:
    return {item.name: item.bytes for item in plan.items}


def test_parameter_counts_by_hand_and_of_the_shipped_architectures():
    # Linear maps (in x out): q 8x8, k 8x4, v 8x4, o 8x8, gate 8x16, up 8x16, down 16x8 = 576; q/k/v
    # biases 8 + 4 + 4; two norms of 8: 608 a layer. Tied embedding 100 x 8, final norm 8.
    assert SMALL.kv_width == 4 and SMALL.layer_parameters() == 608
    assert SMALL.parameters() == 800 + 2 * 608 + 8 == 2024
    assert dataclasses.replace(SMALL, tied=False).parameters() == 2824
    # Rank 2 on every linear map: 2 x (in + out) each, (16 + 12 + 12 + 16 + 24 + 24 + 24) x 2 a layer.
    assert SMALL.lora_parameters(2) == 2 * 2 * 128 == 512
    # Qwen2.5's published parameter counts, from the locally written config.json files.
    import json

    counts = {name: ModelShape.from_config(json.loads((MODELS / name / "config.json").read_text())).parameters()
              for name in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")}
    assert counts == {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-7b": 7_615_616_512}


def test_a_float32_cpu_plan_item_by_item():
    run = RunShape(device="cpu", precision=FP32, micro_batch=2, sequence=10, logprob_chunk=4, total_bytes=64 * GIB)
    plan = plan_memory(SMALL, run)
    # 20 tokens; a layer keeps 32*8 + 16*16 + 8*4 = 544 bytes a token: 10,880; two layers and one
    # layer's backward. The output layer: 4 float32 (4 x 100) tensors, and its weight's gradient.
    assert _items(plan) == {
        "trainable weights (float32)": 4 * 2024, "gradients (float32)": 4 * 2024, "AdamW moments (float32)": 8 * 2024,
        "activations (one micro-batch)": 3 * 10_880, "output layer (chunked scores)": 4 * 4 * 4 * 100 + 4 * 800,
        "allocator slack": 0.1 * 74_624, "Python runtime": GIB // 2,
    }
    assert plan.trainer_bytes == 74_624 and plan.peak_bytes == pytest.approx(74_624 * 1.1 + GIB // 2)
    assert plan.fits and plan.advice == []


def test_a_gpu_plan_under_autocast_with_checkpointing_a_reference_and_the_engine():
    run = RunShape(device="cuda", precision=BF16, micro_batch=2, sequence=10, logprob_chunk=4, kl_reference=True,
                   gradient_checkpointing=True, engine_fraction=0.25, total_bytes=8 * GIB)
    items = _items(plan_memory(SMALL, run))
    # Checkpointed: each layer's float32 input (20 tokens x 8 x 4 bytes, 2 layers) and one layer's
    # activations at 30*8 + 8*16 + 4*4 = 384 bytes a token. Autocast's bf16 copies of the layers'
    # weights; the output layer adds its bf16 cast and float32 gradient; the reference is bf16.
    assert items["activations (one micro-batch)"] == 20 * 2 * 4 * 8 + 20 * 384 == 8960
    assert items["autocast's bf16 weight copies"] == 2 * 2 * 608
    assert items["output layer (chunked scores)"] == 6400 + 2 * 800 + 4 * 800
    assert items["KL reference copy (bfloat16)"] == 2 * 2024
    assert items["vLLM engine (its share)"] == 2 * GIB and items["CUDA context"] == GIB


def test_a_lora_plan_keeps_a_bf16_base_and_no_reference_copy():
    run = RunShape(device="cuda", precision=BF16, micro_batch=2, sequence=10, lora_rank=2, logprob_chunk=4,
                   kl_reference=True, gradient_checkpointing=True, total_bytes=8 * GIB)
    items = _items(plan_memory(SMALL, run))
    assert items["trainable weights (float32)"] == 4 * 512 and items["frozen base (bfloat16)"] == 2 * 2024
    assert items["gradients (float32)"] == 4 * 512 and items["AdamW moments (float32)"] == 8 * 512
    # bf16 layer inputs (20 x 8 x 2 bytes, 2 layers) and 24*8 + 8*16 + 4*4 + 14*2 = 364 bytes a token.
    assert items["activations (one micro-batch)"] == 640 + 20 * 364
    assert items["output layer (chunked scores)"] == 6400 + 2 * 800  # the frozen head has no gradient
    assert not any("reference" in name or "autocast" in name for name in items)


def test_activation_offload_keeps_two_layers_on_the_gpu():
    run = RunShape(device="cpu", precision=FP32, micro_batch=2, sequence=10, activation_offload=True, total_bytes=GIB)
    assert _items(plan_memory(SMALL, run))["activations (one micro-batch)"] == 2 * 10_880


def test_a_rank_s_plan_holds_its_shards_and_fsdp_s_gathered_copies():
    run = RunShape(device="cuda", precision=BF16, micro_batch=2, sequence=10, logprob_chunk=4, kl_reference=True,
                   gradient_checkpointing=True, total_bytes=8 * GIB, world_size=2)
    items = _items(plan_memory(SMALL, run))
    # Half of each: float32 weights and gradients 4 x 2024 / 2, moments 8 x 2024 / 2, the bf16 reference.
    assert items["trainable weights (float32)"] == items["gradients (float32)"] == 4048
    assert items["AdamW moments (float32)"] == 8096 and items["KL reference copy (bfloat16)"] == 2024
    # Two layers gathered in bf16 (2 x 2 x 608), the root unit's tied embedding and final norm in bf16
    # (2 x (800 + 8)), one layer's float32 gradient before its reduce-scatter (4 x 608).
    assert items["FSDP gathered copies"] == 2432 + 1616 + 2432
    # FSDP casts the gathered copies itself: autocast keeps none; activations are the rank's own.
    assert "autocast's bf16 weight copies" not in items
    assert items["activations (one micro-batch)"] == 8960
    with pytest.raises(ValueError, match="--nproc: expected a positive number of ranks"):
        dataclasses.replace(run, world_size=0)


def test_the_fewest_ranks_a_run_fits_on():
    run = RunShape(device="cuda", precision=BF16, micro_batch=1, sequence=8, gradient_checkpointing=True,
                   total_bytes=0)
    peak = {n: plan_memory(_qwen("qwen2.5-7b"), dataclasses.replace(run, world_size=n)).peak_bytes for n in (2, 3)}
    assert peak[3] < peak[2]  # the shards shrink
    exactly_three = dataclasses.replace(run, total_bytes=int(peak[3]) + 1)
    assert smallest_world_size(_qwen("qwen2.5-7b"), exactly_three) == 3
    assert smallest_world_size(_qwen("qwen2.5-7b"), dataclasses.replace(run, total_bytes=GIB)) is None


def _qwen(name: str) -> ModelShape:
    import json

    return ModelShape.from_config(json.loads((MODELS / name / "config.json").read_text()))


def test_a_plan_that_does_not_fit_says_what_to_change():
    # Qwen2.5-1.5B full fine-tuning, 8 x 2,560 tokens without checkpointing, next to vLLM's 35 %.
    run = RunShape(device="cuda", precision=BF16, micro_batch=8, sequence=2560, kl_reference=True,
                   engine_fraction=0.35, total_bytes=141 * GIB)
    plan = plan_memory(_qwen("qwen2.5-1.5b"), run)
    assert not plan.fits
    assert plan.advice[0] == "policy.gradient_checkpointing: true"
    assert plan_memory(_qwen("qwen2.5-1.5b"), dataclasses.replace(run, gradient_checkpointing=True)).fits
    smaller = [a for a in plan.advice if a.startswith("optim.micro_batch_size: ")]
    assert smaller and plan_memory(_qwen("qwen2.5-1.5b"), dataclasses.replace(
        run, micro_batch=int(smaller[0].split(": ")[1]))).fits
    text = plan.refusal()
    assert "policy.gradient_checkpointing: true" in text and "run.memory_check: false" in text
    assert f"{plan.peak_bytes / GIB:.1f} GiB" in text


def test_when_no_change_alone_fits_the_advice_combines_them():
    # Qwen2.5-7B full fine-tuning: the float32 weights, gradients and moments alone are 113 GiB.
    run = RunShape(device="cuda", precision=BF16, micro_batch=64, sequence=2560, kl_reference=True,
                   gradient_checkpointing=True, engine_fraction=0.35, total_bytes=141 * GIB)
    plan = plan_memory(_qwen("qwen2.5-7b"), run)
    assert not plan.fits and len(plan.advice) == 1
    assert plan.advice[0].startswith("policy.lora: {r: 64} with optim.micro_batch_size: ")
    micro = int(plan.advice[0].rsplit(": ", 1)[1])
    lora = dataclasses.replace(run, lora_rank=64)
    assert plan_memory(_qwen("qwen2.5-7b"), dataclasses.replace(lora, micro_batch=micro)).fits
    assert not plan_memory(_qwen("qwen2.5-7b"), dataclasses.replace(lora, micro_batch=micro + 1)).fits
    tiny_gpu = plan_memory(_qwen("qwen2.5-7b"), dataclasses.replace(run, total_bytes=20 * GIB))
    assert tiny_gpu.advice[0].startswith("a GPU with more memory, or a smaller model")


# ----------------------------------------------------------------------------------------- from a config
def _config(**changes):
    from ptgpo_algos.config import TrainConfig

    return TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "model": str(MODELS / "qwen2.5-0.5b"),
                                  "mode": "generate", "device": "cuda", "dtype": "bfloat16", **changes})


def test_the_run_shape_of_a_config():
    config = _config(max_prompt_tokens=1500, max_new_tokens=512, minibatch_size=32, micro_batch_size=4,
                     rollout_backend="vllm", vllm={"gpu_memory_utilization": 0.4}, lora={"r": 8}, kl_coef=0.01)
    run = run_shape(config, "cuda:0", 100 * GIB)
    assert (run.device, run.micro_batch, run.sequence, run.lora_rank) == ("cuda", 4, 2012, 8)
    assert run.precision == BF16 and run.engine_fraction == 0.4 and run.kl_reference
    assert run.gradient_checkpointing  # the GPU default for a pretrained model
    on_cpu = run_shape(_config(minibatch_size=32, rollout_backend="vllm"), "cpu", 16 * GIB)
    assert on_cpu.precision == FP32 and on_cpu.engine_fraction == 0.0 and on_cpu.micro_batch == 32


def test_the_tiny_models_plan_comes_from_its_spec():
    from ptgpo_algos.config import TrainConfig

    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "tiny": {"hidden_size": 32}})
    plan = plan_for_config(config, "cpu", 16 * GIB)
    assert plan.model.hidden == 32 and plan.fits and plan.run.device == "cpu"


def test_the_trainer_refuses_a_gpu_run_that_cannot_fit(monkeypatch):
    import ptgpo_algos.training.memory_plan as memory
    from ptgpo_algos.training.placement import check_memory

    monkeypatch.setattr(memory, "total_device_memory", lambda device: 24 * GIB)  # 45 GiB planned, 17 with checkpointing
    with pytest.raises(GpuDoesNotFit, match="policy.gradient_checkpointing: true"):
        check_memory(_config(minibatch_size=16, gradient_checkpointing=False), "cuda", 1, progress=False)
    lenient = _config(minibatch_size=16, gradient_checkpointing=False, memory_check=False)
    check_memory(lenient, "cuda", 1, progress=False)  # planned, printed nowhere (progress off), not refused


# ----------------------------------------------------------------------------------------- ptgpo plan
@pytest.mark.parametrize("bench", ["alfworld_qwen2.5-1.5b", "webshop_qwen2.5-1.5b", "alfworld_qwen2.5-7b",
                                   "webshop_qwen2.5-7b"])
def test_the_shipped_recipes_fit_one_h200(bench, capsys):
    from ptgpo_harness.cli import main

    model = MODELS / bench.split("_")[1]
    code = main(["plan", str(ROOT / "configs" / "bench" / f"{bench}.yaml"), "--gpu-memory", "139",
                 "--set", f"model={model}"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| peak " in out and "vLLM engine (its share)" in out and "fits: " in out


def test_plan_refuses_7b_full_fine_tuning_and_says_what_to_change(capsys):
    from ptgpo_harness.cli import main

    code = main(["plan", str(ROOT / "configs" / "bench" / "alfworld_qwen2.5-7b.yaml"), "--gpu-memory", "139",
                 "--set", f"model={MODELS / 'qwen2.5-7b'}", "--set", "lora=null"])
    err = capsys.readouterr().err
    assert code == 2 and "does not fit" in err and "policy.lora: {r: 64}" in err


def test_plan_with_nproc_plans_one_rank_and_names_the_fewest_gpus(capsys):
    from ptgpo_harness.cli import main

    arguments = ["plan", str(ROOT / "configs" / "bench" / "alfworld_qwen2.5-7b.yaml"), "--gpu-memory", "80",
                 "--set", f"model={MODELS / 'qwen2.5-7b'}", "--set", "lora=null"]
    assert main(arguments + ["--nproc", "8"]) == 0
    out = capsys.readouterr().out
    assert "one rank of 8 (FSDP)" in out and "1/8 on each of 8 ranks" in out and "FSDP gathered copies" in out
    assert "fewest GPUs of 80 GiB it fits on: 5 (--nproc 5: 79.8 GiB each)" in out
    assert main(arguments + ["--nproc", "0"]) == 2
    assert "--nproc must be a positive number of GPUs" in capsys.readouterr().err


def test_plan_reports_bad_input_naming_the_flag(tmp_path, capsys):
    from ptgpo_harness.cli import main

    config = ROOT / "configs" / "bench" / "alfworld_qwen2.5-1.5b.yaml"
    assert main(["plan", str(config), "--gpu-memory", "0", "--set", f"model={MODELS / 'qwen2.5-1.5b'}"]) == 2
    assert "--gpu-memory must be a number of GiB in (0, 1048576]" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    assert main(["plan", str(config), "--gpu-memory", "139", "--set", f"model={tmp_path}"]) == 2
    assert "--set policy.model=configs/models/qwen2.5-7b" in capsys.readouterr().err  # no config.json there
    assert main(["plan", str(config), "--device", "cpu", "--set", f"model={MODELS / 'qwen2.5-1.5b'}"]) in (0, 2)
    assert "CPU (resident memory)" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------- the optimiser's state
SGD_MOMENTUM = OptimizerState("SGD", "SGD momentum (float32)", 4)


@pytest.fixture
def plugin_optimizers():
    """Two plugin optimisers: an SGD with momentum that declares its buffer, and one that declares nothing."""
    import torch

    from ptgpo_algos.updates.optimizer_registry import OPTIMIZERS, register_optimizer

    @register_optimizer("sgd-momentum", state=SGD_MOMENTUM)
    def sgd_momentum(param_groups, *, lr, weight_decay):
        return torch.optim.SGD(param_groups, lr=lr, momentum=0.9, weight_decay=weight_decay)

    @register_optimizer("undeclared")
    def undeclared(param_groups, *, lr, weight_decay):
        return torch.optim.Adam(param_groups, lr=lr, weight_decay=weight_decay)

    yield {"sgd-momentum": sgd_momentum, "undeclared": undeclared}
    OPTIMIZERS.unregister("sgd-momentum")
    OPTIMIZERS.unregister("undeclared")


def test_the_plan_counts_the_state_each_optimiser_declares(plugin_optimizers):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.memory_plan import plan_disk

    # SMALL's 2,024 parameters sharded over 2 ranks (1,012 each); a value head of 8 weights and a bias.
    run = RunShape(device="cuda", precision=BF16, micro_batch=2, sequence=10, logprob_chunk=4, world_size=2,
                   value_heads=1, total_bytes=64 * GIB)
    expected = {  # state line, its bytes on a rank; the head's line and bytes; the checkpoint's bytes
        "adamw": ("AdamW moments (float32)", 8 * 1012, "value head (+ gradients, AdamW)", 16 * 9, 12 * 2033),
        "sgd": ("SGD state (none: no momentum)", 0, "value head (+ gradients, SGD)", 8 * 9, 4 * 2033),
        "sgd-momentum": ("SGD momentum (float32)", 4 * 1012, "value head (+ gradients, SGD)", 12 * 9, 8 * 2033),
        "undeclared": ("undeclared state (undeclared: AdamW's assumed)", 8 * 1012,
                       "value head (+ gradients, undeclared (AdamW's state assumed))", 16 * 9, 12 * 2033),
    }
    for name, (label, state, head_label, head, checkpoint) in expected.items():
        config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "optim": {"optimizer": name}})
        planned = dataclasses.replace(run, optimizer=run_shape(config, "cuda", 64 * GIB).optimizer)
        plan = plan_memory(SMALL, planned)
        notes = {item.name: item.note for item in plan.items}
        items = _items(plan)
        assert items[label] == state and notes[label] == "1/2 on each of 2 ranks", name
        assert items[head_label] == head, name
        assert sum("AdamW" in line for line in items) == (2 if name in ("adamw", "undeclared") else 0), name
        assert plan_disk(SMALL, planned).checkpoint_bytes == checkpoint, name


def test_each_built_in_and_plugin_state_is_what_its_optimiser_keeps(plugin_optimizers):
    import torch

    from ptgpo_algos.updates.optimizer_registry import BUILT_IN_OPTIMIZERS, BUILT_IN_STATES, OPTIMIZERS

    assert list(BUILT_IN_STATES) == list(BUILT_IN_OPTIMIZERS)
    declared = {**BUILT_IN_STATES, "sgd-momentum": SGD_MOMENTUM}
    for name, state in declared.items():
        parameter = torch.nn.Parameter(torch.ones(6))
        optimizer = OPTIMIZERS.get(name)([{"params": [parameter]}], lr=0.1, weight_decay=0.0)
        parameter.grad = torch.ones(6)
        optimizer.step()
        kept = sum(value.numel() * value.element_size() for value in optimizer.state[parameter].values()
                   if isinstance(value, torch.Tensor) and value.shape == parameter.shape)
        assert kept == 6 * state.bytes_per_value, name


def test_an_optimiser_state_declaration_is_checked():
    from ptgpo_algos.updates.optimizer_registry import register_optimizer
    from ptgpo_envs.plugins import RegistryError

    with pytest.raises(RegistryError, match=r"OptimizerState.bytes_per_value: .* integer >= 0 .* got -4"):
        OptimizerState("SGD", "SGD momentum (float32)", -4)
    with pytest.raises(RegistryError, match="OptimizerState.label: expected a non-empty string"):
        OptimizerState("SGD", "", 4)
    with pytest.raises(RegistryError, match="optimiser 'lion': state must be an OptimizerState, got 4"):
        register_optimizer("lion", state=4)


def test_plan_names_the_optimiser_s_state(plugin_optimizers, capsys):
    from ptgpo_harness.cli import main

    arguments = ["plan", str(ROOT / "configs" / "bench" / "alfworld_qwen2.5-1.5b.yaml"), "--gpu-memory", "139",
                 "--set", f"model={MODELS / 'qwen2.5-1.5b'}", "--set", "optim.optimizer="]
    assert main(arguments[:-1] + [arguments[-1] + "sgd"]) == 0
    out = capsys.readouterr().out
    assert "| SGD state (none: no momentum)" in out and "AdamW" not in out
    assert main(arguments[:-1] + [arguments[-1] + "undeclared"]) == 0
    assert "| undeclared state (undeclared: AdamW's assumed)" in capsys.readouterr().out
