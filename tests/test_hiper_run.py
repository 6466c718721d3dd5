"""HiPER as a runnable method (``algo: hiper``, :mod:`ptgpo_algos.hiper.critic`): per-token advantage
placement on a hand-built response, the per-token path of the ppo-clip loss, the refusals, and short
seeded runs of the tiny model in generate mode (the three value losses and the level figures,
kill-and-resume with the three-head critic)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from resume_scenarios import killed_and_resumed, metric_rows

from ptgpo_algos.hiper.critic import token_advantages
from ptgpo_algos.hiper.plan_format import low_value_index
from ptgpo_algos.updates.losses import ppo_clip_loss

LAKE = {"desc": ["SFF", "FHF", "FFG"]}
ENV = "ptgpo/FrozenLake-v0"
TINY = {"hidden_size": 32, "pretrain_steps": 0}

# A response as its tokens' texts: 0-2 the switch block, 3-7 the subgoal block, 8-10 the action block, 11 a tail.
PIECES = ["<switch>", "SWITCH", "</switch>", "<subgoal>", "reach", " the", " goal", "</subgoal>",
          "<action>", "go right", "</action>", "!"]


def test_each_level_lands_on_its_own_block_and_nothing_else():
    out = token_advantages(PIECES, low=1.0, high=10.0, switch=100.0)
    assert out == [100.0] * 3 + [10.0] * 5 + [1.0] * 3 + [0.0]


def test_a_turn_inside_a_segment_carries_no_high_advantage():
    out = token_advantages(PIECES, low=-0.5, high=None, switch=2.0)
    assert out == [2.0] * 3 + [0.0] * 5 + [-0.5] * 3 + [0.0]


def test_without_an_action_block_the_low_advantage_covers_the_whole_response():
    pieces = ["<switch>", "KEEP", "</switch>", "no action here"]
    assert token_advantages(pieces, low=0.25, high=None, switch=None) == [0.25] * 4
    # and a switch advantage still adds on the switch block
    assert token_advantages(pieces, low=0.25, high=None, switch=1.0) == [1.25] * 3 + [0.25]


def test_the_low_head_reads_the_token_that_closes_the_subgoal():
    assert low_value_index(PIECES) == 7


def test_ppo_clip_takes_one_advantage_per_token_and_a_row_of_equal_ones_is_the_per_step_loss():
    logprobs = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.2, -0.1]])
    old = torch.tensor([[-1.2, -0.5, -1.0], [-0.3, -0.4, -0.1]])
    per_step, clipped_step = ppo_clip_loss(logprobs, old, torch.tensor([0.5, -1.0]))
    per_token, clipped_token = ppo_clip_loss(logprobs, old, torch.tensor([[0.5] * 3, [-1.0] * 3]))
    torch.testing.assert_close(per_token, per_step)
    torch.testing.assert_close(clipped_token, clipped_step)
    # A zero-advantage token adds no loss and no gradient; the others are their own PPO terms.
    logprobs.requires_grad_(True)
    loss, _ = ppo_clip_loss(logprobs, old, torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]), clip_ratio=0.2)
    loss.sum().backward()
    assert loss[0, 0] == 0 and loss[0, 2] == 0 and logprobs.grad[0, 0] == 0 and logprobs.grad[0, 2] == 0
    ratio = torch.exp(torch.tensor(-0.5 + 0.5))
    assert float(loss[0, 1].detach()) == pytest.approx(float(-ratio * 2.0))


def test_the_update_uses_a_samples_token_advantages_when_it_has_them():
    from ptgpo_algos.updates import samples as update
    from ptgpo_algos.records import Decision
    from ptgpo_algos.updates.loss_registry import get_loss
    from ptgpo_algos.updates.losses import PolicyLoss
    from ptgpo_algos.policy.base import ScoredBatch

    seen = {}

    class Scorer:
        device, mode = torch.device("cpu"), "generate"

        def score(self, decisions, entropy_grad):
            width = max(len(d.response_ids) for d in decisions)
            mask = torch.tensor([[1.0] * len(d.response_ids) + [0.0] * (width - len(d.response_ids)) for d in decisions])
            return ScoredBatch(torch.zeros((len(decisions), width)), mask, torch.zeros((len(decisions), width)), 0)

    def spy(logprobs, old, advantages, **keys):
        seen["advantages"] = advantages.clone()
        return torch.zeros_like(logprobs), None

    spec = type(get_loss("ppo-clip"))("spy", spy)
    decisions = [Decision("a", "a", [1], [5, 6, 7], [0.0] * 3, 0.0), Decision("b", "b", [1], [5, 6], [0.0] * 2, 0.0)]
    samples = [update.TrainingSample(decisions[0], 0.3, 1.0, token_advantages=[1.0, 2.0, 3.0]),
               update.TrainingSample(decisions[1], -0.5, 1.0)]
    update.micro_batch_loss(Scorer(), samples, PolicyLoss(spec), total_units=5.0)
    torch.testing.assert_close(seen["advantages"], torch.tensor([[1.0, 2.0, 3.0], [-0.5, -0.5, 0.0]]))
    update.micro_batch_loss(Scorer(), [update.TrainingSample(d, a, 1.0) for d, a in zip(decisions, [0.3, -0.5])],
                            PolicyLoss(spec), total_units=5.0)
    torch.testing.assert_close(seen["advantages"], torch.tensor([0.3, -0.5]))  # no token advantages: per step


# ------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("change, message", [
    ({}, r"policy\.mode: hiper needs generate mode"),
    ({"policy": {"mode": "generate"}, "rollouts": {"strategy": "tree"}}, r"rollouts\.strategy: hiper"),
    ({"policy": {"mode": "generate"}, "algorithm": {"config": {"gamma": 0.9}}}, r"algorithm\.config: hiper takes no"),
    ({"policy": {"mode": "generate"}, "algorithm": {"hiper": {"lam_seg": 2}}}, r"algorithm\.hiper\.lam_seg"),
    ({"policy": {"mode": "generate"}, "algorithm": {"placebo": True}}, r"algorithm\.placebo: it rewrites"),
    ({"policy": {"mode": "generate"}, "algorithm": {"objectives": [{"name": "seed"}]}}, r"algorithm\.objectives: it"),
])
def test_a_hiper_config_it_cannot_run_is_refused_naming_the_field(change, message):
    from ptgpo_algos.config import TrainConfig

    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict({"algo": "hiper", **change})


def test_the_cli_refuses_choose_mode_with_exit_code_2(tmp_path, capsys):
    from ptgpo_harness.cli import main

    code = main(["train", "--algo", "hiper", "--out", str(tmp_path / "run"), "--iterations", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "run").exists()
    assert "policy.mode" in err and "generate" in err and len(err.strip().splitlines()) == 1


def test_hiper_is_registered_with_its_paper_and_needs_a_critic():
    from ptgpo_algos.advantages import get_estimator
    from ptgpo_algos.critic.settings import uses_critic

    assert "2602.16165" in get_estimator("hiper").paper and uses_critic("hiper")


# -------------------------------------------------------------------------------------------- runs
def _lake(out_dir, **change):
    from ptgpo_algos.config import TrainConfig

    data = dict(env_id=ENV, env_kwargs=LAKE, max_steps=3, algo="hiper", group_size=2, tasks_per_iteration=2,
                iterations=2, eval_every=2, eval_seeds=2, checkpoint_every=1, out_dir=str(out_dir), tiny=TINY,
                learning_rate=5e-3, seed=1, policy={"mode": "generate", "max_new_tokens": 24})
    data.update(change)
    return TrainConfig.from_dict(data)


LEVEL_FIGURES = ("critic/hiper_segments", "critic/hiper_segment_length", "critic/hiper_plan_valid_rate",
                 "critic/hiper_adv_low_abs_mean", "critic/hiper_adv_high_abs_mean", "critic/hiper_adv_switch_abs_mean")


def test_a_hiper_run_records_three_value_losses_and_the_level_figures(tmp_path, monkeypatch):
    from ptgpo_algos.training.checkpoint import load_checkpoint
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    summary = run_training(_lake(tmp_path / "run"), progress=False)
    rows = metric_rows(summary.metrics_path)
    assert len(rows) == 2
    for row in rows:
        for key in ("update/value_loss", "update/value_low_loss", "update/value_high_loss", "update/value_switch_loss",
                    *LEVEL_FIGURES):
            assert np.isfinite(row[key]), key
        assert all(row[f"update/value_{head}_loss"] > 0 for head in ("low", "high", "switch"))
        assert row["critic/hiper_segments"] >= 1.0
    # the heads start at 0, then learn
    assert rows[0]["critic/value_mean"] == 0.0 and rows[-1]["critic/value_mean"] != 0.0
    head = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["critic"]["head"]
    assert tuple(head["weight"].shape) == (3, TINY["hidden_size"]) and head["weight"].any()
    settings = json.loads((tmp_path / "run" / "final_model" / "ptgpo_policy.json").read_text())
    assert settings["plan_format"] is True and settings["mode"] == "generate"


def test_two_heads_without_the_switch_head(tmp_path, monkeypatch):
    from ptgpo_algos.training.checkpoint import load_checkpoint
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    summary = run_training(_lake(tmp_path / "run", iterations=1, algorithm={"hiper": {"switch_head": False}}),
                           progress=False)
    row = metric_rows(summary.metrics_path)[0]
    assert "update/value_switch_loss" not in row and "critic/hiper_adv_switch_abs_mean" not in row
    assert row["update/value_high_loss"] > 0
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["critic"]["head"]["weight"].shape[0] == 2


def test_kill_and_resume_of_a_hiper_run_reproduces_the_uninterrupted_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))

    def config(out_dir, **change):
        return _lake(tmp_path / out_dir, algorithm={"critic": {"value_head_lr": 2e-2}}, **change)

    resumed, whole = killed_and_resumed(monkeypatch, config, "ptgpo_algos.rollouts.collection.collect_rollouts")
    assert resumed == whole
    assert whole[-1]["critic/value_mean"] != 0.0  # the critic had learnt something to restore


def _annotated_batch(tmp_path):
    """The tiny model in generate mode, a batch of two groups (two episodes, then one) of hand-written
    plan responses, the HiPER critic that annotated it, and the batch's samples with their targets."""
    from ptgpo_algos.critic.settings import CriticSettings
    from ptgpo_algos.records import Decision, Step, Trajectory
    from ptgpo_algos.hiper.critic import HiperCritic
    from ptgpo_algos.hiper.plan_format import format_plan_response
    from ptgpo_algos.hiper.settings import HiperSettings
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model
    from ptgpo_algos.updates.samples import flatten_batch

    path = build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0, hidden_size=32), env_ids=[ENV], cache_dir=tmp_path)
    policy = load_policy(str(path), mode="generate", plan_format=True)

    def episode(*turns):
        steps = []
        for switch, subgoal, reward in turns:
            text = format_plan_response("go right", subgoal, switch)
            ids = policy.tokenizer.encode(text, add_special_tokens=False)
            steps.append(Step("s", "go right", reward, decision=Decision(text, "go right", [1, 2, 3], ids,
                                                                        [0.0] * len(ids), 0.0)))
        return Trajectory(steps)

    batch = [[episode(("SWITCH", "reach the goal", 0.0), ("KEEP", "reach the goal", 1.0)),
              episode(("SWITCH", "go round", 0.0), ("SWITCH", "reach the goal", 0.0))],
             [episode(("SWITCH", "wander", 0.0))]]
    critic = HiperCritic(CriticSettings(), HiperSettings(), policy)
    critic.annotate(batch, policy, batch_size=8)
    samples = flatten_batch(batch, [[[s.extras["credit"] for s in t.steps] for t in g] for g in batch], mode="generate")
    figures = critic.set_targets(batch, samples, {})
    return policy, batch, critic, samples, figures


def test_the_critic_spreads_the_credit_over_blocks_and_a_lone_episodes_group_gets_none(tmp_path):
    policy, batch, critic, samples, figures = _annotated_batch(tmp_path)
    assert figures["hiper_segments"] == pytest.approx(4 / 3)  # 1 + 2 + 1 segments over three episodes
    first, kept, _, second_start, lone = samples
    pieces = [policy.tokenizer.decode([t]) for t in first.decision.response_ids]
    ends = np.cumsum([len(p) for p in pieces])
    in_subgoal = int(np.searchsorted(ends, len("<switch>SWITCH</switch><subgoal>r")))
    turn = batch[0][0].steps[0].extras["hiper"]
    # A segment start: the switch block carries the switch advantage, the subgoal block the high one,
    # the action block the low one.
    assert first.token_advantages[0] == turn["switch_advantage"] != 0.0
    assert first.token_advantages[in_subgoal] == turn["high_advantage"] != 0.0
    assert first.token_advantages[-1] == turn["low_advantage"] != 0.0
    # A KEEP turn: no high advantage, so its subgoal block carries nothing.
    assert 0.0 in kept.token_advantages and set(second_start.critic_targets["heads"]) == {0, 1, 2}
    assert set(kept.critic_targets["heads"]) == {0, 2}  # the high head is fitted at segment starts only
    assert lone.token_advantages == [0.0] * len(lone.decision.response_ids)  # a group of one: no advantage


def test_the_critics_figures_do_not_depend_on_how_a_mini_batch_is_cut(tmp_path):
    # The heads' losses were averaged over a mini-batch's micro-batches where their sum, value_loss, was
    # added up: split in parts, they no longer made up value_loss (and a run across ranks, whose parts
    # are a rank's, reported other figures than one process).
    from ptgpo_algos.updates.loss_registry import get_loss
    from ptgpo_algos.updates.losses import PolicyLoss
    from ptgpo_algos.updates.samples import accumulate_gradients

    policy, _, critic, samples, _ = _annotated_batch(tmp_path)
    with torch.no_grad():  # heads away from their zero start, so that every head's loss is its own
        critic.head.weight.copy_(torch.linspace(-1.0, 1.0, critic.head.weight.numel()).reshape(critic.head.weight.shape))
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": 0.2, "clip_ratio_c": 3.0})
    weights = float(sum(s.weight for s in samples))
    figures = []
    for micro in (None, 2):
        stats = accumulate_gradients(policy, samples, loss, weights, micro,
                                     extra=lambda part: critic.loss(policy, part, weights))
        figures.append(stats)
        heads = stats["value_low_loss"] + stats["value_high_loss"] + stats["value_switch_loss"]
        assert stats["value_loss"] == pytest.approx(heads, rel=1e-6)
    # The other figures are means over the units (response tokens here), whatever the parts: they were
    # means over each part's samples, which parts of other sizes (a rank's) combined otherwise.
    for key in ("value_loss", "value_low_loss", "value_high_loss", "value_switch_loss", "value_pred_mean",
                "value_clip_fraction"):
        assert figures[1][key] == pytest.approx(figures[0][key], rel=1e-5), key
    for parameter in list(policy.parameters()) + critic.parameters():
        parameter.grad = None
