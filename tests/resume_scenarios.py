"""A training run killed inside a rollout strategy's collection, resumed, and compared with the same
run left alone: shared by the tests of the strategies that keep state a checkpoint must carry; and
the smallest run the checkpoint and resume tests train."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Callable

import pytest

#: The 3x3 lake and the smallest tiny model (not pretrained): a run of seconds.
LAKE = {"desc": ["SFF", "FHF", "FFG"]}
TINY = {"hidden_size": 32, "pretrain_steps": 0}


def small_lake_config(out_dir, **change):
    """Two iterations of GiGPO on :data:`LAKE`, a checkpoint after each; ``change`` overrides fields."""
    from ptgpo_algos.config import TrainConfig

    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=6, algo="gigpo", group_size=2,
                tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, checkpoint_every=1,
                out_dir=str(out_dir), tiny=TINY)
    data.update(change)
    return TrainConfig.from_dict(data)


def is_timing(key: str) -> bool:
    """Whether a metrics key is a wall-clock measure, which no two runs share (a rate ends in ``per_s``;
    ``hiper_segments`` holds those letters and is not one)."""
    return "time" in key or "wait" in key or key.endswith("per_s")


def metric_rows(path: Path) -> list[dict]:
    """The rows of a run's ``metrics.jsonl`` without their wall-clock measures."""
    return [{k: v for k, v in json.loads(line).items() if not is_timing(k)} for line in open(path)]


def killed_and_resumed(monkeypatch, make_config: Callable[..., object], collector: str) -> tuple[list, list]:
    """Run 4 iterations (checkpoints every 2) whole; run them again killed in the 4th iteration's first
    call of ``collector`` (``module.function``, e.g. ``ptgpo_algos.rollouts.patr.collection.collect_patr_rollouts``: one call per
    task) and resume; the two runs' metric rows."""
    from ptgpo_algos.training.trainer import run_training

    module_name, _, function = collector.rpartition(".")
    module = importlib.import_module(module_name)

    small = dict(total_decisions=None, iterations=4, checkpoint_every=2)
    config = make_config(**small, out_dir="whole")
    whole = run_training(config, progress=False)
    real = getattr(module, function)
    calls = []

    def dies_in_the_fourth_iteration(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3 * config.rollouts.tasks_per_iteration + 1:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, function, dies_in_the_fourth_iteration)
    with pytest.raises(KeyboardInterrupt):
        run_training(make_config(**small, out_dir="cut"), progress=False)
    monkeypatch.setattr(module, function, real)
    resumed = run_training(make_config(**small, out_dir="cut", resume=True), progress=False)
    return metric_rows(resumed.metrics_path), metric_rows(whole.metrics_path)
