"""Hindsight relabelling: which steps a failed rollout lends to which task, the buffer, the loss
against a hand computation, and a training run that relabels, learns from it and resumes exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Context, Decision, Step, Task, Trajectory
from ptgpo_algos.objectives.hindsight import (
    HindsightBuffer,
    hindsight_loss,
    hindsight_steps,
    relabel_batch,
    relabel_trajectory,
)
from ptgpo_algos.policy.base import ScoredBatch
from ptgpo_algos.training.preflight import check_environment
from ptgpo_algos.training.trainer import run_training
from test_trainer import _dies_on_call, _rows

TASK = "put a bowl in sinkbasin."


def _step(action: str, achieved=None, valid: bool = True, observation: str = "room") -> Step:
    context = Context(TASK, f"{observation}. Your task is to: {TASK}", [action, "look"], [("before", "look")])
    decision = Decision(action, action, [1, 2, 3], [7], [-0.1], 0.5, [[7], [8]], 0, -0.7)
    return Step(observation, action, 0.0, valid, decision=decision, context=context, achieved=achieved)


def _trajectory(steps, won=False, task_type="Pick") -> Trajectory:
    return Trajectory(steps=steps, meta={"won": won, "task_type": task_type})


HEAT = {"put a hot apple in diningtable.": "Heat", "heat some apple and put it in diningtable.": "Heat"}
PICK = {"put a apple in diningtable.": "Pick", "put some apple on diningtable.": "Pick"}


def test_relabel_takes_the_window_up_to_the_first_completion_of_the_same_type():
    steps = [_step("go to fridge 1"), _step("take apple 1", HEAT), _step("nonsense", valid=False),
             _step("go to cabinet 1"), _step("move apple 1 to diningtable 1", {**PICK, **HEAT}), _step("look", PICK)]
    rng = np.random.default_rng(0)
    task, relabelled = relabel_trajectory(_trajectory(steps), window=3, types="same", rng=rng)
    # The Heat completion at step 1 is of another type; step 4 completes a Pick task. Three valid
    # steps up to it, the invalid one skipped.
    assert task in PICK
    assert [s for s, _ in relabelled] == [steps[1], steps[3], steps[4]]
    for step, context in relabelled:
        assert context.task == task and context.observation == f"room. Your task is to: {task}"
        assert context.admissible_actions == step.context.admissible_actions
        assert context.history == [("before", "look")]

    task, relabelled = relabel_trajectory(_trajectory(steps), window=5, types="any", rng=rng)
    assert task in HEAT and [s for s, _ in relabelled] == steps[:2]


def test_relabel_skips_wins_the_own_task_and_trajectories_that_completed_nothing():
    own = {TASK: "Pick", "put some bowl on sinkbasin.": "Pick"}
    steps = [_step("move bowl 1 to sinkbasin 1", own)]
    rng = np.random.default_rng(0)
    assert relabel_trajectory(_trajectory(steps, won=True), 4, "any", rng) is None
    # (A rollout that completes its own task wins; should a step report it anyway, that sentence is
    # never a relabel.)
    task, _ = relabel_trajectory(_trajectory(steps), 4, "same", rng)
    assert task == "put some bowl on sinkbasin."
    assert relabel_trajectory(_trajectory([_step("look", {TASK: "Pick"})]), 4, "any", rng) is None
    assert relabel_trajectory(_trajectory([_step("look"), _step("look", {})]), 4, "any", rng) is None


class _Prompts:
    """A prompt builder that writes the task's length into the prompt, to see that it was rebuilt."""

    def prompt_ids(self, context: Context) -> list[int]:
        return [len(context.task), len(context.observation)]


def test_relabel_batch_rebuilds_prompts_and_relabels_a_shared_step_once():
    shared = _step("move apple 1 to diningtable 1", PICK)
    tree = [_trajectory([shared]), _trajectory([shared, _step("look")])]
    decisions = relabel_batch([tree], _Prompts(), window=4, types="same", rng=np.random.default_rng(1))
    assert len(decisions) == 1
    original = shared.decision
    (decision,) = decisions
    task = next(t for t in PICK if decision.prompt_ids[0] == len(t))
    assert decision.prompt_ids == [len(task), len(f"room. Your task is to: {task}")]
    assert (decision.candidate_ids, decision.choice, decision.response_ids) == (
        original.candidate_ids, original.choice, original.response_ids)
    assert original.prompt_ids == [1, 2, 3], "the rollout's own decision is left as it was"


def test_buffer_keeps_the_newest_and_samples_without_repeats():
    buffer = HindsightBuffer(3)
    buffer.add(range(5))
    assert list(buffer.items) == [2, 3, 4]
    sample = buffer.sample(10, np.random.default_rng(0))
    assert sorted(sample) == [2, 3, 4]
    assert len(set(buffer.sample(2, np.random.default_rng(0)))) == 2


class _FixedScores:
    def __init__(self, logprobs, mask):
        self.logprobs, self.mask = logprobs, mask

    def score(self, decisions):
        return ScoredBatch(self.logprobs, torch.zeros_like(self.logprobs), self.mask)


def test_hindsight_loss_is_the_token_mean_cross_entropy():
    # Two responses of 2 and 1 tokens: -(log .5 + log .25 + log .8) / 3.
    logprobs = torch.log(torch.tensor([[0.5, 0.25], [0.8, 1.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss = hindsight_loss(_FixedScores(logprobs, mask), [None, None])
    assert math.isclose(float(loss), -(math.log(0.5) + math.log(0.25) + math.log(0.8)) / 3, rel_tol=1e-6)


@pytest.mark.parametrize("data, message", [
    ({"updates": -1}, "updates=-1 is invalid for objective 'hindsight': updates (cross-entropy steps after each PPO "
                      "update) must be an integer >= 0"),
    ({"window": 0}, "window=0 is invalid for objective 'hindsight'"),
    ({"types": "similar"}, "types='similar' is invalid for objective 'hindsight': types (relabel into tasks of the "
                           "rollout's own type (same) or any type) must be one of same, any"),
    ({"windw": 2}, "unknown key(s) 'windw' for objective 'hindsight'; valid keys: weight, updates, batch_size, "
                   "window, buffer_size, types"),
])
def test_bad_hindsight_configs_fail_with_clear_messages(data, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"env_id": "ptgpo/Household-v0", "hindsight": data})
    assert message in str(error.value)


def test_hindsight_needs_an_environment_that_reports_completed_tasks():
    with pytest.raises(ValueError, match=r"algorithm.objectives \(objectives\): hindsight needs the tasks its steps "
                                         r"complete \(achieved_tasks\(\)\), which ptgpo/FrozenLake-v0 does not have"):
        check_environment(TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "hindsight": {}}))
    check_environment(TrainConfig.from_dict({"hindsight": {}}))  # Household reports them


def test_an_old_hindsight_section_is_the_hindsight_objective():
    defaults = {"name": "hindsight", "weight": 1.0, "updates": 1, "batch_size": 256, "window": 4, "buffer_size": 4096,
                "types": "same"}
    assert TrainConfig.from_dict({"hindsight": {}}).algorithm.objectives == [defaults]
    assert TrainConfig.from_dict({"hindsight.window": 2}).algorithm.objectives == [{**defaults, "window": 2}]
    assert TrainConfig.from_dict({"hindsight": None}).algorithm.objectives == []
    # After the objectives the config lists; written as the objective, it reads back the same.
    both = TrainConfig.from_dict({"objectives": ["mcgpo"], "hindsight": {"types": "any"}})
    assert [o["name"] for o in both.algorithm.objectives] == ["mcgpo", "hindsight"]
    assert TrainConfig.from_dict(both.to_dict()) == both
    with pytest.raises(ValueError, match="objective 'hindsight' is listed twice"):
        TrainConfig.from_dict({"objectives": ["hindsight"], "hindsight": {}})


def _household(out_dir, **change):
    data = dict(env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "easy"}, max_steps=12, algo="gigpo",
                group_size=4, tasks_per_iteration=4, iterations=4, eval_every=4, eval_seeds=2, checkpoint_every=2,
                history_length=1, minibatch_size=64, out_dir=str(out_dir), learning_rate=1e-2,
                tiny={"hidden_size": 32, "pretrain_steps": 0},
                hindsight={"updates": 2, "batch_size": 16, "window": 2, "types": "any"})
    data.update(change)
    return TrainConfig.from_dict(data)


def test_run_relabels_trains_on_relabels_and_resumes_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    whole = run_training(_household(tmp_path / "whole"), progress=False)
    rows = _rows(whole.metrics_path)
    assert sum(r["objective/hindsight/relabelled"] for r in rows) > 0
    relabelled = [r["objective/hindsight/relabelled"] for r in rows]
    assert [r["objective/hindsight/buffer"] for r in rows] == list(np.cumsum(relabelled))
    assert all(r["objective/hindsight/updates"] == (2 if r["objective/hindsight/buffer"] else 0) for r in rows)

    from ptgpo_algos.rollouts import collection

    real = collection.collect_rollouts
    # A collection per task: the 13th is iteration 4's first (4 tasks an iteration).
    monkeypatch.setattr(collection, "collect_rollouts", _dies_on_call(real, 13))
    with pytest.raises(KeyboardInterrupt):
        run_training(_household(tmp_path / "cut"), progress=False)
    monkeypatch.setattr(collection, "collect_rollouts", real)
    # Resumed from iteration 2's checkpoint: the buffer's relabels of iterations 1-2 must come back,
    # or the next hindsight losses differ.
    resumed = run_training(_household(tmp_path / "cut", resume=True), progress=False)
    assert _rows(resumed.metrics_path) == rows


def test_hindsight_steps_make_the_relabelled_actions_likelier(tmp_path, monkeypatch):
    """What the relabels teach: after a few steps on them, the policy puts more probability on the
    relabelled actions, in the relabelled contexts."""
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.rollouts.collection import collect_rollouts

    config = _household(tmp_path / "unused")
    policy = build_policy(config, "cpu")
    tasks = [Task(config.env.id, seed, dict(config.env.kwargs), 20) for seed in range(6)]
    batch, _ = collect_rollouts(policy, tasks, group_size=4, generator=torch.Generator().manual_seed(0))
    decisions = relabel_batch(batch, policy.prompts, window=2, types="any", rng=np.random.default_rng(0))
    assert len(decisions) >= 8
    buffer = HindsightBuffer(1000, decisions)
    with torch.no_grad():
        before = float(hindsight_loss(policy, decisions))
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-2)

    def step(loss):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return 0.0

    losses = hindsight_steps(policy, buffer, 5, len(decisions), np.random.default_rng(0), step)
    with torch.no_grad():
        after = float(hindsight_loss(policy, decisions))
    assert len(losses) == 5
    assert after < before - 0.1, (before, after)
