"""Held-out evaluation and provenance: every episode's start layout is hashed, a share of layouts is
kept for evaluation (training redraws seeds that start there), and every record says how much its
evaluation overlapped its training, which code wrote it and what it spent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gymnasium
import pytest

import ptgpo_envs  # noqa: F401 - registers the environments
from ptgpo_harness.bench import BenchConfig, plan_cells, run_cell
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.rollouts.evaluation import overlap
from ptgpo_algos.files import read_jsonl
from ptgpo_algos.provenance import PACKAGES
from ptgpo_algos.training.state import TrainState
from ptgpo_algos.training.tasks import TaskDrawer
from ptgpo_algos.training.trainer import Trainer
from ptgpo_envs import held_out

DOORKEY = {"level": "DoorKey-5x5"}
ROOT = Path(__file__).resolve().parents[1]


def _layout(seed: int, level: str = "DoorKey-5x5") -> str:
    return gymnasium.make("ptgpo/BabyAI-v0", level=level).reset(seed=seed)[1]["layout"]


def test_the_layout_hash_names_the_whole_start_and_lasts_the_episode():
    env = gymnasium.make("ptgpo/BabyAI-v0", **DOORKEY)
    layouts = {env.reset(seed=seed)[1]["layout"] for seed in range(600)}
    # DoorKey-5x5 has 48 start layouts (wall column, door, key and start cell): seeds repeat them.
    assert len(layouts) == 48
    _, info = env.reset(seed=3)
    start = info["layout"]
    snapshot = env.unwrapped.snapshot()
    for action in info["admissible_actions"][:1] * 3:
        info = env.step(action)[4]
        assert info["layout"] == start and len(start) == 16
    env.reset(seed=4)
    assert env.unwrapped.restore(snapshot)[1]["layout"] == start
    assert _layout(3) == start  # the same in another process or instance
    # Environments without their own layout key hash the task and the first view.
    household = gymnasium.make("ptgpo/Household-v0", difficulty="easy")
    assert household.reset(seed=1)[1]["layout"] != household.reset(seed=2)[1]["layout"]


def test_the_held_out_share_is_a_fixed_split_of_the_layouts():
    layouts = sorted({_layout(seed) for seed in range(600)})
    kept = [layout for layout in layouts if held_out(layout, 0.25)]
    assert 0 < len(kept) < 48 and kept == [layout for layout in layouts if held_out(layout, 0.25)]
    assert all(held_out(layout, 0.5) for layout in kept)  # a larger share contains a smaller one
    assert held_out("0000000000000000", 1e-9) and not held_out("ffffffffffffffff", 0.999)


def test_overlap_is_the_share_of_evaluation_episodes_that_started_in_a_trained_layout():
    assert overlap(["a", "b", "a", "c"], {"a"}) == 0.5
    assert overlap(["a", "b"], set()) == 0.0
    assert overlap(["a", None], {"a"}) is None and overlap(["a"], None) is None


def test_training_redraws_seeds_whose_layout_is_held_out():
    config = TrainConfig.from_dict({"env_id": "ptgpo/BabyAI-v0", "env_kwargs": DOORKEY, "held_out": 0.5,
                                    "tasks_per_iteration": 64, "train_seeds": [0, 1000], "eval_seeds": 4})
    trainer = Trainer(config, progress=False)
    trainer.state, trainer.tasks = TrainState.seeded(0), TaskDrawer(config.env)
    seeds = [task.seed for _ in range(3) for task in trainer.next_tasks()]
    assert len(seeds) == 192 and all(0 <= seed < 1000 for seed in seeds)
    assert not any(held_out(_layout(seed), 0.5) for seed in seeds)
    with pytest.raises(ValueError, match=r"env.held_out \(held_out\): expected a number > 0.0"):
        TrainConfig.from_dict({"env_id": "ptgpo/BabyAI-v0", "held_out": 0.0})


def _bench(tmp_path, **environment) -> BenchConfig:
    policy = {"mode": "choose", "group_size": 2, "tasks_per_iteration": 4,
              "tiny": {"hidden_size": 32, "pretrain_steps": 0}}
    return BenchConfig.from_dict({
        "name": "held-out", "budget": 100, "seeds": [0], "iterations": 2, "policy": policy,
        "methods": [{"algo": "grpo"}], "baselines": ["random"],
        "environments": [{"label": "doorkey", "id": "ptgpo/BabyAI-v0", "kwargs": DOORKEY, "max_steps": 12,
                          "train_seeds": {"start": 0, "count": 1000},
                          "eval_seeds": {"start": 1000000, "count": 40}, **environment}],
    })


def test_records_measure_the_overlap_and_carry_provenance_and_compute(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = _bench(tmp_path, held_out=0.25)
    [env] = config.environments
    assert len(env.eval_seeds) == 40 and all(held_out(_layout(seed), 0.25) for seed in env.eval_seeds)
    rl, random = (run_cell(cell, tmp_path / "held") for cell in plan_cells(config))
    assert rl.status == random.status == "ok"
    assert rl.eval_overlap == 0.0 and 0 < rl.eval_layouts < 48 and random.eval_overlap == 0.0

    # Without a held-out share, DoorKey's 48 layouts repeat between training and evaluation.
    shared, _ = (run_cell(cell, tmp_path / "shared") for cell in plan_cells(_bench(tmp_path)))
    assert shared.eval_overlap > 0 and shared.eval_layouts > rl.eval_layouts

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    provenance = rl.provenance
    assert provenance["commit"] == commit and isinstance(provenance["dirty"], bool)
    assert set(provenance["versions"]) == set(PACKAGES) and provenance["versions"]["numpy"]
    assert provenance["threads"] >= 1 and provenance["cores"] >= 1 and provenance["python"]
    assert provenance["config"]["env"]["held_out"] == 0.25 and provenance["config"]["run"]["iterations"] == 2
    assert random.provenance["config"]["baseline"] == "random"
    # The device the policy ran on as resolved (the config says auto), and no GPU behind it.
    assert rl.provenance["config"]["policy"]["device"] == "auto"
    assert (rl.provenance["device"], rl.provenance["gpu"]) == ("cpu", None)
    assert (random.provenance["device"], random.provenance["gpu"]) == (None, None)
    rows = read_jsonl(tmp_path / "held" / "runs" / "doorkey__grpo__seed0" / "metrics.jsonl")
    assert rl.episodes == sum(row["rollout/episodes"] for row in rows) > 0
    assert rl.trained_tokens == sum(row["update/train_tokens"] for row in rows)
    assert rl.cpu_time_s > 0 and rl.decisions > 0
    assert random.episodes is None and random.cpu_time_s >= 0


def test_provenance_names_the_gpu_a_cuda_run_computed_on(monkeypatch):
    import torch

    from ptgpo_algos.provenance import provenance

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: asked.append(device) or "NVIDIA H100 80GB HBM3")
    record = provenance({"policy": {"device": "auto"}}, "cuda:0")
    assert (record["device"], record["gpu"]) == ("cuda:0", "NVIDIA H100 80GB HBM3")
    assert asked == [torch.device("cuda:0")]
    assert provenance(None, "cpu")["gpu"] is None and provenance(None)["device"] is None
