"""The measurement scripts that the README and docs/ cite run end to end (at toy sizes)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_imitation_ceiling_fits_the_expert_decisions(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bc.jsonl"
    code = _script("imitation_ceiling").main([
        "--config", str(ROOT / "configs" / "train_household_easy_gigpo.yaml"),
        "--set", "tiny={hidden_size: 32, pretrain_steps: 0}", "--set", "eval_seeds=2",
        "--demo-seeds", "2", "--steps", "120", "--batch", "8", "--lr", "3e-3", "--eval-every", "40",
        "--out", str(out),
    ])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 40, 80, 120] and rows[0]["mean_loss"] is None
    # Two episodes' expert decisions are memorised: the loss falls well below its first stretch's.
    losses = [r["mean_loss"] for r in rows[1:]]
    assert losses[-1] < 0.6 * losses[0], losses


def test_bench_train_profile_says_where_the_time_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    for key in ("OMP_WAIT_POLICY", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM"):  # the script sets these on import; undo after
        monkeypatch.setenv(key, os.environ.get(key, ""))
    from ptgpo_algos.config import TrainConfig

    module = _script("bench_train")
    config = TrainConfig.from_yaml(ROOT / "configs" / "train_household_easy_gigpo.yaml", {
        "tiny": {"hidden_size": 32, "pretrain_steps": 0}, "env_kwargs": {"difficulty": "easy", "max_steps": 3}})
    target = tmp_path / "profile.txt"
    result = module.profile_throughput(config, target)
    lines = target.read_text().splitlines()
    assert lines[0].startswith("own time:") and "in torch's compiled functions" in lines[0]
    assert any("run_backward" in line for line in lines)  # the update is inside the profile
    assert 0.0 < result["profile_torch_kernel_share"] < 1.0
    assert 0 < result["linear_decisions"] <= 8 * 8 * 3 and result["train_steps"] > 0


def test_task_sensitivity_pairs_states_and_averages_total_variation(tmp_path, monkeypatch, capsys):
    import math

    import torch

    module = _script("task_sensitivity")
    own, other = module.sample_contexts(episodes=12, first_seed=3_000_000, seed=0)
    assert len(own) == len(other) > 0
    for a, b in zip(own, other):
        assert a.task != b.task and a.admissible_actions == b.admissible_actions
        assert b.observation == a.observation.replace(a.task, b.task)
        assert all(a.task not in o for o, _ in b.history)
        assert [act for _, act in a.history] == [act for _, act in b.history]

    class Table:
        """Hands out fixed distributions: own[0]/other[0] agree, own[1]/other[1] are disjoint."""
        def action_distribution(self, contexts):
            first = contexts[0] is own[0]
            return [torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0] if first else [0.0, 1.0])]

    result = module.task_sensitivity(Table(), own[:2], other[:2])
    assert result["states"] == 2 and result["mean_tv"] == 0.5
    assert math.isclose(result["mean_entropy"], math.log(2) / 2, rel_tol=1e-6)

    # End to end on a bare tiny model.
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    path = build_tiny_model(TinyModelSpec(seed=2, hidden_size=32, pretrain_steps=0),
                            env_ids=["ptgpo/Household-v0"], cache_dir=tmp_path)
    assert module.main([str(path), "--episodes", "6", "--history-length", "1"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["target"] == str(path) and 0.0 <= row["mean_tv"] <= 1.0 and row["states"] > 0


def test_babyai_levels_measures_random_and_expert_play(tmp_path, capsys):
    out = tmp_path / "levels.json"
    module = _script("babyai_levels")
    assert module.main(["GoToObjS4", "doorkey-5x5", "--seeds", "4", "--expert-seeds", "2", "--max-steps", "30",
                        "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["level"] for r in rows] == ["GoToObjS4", "DoorKey-5x5"]
    for row in rows:
        assert (row["horizon"], row["seeds"], row["expert_seeds"], row["expert_success"]) == (30, 4, 2, 1.0)
        assert 1 <= row["expert_steps_min"] <= row["expert_steps_median"] <= row["expert_steps_max"] <= 30
        assert 0.0 <= row["random_success"] <= 1.0
    assert capsys.readouterr().out.count("| `") == 2
    try:
        module.main(["DoorKey"])
    except SystemExit as error:
        assert error.code == 2
    else:
        raise AssertionError("an unknown level was accepted")


def test_kernel_spread_compares_two_runs_number_by_number():
    compare = _script("kernel_spread").compare
    expected = {"metrics": [{"loss": 0.5, "decisions": 3, "env": "x"}, {"loss": 2.0}]}
    assert compare(expected, expected) == {"identical": True, "discrete": [], "max_rel": 0.0, "max_abs": 0.0}
    actual = {"metrics": [{"loss": 0.5, "decisions": 4, "env": "x"}, {"loss": 2.0 + 1e-4}]}
    result = compare(actual, expected)
    # |2.0001 - 2.0| = 1e-4, relative to the larger of the two: 1e-4 / 2.0001.
    assert not result["identical"] and result["discrete"] == [".metrics[0].decisions: 4 != 3"]
    assert abs(result["max_abs"] - 1e-4) < 1e-12 and abs(result["max_rel"] - 1e-4 / 2.0001) < 1e-12
    assert compare({"metrics": [{"loss": 0.5}]}, expected)["discrete"] == ["the rows have other fields or lengths"]


def test_kernel_spread_finds_a_seeded_run_bitwise_equal_under_the_same_settings(tmp_path, capsys):
    _script("kernel_spread").main(["--setting", "first=", "--setting", "again=OMP_NUM_THREADS=1",
                                   "--runs", "household-grpo-hindsight", "--keep", str(tmp_path)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["setting"], r["identical"]) for r in lines] == [("first", True), ("again", True)]
    kept = json.loads((tmp_path / "again" / "household-grpo-hindsight.json").read_text())
    assert kept["metrics"] and kept["curve"] and kept["capability"] == lines[1]["capability"]


def test_kernel_spread_probe_hashes_each_operation_the_same_under_the_same_settings(capsys):
    _script("kernel_spread").main(["--probe", "--setting", "first=", "--setting", "again="])
    first, again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"matmul", "log_softmax", "grad_w1", "adamw_step", "sum"} <= set(first["ops"])
    assert first["ops"] == again["ops"] and first["capability"] == again["capability"]


@pytest.mark.slow
def test_recording_cost_reports_the_recorders_share_and_bytes(tmp_path, capsys):
    code = _script("recording_cost").main(["--iterations", "1", "--out", str(tmp_path)])
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["run"] for row in rows] == ["frozenlake-4x4-ptgpo", "household-easy-gigpo"]
    for row in rows:
        assert 0 < row["recording_share"] < 1 and row["recording_kib_per_iteration"] > 0
        assert len(list((tmp_path / row["run"] / "rollouts").iterdir())) == 1
