"""The optimiser builder and the learning-rate schedule (ptgpo_algos.updates.optimizer): factors by hand, the
config's refusals, and a scheduled run that resumes as it would have gone on."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.updates.settings import OptimConfig
from ptgpo_algos.updates.optimizer import build_optimizer, build_schedule, lr_factor

import resume_scenarios


@pytest.mark.parametrize("schedule, warmup, decay, factors", [
    ("constant", 0, None, [1.0, 1.0, 1.0]),
    ("constant", 3, None, [0.25, 0.5, 0.75, 1.0, 1.0]),
    ("linear", 0, 4, [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]),
    ("linear", 1, 3, [0.5, 1.0, 0.5, 0.0]),
    ("cosine", 0, 4, [1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2, 0.0, 0.0]),
])
def test_the_schedule_s_factors_by_hand(schedule, warmup, decay, factors):
    assert [lr_factor(step, schedule, warmup, decay) for step in range(len(factors))] == pytest.approx(factors)


def test_a_constant_rate_has_no_scheduler_and_a_schedule_steps_the_optimiser_s_rate():
    model = torch.nn.Linear(2, 1)
    constant = OptimConfig(lr=0.1, weight_decay=0.01)
    optimizer = build_optimizer(model.parameters(), constant)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["weight_decay"] == 0.01
    assert build_schedule(optimizer, constant) is None
    linear = OptimConfig(lr=0.1, lr_schedule="linear", lr_warmup_steps=1, lr_decay_steps=3)
    optimizer = build_optimizer(model.parameters(), linear)
    schedule = build_schedule(optimizer, linear)
    rates = [optimizer.param_groups[0]["lr"]]
    for _ in range(3):
        optimizer.step()
        schedule.step()
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([0.05, 0.1, 0.05, 0.0])


@pytest.mark.parametrize("change, message", [
    ({"lr_schedule": "step"}, r"optim.lr_schedule \(lr_schedule\): 'step' is not valid; choose one of constant, linear, cosine"),
    ({"lr_schedule": "cosine"}, r"optim.lr_decay_steps \(lr_decay_steps\): the cosine schedule decays to 0 at a step: set lr_decay_steps"),
    ({"lr_schedule": "linear", "lr_warmup_steps": 4, "lr_decay_steps": 4}, r"optim.lr_decay_steps \(lr_decay_steps\): expected an integer >= 5, got 4 \(more than lr_warmup_steps\)"),
    ({"lr_warmup_steps": -1}, r"optim.lr_warmup_steps \(lr_warmup_steps\): expected an integer >= 0"),
])
def test_a_bad_schedule_is_refused_with_the_field_named(change, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict({"optim": change})


def test_a_scheduled_run_resumes_as_it_would_have_gone_on(tmp_path, monkeypatch):
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    # Four episodes of 3 tasks an iteration: the untrained policy wins some, so updates happen.
    schedule = dict(lr_schedule="cosine", lr_warmup_steps=1, lr_decay_steps=40, ppo_epochs=2, minibatch_size=16,
                    group_size=4, tasks_per_iteration=3, max_steps=8)
    whole = run_training(resume_scenarios.small_lake_config(tmp_path / "whole", iterations=4, **schedule),
                         progress=False)
    run_training(resume_scenarios.small_lake_config(tmp_path / "cut", iterations=3, **schedule), progress=False)
    resumed = run_training(resume_scenarios.small_lake_config(tmp_path / "cut", iterations=4, resume=True,
                                                              **schedule), progress=False)
    rows = resume_scenarios.metric_rows(whole.metrics_path)
    assert resume_scenarios.metric_rows(resumed.metrics_path) == rows
    rates = [row["update/lr"] for row in rows]
    assert len(set(rates)) > 1 and all(0.0 <= rate <= 5e-4 for rate in rates)  # the rate moved, within lr


def test_sgd_steps_by_hand_and_keeps_a_group_s_own_settings():
    weights = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    head = torch.nn.Parameter(torch.tensor([0.5]))
    optim = TrainConfig.from_dict({"optim": {"optimizer": "SGD", "lr": 0.1, "weight_decay": 0.5}}).optim
    assert optim.optimizer == "sgd"  # the registered spelling
    optimizer = build_optimizer([weights], optim, [{"params": [head], "lr": 0.01, "weight_decay": 0.0}])
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.0
    ((weights * torch.tensor([3.0, 1.0])).sum() + 2.0 * head.sum()).backward()
    optimizer.step()
    # w - lr (grad + decay w): 1 - 0.1 (3 + 0.5) and -2 - 0.1 (1 - 1); the head: 0.5 - 0.01 * 2.
    assert weights.tolist() == pytest.approx([0.65, -2.0]) and head.tolist() == pytest.approx([0.48])


def test_an_unknown_optimiser_is_refused_with_the_field_and_the_names():
    with pytest.raises(ValueError, match=r"optim.optimizer: unknown optimiser 'adam' \(did you mean 'adamw'\?\); "
                                         r"choose one of adamw, sgd"):
        TrainConfig.from_dict({"optim": {"optimizer": "adam"}})


def test_an_optimiser_registered_from_its_own_module_trains_with_the_critic_s_group(tmp_path, monkeypatch):
    from ptgpo_algos.updates.optimizer_registry import OPTIMIZERS
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    (tmp_path / "halving_optimizer.py").write_text(
        "import torch\n"
        "from ptgpo_algos.updates.optimizer_registry import register_optimizer\n"
        "GROUPS = []\n"
        "@register_optimizer('halving-sgd')\n"
        "def halving_sgd(param_groups, *, lr, weight_decay):\n"
        "    GROUPS.append(len(param_groups))\n"
        "    return torch.optim.SGD(param_groups, lr=lr / 2, weight_decay=weight_decay)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import halving_optimizer

    try:
        # PPO's critic trains its value head in a group of its own beside the policy's.
        summary = run_training(resume_scenarios.small_lake_config(tmp_path / "run", algo="ppo", iterations=1,
                                                                  **{"optim.optimizer": "halving-sgd"}),
                               progress=False)
        assert summary.iterations == 1 and halving_optimizer.GROUPS == [2]
    finally:
        OPTIMIZERS.unregister("halving-sgd")
        monkeypatch.delitem(sys.modules, "halving_optimizer")
    with pytest.raises(ValueError, match="unknown optimiser 'halving-sgd'"):
        TrainConfig.from_dict({"optim": {"optimizer": "halving-sgd"}})


def test_a_run_saved_before_the_optimiser_field_resumes_with_adamw(tmp_path, monkeypatch):
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    whole = run_training(resume_scenarios.small_lake_config(tmp_path / "whole"), progress=False)
    run_training(resume_scenarios.small_lake_config(tmp_path / "cut", iterations=1), progress=False)
    saved = tmp_path / "cut" / "config.json"
    data = json.loads(saved.read_text())
    del data["optim"]["optimizer"]  # as a run written before the field
    saved.write_text(json.dumps(data))
    resumed = run_training(resume_scenarios.small_lake_config(tmp_path / "cut", resume=True), progress=False)
    assert resume_scenarios.metric_rows(resumed.metrics_path) == resume_scenarios.metric_rows(whole.metrics_path)
