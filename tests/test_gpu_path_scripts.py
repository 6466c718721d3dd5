"""The GPU path's scripts at toy sizes on the CPU: the scale rehearsal's JSON line, and every phase of
``scripts/gpu_check.sh`` that does not need vLLM (the GPU itself was not available to these tests)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_scripts import _script

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------- scale rehearsal
def test_relative_error_on_hand_numbers():
    module = _script("scale_rehearsal")
    # |(1, 2) - (1, 1)| = 1 over |(1, 1)| = sqrt 2, the pairs taken as one vector.
    assert math.isclose(module.relative_error([torch.tensor([1.0]), torch.tensor([2.0])],
                                              [torch.tensor([1.0]), torch.tensor([1.0])]), 1 / math.sqrt(2))


def test_scale_rehearsal_prints_its_json_line_at_toy_shapes(tmp_path, capsys):
    module = _script("scale_rehearsal")
    assert module.main(["--layers", "1", "--vocab", "600", "--prompt-tokens", "20", "--response-tokens", "8",
                        "--samples", "3", "--chunk", "5", "--scratch", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"peak_rss_gib", "planned_gib", "weights_changed_frac", "grad_rel_err_microbatch", "seconds"} <= set(row)
    # float32 weights under a bf16 config: AdamW's first step at lr 1e-6 moves every weight with a
    # gradient (all of them here: the tied output layer gives every embedding row one).
    assert row["weights_changed_frac"] > 0.99
    assert row["grad_rel_err_microbatch"] < 1e-5
    assert 0 < row["peak_rss_gib"] and 0 < row["planned_gib"] and row["seconds"] > 0
    assert list(tmp_path.iterdir()) == []  # the checks' copies are cleaned up


def test_scale_rehearsal_refuses_a_mini_batch_it_cannot_cut(capsys):
    module = _script("scale_rehearsal")
    with pytest.raises(SystemExit) as error:
        module.main(["--samples", "2", "--micro-batch", "2"])
    assert error.value.code == 2 and "--samples must be at least 2 and above --micro-batch" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- gpu_check
def _fake_build(out: Path, model: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"build_{model}.json").write_text(json.dumps({"path": str(ROOT / "configs" / "models" / model)}))


@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "qwen2.5-7b"])
def test_gpu_check_runs_the_recipe_at_the_issues_shapes(tmp_path, model):
    from ptgpo_algos.config import TrainConfig, merge_overrides

    module = _script("gpu_check")
    _fake_build(tmp_path, model)
    for backend in ("transformers", "vllm"):
        config = TrainConfig.from_dict(module.iteration_spec(tmp_path, model, backend))
        assert (config.rollouts.tasks_per_iteration, config.rollouts.group_size) == (16, 8)
        assert config.policy.min_new_tokens == config.policy.max_new_tokens == 512
        assert config.rollouts.backend == backend and config.policy.device == "cuda"
        assert config.algorithm.name == "ptgpo" and config.env.max_steps == module.ITERATION_STEPS
        assert config.env.id == "ptgpo/Household-v0" and config.env_workers.backend == "processes"
        assert bool(config.policy.lora) == (model == "qwen2.5-7b") and config.optim.micro_batch_size == 8
        # LoRA trains at 10x full fine-tuning's rate.
        assert config.optim.lr == (1e-5 if model == "qwen2.5-7b" else 1e-6)
        # The check measures the final model's size; the cell drops its checkpoint as the recipe's would.
        assert config.run.keep_final_model and not config.run.keep_checkpoint
    cell = TrainConfig.from_dict(merge_overrides(module.recipe(model), {"model": str(ROOT / "configs" / "models" / model)}))
    # 42 fully fine-tuned 1.5B final models would not fit a 64 GiB disk; LoRA adapters do.
    assert cell.run.keep_final_model == (model == "qwen2.5-7b") and not cell.run.keep_checkpoint
    cpu = TrainConfig.from_dict(module.iteration_spec(tmp_path, model, device="cpu", tasks=1, response_tokens=8))
    assert cpu.env_workers.backend == "in-process" and cpu.policy.max_new_tokens == 8
    update = TrainConfig.from_dict(module.update_spec(tmp_path, model, "cuda"))
    assert update.policy.max_prompt_tokens == 1500 and update.policy.max_new_tokens == 512
    # The shipped recipe fits an H200 by the planner, next to vLLM's 35 %.
    plan = module.planned(module.iteration_spec(tmp_path, model, "vllm"), "cuda", 139 * 2**30)
    assert plan["fits"] and plan["engine_gib"] == pytest.approx(0.35 * 139)


def _summary_cells(module, out: Path) -> dict[str, list[str]]:
    lines = module.summary(out).splitlines()
    assert lines[0].split("|")[2:4] == [" qwen2.5-1.5b ", " qwen2.5-7b "]
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
            for line in lines[2:] if line.startswith("|")}


def test_gpu_check_summary_reads_whatever_phases_left(tmp_path):
    module = _script("gpu_check")
    (tmp_path / "environment.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "vllm": None,
                                                           "torch": "2.11.0"}))
    (tmp_path / "update_qwen2.5-1.5b.json").write_text(json.dumps({
        "parameters": 1_543_714_304, "build_seconds": 6.25, "planned": {"trainer_gib": 40.0},
        "sync_floor": {"mean_logprob_diff": 0.0123, "max_logprob_diff": 0.25},
        "cold": {"seconds": 15.7, "train_tokens_per_s": 16381, "max_memory_allocated_gib": 28.9},
        "warm": {"seconds": 12.0, "train_tokens_per_s": 21000, "max_memory_allocated_gib": 36.5,
                 "max_memory_reserved_gib": 39.25, "mfu": 0.3125},
        "weights_changed_frac": 0.99991, "grad_rel_err_microbatch": 3.1e-3, "complete": True}))
    # The 7B update ran out of time after its floor: what it wrote is shown, marked.
    (tmp_path / "update_qwen2.5-7b.json").write_text(json.dumps({
        "planned": {"trainer_gib": 60.0}, "sync_floor": {"mean_logprob_diff": 0.02, "max_logprob_diff": 0.3}}))
    # The compiled decoding ran out of time: the two caches before it are shown.
    (tmp_path / "rollout_qwen2.5-1.5b.json").write_text(json.dumps({
        "prefill_s": 1.5, "floor_step_ms": 4.0, "decode": {
            "dynamic": {"decode_step_ms": 12.5, "generated_tokens_per_s": 10240.0, "over_floor": 3.125},
            "static": {"decode_step_ms": 14.0, "generated_tokens_per_s": 9000.0, "over_floor": 3.5}}}))
    (tmp_path / "tiny.json").write_text(json.dumps({
        "cell": "multiroom__grpo__seed0", "iterations": 2,
        "cuda": {"status": "ok", "wall_time_s": 20.5, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"},
        "cpu": {"status": "ok", "wall_time_s": 14.25, "device": "cpu", "gpu": None}, "complete": True}))
    cells = _summary_cells(module, tmp_path)
    assert cells["parameters (random init) / build s"] == ["1,543,714,304 / 6.2", "n/a / n/a (incomplete)"]
    assert cells["sync-check floor, bf16: mean / max abs dlogp"] == ["0.0123 / 0.25", "0.02 / 0.3 (incomplete)"]
    assert cells["update, cold: s / train tok/s / max allocated GiB"][0] == "15.7 / 16,381 / 28.9"
    assert cells["update, warm: max allocated / reserved GiB"] == ["36.5 / 39.2", "not run (incomplete)"]
    assert cells["update, warm: s / train tok/s / MFU"][0] == "12.0 / 21,000 / 31.2%"
    assert cells["update: weights changed / micro-batch grad rel. err."][0] == "0.9999 / 0.0031"
    assert cells["rollout: prefill s / bandwidth floor ms a step"] == ["1.50 / 4.0 (incomplete)", "not run"]
    assert cells["rollout, dynamic cache: ms a step / tok/s / x floor"][0] == "12.5 / 10,240 / 3.12 (incomplete)"
    assert cells["rollout, static cache: ms a step / tok/s / x floor"][0] == "14.0 / 9,000 / 3.50 (incomplete)"
    assert cells["rollout, static compiled cache: ms a step / tok/s / x floor"][0] == "not run (incomplete)"
    assert cells["vllm bench throughput: output tok/s"] == ["vLLM not installed"] * 2
    lines = module.summary(tmp_path).splitlines()
    assert lines[-3] == ("Tiny benchmark cell multiroom__grpo__seed0, 2 iterations: cuda 20.5 s (ok, record: device "
                         "cuda, GPU NVIDIA H100 80GB HBM3); cpu 14.2 s (ok, record: device cpu, GPU none).")
    assert "NVIDIA H100 80GB HBM3" in lines[-1]


def test_gpu_check_throughput_figures_on_hand_numbers():
    module = _script("gpu_check")
    assert module.gpu_peaks("NVIDIA H100 80GB HBM3") == (989e12, 3.35e12)
    assert module.gpu_peaks("NVIDIA H100 PCIe") == (756e12, 2.0e12) and module.gpu_peaks("NVIDIA H200")[1] == 4.8e12
    assert module.gpu_peaks("Tesla T4") is None and module.gpu_peaks(None) is None
    # 10 decoder weights over 7 tokens, a 3-weight output layer over the 2 scored ones: 2 * (70 + 6).
    assert module.pass_flops(10, 3, 7, 2) == 152.0
    full = module.update_passes(old_share=0.5, reference=True, checkpointing=True, lora=False)
    assert full == {"pi_old": 0.5, "reference": 1.0, "forward": 1.0, "recompute": 1.0, "backward": 2.0}
    lora = module.update_passes(old_share=0.0, reference=False, checkpointing=False, lora=True)
    assert sum(lora.values()) == 2.0
    # 3 GB of weights and 1 GB of cache at 2 TB/s: 2 ms a step.
    assert module.decode_floor_s(3e9, 1e9, 2e12) == 0.002


def test_gpu_check_summary_with_vllm_reads_its_bench_and_sync(tmp_path):
    module = _script("gpu_check")
    (tmp_path / "environment.json").write_text(json.dumps({"vllm": "0.34.0"}))
    (tmp_path / "vllm_iteration_qwen2.5-1.5b.json").write_text(json.dumps({"complete": True, "row": {
        "tokens": 65536, "rollout_time_s": 4.0, "sync_time_s": 1.25, "sync_mean_logprob_diff": 0.031,
        "sync_floor": 0.02}}))
    (tmp_path / "vllm_bench_qwen2.5-1.5b.json").write_text(json.dumps({"tokens_per_second": 40040.0}))
    cells = _summary_cells(module, tmp_path)
    assert cells["vLLM iteration: weight sync s / mean dlogp (floor)"][0] == "1.25 / 0.031 (0.02)"
    assert cells["vLLM rollout: generated tok/s"][0] == "16,384"
    # vllm bench's total tokens/s, 512 of every 2,012 tokens generated.
    assert cells["vllm bench throughput: output tok/s"] == ["10,189", "not run"]


def test_gpu_check_phases_run_on_a_one_layer_model_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    module = _script("gpu_check")
    out = tmp_path / "out"
    assert module.main(["build", str(out), "qwen2.5-7b", "--layers", "1", "--vocab", "8192", "--device", "cpu"]) == 0
    built = json.loads((out / "build_qwen2.5-7b.json").read_text())
    folder = Path(built["path"])
    assert built["layers"] == 1 and (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 3584
    # The phases below at a narrower width (gpu_check.sh --dry-run runs them at 7B's): they read the
    # architecture from the built folder.
    monkeypatch.setattr(sys.modules["scale_rehearsal"], "architecture", _narrow(sys.modules["scale_rehearsal"].architecture))
    assert module.main(["build", str(out), "qwen2.5-7b", "--layers", "1", "--vocab", "8192", "--device", "cpu"]) == 0
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 256
    # The update builds its random weights in its own process, as wide as the narrowed architecture.
    assert module.main(["update", str(out), "qwen2.5-7b", "--device", "cpu", "--samples", "8", "--layers", "1",
                        "--vocab", "8192", "--prompt-tokens", "16", "--response-tokens", "8"]) == 0
    update = json.loads((out / "update_qwen2.5-7b.json").read_text())
    assert update["complete"] and update["lora"] and update["layers"] == 1 and update["gpu"] is None
    for step in ("cold", "warm"):
        assert update[step]["updates"] == 1 and update[step]["train_tokens"] == 8 * (16 + 8)
        assert update[step]["max_memory_allocated_gib"] is None and update[step]["mfu"] is None
        # One mini-batch: its pi_old is the update's own forward, no pass of its own; the recipe
        # checkpoints activations (one recomputation); LoRA's backward forms input gradients only.
        assert update["gradient_checkpointing"]
        assert update[step]["passes"] == {"pi_old": 0.0, "reference": 1.0, "forward": 1.0, "recompute": 1.0,
                                          "backward": 1.0}
    assert update["warm"]["tflops"] == update["cold"]["tflops"] > 0
    assert "micro-batch 8 x 24 tokens" in update["planned"]["table"]
    # float32 on the CPU: cached decoding and one forward pass agree to rounding.
    assert update["sync_floor"]["tokens"] == 32 and update["sync_floor"]["mean_logprob_diff"] < 1e-3
    assert update["grad_rel_err_microbatch"] < 1e-4 and update["weights_changed_frac"] > 0.5
    assert module.main(["rollout", str(out), "qwen2.5-7b", "--device", "cpu", "--layers", "1", "--vocab", "8192",
                        "--rows", "2", "--prompt-tokens", "12", "--new-tokens", "3"]) == 0
    rollout = json.loads((out / "rollout_qwen2.5-7b.json").read_text())
    assert rollout["complete"] and rollout["prefill_s"] > 0 and set(rollout["decode"]) == {"dynamic", "static"}
    # The static cache decodes the dynamic one's tokens (greedy); compiled decoding needs a GPU.
    assert all(d["decode_step_ms"] > 0 and d["tokens_as_dynamic"] == 1.0 for d in rollout["decode"].values())
    assert rollout["floor_step_ms"] is None and rollout["kv_cache_gib"] > 0  # no GPU: no bandwidth to divide by
    assert module.main(["iteration", str(out), "qwen2.5-7b", "--device", "cpu", "--tasks", "1",
                        "--response-tokens", "4"]) == 0
    iteration = json.loads((out / "iteration_qwen2.5-7b.json").read_text())
    assert iteration["complete"] and iteration["row"]["rollout/decisions"] > 0 and iteration["tokens_per_s"] > 0
    assert iteration["checkpoint_gib"] > 0 and iteration["checkpoint_seconds"] > 0
    # A LoRA run's final model is its adapters, not a merged copy of the base.
    assert "adapter_config.json" in iteration["final_model_files"]
    assert "model.safetensors" not in iteration["final_model_files"]
    assert not (out / "run_transformers_qwen2.5-7b").exists()  # its tens of GB are removed


def _narrow(architecture):
    def narrow(*args, **kwargs):
        config = architecture(*args, **kwargs)
        config.hidden_size, config.intermediate_size = 256, 512
        config.num_attention_heads, config.num_key_value_heads = 4, 2
        return config
    return narrow


def test_gpu_check_refuses_a_phase_without_its_model(capsys):
    module = _script("gpu_check")
    with pytest.raises(SystemExit):
        module.main(["update", "/tmp/nowhere"])
    assert "needs a MODEL" in capsys.readouterr().err


def test_gpu_check_shell_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")]).returncode == 0


def test_gpu_check_refuses_unknown_options_before_any_work(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--fast", str(tmp_path / "out")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "usage: bash scripts/gpu_check.sh" in result.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------- wheelhouse
def test_wheelhouse_reads_names_and_pip_freeze_lines(tmp_path):
    module = _script("wheelhouse")
    have = tmp_path / "have.txt"
    have.write_text("# the node\nPyYAML==6.0.2\ntorch==2.11.0+cu130\nstable_baselines3\n"
                    "ptgpo @ file:///src\n-e git+https://x/y#egg=z\n\n")
    assert module.read_have(have) == {"pyyaml", "torch", "stable-baselines3", "ptgpo"}
    have.write_text("torch\n!!!\n")
    with pytest.raises(SystemExit, match=r"have.txt:2: expected a distribution name"):
        module.read_have(have)


def test_wheelhouse_collects_what_the_node_lacks_and_not_what_its_packages_bring():
    module = _script("wheelhouse")
    metadata = {
        "gymnasium": {"version": "1.4.0", "requires_dist": ["numpy>=1.21", "cloudpickle", "farama-notifications",
                                                            "pytest; extra == 'testing'"]},
        "stable-baselines3": {"version": "2.9.2", "requires_dist": ["gymnasium>=0.29", "torch>=2.3", "pandas"]},
        "minigrid": {"version": "3.2.0", "requires_dist": ["pygame-ce>=2.4", "tomli; python_version < '3.11'"]},
        "torch": {"version": "2.7.1", "requires_dist": ["nvidia-cudnn-cu12; platform_system == 'Linux'"]},
        "pygame-ce": {"version": "2.5.8"}, "farama-notifications": {"version": "0.0.6"},
        "tomli": {"version": "2.0"}, "nvidia-cudnn-cu12": {"version": "9"}, "numpy": {"version": "2"},
    }
    have = {"torch", "numpy", "cloudpickle", "pandas", "transformers"}
    requirements = ["gymnasium>=1.0", "stable-baselines3>=2.3", "minigrid>=3.0"]
    assert module.closure(requirements, metadata, have, "3.12") == [
        "gymnasium", "stable-baselines3", "minigrid", "farama-notifications", "pygame-ce"]
    # tomli only below Python 3.11; torch's CUDA libraries never (the node's torch brings its own).
    assert "tomli" in module.closure(requirements, metadata, have, "3.10")
    assert module.missing(["torch>=2.3", "PyYAML>=6", "bm25s>=0.3"], {"torch", "pyyaml"}) == ["bm25s>=0.3"]


def test_the_gpu_nodes_lack_only_pure_python_dependencies_and_pygame():
    module = _script("wheelhouse")
    lacking = {module.requirement_name(r) for r in module.missing(module.project_requirements(),
                                                                  module.read_have(module.DEFAULT_HAVE))}
    assert lacking == {"gymnasium", "stable-baselines3", "bm25s", "minigrid"}
    # The floors the code needs: from_pretrained(dtype=) arrived in transformers 4.56.
    assert "transformers>=4.56" in module.project_requirements()


def test_make_wheelhouse_refuses_bad_arguments_before_any_download(tmp_path):
    script = str(ROOT / "scripts" / "make_wheelhouse.sh")
    assert subprocess.run(["bash", script], capture_output=True).returncode == 2
    result = subprocess.run(["bash", script, str(tmp_path / "w"), "--python-version", "twelve"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--python-version: expected a CPython version" in result.stderr
    result = subprocess.run(["bash", script, str(tmp_path / "w"), "--have", str(tmp_path / "none.txt")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "none.txt is not a file" in result.stderr
    assert not (tmp_path / "w").exists()
