"""The update's memory path and its pi_old: micro-batches whose gradients add up to the mini-batch's,
pi_old and the reference scored before the update without gradients, dual clip, the log-ratio
clamp, truncated importance sampling and activation offload."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ptgpo_algos.updates.settings import OptimConfig
from ptgpo_algos.updates.loss_registry import get_loss
from ptgpo_algos.updates.losses import PolicyLoss, policy_loss, ppo_clip_loss
from ptgpo_algos.policy import Context, load_policy
from ptgpo_algos.updates.samples import (
    COUNTS,
    TrainingSample,
    accumulate_gradients,
    micro_batches,
    recompute_old_logprobs,
    reference_logprobs,
    trained_samples,
)
from ptgpo_algos.updates.updater import ppo_update

ENV = "ptgpo/FrozenLake-v0"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0), env_ids=[ENV],
                            cache_dir=tmp_path_factory.mktemp("cache"))


def _contexts():
    base = "You stand on the start S.\nP F F\nF H F\nF F G"
    return [Context("Walk across the frozen lake to the goal G.", base + "\n" * k, ["go left", "go right", "go up"][: 1 + k % 3])
            for k in range(5)]


def _samples(policy, seed=0):
    decisions = policy.decide(_contexts() + _contexts()[:2], generator=torch.Generator().manual_seed(seed))
    advantages = [0.8, -1.3, 0.0, 2.0, -0.4, 0.6, -1.1]
    return [TrainingSample(d, a, w) for d, a, w in zip(decisions, advantages, [1.0, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0])]


# ----------------------------------------------------------------------------- dual clip, clamp, TIS
def test_dual_clip_bounds_the_loss_of_negative_advantages():
    logp = torch.log(torch.tensor([[5.0], [5.0], [2.0], [0.5]]))
    old = torch.zeros(4, 1)
    adv = torch.tensor([-1.0, 1.0, -1.0, -2.0])
    plain, _ = ppo_clip_loss(logp, old, adv, 0.2)
    dual, _ = ppo_clip_loss(logp, old, adv, 0.2, clip_ratio_c=3.0)
    # By hand: -min(r A, clip(r) A) = 5, -1.2, 2, 1.6 (r = 0.5 clipped to 0.8 with A = -2); the dual
    # clip caps the first at 3 |A| = 3 and leaves the others (2 < 3, 1.6 < 6, A > 0 untouched).
    assert torch.allclose(plain[:, 0], torch.tensor([5.0, -1.2, 2.0, 1.6]), atol=1e-6)
    assert torch.allclose(dual[:, 0], torch.tensor([3.0, -1.2, 2.0, 1.6]), atol=1e-6)


def test_log_ratio_is_clamped_before_exponentiation():
    logp, old = torch.tensor([[0.0]]), torch.tensor([[-200.0]])  # a ratio of e^200 would be inf in float32
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([-1.0]))
    assert torch.isfinite(loss).all() and math.isclose(float(loss), math.exp(20.0), rel_tol=1e-5)


def test_importance_weights_scale_each_units_ppo_term():
    logp = torch.tensor([[-1.0, -2.0]])
    old = torch.tensor([[-1.0, -2.0]])
    mask, weight, adv = torch.ones(1, 2), torch.ones(1), torch.tensor([1.5])
    loss, _ = policy_loss(logp, old, adv, mask, weight, is_weights=torch.tensor([[0.5, 2.0]]))
    assert math.isclose(float(loss), -(1.5 * 0.5 + 1.5 * 2.0) / 2, rel_tol=1e-6)


# ----------------------------------------------------------------------------- micro-batches
def test_micro_batches_cut_in_order():
    assert micro_batches([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert micro_batches([1, 2, 3], None) == [[1, 2, 3]]
    assert micro_batches([1, 2, 3], 8) == [[1, 2, 3]]


@pytest.mark.parametrize("mode", ["generate", "choose"])
def test_micro_batch_gradients_equal_the_whole_mini_batchs(tiny_path, mode):
    policy = load_policy(tiny_path, mode=mode, max_new_tokens=8)
    samples = _samples(policy)
    reference_logprobs(policy.reference_policy(), samples, 3)
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": 0.2, "clip_ratio_c": 3.0}, entropy_coef=0.01, kl_coef=0.1)
    total = sum(s.weight * (1 if mode == "choose" else len(s.decision.response_ids)) for s in samples)

    def gradients(size):
        policy.model.zero_grad(set_to_none=True)
        stats = accumulate_gradients(policy, samples, loss, total, size)
        return [p.grad.clone() for p in policy.parameters()], stats

    whole, whole_stats = gradients(None)
    for size in (1, 3):
        parts, stats = gradients(size)
        error = math.sqrt(sum(float((a - b).pow(2).sum()) for a, b in zip(parts, whole)))
        norm = math.sqrt(sum(float(b.pow(2).sum()) for b in whole))
        assert norm > 0 and error / norm < 1e-5, (size, error / norm)
        # A micro-batch's shape picks other BLAS kernels, which round a log-probability (|log p| < 10)
        # in float32 differently: up to ~1e-6, so approx_kl_old, 0 for the whole batch, is not exactly 0.
        for key, value in whole_stats.items():
            if key in COUNTS:  # smaller parts share fewer prefixes: they compute more tokens, never fewer
                assert stats[key] >= value, key
                continue
            assert math.isclose(stats[key], value, rel_tol=1e-5, abs_tol=1e-6), key
    policy.model.zero_grad(set_to_none=True)


def test_activation_offload_gives_the_same_gradients(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    samples = _samples(policy, seed=4)
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": 0.2, "clip_ratio_c": None})
    grads = []
    for offload in (False, True):
        policy.model.zero_grad(set_to_none=True)
        accumulate_gradients(policy, samples, loss, 50.0, 2, activation_offload=offload)
        grads.append([p.grad.clone() for p in policy.parameters()])
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(*grads))


# ----------------------------------------------------------------------------- pi_old and the reference
def test_recomputed_old_logprobs_are_the_current_weights_scores(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    samples = _samples(policy, seed=1)
    assert recompute_old_logprobs(policy, samples, 2)["old_logprob_drift"] < 1e-4  # the same weights played them
    with torch.no_grad():  # the weights move on (a lagged collector, or another engine's kernels)
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    stats = recompute_old_logprobs(policy, samples, 2)
    assert stats["old_logprob_drift"] > 1e-3
    with torch.no_grad():
        scored = policy.score([s.decision for s in samples])
    for row, s in enumerate(samples):
        n = len(s.decision.response_ids)
        assert torch.allclose(s.old_logprobs, scored.logprobs[row, :n].float(), atol=1e-5)
        assert not torch.allclose(s.old_logprobs, torch.tensor(s.decision.logprobs), atol=1e-4)


def test_ppo_update_ratios_start_at_one_against_a_recomputed_pi_old(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    samples = _samples(policy, seed=2)
    with torch.no_grad():  # the behaviour log-probs came from other weights
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    trained = trained_samples(samples, entropy_coef=0.0, kl=False)
    assert [s.advantage for s in trained] == [s.advantage for s in samples if s.advantage]
    recompute_old_logprobs(policy, trained, 4)
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=0.0)
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=1.0, epochs=1, minibatch_size=64,
                        micro_batch_size=2, clip_ratio_c=3.0, tis_cap=2.0)
    stats = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    assert abs(stats["approx_kl_old"]) < 1e-5 and stats["clip_fraction"] == 0.0


def test_reference_logprobs_are_computed_before_the_update(tiny_path):
    policy = load_policy(tiny_path, mode="choose")
    samples = _samples(policy, seed=3)
    reference = policy.reference_policy()
    reference_logprobs(reference, samples, 3)
    assert all(s.ref_logprobs is not None and s.ref_logprobs.shape == (1,) for s in samples)
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-2)
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.5, max_grad_norm=1.0, epochs=2, minibatch_size=4,
                        micro_batch_size=2)
    stats = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    assert stats["updates"] >= 2 and stats["kl"] > 0.0  # the policy moved away from the stored reference


def test_the_first_steps_pi_old_comes_from_its_own_forward_and_equals_a_recomputed_one(tiny_path):
    from ptgpo_algos.updates.settings import AlgorithmConfig
    from ptgpo_algos.updates.updater import Updater

    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=1.0, epochs=2, minibatch_size=3,
                        micro_batch_size=2)
    runs = []
    # report_drift scores every sample before the update (the drift needs them all); without it the
    # first mini-batch's samples take pi_old from their own forward in the first step.
    for report_drift in (True, False):
        policy = load_policy(tiny_path, mode="generate", max_new_tokens=8)
        samples = _samples(policy, seed=5)
        with torch.no_grad():  # the rollouts came from other weights: pi_old is not the behaviour policy
            for p in policy.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
        optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-3)
        updater = Updater(policy, optimizer, optim, AlgorithmConfig(), rng=np.random.default_rng(0),
                          old_logprobs="recompute", report_drift=report_drift)
        updater.prepare(samples)
        scored_before = [s.old_logprobs is not None for s in samples if s.advantage]
        stats = updater.run(samples)
        runs.append((policy, samples, scored_before, stats))
    (full, full_samples, full_scored, full_stats), (skip, skip_samples, skip_scored, skip_stats) = runs
    assert all(full_scored) and 0 < skip_scored.count(False) < len(skip_scored)
    assert full_stats["updates"] == skip_stats["updates"] >= 4
    for key, value in full_stats.items():
        assert math.isclose(skip_stats[key], value, rel_tol=1e-4, abs_tol=1e-6), key
    for a, b in zip(full_samples, skip_samples):
        if a.advantage:
            assert torch.allclose(a.old_logprobs, b.old_logprobs, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(full.parameters(), skip.parameters()))


# ----------------------------------------------------------------------------- the loss protocol
def _scaled_pg(logprobs, old_logprobs, advantages, *, clip_ratio=0.2, scale=1.0):
    """A plugin's loss: the unclipped policy gradient times its own key ``scale``, no clip mask."""
    return -scale * torch.exp(logprobs - old_logprobs) * advantages[:, None], None


@pytest.fixture()
def scaled_pg():
    from ptgpo_algos.advantages.config import ConfigKey, real_rule
    from ptgpo_algos.updates.loss_registry import LOSSES, register_loss

    register_loss("scaled-pg", keys={"scale": ConfigKey("factor", "a finite number >= 0", real_rule(0.0))})(_scaled_pg)
    yield "scaled-pg"
    LOSSES.unregister("scaled-pg")


def _gradients(loss, logprobs, entropy):
    logprobs = logprobs.clone().requires_grad_(True)
    entropy = entropy.clone().requires_grad_(True)
    old, ref = torch.tensor([[-1.0, -0.7, -2.0], [-0.3, -1.5, -0.9]]), torch.tensor([[-1.4, -0.2, -2.5], [-0.1, -1.0, -1.2]])
    mask, weight, adv = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]), torch.tensor([2.0, 1.0]), torch.tensor([0.6, -1.1])
    value, stats = loss(logprobs, old, adv, mask, weight, entropy=entropy, ref_logprobs=ref)
    value.backward()
    return logprobs.grad, torch.zeros_like(entropy) if entropy.grad is None else entropy.grad, stats


def test_kl_and_entropy_coefficients_act_on_the_gradient_of_every_registered_loss(scaled_pg):
    from ptgpo_algos.updates.settings import AlgorithmConfig
    from ptgpo_algos.updates.loss_registry import LOSSES
    from ptgpo_algos.updates.losses import low_var_kl, weighted_token_mean
    from ptgpo_algos.updates.updater import policy_loss_for

    logprobs = torch.tensor([[-0.9, -0.8, -1.7], [-0.4, -1.2, -1.0]])
    entropy = torch.tensor([[1.2, 0.4, 0.9], [0.7, 1.1, 0.3]])
    mask, weight = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]), torch.tensor([2.0, 1.0])
    ref = torch.tensor([[-1.4, -0.2, -2.5], [-0.1, -1.0, -1.2]])
    # By hand: the KL term adds kl_coef x d mean(k3)/d logprobs, the bonus -entropy_coef x mask weight / sum.
    p = logprobs.clone().requires_grad_(True)
    weighted_token_mean(low_var_kl(p, ref), mask, weight).backward()
    kl_gradient = p.grad
    entropy_gradient = -mask * weight[:, None] / (mask * weight[:, None]).sum()
    for name in LOSSES:
        config = {"scale": 3.0} if name == scaled_pg else {}
        algorithm = AlgorithmConfig(name="grpo", loss=name, loss_config=config)
        off = policy_loss_for(OptimConfig(kl_coef=0.0, entropy_coef=0.0), algorithm)
        on = policy_loss_for(OptimConfig(kl_coef=0.5, entropy_coef=0.1), algorithm)
        base_lp, base_ent, _ = _gradients(off, logprobs, entropy)
        lp, ent, stats = _gradients(on, logprobs, entropy)
        assert torch.allclose(lp - base_lp, 0.5 * kl_gradient, atol=1e-6), name
        assert torch.allclose(ent - base_ent, 0.1 * entropy_gradient, atol=1e-6), name
        assert stats["kl"] > 0 and stats["entropy"] > 0 and "pg_loss" in stats
    # The plugin's own key reached it (its policy-gradient term tripled), and it has no clip mask to log.
    scaled = policy_loss_for(OptimConfig(kl_coef=0.0), AlgorithmConfig(name="grpo", loss=scaled_pg, loss_config={"scale": 3.0}))
    plain = policy_loss_for(OptimConfig(kl_coef=0.0), AlgorithmConfig(name="grpo", loss=scaled_pg))
    *_, tripled = _gradients(scaled, logprobs, entropy)
    *_, once = _gradients(plain, logprobs, entropy)
    assert math.isclose(tripled["pg_loss"], 3.0 * once["pg_loss"], rel_tol=1e-6) and "clip_fraction" not in once


def test_a_losss_keys_follow_the_estimators_rules(scaled_pg):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.updates.loss_registry import LOSSES

    config = TrainConfig.from_dict({"algorithm": {"loss": scaled_pg, "loss_config": {"scale": "1e-1"}}})
    assert config.algorithm.loss_config == {"scale": 0.1}  # converted by its rule, as an estimator's key
    with pytest.raises(ValueError, match=r"algorithm.loss_config: unknown config key\(s\) 'scal' for policy loss "
                                         r"'scaled-pg'; valid keys: scale"):
        TrainConfig.from_dict({"algorithm": {"loss": scaled_pg, "loss_config": {"scal": 1.0}}})
    with pytest.raises(ValueError, match=r"scale=-1.0 is invalid for policy loss 'scaled-pg'.*a finite number >= 0"):
        TrainConfig.from_dict({"algorithm": {"loss": scaled_pg, "loss_config": {"scale": -1.0}}})
    with pytest.raises(ValueError, match=r"clip_ratio is the optim section's \(optim.clip_ratio\)"):
        TrainConfig.from_dict({"algorithm": {"loss_config": {"clip_ratio": 0.3}}})

    def old_protocol(logprobs, old_logprobs, advantages, mask, weight, **keywords):
        return policy_loss(logprobs, old_logprobs, advantages, mask, weight, **keywords)

    LOSSES.register("old-protocol", old_protocol)
    try:
        with pytest.raises(ValueError, match=r"algorithm.loss \(loss\): policy loss 'old-protocol': a loss takes \(logprobs, "
                                             r"old_logprobs, advantages, \*, keys...\)"):
            TrainConfig.from_dict({"algorithm": {"loss": "old-protocol"}})
    finally:
        LOSSES.unregister("old-protocol")
