"""PPO with a learned critic (``algo: ppo``, :mod:`ptgpo_algos.critic`): turn-level GAE on hand-computed
numbers, the clipped value loss, where the value loss's gradient goes, the estimator and its settings,
and short seeded runs (value metrics, a falling value loss, kill-and-resume, the refusals)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from resume_scenarios import killed_and_resumed, metric_rows

from ptgpo_algos.advantages import compute_advantages, get_estimator
from ptgpo_algos.critic.component import Critic
from ptgpo_algos.critic.gae import turn_gae
from ptgpo_algos.critic.loss import clipped_value_loss, explained_variance
from ptgpo_algos.critic.settings import CriticSettings
from ptgpo_algos.records import Step, Trajectory

LAKE = {"desc": ["SFF", "FHF", "FFG"]}
TINY = {"hidden_size": 32, "pretrain_steps": 0}


# ----------------------------------------------------------------------------------------------- GAE
def test_gae_of_a_terminated_three_step_episode_by_hand():
    # gamma 0.9, lambda 0.8; V = 0.5, 0.6, 0.8; rewards 0, 0, 1; terminated (V after the end is 0):
    # delta = (0 + 0.9*0.6 - 0.5, 0 + 0.9*0.8 - 0.6, 1 + 0 - 0.8) = (0.04, 0.12, 0.2)
    # A_2 = 0.2; A_1 = 0.12 + 0.72*0.2 = 0.264; A_0 = 0.04 + 0.72*0.264 = 0.23008
    result = turn_gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.8], [3], [0.0], gamma=0.9, lam=0.8)
    np.testing.assert_allclose(result.advantages, [0.23008, 0.264, 0.2], atol=1e-12)
    np.testing.assert_allclose(result.returns, [0.73008, 0.864, 1.0], atol=1e-12)


def test_a_truncated_episode_bootstraps_from_the_value_of_its_final_state():
    # The same episode cut off by the horizon in a state worth 0.7:
    # delta_2 = 1 + 0.9*0.7 - 0.8 = 0.83; A_1 = 0.12 + 0.72*0.83 = 0.7176; A_0 = 0.04 + 0.72*0.7176 = 0.556672
    result = turn_gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.8], [3], [0.7], gamma=0.9, lam=0.8)
    np.testing.assert_allclose(result.advantages, [0.556672, 0.7176, 0.83], atol=1e-12)


def test_lambda_one_is_the_discounted_return_minus_the_value_and_lambda_zero_the_td_error():
    rng = np.random.default_rng(0)
    rewards, values, gamma, bootstrap = rng.normal(size=5), rng.normal(size=5), 0.9, 0.4
    returns = [sum(gamma ** (k - t) * rewards[k] for k in range(t, 5)) + gamma ** (5 - t) * bootstrap for t in range(5)]
    one = turn_gae(rewards, values, [5], [bootstrap], gamma, 1.0)
    np.testing.assert_allclose(one.advantages, np.array(returns) - values, atol=1e-12)
    np.testing.assert_allclose(one.returns, returns, atol=1e-12)
    next_values = np.append(values[1:], bootstrap)
    zero = turn_gae(rewards, values, [5], [bootstrap], gamma, 0.0)
    np.testing.assert_allclose(zero.advantages, rewards + gamma * next_values - values, atol=1e-12)


def test_a_batch_of_unequal_lengths_equals_each_episode_on_its_own():
    rng = np.random.default_rng(1)
    lengths, bootstrap = [3, 0, 1, 5], [0.0, 0.3, 0.2, -0.5]
    rewards, values = rng.normal(size=9), rng.normal(size=9)
    together = turn_gae(rewards, values, lengths, bootstrap, 0.95, 0.7)
    start = 0
    for length, last in zip(lengths, bootstrap):
        alone = turn_gae(rewards[start:start + length], values[start:start + length], [length], [last], 0.95, 0.7)
        np.testing.assert_allclose(together.advantages[start:start + length], alone.advantages, atol=1e-12)
        np.testing.assert_allclose(together.returns[start:start + length], alone.returns, atol=1e-12)
        start += length


def test_one_whitening_serves_ppo_and_hiper_bit_for_bit_as_each_had_it():
    from ptgpo_algos.critic.gae import whitened
    from ptgpo_algos.hiper.estimate import EpisodeTurns, hiper_credit
    from ptgpo_algos.hiper.plan_format import parse_plan_response
    from ptgpo_algos.hiper.settings import HiperSettings

    rng = np.random.default_rng(5)
    for _ in range(200):
        flat = rng.normal(size=int(rng.integers(2, 40))) * rng.choice([1e-3, 1.0, 1e3])
        # ppo's own formula (verl's masked_whiten over the whole batch), and over another rank's too
        assert np.array_equal(whitened(flat), (flat - flat.mean()) / (flat.std() + 1e-8))
        whole = np.concatenate([flat, rng.normal(size=5)])
        assert np.array_equal(whitened(flat, over=whole), (flat - whole.mean()) / (whole.std() + 1e-8))
        # hiper's per-level formula: the masked entries' moments, 0 elsewhere
        grid, mask = rng.normal(size=(3, 7)), rng.random((3, 7)) < 0.6
        chosen = grid[mask]
        expected = np.where(mask, (grid - chosen.mean()) / (chosen.std() + 1e-8), 0.0) if mask.any() else 0 * grid
        assert np.array_equal(whitened(grid, mask), expected)
    # The two callers: ppo's estimator and hiper's credit call it (a whitened result, not their own).
    steps = [_step(r, v) for r, v in ((0.0, 0.1), (1.0, -0.3), (0.5, 0.2), (0.0, 0.0))]
    raw = compute_advantages("ppo", [[Trajectory(steps[:2]), Trajectory(steps[2:])]], whiten=False)
    white = compute_advantages("ppo", [[Trajectory(steps[:2]), Trajectory(steps[2:])]], whiten=True)
    assert np.array_equal([a for t in white[0] for a in t], whitened(np.array([a for t in raw[0] for a in t])))
    response = parse_plan_response("<switch>SWITCH</switch><subgoal>go</subgoal><action>go right</action>")
    episodes = [EpisodeTurns([0.0, 1.0], [response] * 2, [True, True], True), EpisodeTurns([0.5], [response], [True], True)]
    values = np.array([[0.1, -0.2], [0.3, 0.0]])
    plain = hiper_credit(episodes, values, values, HiperSettings(normalize=False, switch_head=False))
    white = hiper_credit(episodes, values, values, HiperSettings(normalize=True, switch_head=False))
    inside = np.array([[True, True], [True, False]])
    assert np.array_equal(white.low_advantages, whitened(plain.low_advantages, inside))
    assert np.array_equal(white.high_advantages, whitened(plain.high_advantages, plain.high_turns))


def test_gae_refuses_arrays_that_do_not_match_the_lengths():
    with pytest.raises(ValueError, match="one entry per step"):
        turn_gae([0.0, 1.0], [0.0], [2], [0.0], 0.9, 0.9)


# ------------------------------------------------------------------------------------- value loss
def test_the_clipped_value_loss_by_hand():
    # Sample 0 moved from 0 to 1 towards a return of 2: clipped to 0.2, (0.2 - 2)^2 = 3.24 > (1 - 2)^2 = 1,
    # so 0.5 * 3.24; sample 1 stayed at 0 (return 0.5): 0.5 * 0.25, not clipped.
    loss, clipped = clipped_value_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 0.5]), 0.2)
    torch.testing.assert_close(loss, torch.tensor([1.62, 0.125]))
    assert clipped.tolist() == [1.0, 0.0]
    plain, none = clipped_value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]), None)
    assert plain.tolist() == [0.5] and none.tolist() == [0.0]


def test_explained_variance():
    assert explained_variance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 1.0
    assert explained_variance(np.zeros(3), np.array([1.0, 2.0, 3.0])) == 0.0
    assert explained_variance(np.zeros(2), np.ones(2)) == 0.0
    # Targets equal but for rounding (a state's float32 value scored in another batch, as across ranks)
    # have no variance to explain either: the figure was 1.0 or 0.0 by how the rounding fell.
    equal = np.array([0.1 + 0.2, 0.3, 0.3])
    assert np.var(equal) > 0 and explained_variance(equal, equal) == 0.0
    float32 = np.array([0.3, np.nextafter(np.float32(0.3), np.float32(1.0)), 0.3], dtype=np.float32).astype(np.float64)
    assert np.var(float32) > 0 and explained_variance(float32, float32) == 0.0
    assert explained_variance(np.array([1.0, 2.0, 3.0]) * 1e-9, np.array([1.0, 2.0, 3.0]) * 1e-9) == 1.0  # small, not equal


# ----------------------------------------------------------------------------- estimator, settings
def _step(reward, value, state="s"):
    return Step(state, "a", reward, extras={"value": value})


def test_the_ppo_estimator_is_turn_gae_of_the_recorded_values():
    first = Trajectory([_step(0.0, 0.5), _step(0.0, 0.6), _step(1.0, 0.8)])
    second = Trajectory([_step(0.0, 0.2), _step(0.0, 0.1)], meta={"bootstrap_value": 0.3})
    got = compute_advantages("ppo", [[first, second]], gamma=0.9, gae_lambda=0.8, whiten=False, invalid_penalty=0.0)
    expected = turn_gae([0, 0, 1, 0, 0], [0.5, 0.6, 0.8, 0.2, 0.1], [3, 2], [0.0, 0.3], 0.9, 0.8).advantages
    np.testing.assert_allclose([a for t in got[0] for a in t], expected, atol=1e-12)
    whitened = np.array([a for t in compute_advantages("ppo", [[first, second]])[0] for a in t])
    assert abs(whitened.mean()) < 1e-9 and abs(whitened.std() - 1.0) < 1e-6
    assert "Schulman et al. 2017" in get_estimator("ppo").paper and "verl-agent" in get_estimator("ppo").paper


def test_the_ppo_estimator_refuses_steps_without_values():
    with pytest.raises(ValueError, match="needs the critic's value"):
        compute_advantages("ppo", [[Trajectory([Step("s", "a", 1.0)]), Trajectory([Step("s", "b", 0.0)])]])


def test_critic_settings_are_checked_naming_the_field():
    from ptgpo_algos.config import TrainConfig

    config = TrainConfig.from_dict({"algo": "ppo", "algorithm.critic": {"value_head_lr": "1e-3", "value_clip": None}})
    assert config.algorithm.critic == CriticSettings(value_head_lr=1e-3, value_clip=None)
    with pytest.raises(ValueError, match=r"algorithm\.critic\.detach_trunk: true .* shared_trunk: false"):
        TrainConfig.from_dict({"algo": "ppo", "algorithm.critic": {"shared_trunk": False, "detach_trunk": True}})
    with pytest.raises(ValueError, match=r"algorithm\.critic.*value_loss_coef"):
        TrainConfig.from_dict({"algo": "ppo", "algorithm.critic.value_loss_coef": 1.0})
    with pytest.raises(ValueError, match=r"algorithm\.critic\.value_coef"):
        TrainConfig.from_dict({"algo": "ppo", "algorithm.critic.value_coef": -1})
    with pytest.raises(ValueError, match="gae_lambda"):
        TrainConfig.from_dict({"algo": "ppo", "algo_config": {"gae_lambda": 1.5}})


# ------------------------------------------------------------------- the value head on the trunk
ENV = "ptgpo/FrozenLake-v0"


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    path = build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0), env_ids=[ENV],
                            cache_dir=tmp_path_factory.mktemp("cache"))
    return load_policy(str(path))


def _targeted_samples(policy):
    from ptgpo_algos.records import Context
    from ptgpo_algos.updates.samples import TrainingSample

    base = "You stand on the start S.\nP F F\nF H F\nF F G"
    contexts = [Context("Walk to the goal G.", base + "\n" * k, ["go left", "go right", "go up"][: 1 + k % 3])
                for k in range(6)]
    decisions = policy.decide(contexts, generator=torch.Generator().manual_seed(0))
    samples = [TrainingSample(d, a, 1.0) for d, a in zip(decisions, [0.5, -1.0, 0.3, 0.0, 1.2, -0.2])]
    for sample, target in zip(samples, [1.0, 0.0, 0.5, 1.0, 0.0, 0.25]):
        sample.old_value, sample.value_return = 0.0, target
    return samples


def _critic(policy, **settings):
    critic = Critic(CriticSettings(**settings), policy)
    with torch.no_grad():  # a head away from its zero start, so that the trunk's gradient is not 0 by construction
        critic.head.weight.copy_(torch.linspace(-1.0, 1.0, critic.head.weight.numel()).reshape(critic.head.weight.shape))
    return critic


def _zero_grads(policy, critic):
    for parameter in list(policy.parameters()) + critic.parameters():
        parameter.grad = None


def test_the_value_heads_gradient_comes_from_the_value_loss_alone(policy):
    from ptgpo_algos.updates.loss_registry import get_loss
    from ptgpo_algos.updates.losses import PolicyLoss
    from ptgpo_algos.updates.samples import accumulate_gradients

    critic, samples = _critic(policy), _targeted_samples(policy)
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": 0.2, "clip_ratio_c": 3.0})
    _zero_grads(policy, critic)
    accumulate_gradients(policy, samples, loss, float(len(samples)), None)
    assert all(p.grad is None or not p.grad.any() for p in critic.parameters())
    _zero_grads(policy, critic)
    stats = accumulate_gradients(policy, samples, loss, float(len(samples)), None,
                                 extra=lambda part: critic.loss(policy, part, float(len(samples))))
    assert all(p.grad is not None and p.grad.any() for p in critic.parameters())
    assert stats["value_loss"] > 0 and "value_clip_fraction" in stats and "value_pred_mean" in stats


def test_the_value_loss_trains_the_shared_trunk_unless_it_is_detached(policy):
    samples = _targeted_samples(policy)
    for detach, reaches_trunk in ((False, True), (True, False)):
        critic = _critic(policy, detach_trunk=detach)
        _zero_grads(policy, critic)
        critic.loss(policy, samples, float(len(samples)))[0].backward()
        trunk = [p.grad for p in policy.parameters()]
        assert any(g is not None and g.any() for g in trunk) is reaches_trunk
        assert all(p.grad is not None and p.grad.any() for p in critic.parameters())
    _zero_grads(policy, critic)


def test_the_value_loss_falls_over_a_few_updates_on_a_fixed_batch(policy):
    critic, samples = _critic(policy, detach_trunk=True, value_clip=None), _targeted_samples(policy)
    optimizer = torch.optim.AdamW([critic.param_group(1e-2)], lr=1e-2)
    losses = []
    for _ in range(30):
        optimizer.zero_grad(set_to_none=True)
        value, stats = critic.loss(policy, samples, float(len(samples)))
        value.backward()
        optimizer.step()
        losses.append(stats["value_loss"])
    assert losses[-1] < 0.5 * losses[0]
    _zero_grads(policy, critic)


# ------------------------------------------------------------------------------------------ runs
def _lake(out_dir, **change):
    from ptgpo_algos.config import TrainConfig

    data = dict(env_id=ENV, env_kwargs=LAKE, max_steps=6, algo="ppo", group_size=3, tasks_per_iteration=2,
                iterations=3, eval_every=3, eval_seeds=2, checkpoint_every=1, out_dir=str(out_dir), tiny=TINY,
                learning_rate=5e-3, seed=1)
    data.update(change)
    return TrainConfig.from_dict(data)


def test_a_ppo_run_records_the_critics_figures_and_checkpoints_its_head(tmp_path, monkeypatch):
    from ptgpo_algos.training.checkpoint import load_checkpoint
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    # Seed 3 with six 8-step episodes of four tasks an iteration reaches the goal: returns that are not all 0.
    summary = run_training(_lake(tmp_path / "run", group_size=6, tasks_per_iteration=4, max_steps=8, seed=3),
                           progress=False)
    rows = metric_rows(summary.metrics_path)
    assert len(rows) == 3 and rows[0]["critic/value_return_mean"] != 0.0
    for row in rows:
        for key in ("update/value_loss", "critic/value_explained_var", "critic/value_mean",
                    "update/value_clip_fraction", "critic/value_return_mean"):
            assert np.isfinite(row[key]), key
    assert rows[0]["critic/value_mean"] == 0.0  # the head starts at zero
    assert rows[-1]["critic/value_mean"] != 0.0  # and has learnt since
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert set(checkpoint["critic"]["head"]) == {"weight", "bias"} and checkpoint["critic"]["head"]["weight"].any()
    assert checkpoint["critic"]["trunk"] is None
    assert len(checkpoint["optimizer"]["param_groups"]) == 2


@pytest.mark.parametrize("shared_trunk", [True, False])
def test_kill_and_resume_of_a_ppo_run_reproduces_the_uninterrupted_one(tmp_path, monkeypatch, shared_trunk):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    # The goal is reached (returns that are not all 0) with these, as in the run above.
    run = dict(seed=3, group_size=6, tasks_per_iteration=4, max_steps=8,
               algorithm={"critic": {"value_head_lr": 2e-2, "shared_trunk": shared_trunk}})

    def config(out_dir, **change):
        return _lake(tmp_path / out_dir, **run, **change)

    resumed, whole = killed_and_resumed(monkeypatch, config, "ptgpo_algos.rollouts.collection.collect_rollouts")
    assert resumed == whole
    assert whole[-1]["critic/value_mean"] != 0.0  # the critic had learnt something to restore


def test_a_critic_model_of_its_own_across_ranks_is_refused_naming_the_field():
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.distributed.placement import check_sharded_config

    with pytest.raises(ValueError, match=r"^algorithm\.critic\.shared_trunk: false .* not sharded across ranks; set it "
                                         r"to true with --nproc"):
        check_sharded_config(TrainConfig.from_dict({"algo": "ppo", "algorithm.critic.shared_trunk": False}))
    check_sharded_config(TrainConfig.from_dict({"algo": "ppo"}))  # the head on the policy's trunk runs across ranks


def test_a_truncated_episode_carries_its_final_state_and_the_critic_bootstraps_from_it(policy):
    from ptgpo_algos.records import Task
    from ptgpo_algos.rollouts.collection import FINAL_CONTEXT, collect_rollouts

    batch, _ = collect_rollouts(policy, [Task(ENV, 5, dict(LAKE), max_steps=2)], group_size=4,
                                generator=torch.Generator().manual_seed(0))
    trajectories = [t for group in batch for t in group]
    cut = [t for t in trajectories if len(t) == 2 and not t.meta["won"] and t.steps[-1].reward == 0.0
           and FINAL_CONTEXT in t.steps[-1].extras]
    assert cut, "a 2-step horizon on a 3x3 lake cuts episodes off"
    assert all(FINAL_CONTEXT not in s.extras for t in trajectories for s in t.steps[:-1])
    critic = _critic(policy)
    critic.annotate(batch, policy, batch_size=4)
    assert all(isinstance(s.extras["value"], float) for t in trajectories for s in t.steps)
    assert all(isinstance(t.meta["bootstrap_value"], float) and t.meta["bootstrap_value"] != 0.0 for t in cut)
    ended = [t for t in trajectories if FINAL_CONTEXT not in t.steps[-1].extras]
    assert all("bootstrap_value" not in t.meta for t in ended)


# ------------------------------------------------------------------------------------ memory plan
def test_the_memory_plan_of_ppo_counts_the_value_head_and_its_pass_over_grpos():
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.memory_plan import GIB, disk_plan_for_config, plan_for_config

    def plans(algo, **critic):
        config = TrainConfig.from_dict({"env_id": ENV, "algo": algo, "tiny": {"hidden_size": 32},
                                        "algorithm.critic": critic})
        return plan_for_config(config, "cpu", 16 * GIB), disk_plan_for_config(config, "cpu")

    (grpo, grpo_disk), (ppo, ppo_disk), (detached, _) = plans("grpo"), plans("ppo"), plans("ppo", detach_trunk=True)
    (separate, separate_disk) = plans("ppo", shared_trunk=False)
    items = {item.name: item.bytes for item in ppo.items}
    # The tiny model's (hidden 32, 2 layers, MLP 256, one key/value head of 16) float32 activations:
    # 32*32 + 16*256 + 8*16 = 5,248 bytes a token and layer, two layers and one layer's backward, over
    # 512 prompts of 1,024 tokens.
    activations = 3 * 5_248 * 512 * 1024
    # The head: 32 weights and a bias in float32, with their gradients and two AdamW moments: 16 x 33 bytes.
    assert items["value head (+ gradients, AdamW)"] == 16 * 33
    assert items["value pass activations"] == activations
    assert ppo.trainer_bytes - grpo.trainer_bytes == 16 * 33 + activations
    assert ppo.peak_bytes - grpo.peak_bytes == pytest.approx(1.1 * (16 * 33 + activations))
    assert detached.trainer_bytes - grpo.trainer_bytes == 16 * 33
    # The checkpoint keeps the head's weights and its two moments.
    assert ppo_disk.checkpoint_bytes - grpo_disk.checkpoint_bytes == 3 * 4 * 33
    # A critic model of its own: the policy's weights, gradients and moments once more, in memory and on disk.
    model = {item.name: item.bytes for item in grpo.items}
    own = model["trainable weights (float32)"] + model["gradients (float32)"] + model["AdamW moments (float32)"]
    assert {item.name: item.bytes for item in separate.items}["critic model (+ gradients, AdamW)"] == own
    assert separate.trainer_bytes - ppo.trainer_bytes == own
    assert separate_disk.checkpoint_bytes - ppo_disk.checkpoint_bytes == 3 * model["trainable weights (float32)"]


def test_the_memory_plan_of_hiper_adds_its_heads_and_the_low_heads_second_pass_to_ppos():
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.memory_plan import GIB, disk_plan_for_config, plan_for_config

    def plans(algo, **hiper):
        config = TrainConfig.from_dict({"env_id": ENV, "algo": algo, "tiny": {"hidden_size": 32},
                                        "policy": {"mode": "generate", "max_new_tokens": 24}, "algorithm.hiper": hiper})
        return plan_for_config(config, "cpu", 16 * GIB), disk_plan_for_config(config, "cpu")

    (ppo, ppo_disk), (hiper, hiper_disk), (two, _) = plans("ppo"), plans("hiper"), plans("hiper", switch_head=False)
    # Per turn HiPER reads the high and switch heads at the prompt, as PPO reads its one, and the low
    # head at the token closing </subgoal>: one more pass with gradients over the prompt and the response
    # up to there, at most 1,024 + 24 tokens. The tiny model's float32 activations (5,248 bytes a token
    # and layer, two layers and one layer's backward) over the micro-batch of 512 such sequences:
    low_pass = 3 * 5_248 * 512 * (1024 + 24)
    assert {item.name: item.bytes for item in hiper.items}["low value pass activations"] == low_pass
    # Three heads where PPO has one: two more of 16 x 33 bytes (weights, gradients, two AdamW moments).
    assert hiper.trainer_bytes - ppo.trainer_bytes == 2 * 16 * 33 + low_pass
    assert hiper.peak_bytes - ppo.peak_bytes == pytest.approx(1.1 * (2 * 16 * 33 + low_pass))
    assert two.trainer_bytes - ppo.trainer_bytes == 16 * 33 + low_pass  # without the switch head
    assert hiper_disk.checkpoint_bytes - ppo_disk.checkpoint_bytes == 2 * 3 * 4 * 33


def test_under_lora_the_value_head_trains_with_the_adapters_and_the_base_stays_frozen(policy, tmp_path):
    from ptgpo_algos.policy import load_policy

    path = tmp_path / "saved"
    policy.save_pretrained(path)
    lora = load_policy(str(path), lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    critic = _critic(lora)
    critic.loss(lora, _targeted_samples(lora), 6.0)[0].backward()
    assert all(p.requires_grad and p.grad is not None and p.grad.any() for p in critic.parameters())
    adapters = dict(lora.named_trainable())
    assert adapters and all("lora" in name for name in adapters)
    assert any(p.grad is not None and p.grad.any() for p in adapters.values())
    frozen = [p for name, p in lora.model.named_parameters() if "lora" not in name]
    assert all(not p.requires_grad and p.grad is None for p in frozen)


def test_a_critic_model_of_its_own_is_trained_by_the_value_loss_alone(policy):
    from ptgpo_algos.updates.loss_registry import get_loss
    from ptgpo_algos.updates.losses import PolicyLoss
    from ptgpo_algos.updates.samples import accumulate_gradients

    critic, samples = _critic(policy, shared_trunk=False), _targeted_samples(policy)
    assert not critic.shares_trunk and critic.trunk is not policy
    own = list(critic.trunk.parameters())
    assert own and not {id(p) for p in own} & {id(p) for p in policy.parameters()}
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": 0.2, "clip_ratio_c": 3.0})
    _zero_grads(policy, critic)
    accumulate_gradients(policy, samples, loss, float(len(samples)), None)
    assert all(p.grad is None for p in critic.parameters())
    _zero_grads(policy, critic)
    critic.loss(policy, samples, float(len(samples)))[0].backward()
    assert all(p.grad is None for p in policy.parameters())
    assert any(p.grad is not None and p.grad.any() for p in own)
    restored = _critic(policy, shared_trunk=False)
    with torch.no_grad():
        own[0].add_(1.0)
    restored.load_state_dict(critic.state_dict())
    torch.testing.assert_close(dict(restored.trunk.named_trainable()), dict(critic.trunk.named_trainable()))
    with pytest.raises(KeyError, match="shared_trunk"):
        _critic(policy).load_state_dict(critic.state_dict())
    _zero_grads(policy, critic)


def test_the_viewer_recomputes_a_ppo_runs_credit_from_its_recorded_values(tmp_path, monkeypatch):
    from ptgpo_algos.files import read_jsonl
    from ptgpo_algos.training.trainer import run_training
    from ptgpo_algos.viewer.credit import decision_credit, estimator_credits

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = _lake(tmp_path / "run", iterations=2, max_steps=3, **{"run.record_rollouts": 1})
    run_training(config, progress=False)
    rows = list(read_jsonl(tmp_path / "run" / "rollouts" / "iteration-000002.jsonl"))
    assert all(isinstance(row["extras"]["value"], float) for row in rows)
    credit = estimator_credits(config, 2, rows)[0]
    assert credit.name == "ppo" and credit.error is None
    assert [decision_credit(row, credit) for row in rows] == pytest.approx([row["advantage"] for row in rows])


def test_the_verl_bridge_refuses_ppo_which_reads_our_critic():
    from ptgpo_algos.integrations.verl import bridged_estimators, check_bridged

    assert "ppo" not in bridged_estimators()
    with pytest.raises(ValueError, match="verl runs PPO with its own critic"):
        check_bridged("ppo")


def test_final_model_keeps_the_critic_and_a_run_started_from_it_takes_it_back(tmp_path, monkeypatch):
    from ptgpo_algos.critic.files import CRITIC_FILE
    from ptgpo_algos.training.trainer import Trainer

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    trained = Trainer(_lake(tmp_path / "run", iterations=2, seed=3, group_size=6, tasks_per_iteration=4, max_steps=8,
                            algorithm={"critic": {"value_head_lr": 2e-2}}), progress=False)
    trained.train()
    final = tmp_path / "run" / "final_model"
    assert (final / CRITIC_FILE).is_file()  # final_model/ held the policy alone: the critic was lost
    prompts = [s.decision.prompt_ids for s in _targeted_samples(trained.policy)]
    saved = trained.critic.score(trained.policy, prompts, batch_size=4)
    assert np.abs(saved).max() > 0  # the head learnt something to take back
    again = _models(_lake(tmp_path / "next", model=str(final), tiny={}))
    np.testing.assert_array_equal(again.critic.score(again.policy, prompts, batch_size=4), saved)
    assert not _models(_lake(tmp_path / "fresh")).critic.head.weight.any()  # a model without a saved critic


def _models(config):
    """A trainer of ``config`` with its models built (what a run starts with), nothing trained."""
    from ptgpo_algos.training.trainer import Trainer

    trainer = Trainer(config, progress=False)
    trainer.device = trainer.placement.device(config)
    trainer.build_models()
    return trainer


def test_a_saved_critic_that_does_not_fit_is_refused_naming_the_file(tmp_path, policy):
    from ptgpo_algos.critic.files import CRITIC_FILE, load_saved_critic, save_critic

    save_critic(_critic(policy, shared_trunk=False), tmp_path)
    assert load_saved_critic(_critic(policy, shared_trunk=False), tmp_path)
    with pytest.raises(ValueError, match=rf"{CRITIC_FILE}: the saved critic does not fit this run's .*algorithm\.critic"):
        load_saved_critic(_critic(policy), tmp_path)
    assert not load_saved_critic(_critic(policy), tmp_path / "elsewhere")


def _spo3_batch(policy, task):
    from ptgpo_algos.rollouts.spo3.search import StateStats
    from ptgpo_algos.rollouts.spo3.collection import collect_spo3_rollouts
    from ptgpo_algos.rollouts.spo3.settings import Spo3Config

    return collect_spo3_rollouts(policy, [task], Spo3Config(g_max=2, trajectories=4), StateStats(),
                                 generator=torch.Generator().manual_seed(0))[0]


def _bpo_batch(policy, task):
    from ptgpo_algos.rollouts.bpo.collection import collect_bpo_rollouts
    from ptgpo_algos.rollouts.bpo.settings import BpoConfig

    return collect_bpo_rollouts(policy, [task], BpoConfig(), generator=torch.Generator().manual_seed(0))[0]


@pytest.mark.parametrize("collect", [_spo3_batch, _bpo_batch], ids=["spo3", "bpo"])
def test_a_truncated_3spo_or_bpo_episode_is_bootstrapped_from_its_final_state(policy, collect):
    # 3SPO recorded no final state: its episodes cut off by the horizon counted as terminated in GAE.
    from ptgpo_algos.advantages.ppo import ppo_targets
    from ptgpo_algos.advantages.table import StepTable
    from ptgpo_algos.records import Task
    from ptgpo_algos.rollouts.collection import FINAL_CONTEXT

    batch = collect(policy, Task(ENV, 5, dict(LAKE), max_steps=2))
    trajectories = [t for group in batch for t in group]
    cut = [t for t in trajectories if len(t) == 2 and t.steps[-1].reward == 0.0 and FINAL_CONTEXT in t.steps[-1].extras]
    assert cut, "a 2-step horizon on a 3x3 lake cuts episodes off"
    for trajectory in cut:
        context = trajectory.steps[-1].extras[FINAL_CONTEXT]
        assert context.history[-1][1] == trajectory.steps[-1].action and context.task == trajectory.steps[-1].context.task
    critic = _critic(policy)
    critic.annotate(batch, policy, batch_size=4)
    assert all(t.meta["bootstrap_value"] != 0.0 for t in cut)
    # The last step's GAE target is its reward plus gamma times the final state's value (lambda 1 on one step).
    table = StepTable.from_batch(batch)
    _, returns = ppo_targets(table, gamma=0.9, invalid_penalty=0.0, gae_lambda=1.0)
    ends = np.cumsum([len(t) for t in trajectories]) - 1
    for trajectory, end in zip(trajectories, ends):
        if trajectory in cut:
            assert returns[end] == pytest.approx(trajectory.steps[-1].reward + 0.9 * trajectory.meta["bootstrap_value"])


def test_across_ranks_the_advantages_are_whitened_over_the_whole_batch():
    # Each rank whitened its own groups: a rank's advantages had mean 0 alone, not the batch's.
    from ptgpo_algos.advantages import StepAdvantages
    from ptgpo_algos.advantages.estimate import GroupDiagnostics
    from ptgpo_algos.training.trainer import whitened_over_ranks

    # each rank's groups of trajectories
    ranks = [StepAdvantages.from_nested(nested) for nested in ([[[1.0, 0.0], [3.0]]], [[[0.0, 0.0], [4.0, 2.0]]])]
    diagnostics = [GroupDiagnostics(2, 3, 2, False, False, {}), GroupDiagnostics(2, 4, 2, False, False, {})]
    flat = [1.0, 0.0, 3.0, 0.0, 0.0, 4.0, 2.0]
    mean, std = 10.0 / 7, float(np.std(flat))
    mine, counts = whitened_over_ranks(ranks[1], diagnostics[1:], lambda local: [ranks[0].values, local])
    assert mine.nested() == [[[(0.0 - mean) / (std + 1e-8)] * 2,
                              [(4.0 - mean) / (std + 1e-8), (2.0 - mean) / (std + 1e-8)]]]
    assert counts[0].nonzero_steps == 4
    first, _ = whitened_over_ranks(ranks[0], diagnostics[:1], lambda local: [local, ranks[1].values])
    together = np.concatenate([first.values, mine.values])
    assert np.mean(together) == pytest.approx(0.0, abs=1e-12) and np.std(together) == pytest.approx(1.0, abs=1e-7)


# ------------------------------------------------------------------------------- a plugin's critic
class PluginCritic(Critic):
    """A plugin estimator's own critic, named by its import string: PPO's, noting the runs built with it."""

    built: list[str] = []

    @classmethod
    def from_algorithm(cls, algorithm, policy):
        cls.built.append(algorithm.name)
        return super().from_algorithm(algorithm, policy)


def test_a_plugin_estimator_declares_its_own_critic_which_the_trainer_builds(tmp_path, monkeypatch):
    from ptgpo_algos.advantages import ESTIMATORS
    from ptgpo_algos.advantages.config import ConfigKey, real_rule
    from ptgpo_algos.advantages.ppo import ppo_targets
    from ptgpo_algos.advantages.registry import Estimate, register_estimator
    from ptgpo_algos.critic.settings import CRITIC_ESTIMATORS, uses_critic
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(PluginCritic, "built", [])
    keys = {"gae_lambda": ConfigKey("GAE's lambda", "a number in [0, 1]", real_rule(0.0, 1.0))}
    try:
        # Declaring the critic imports nothing: a module that does not exist is only found missing when built.
        register_estimator("plugin_gae", coverage_beta=None, keys=keys, critic=f"{__name__}:PluginCritic")(
            lambda table, signal, *, gamma=0.9, invalid_penalty=0.1, gae_lambda=0.9:
            Estimate(ppo_targets(table, gamma, invalid_penalty, gae_lambda)[0]))
        register_estimator("plugin_missing", coverage_beta=None, critic="no_such_module_here:Critic")(
            lambda table, signal: Estimate(np.zeros(len(table.value))))
        assert uses_critic("plugin_gae") and uses_critic("plugin_missing") and not uses_critic("grpo")
        summary = run_training(_lake(tmp_path / "run", algo="plugin_gae", iterations=1), progress=False)
        assert PluginCritic.built == ["plugin_gae"]
        assert np.isfinite(metric_rows(summary.metrics_path)[0]["update/value_loss"])
        with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
            run_training(_lake(tmp_path / "missing", algo="plugin_missing", iterations=1), progress=False)
    finally:
        for name in ("plugin_gae", "plugin_missing"):
            ESTIMATORS.unregister(name)
            CRITIC_ESTIMATORS.unregister(name)


def test_the_built_in_critics_are_named_by_import_string_and_built_from_the_algorithm_section(policy):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.critic.component import build_critic
    from ptgpo_algos.hiper.critic import HiperCritic

    ppo = build_critic(TrainConfig.from_dict({"algo": "ppo"}).algorithm, policy)
    hiper = build_critic(TrainConfig.from_dict({"algo": "hiper", "policy": {"mode": "generate"}}).algorithm, policy)
    assert type(ppo) is Critic and ppo.head.n_values == 1
    assert type(hiper) is HiperCritic and hiper.head.n_values == 3
    assert build_critic(TrainConfig.from_dict({"algo": "grpo"}).algorithm, policy) is None
