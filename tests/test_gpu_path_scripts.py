"""The GPU path's scripts at toy sizes on the CPU: the scale rehearsal's JSON line, and every phase of
``scripts/gpu_check.sh`` that does not need vLLM (the GPU itself was not available to these tests)."""

from __future__ import annotations

import json
import math
import subprocess
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
    from ptgpo_algos.config import TrainConfig

    module = _script("gpu_check")
    _fake_build(tmp_path, model)
    config = TrainConfig.from_dict(module.iteration_spec(tmp_path, model))
    assert (config.rollouts.tasks_per_iteration, config.rollouts.group_size) == (16, 8)
    assert config.policy.min_new_tokens == config.policy.max_new_tokens == 512
    assert config.rollouts.backend == "vllm" and config.policy.device == "cuda" and config.algorithm.name == "ptgpo"
    assert config.env.id == "ptgpo/Household-v0" and config.env.max_steps == module.ITERATION_STEPS
    assert bool(config.policy.lora) == (model == "qwen2.5-7b") and config.optim.micro_batch_size == 8
    update = TrainConfig.from_dict(module.update_spec(tmp_path, model, "cuda"))
    assert update.policy.max_prompt_tokens == 1500 and update.policy.max_new_tokens == 512
    # The shipped recipe fits an H200 by the planner, next to vLLM's 35 %.
    plan = module.planned(module.iteration_spec(tmp_path, model), "cuda", 139 * 2**30)
    assert plan["fits"] and plan["engine_gib"] == pytest.approx(0.35 * 139)


def test_gpu_check_summary_is_one_table_with_a_column_per_model(tmp_path):
    module = _script("gpu_check")
    (tmp_path / "build_qwen2.5-1.5b.json").write_text(json.dumps({"parameters": 1_543_714_304}))
    (tmp_path / "update_qwen2.5-1.5b.json").write_text(json.dumps({
        "planned": {"trainer_gib": 40.0}, "measured_trainer_gib": 36.5, "seconds": 12.0, "train_tokens_per_s": 21000}))
    (tmp_path / "iteration_qwen2.5-1.5b.json").write_text(json.dumps({
        "seconds": 70.0, "max_memory_allocated_gib": 80.2, "planned": {"peak_gib": 90.0, "engine_gib": 48.7},
        "row": {"tokens": 65536, "rollout_time_s": 4.0, "sync_time_s": 1.25, "sync_max_logprob_diff": 0.031}}))
    (tmp_path / "vllm_bench_qwen2.5-1.5b.json").write_text(json.dumps({"tokens_per_second": 40040.0}))
    (tmp_path / "gpu_memory_qwen2.5-1.5b.csv").write_text("1024\n92160\nbad\n")
    lines = module.summary(tmp_path).splitlines()
    assert lines[0].split("|")[2:4] == [" qwen2.5-1.5b ", " qwen2.5-7b "]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]] for line in lines[2:]}
    assert cells["parameters (random init)"] == ["1,543,714,304", "n/a"]
    assert cells["update: planned trainer GiB"] == ["40.0", "n/a"]
    assert cells["update: max_memory_allocated GiB"] == ["36.5", "n/a"]
    assert cells["iteration: planned peak GiB (vLLM's share)"][0] == "90.0 (48.7)"
    assert cells["iteration: nvidia-smi high-water GiB"][0] == "90.0"
    assert cells["iteration: weight sync s / max abs dlogp"][0] == "1.25 / 0.031"
    assert cells["rollout: generated tok/s (ours)"][0] == "16,384"
    # vllm bench's total tokens/s, 512 of every 2,012 tokens generated.
    assert cells["vllm bench throughput: output tok/s"][0] == "10,189"


def test_gpu_check_builds_and_updates_a_one_layer_model_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    module = _script("gpu_check")
    out = tmp_path / "out"
    assert module.main(["build", str(out), "qwen2.5-1.5b", "--layers", "1", "--vocab", "8192", "--device", "cpu"]) == 0
    built = json.loads((out / "build_qwen2.5-1.5b.json").read_text())
    folder = Path(built["path"])
    assert built["layers"] == 1 and (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 1536
    assert module.main(["update", str(out), "qwen2.5-1.5b", "--device", "cpu", "--samples", "2",
                        "--prompt-tokens", "16"]) == 0
    update = json.loads((out / "update_qwen2.5-1.5b.json").read_text())
    assert update["updates"] == 1 and update["train_tokens"] == 2 * (16 + 512)
    assert update["measured_trainer_gib"] is None and update["planned"]["trainer_gib"] > 0
    assert "micro-batch 8 x 528 tokens" in update["planned"]["table"]


def test_gpu_check_refuses_a_phase_without_its_model(capsys):
    module = _script("gpu_check")
    with pytest.raises(SystemExit):
        module.main(["update", "/tmp/nowhere"])
    assert "needs a MODEL" in capsys.readouterr().err


def test_gpu_check_shell_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")]).returncode == 0
