"""What a run keeps on disk (the disk plan checked before the model is built, the checkpoint removed
when the run is done unless kept) and the sync check held to its measured noise floor."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.memory_plan import DiskDoesNotFit, ModelShape, RunShape, plan_disk
from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS, WeightSyncError, sync_prompts, sync_tolerance
from ptgpo_algos.policy.precision import precision_for
from ptgpo_algos.training.trainer import Trainer, run_training

QWEN_1_5B = ModelShape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936, tied=True)


def _run(device: str, lora_rank: int | None = None) -> RunShape:
    return RunShape(device=device, precision=precision_for(device, "bfloat16"), micro_batch=8, sequence=2012,
                    lora_rank=lora_rank, total_bytes=0)


def test_disk_plan_of_qwen_1_5b_on_hand_numbers():
    parameters = QWEN_1_5B.parameters()
    assert parameters == 1_543_714_304
    full = plan_disk(QWEN_1_5B, _run("cuda"))
    # float32 weights and AdamW's two moments: 12 bytes a parameter (18.5 GB); the model saved in bf16.
    assert full.checkpoint_bytes == 12 * parameters and full.final_model_bytes == 2 * parameters
    assert full.peak_bytes == 26 * parameters
    adapters = QWEN_1_5B.lora_parameters(64)
    lora = plan_disk(QWEN_1_5B, _run("cuda", lora_rank=64))
    assert lora.checkpoint_bytes == 12 * adapters and lora.final_model_bytes == 4 * adapters
    # On a CPU the compute dtype is float32: the final model is saved as trained.
    assert plan_disk(QWEN_1_5B, _run("cpu")).final_model_bytes == 4 * parameters
    message = full.refusal("runs/x", 10 * 2**30)
    assert "runs/x: the run needs about 37.4 GiB" in message and "10.0 GiB are free" in message


def _spec(tmp_path, **run) -> dict:
    return {
        "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 6},
        "algorithm": {"name": "gigpo"},
        "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
        "rollouts": {"group_size": 2, "tasks_per_iteration": 2},
        "evaluation": {"every": 5, "seeds": 2},
        "run": {"iterations": 1, "out_dir": str(tmp_path / "run"), **run},
    }


def test_a_finished_run_removes_its_checkpoint_unless_kept(tmp_path):
    run_training(TrainConfig.from_dict(_spec(tmp_path, keep_checkpoint=False)), progress=False)
    assert (tmp_path / "run" / "final_model").is_dir() and not (tmp_path / "run" / "checkpoint.pt").exists()
    kept = tmp_path / "kept"
    run_training(TrainConfig.from_dict(_spec(kept)), progress=False)
    assert (kept / "run" / "checkpoint.pt").exists()


def test_benchmark_cells_do_not_keep_checkpoints_unless_the_config_says(tmp_path):
    from ptgpo_harness.bench.config import load_config
    from ptgpo_harness.bench.plan import plan_cells

    config = tmp_path / "bench.yaml"
    text = ("name: b\nbudget: 64\nseeds: [0]\nenvironments:\n  - label: lake\n    id: ptgpo/FrozenLake-v0\n    max_steps: 6\n"
            "    train_seeds: {start: 0, count: 100}\n    eval_seeds: {start: 1000000, count: 4}\nmethods:\n  - {name: grpo, algo: grpo}\n")
    config.write_text(text)
    specs = [c.spec for c in plan_cells(load_config(config)) if c.kind == "rl"]
    assert specs and all(TrainConfig.from_dict(s).run.keep_checkpoint is False for s in specs)
    config.write_text(text + "policy: {keep_checkpoint: true}\n")
    specs = [c.spec for c in plan_cells(load_config(config)) if c.kind == "rl"]
    assert all(TrainConfig.from_dict(s).run.keep_checkpoint is True for s in specs)


def test_a_run_that_cannot_fit_the_disk_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**20, used=2**20 - 1024, free=1024))
    with pytest.raises(DiskDoesNotFit, match=r"the run needs about .* GiB of free disk"):
        run_training(TrainConfig.from_dict(_spec(tmp_path)), progress=False)
    assert not (tmp_path / "run").exists()
    # run.memory_check: false goes on (and says so in the plan it would print).
    run_training(TrainConfig.from_dict(_spec(tmp_path, memory_check=False)), progress=False)


# ----------------------------------------------------------------------------------------- sync check
def test_sync_tolerance_is_a_multiple_of_the_floor_or_the_configured_one():
    config = TrainConfig.from_dict({})
    assert sync_tolerance(config, 0.02) == pytest.approx(0.08)
    assert sync_tolerance(config, 1e-7) == 1e-3  # float32's floor: rounding, held to 1e-3
    assert sync_tolerance(TrainConfig.from_dict({"rollouts": {"sync_tolerance": 0.5}}), 0.02) == 0.5


def test_sync_prompts_are_distinct_and_spread_over_the_groups():
    def trajectory(*prompts):
        return SimpleNamespace(steps=[SimpleNamespace(decision=SimpleNamespace(prompt_ids=p)) for p in prompts])

    batch = [[trajectory([1], [2]), trajectory([1], [3])], [trajectory([4])], [trajectory([5])], [trajectory([6])]]
    assert sync_prompts(batch) == [[1], [4], [5], [6]]


class _ScriptedEngine:
    """Samples with the trainable policy itself; its sync statistics come from a script."""

    def __init__(self, policy, diffs):
        self.policy, self.diffs, self.asked = policy, list(diffs), []

    def decide(self, contexts, **options):
        return self.policy.decide(contexts, **options)

    def load_weights(self, weights, **_):
        list(weights)

    def verify_sync(self, reference, prompts, max_tokens=32):
        self.asked.append((len(prompts), max_tokens))
        diff = self.diffs.pop(0)
        return SimpleNamespace(mean_logprob_diff=diff, max_logprob_diff=2 * diff, tokens=[[0]])


@pytest.mark.parametrize("diffs, fails", [([0.02, 0.05, 0.07], False), ([0.02, 0.05, 0.2], True)])
def test_the_sync_check_is_held_to_four_times_the_floor_measured_before_the_first_update(tmp_path, diffs, fails):
    engines = []

    def build(policy, config, device):
        engines.append(_ScriptedEngine(policy, diffs))
        return engines[-1]

    ROLLOUT_BACKENDS.register("scripted-sync", build, replace=True)
    try:
        spec = _spec(tmp_path)
        spec["rollouts"]["backend"] = "scripted-sync"
        spec["run"]["iterations"] = 2
        trainer = Trainer(TrainConfig.from_dict(spec), progress=False)
        if fails:
            with pytest.raises(WeightSyncError, match=r"0\.2 on average \(> tolerance 0\.08: 4 x the noise floor 0\.02"):
                trainer.train()
            return
        summary = trainer.train()
    finally:
        ROLLOUT_BACKENDS.unregister("scripted-sync")
    assert trainer.sync_floor == 0.02 and engines[0].asked[0] == (4, 32)  # four distinct prompts, 32 tokens each
    rows = [__import__("json").loads(line) for line in summary.metrics_path.read_text().splitlines()]
    assert [r["sync/mean_logprob_diff"] for r in rows] == [0.05, 0.07]
    assert all(r["sync/floor"] == 0.02 and r["sync/tolerance"] == pytest.approx(0.08) for r in rows)


def test_a_run_without_its_final_model_plans_no_disk_for_it_and_says_why_evaluate_finds_nothing(tmp_path):
    from ptgpo_algos.training.run_evaluation import load_trained_policy

    run_training(TrainConfig.from_dict(_spec(tmp_path, keep_checkpoint=False, keep_final_model=False)), progress=False)
    run = tmp_path / "run"
    assert (run / "metrics.jsonl").exists() and not (run / "final_model").exists()
    assert not (run / "checkpoint.pt").exists()
    with pytest.raises(ValueError, match="finished with run.keep_final_model and run.keep_checkpoint off"):
        load_trained_policy(run)
