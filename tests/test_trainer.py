"""The trainer: loss terms against hand computations, shared-step weighting, config validation,
kill-and-resume reproducibility, and a short learning run."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.updates.losses import low_var_kl, policy_loss, ppo_clip_loss, weighted_token_mean
from ptgpo_algos.metrics import TIMED
from ptgpo_algos.records import Decision
from ptgpo_algos.training.run_evaluation import evaluation_agent
from ptgpo_algos.training.trainer import Trainer, run_training
from ptgpo_algos.updates.samples import flatten_batch

LAKE = {"desc": ["SFF", "FHF", "FFG"]}


# ----------------------------------------------------------------------------- losses
def test_ppo_loss_matches_hand_computation():
    # Two steps: a 2-token response (A=+1) and a 1-token one (A=-2, weight 3: shared by 3 leaves).
    logp = torch.tensor([[math.log(0.5), math.log(0.9)], [math.log(0.2), 0.0]])
    old = torch.tensor([[math.log(0.25), math.log(0.9)], [math.log(0.4), 0.0]])
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    weight = torch.tensor([1.0, 3.0])
    loss, stats = policy_loss(logp, old, adv, mask, weight, clip_ratio=0.2)
    # Ratios 2.0 (clipped to 1.2 since A > 0), 1.0, and 0.5 (clipped to 0.8 since A < 0: min picks
    # -max(0.5*2, 0.8*2)... i.e. loss = -min(r A, clip(r) A)).
    per_unit = [-min(2.0 * 1, 1.2 * 1), -min(1.0 * 1, 1.0 * 1), -min(0.5 * -2, 0.8 * -2)]
    expected = (per_unit[0] + per_unit[1] + 3 * per_unit[2]) / (1 + 1 + 3)
    assert math.isclose(float(loss), expected, rel_tol=1e-6)
    assert math.isclose(stats["clip_fraction"], (1 + 3) / 5, rel_tol=1e-6)


def test_low_var_kl_and_entropy_terms():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    # k3 = exp(q - p) - (q - p) - 1 with q - p = log(0.5)
    assert math.isclose(float(low_var_kl(logp, ref)), 0.5 - math.log(0.5) - 1, rel_tol=1e-6)
    assert float(low_var_kl(logp, logp)) == 0.0
    mask, weight, adv = torch.ones(1, 1), torch.ones(1), torch.zeros(1)
    entropy = torch.tensor([[1.5]])
    loss, stats = policy_loss(logp, logp, adv, mask, weight, entropy=entropy, entropy_coef=0.1,
                              ref_logprobs=ref, kl_coef=0.5)
    assert math.isclose(float(loss), -0.1 * 1.5 + 0.5 * (0.5 - math.log(0.5) - 1), rel_tol=1e-6)
    assert stats["entropy"] == 1.5


def test_skipping_zero_advantage_rows_keeps_the_loss():
    logp = torch.tensor([[-1.0], [-0.5], [-2.0]])
    old = torch.tensor([[-1.1], [-0.4], [-2.0]])
    adv, mask, weight = torch.tensor([0.7, 0.0, -0.3]), torch.ones(3, 1), torch.tensor([1.0, 2.0, 1.0])
    full, _ = policy_loss(logp, old, adv, mask, weight)
    keep = torch.tensor([0, 2])
    part, _ = policy_loss(logp[keep], old[keep], adv[keep], mask[keep], weight[keep], total_units=4.0)
    assert torch.allclose(full, part)
    assert float(weighted_token_mean(torch.ones(3, 1), mask, weight)) == 1.0


# ----------------------------------------------------------------------------- shared steps
def _step(action, decision_id):
    decision = Decision(action, action, [decision_id], [decision_id], [0.0], 0.0, [[decision_id]], 0, -0.1)
    return Step(state_key=action, action=action, reward=0.0, decision=decision)


def test_shared_steps_are_trained_once_with_their_trajectory_count():
    root, left, right = _step("a", 1), _step("b", 2), _step("c", 3)
    group = [Trajectory([root, left]), Trajectory([root, right]), Trajectory([_step("d", 4)])]
    advantages = [[[0.5, 1.0], [0.3, -1.0], [2.0]]]
    samples = flatten_batch([group], advantages)
    assert [s.decision.text for s in samples] == ["a", "b", "c", "d"]
    assert [s.weight for s in samples] == [2.0, 1.0, 1.0, 1.0]
    assert math.isclose(samples[0].advantage, 0.4)
    # Training the shared step once with weight 2 equals training its two copies (unclipped ratio).
    logp, old = torch.tensor([[-0.9]]), torch.tensor([[-1.0]])
    once, _ = policy_loss(logp, old, torch.tensor([0.4]), torch.ones(1, 1), torch.tensor([2.0]), clip_ratio=0.5)
    twice, _ = policy_loss(logp.repeat(2, 1), old.repeat(2, 1), torch.tensor([0.5, 0.3]), torch.ones(2, 1),
                           torch.ones(2), clip_ratio=0.5)
    assert torch.allclose(once, twice)


def test_trajectory_mean_weighs_every_trajectory_once():
    root, left, right = _step("a", 1), _step("b", 2), _step("c", 3)
    long = [_step(f"l{i}", 10 + i) for i in range(4)]
    group = [Trajectory([root, left]), Trajectory([root, right]), Trajectory(long)]
    advantages = [[[0.5, 1.0], [0.3, -1.0], [2.0, 2.0, 2.0, 2.0]]]
    samples = flatten_batch([group], advantages, loss_agg="trajectory-mean")
    # The shared root gets 1/2 from each of its two 2-step trajectories; each step of the 4-step one 1/4.
    assert [s.weight for s in samples] == [1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    assert math.isclose(sum(s.weight for s in samples), 3.0)  # the denominator: three trajectories
    # With unit ratios the loss is minus the mean over trajectories of each one's mean advantage.
    n = len(samples)
    loss, _ = policy_loss(torch.zeros(n, 1), torch.zeros(n, 1), torch.tensor([s.advantage for s in samples]),
                          torch.ones(n, 1), torch.tensor([s.weight for s in samples]))
    assert math.isclose(float(loss), -((0.5 + 1.0) / 2 + (0.3 - 1.0) / 2 + 2.0) / 3, rel_tol=1e-6)
    with pytest.raises(ValueError, match="algorithm.loss_agg .*'sum'"):
        TrainConfig.from_dict({"algorithm": {"loss_agg": "sum"}})



def test_minibatches_keep_steps_with_the_same_prompt_together():
    from ptgpo_algos.updates.samples import TrainingSample, minibatches, same_prompt_groups

    prompts = [[1, 2], [3], [1, 2], [4], [3], [1, 2], [5], [6]]
    samples = [TrainingSample(Decision("a", "a", p, [7], [-0.1], 0.0), 0.5, 1.0) for p in prompts]
    groups = same_prompt_groups(samples)
    assert groups == [[0, 2, 5], [1, 4], [3], [6], [7]]
    order = np.random.default_rng(0).permutation(len(groups))
    chunks = list(minibatches(groups, order, 3))
    assert sorted(i for c in chunks for i in c) == list(range(8))  # every step once per epoch
    for chunk in chunks:
        assert len(chunk) <= 3
        for group in groups:  # never split
            assert set(group) <= set(chunk) or not set(group) & set(chunk)
    # A group larger than a mini-batch stays whole rather than being cut.
    assert list(minibatches([[0, 1, 2, 3], [4]], [0, 1], 2)) == [[0, 1, 2, 3], [4]]

def test_ppo_clip_loss_shape():
    loss, clipped = ppo_clip_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, -1.0]))
    assert loss.shape == (2, 3) and torch.equal(loss[0], -torch.ones(3)) and clipped.sum() == 0


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "change, message",
    [
        ({"env_id": "ptgpo/Nowhere-v0"}, "(env_id): unknown environment"),
        ({"algo": "ptgpx"}, "(algo): unknown advantage estimator 'ptgpx' (did you mean 'ptgpo'?); choose one of"),
        ({"group_size": 1}, "(group_size): expected an integer in [2, 1048576]"),
        ({"learning_rate": -1.0}, "(learning_rate): expected a number > 0"),
        ({"clip_ratio": float("nan")}, "clip_ratio"),
        ({"iterations": 0}, "(iterations): expected an integer >= 1"),
        ({"mode": "talk"}, "(mode): 'talk' is not valid"),
        ({"rollout": "bush"}, "(rollout): 'bush' is not valid"),
        ({"initial_rollouts": 9}, "(initial_rollouts): expected an integer in [1, 8]"),
        ({"grup_size": 4}, "did you mean 'group_size'"),
        ({"eval_seeds": [5]}, "(eval_seeds) overlap env.train_seeds"),
        ({"train_seeds": [10, 5]}, "train_seeds"),
        ({"algo_config": {"gama": 0.9}}, "(algo_config): unknown config key"),
        ({"resume": "yes"}, "(resume): expected true or false"),
        ({"async_rollouts": "yes"}, "(async_rollouts): expected true or false"),
        ({"async_rollouts": True, "rollout_backend": "vllm"}, "(async_rollouts): the rollout worker runs"),
        ({"loss_agg": "sum"}, "(loss_agg): 'sum' is not valid"),
        ({"eval_temperature": -0.5}, "(eval_temperature): expected a number >= 0"),
        ({"tiny": {"hiden_size": 32}}, "(tiny): unknown key(s) 'hiden_size' (did you mean 'hidden_size'?)"),
        ({"tiny": {"pretrain_steps": -1}}, "tiny.pretrain_steps: expected an integer >= 0"),
        ({"optim": {"lrr": 1}}, "optim: unknown key(s) 'lrr' (did you mean 'lr'?)"),
        ({"optim.lr": 2e-3, "learning_rate": 3e-3}, "optim.lr is given twice"),
        ({"policy": 5}, "policy: expected a mapping"),
        ({"algorithm.loss": "ppo-clap"},
         "algorithm.loss (loss): unknown policy loss 'ppo-clap' (did you mean 'ppo-clip'?)"),
    ],
)
def test_bad_configs_fail_with_clear_messages(change, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", **change})
    assert message in str(error.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": "/no/such/model"}, "(model): no model folder"),
        ({"model": "./relative/missing"}, "(model): no model folder"),
        ({"rollout_backend": "vlm"}, "(rollout_backend): unknown rollout backend 'vlm' (did you mean 'vllm'?)"),
    ],
)
def test_what_the_machine_lacks_is_refused_before_the_run(change, message):
    # The config builds (it asks nothing of the machine, so a config from another one loads); the
    # trainer's pre-flight refuses it before a model is built or a file written.
    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", **change})
    with pytest.raises(ValueError) as error:
        Trainer(config, progress=False).train()
    assert message in str(error.value)


def test_config_defaults_and_yaml(tmp_path):
    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "algo": "ptgpo", "eval_seeds": 3})
    assert config.rollouts.strategy == "tree" and config.optim.kl_coef == 0.0
    # Resolved once, from the model: the tiny model's measured settings, or a pretrained LLM's.
    optim = config.optim
    assert (optim.lr, optim.epochs, optim.minibatch_size) == (5e-4, 2, 512)
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "config.json").write_text("{}")
    pretrained = TrainConfig.from_dict({"model": str(tmp_path / "llm"), "minibatch_size": 32})
    optim = pretrained.optim
    assert (optim.lr, optim.epochs, optim.minibatch_size, optim.kl_coef) == (1e-6, 1, 32, 0.01)
    # Evaluation: sampled at 0.4 for the tiny model, greedy for a pretrained one; 0 asks for greedy.
    assert (config.evaluation.temperature, pretrained.evaluation.temperature) == (0.4, 0.0)
    greedy = evaluation_agent(None, TrainConfig.from_dict({"eval_temperature": 0}))
    sampled = evaluation_agent(None, TrainConfig.from_dict({"eval_temperature": 0.7}))
    assert (greedy.greedy, sampled.greedy, sampled.temperature) == (True, False, 0.7)
    assert config.evaluation.seeds == [1_000_000, 1_000_001, 1_000_002]
    assert TrainConfig.from_dict({"algo": "grpo"}).rollouts.strategy == "linear"
    path = tmp_path / "run.yaml"
    path.write_text("env_id: ptgpo/FrozenLake-v0\nalgo: rloo\ngroup_size: 4\n")
    loaded = TrainConfig.from_yaml(path, {"seed": 3})
    assert (loaded.algorithm.name, loaded.rollouts.group_size, loaded.run.seed) == ("rloo", 4, 3)
    with pytest.raises(ValueError, match="does not exist"):
        TrainConfig.from_yaml(tmp_path / "missing.yaml")


def test_sections_dotted_keys_and_flat_names_are_one_config(tmp_path):
    flat = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "learning_rate": 1e-3, "group_size": 4,
                                  "tiny": {"pretrain_steps": 0}, "eval_seeds": 3, "hindsight": None})
    nested = TrainConfig.from_dict({"env": {"id": "ptgpo/FrozenLake-v0"}, "optim": {"lr": 1e-3},
                                    "rollouts.group_size": 4, "tiny.pretrain_steps": 0, "evaluation": {"seeds": 3}})
    assert flat == nested
    # The saved form (config.json) reads back as the same config, resolved values included.
    assert TrainConfig.from_dict(flat.to_dict()) == flat
    assert flat.replace(**{"optim.lr": 2e-3}).optim.lr == 2e-3 and flat.replace(seed=4).run.seed == 4
    # A key inside a mapping field is merged into it; the whole field replaces it.
    merged = TrainConfig.from_dict({"env_id": "ptgpo/Household-v0", "env_kwargs": {"difficulty": "easy"},
                                    "env.kwargs.task_type": "pick"})
    assert merged.env.kwargs == {"difficulty": "easy", "task_type": "pick"}
    # An old config's hindsight: {} is the hindsight objective with its defaults, null turns it off.
    assert TrainConfig.from_dict({"hindsight": {}}).algorithm.objectives[0]["buffer_size"] == 4096
    assert TrainConfig.from_dict({"hindsight": None}).algorithm.objectives == []


def test_the_cli_flags_come_from_the_config_fields(capsys):
    from ptgpo_harness.cli import build_parser
    from ptgpo_harness.commands.train import build_config
    from ptgpo_algos.config import cli_fields

    flags = {spec.flag for spec in cli_fields()}
    assert {"env", "algo", "model", "mode", "rollout", "group-size", "tasks", "iterations", "total-decisions",
            "time-limit", "lr", "eval-every", "eval-episodes", "eval-temperature", "seed", "out", "resume",
            "tensorboard", "record-rollouts", "async-rollouts", "recipe", "prompt-template", "reproducible"} == flags
    parser = build_parser()
    args = parser.parse_args(["train", "--env", "ptgpo/FrozenLake-v0", "--lr", "0.002", "--eval-episodes", "3",
                              "--async-rollouts", "--difficulty", "easy", "--set", "optim.epochs=3",
                              "--set", "clip_ratio=0.3"])
    config = build_config(args)
    assert (config.optim.lr, config.optim.epochs, config.optim.clip_ratio) == (0.002, 3, 0.3)
    assert config.rollouts.asynchronous and len(config.evaluation.seeds) == 3
    assert config.env.kwargs == {"difficulty": "easy"}
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    assert "learning rate [5e-4 tiny, 1e-6 pretrained]" in " ".join(capsys.readouterr().out.split())


def test_cli_reports_bad_config_before_any_work(capsys, tmp_path):
    from ptgpo_harness.cli import main

    assert main(["train", "--env", "ptgpo/FrozenLake-v0", "--group-size", "1", "--out", str(tmp_path / "r")]) == 2
    assert "group_size" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_shipped_configs_are_valid(monkeypatch):
    from pathlib import Path

    # The pretrained-model config names a hub model; offline, validation would demand it be cached.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("train_*.yaml"))
    assert configs
    for path in configs:
        TrainConfig.from_yaml(path)


# ----------------------------------------------------------------------------- runs
def _small(out_dir, **change):
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=8, algo="ptgpo", group_size=4,
                tasks_per_iteration=2, iterations=4, eval_every=2, eval_seeds=2, checkpoint_every=2,
                ppo_epochs=2, minibatch_size=16, out_dir=str(out_dir), tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict(data)


def _rows(path):
    drop = {"wall_time_s", *TIMED}  # the curve's clock, the metrics rows'
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in open(path)]


def _dies_on_call(real, n):
    """``real``, except that its ``n``-th call raises KeyboardInterrupt (a killed run)."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    return wrapper


def test_a_run_folder_older_than_per_task_seeding_resumes_with_the_shared_draws(tmp_path, monkeypatch):
    # Its config.json has no rollouts.seeding: the run drew every task's rollouts from the run's
    # generators in one pass, and a resume with the default config must go on doing so.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    shared = {"rollouts": {"seeding": "shared"}}
    whole = run_training(_small(tmp_path / "whole", **shared), progress=False)
    run_training(_small(tmp_path / "cut", iterations=2, **shared), progress=False)
    path = tmp_path / "cut" / "config.json"
    saved = json.loads(path.read_text())
    del saved["rollouts"]["seeding"]
    path.write_text(json.dumps(saved))
    resumed = run_training(_small(tmp_path / "cut", resume=True), progress=False)
    assert _rows(resumed.metrics_path) == _rows(whole.metrics_path)
    assert json.loads(path.read_text())["rollouts"]["seeding"] == "shared"


def test_kill_and_resume_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    whole = run_training(_small(tmp_path / "whole"), progress=False)

    from ptgpo_algos.rollouts import collection

    real = collection.collect_rollouts
    # A collection per task: the 7th is iteration 4's first (2 tasks an iteration).
    monkeypatch.setattr(collection, "collect_rollouts", _dies_on_call(real, 7))
    with pytest.raises(KeyboardInterrupt):
        run_training(_small(tmp_path / "cut", checkpoint_every=2), progress=False)
    # Iteration 3 was logged but not checkpointed: the resumed run must redo it identically.
    assert len(_rows(tmp_path / "cut" / "metrics.jsonl")) == 3
    with pytest.raises(ValueError, match="already holds a run"):
        run_training(_small(tmp_path / "cut"), progress=False)
    monkeypatch.setattr(collection, "collect_rollouts", real)
    resumed = run_training(_small(tmp_path / "cut", resume=True), progress=False)
    assert _rows(resumed.metrics_path) == _rows(whole.metrics_path)
    assert _rows(resumed.curve_path) == _rows(whole.curve_path)
    assert [r["iteration"] for r in _rows(whole.curve_path)] == [0, 2, 4]
    assert resumed.decisions == whole.decisions and resumed.final_eval == whole.final_eval
    assert whole.decisions_saved > 0
    assert (tmp_path / "whole" / "final_model" / "config.json").is_file()


@pytest.mark.slow
def test_short_run_improves_success_on_an_easy_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=8, algo="gigpo", group_size=8,
        tasks_per_iteration=4, iterations=12, eval_every=12, eval_seeds=4, learning_rate=1e-2,
        ppo_epochs=4, minibatch_size=64, out_dir=str(tmp_path / "run"), tiny={"pretrain_steps": 0},
        eval_temperature=0,
    ))
    summary = run_training(config, progress=False)
    curve = [json.loads(line) for line in open(summary.curve_path)]
    rollouts = [json.loads(line)["rollout/success"] for line in open(summary.metrics_path)]
    # Sampled success, 96 episodes at the end against 96 at the start: near-random play succeeds
    # ~6 % of the time, so +0.15 is about four standard deviations of the difference (measured
    # here: ~0.06 -> ~0.4). The greedy evaluation on this one map is all-or-nothing.
    assert np.mean(rollouts[-3:]) > np.mean(rollouts[:3]) + 0.15
    assert curve[0]["success"] == 0.0  # the untrained greedy policy does not reach the goal


def test_coverage_credit_reaches_all_succeeded_groups_only_when_asked(tmp_path, monkeypatch):
    # A 1x3 lake where most tree rollouts win: some groups all succeed. By default they keep the outcome
    # formula (coverage credit would rank the longer wins first); coverage_when all_equal credits them
    # by coverage, as before the key existed. Same seed, same rollouts at iteration 1.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    rows = {}
    for when in ("all_failed", "all_equal"):
        config = TrainConfig.from_dict(dict(
            env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFG"]}, max_steps=12, algo="ptgpo",
            algo_config={"coverage_when": when}, rollout="tree", group_size=4, tasks_per_iteration=2,
            iterations=3, eval_every=3, eval_seeds=4, ppo_epochs=1, minibatch_size=32,
            tiny={"hidden_size": 32, "pretrain_steps": 0}, seed=3, out_dir=str(tmp_path / when),
        ))
        summary = run_training(config, progress=False)
        rows[when] = [json.loads(line) for line in open(summary.metrics_path)]
    default, old = rows["all_failed"], rows["all_equal"]
    assert sum(row["advantages/all_equal_groups"] for row in default) > 0
    assert all(row["advantages/coverage_groups"] == 0 for row in default)
    assert all(row["advantages/coverage_groups"] == row["advantages/all_equal_groups"] for row in old)
    assert old[0]["rollout/leaf_success"] == default[0]["rollout/leaf_success"] > 0


def test_generate_mode_run_penalises_unparsable_responses(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = _small(tmp_path / "gen", mode="generate", max_new_tokens=4, iterations=1, eval_every=1,
                    algo="grpo", algo_config={"invalid_penalty": 0.5})
    summary = run_training(config, progress=False)
    row = _rows(summary.metrics_path)[0]
    # A from-scratch model cannot write the ReAct tags in 4 tokens: every step is invalid (and is
    # sent as an empty action, so the environment counts it as such).
    assert row["rollout/invalid_rate"] == 1.0 and row["update/trained_steps"] == row["rollout/decisions"]
    assert row["advantages/steps"] == 2 * 4 * 8
    assert summary.final_eval["invalid_rate"] == 1.0


def test_evaluate_command_replays_a_runs_final_evaluation(tmp_path, monkeypatch, capsys):
    from ptgpo_harness.cli import main
    from ptgpo_algos.policy.hf import saved_policy_settings

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    summary = run_training(_small(run_dir, iterations=2, history_length=1, eval_seeds=8, eval_temperature=0.7,
                                  max_new_tokens=7), progress=False)
    # The saved model keeps the settings it acted with, not the loader's defaults (history 2).
    assert saved_policy_settings(run_dir / "final_model") == {
        "mode": "choose", "score": "mean", "temperature": 1.0, "history_length": 1,
        "max_prompt_tokens": 1024, "max_new_tokens": 7, "prompt_template": None, "require_think": False,
        "plan_format": False,
    }
    keys = ("success", "return", "length", "invalid_rate")

    def evaluate(*argv):
        out = tmp_path / "eval.json"
        assert main(["evaluate", *map(str, argv), "--no-progress", "--out", str(out)]) == 0
        return json.loads(out.read_text())

    replay = evaluate(run_dir)
    assert {k: replay[k] for k in keys} == {k: summary.final_eval[k] for k in keys}
    assert replay["temperature"] == 0.7 and len(replay["per_episode"]) == 8 and replay["history_length"] == 1
    # A model folder acts with its saved settings unless --history-length says otherwise.
    model = (run_dir / "final_model", "--env", "ptgpo/FrozenLake-v0", "--episodes", 2)
    assert evaluate(*model)["history_length"] == 1
    assert evaluate(*model, "--history-length", 0)["history_length"] == 0
    # Without final_model/, the last checkpoint (the same iteration here) is loaded on the base model.
    shutil.rmtree(run_dir / "final_model")
    assert {k: evaluate(run_dir)[k] for k in keys} == {k: summary.final_eval[k] for k in keys}
    from ptgpo_harness.commands.alfworld import _make_agent

    agent, kind = _make_agent(str(run_dir), 0, False)  # `ptgpo alfworld eval --agent RUN` takes runs too
    assert kind == "rl" and agent.policy.prompts.history_length == 1
    other = evaluate(run_dir, "--episodes", 3, "--first-seed", 5_000_000, "--temperature", 0)
    assert [e["seed"] for e in other["per_episode"]] == [5_000_000, 5_000_001, 5_000_002]
    assert other["temperature"] == 0.0

    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "cache"), "--no-progress"]) == 2
    assert main(["evaluate", str(tmp_path / "missing")]) == 2
    assert main(["evaluate", str(run_dir), "--history-length", "0", "--no-progress"]) == 2
    assert main(["evaluate", str(run_dir), "--history-length", "-1", "--no-progress"]) == 2
    import ptgpo_algos.training.run_evaluation as run_evaluation

    def no_loading(*args, **kwargs):
        raise AssertionError("a bad environment must fail before the model is loaded")

    monkeypatch.setattr(run_evaluation, "load_trained_policy", no_loading)
    assert main(["evaluate", str(run_dir), "--env", "ptgpo/NoSuchEnv-v0", "--no-progress"]) == 2
    errors = capsys.readouterr().err
    assert "say which environment with --env" in errors and "is not a folder" in errors
    assert "--history-length applies to a model folder" in errors and "--history-length must be >= 0" in errors
    assert "unknown environment 'ptgpo/NoSuchEnv-v0'" in errors


# ----------------------------------------------------------------------------- async rollouts
def _played(batch):
    return [[[(s.action, s.decision.choice_logprob, s.decision.prompt_ids) for s in t.steps] for t in group]
            for group in batch]


def test_rollout_worker_plays_what_the_trainer_process_would(tmp_path, monkeypatch):
    from ptgpo_algos.rollouts.collection import Task, collect_rollouts
    from ptgpo_algos.training.collectors import RolloutRequest, RolloutWorker, snapshot_weights
    from ptgpo_algos.policy.backends import build_policy

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = _small(tmp_path / "unused")
    policy = build_policy(config, "cpu")
    # Weights the worker's freshly built copy does not have: the request must carry them.
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    tasks = [Task(config.env.id, s, dict(config.env.kwargs), config.env.max_steps) for s in (3, 4)]
    here, here_stats = collect_rollouts(policy, tasks, group_size=4, mode="tree", rng=np.random.default_rng(7),
                                        generator=torch.Generator().manual_seed(7))
    with RolloutWorker(config.to_dict(), "cpu") as worker:
        worker.submit(RolloutRequest(snapshot_weights(policy), tasks, 7))
        with pytest.raises(RuntimeError, match="one request at a time"):
            worker.submit(RolloutRequest(snapshot_weights(policy), tasks, 7))
        there, there_stats = worker.result()
        with pytest.raises(RuntimeError, match="no rollout request in flight"):
            worker.result()
    assert _played(there) == _played(here)
    assert (there_stats.decisions, there_stats.decisions_saved) == (here_stats.decisions, here_stats.decisions_saved)
    # The worker's CPU travels with the batch, for the run's training CPU; the trainer measures its own.
    assert there_stats.worker_cpu_s > 0 and here_stats.worker_cpu_s == 0
    # Tree leaves still share their prefix steps as objects after the trip between processes.
    leaves = there[0]
    assert any(a is b for t in leaves[1:] for a, b in zip(t.steps, leaves[0].steps))


def test_rollout_worker_reports_a_failing_request(tmp_path, monkeypatch):
    from ptgpo_algos.rollouts.collection import Task
    from ptgpo_algos.training.collectors import RolloutRequest, RolloutWorker

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = _small(tmp_path / "unused")
    with RolloutWorker(config.to_dict(), "cpu") as worker:
        worker.submit(RolloutRequest({}, [Task("ptgpo/FrozenLake-v0", 0, {"map_name": "nowhere"})], 0))
        with pytest.raises(RuntimeError, match="the rollout worker failed"):
            worker.result()


def test_async_rollouts_lag_one_update_and_resume_reproduces_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    whole = run_training(_small(tmp_path / "whole", async_rollouts=True), progress=False)
    rows = _rows(whole.metrics_path)
    # Iteration 1 plays the initial weights, as a synchronous run does; each later one plays the
    # weights from before the previous update.
    assert [r["rollout/policy_lag"] for r in rows] == [0, 1, 1, 1]
    sync = _rows(run_training(_small(tmp_path / "sync"), progress=False).metrics_path)
    assert [r["rollout/policy_lag"] for r in sync] == [0, 0, 0, 0]

    from ptgpo_algos.updates.updater import Updater

    real = Updater.run
    # (Rollouts run in the worker here: the run is killed in iteration 4's update.)
    monkeypatch.setattr(Updater, "run", _dies_on_call(real, 4))
    with pytest.raises(KeyboardInterrupt):
        run_training(_small(tmp_path / "cut", async_rollouts=True), progress=False)
    assert len(_rows(tmp_path / "cut" / "metrics.jsonl")) == 3
    monkeypatch.setattr(Updater, "run", real)
    resumed = run_training(_small(tmp_path / "cut", async_rollouts=True, resume=True), progress=False)
    assert _rows(resumed.metrics_path) == rows
    assert _rows(resumed.curve_path) == _rows(whole.curve_path)
    assert resumed.final_eval == whole.final_eval


# ----------------------------------------------------------------------------- controls and curves
def test_placebo_permutes_the_advantages_over_the_batch():
    from ptgpo_algos.advantages import StepAdvantages
    from ptgpo_algos.training.trainer import permuted

    advantages = StepAdvantages.from_nested([[[1.0, 2.0], [3.0]], [[4.0, 5.0, 6.0]]])
    shuffled = permuted(advantages, np.random.default_rng(0)).nested()
    assert [[len(t) for t in g] for g in shuffled] == [[2, 1], [3]]
    flat = [a for g in shuffled for t in g for a in t]
    assert sorted(flat) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and flat != [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_a_placebo_run_trains_on_permuted_advantages(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    import ptgpo_algos.training.trainer as trainer

    seen = []
    real = trainer.permuted

    def spy(advantages, rng):
        out = real(advantages, rng)
        seen.append((advantages, out))
        return out

    monkeypatch.setattr(trainer, "permuted", spy)
    summary = run_training(_small(tmp_path / "run", algo="gigpo", iterations=2, placebo=True), progress=False)
    assert summary.iterations == 2 and len(seen) == 2
    assert all(sorted(o.values.tolist()) == sorted(i.values.tolist()) for i, o in seen)


def test_curve_evaluations_play_the_first_seeds_and_the_last_plays_all(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    import ptgpo_algos.training.run_evaluation as run_evaluation

    played = []
    real = run_evaluation.evaluate

    def spy(agent, env_id, seeds, *args, **kwargs):
        played.append(len(seeds))
        return real(agent, env_id, seeds, *args, **kwargs)

    monkeypatch.setattr(run_evaluation, "evaluate", spy)
    summary = run_training(_small(tmp_path / "run", eval_seeds=6, eval_curve_episodes=2), progress=False)
    assert played == [2, 2, 6] and summary.final_eval["episodes"] == 6


def test_callbacks_observe_a_read_only_view_of_the_run():
    from ptgpo_algos.training.callbacks import RunView
    from ptgpo_algos.training.state import TrainState

    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0"})
    state = TrainState.seeded(0)
    view = RunView(config, state)
    state.iteration = 4
    assert view.config is config and view.state.iteration == 4  # a view: it follows the run
    with pytest.raises(AttributeError, match="a callback observes the run's state"):
        view.state.iteration = 5
    assert state.iteration == 4
