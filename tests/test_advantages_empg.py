"""EMPG on top of the estimators: a hand-computed batch, its limits and properties, the key's rule, and
a short training run with it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptgpo_algos import ESTIMATORS, Step, Trajectory, compute_advantages
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Decision
from ptgpo_algos.training.trainer import run_training


def S(state: str, action: str, reward: float, entropy: float | None) -> Step:
    decision = None if entropy is None else Decision(action, action, [1], [2], [-0.1], entropy)
    # The strategy reward is what 3spo credits (its rollouts record it): x 0, y 1, z 2; the value is what
    # ppo reads (its critic's, recorded by the trainer); the credit what hiper reads (its critic's).
    return Step(state, action, reward, decision=decision,
                extras={"strategy_reward": float(ord(action) % 3), "value": 0.25 * len(state),
                        "credit": 0.5 - ord(action) % 2})


def batch(entropies=((0.0, 1.0), (2.0,))) -> list[list[Trajectory]]:
    (a, b), (c,) = entropies
    return [[Trajectory([S("s", "x", 0.0, a), S("t", "y", 1.0, b)]), Trajectory([S("s", "z", 0.0, c)])]]


def flat(nested) -> np.ndarray:
    return np.array([x for group in nested for trajectory in group for x in trajectory], dtype=float)


def test_hand_computed_on_grpo():
    # GRPO, mean_norm: R = 1, 0 -> A = 0.5, 0.5, -0.5. Entropies 0, 1, 2 -> H~ = 0, 1/2, 1 (to 1e-8).
    h = [0.0, 1.0 / (2 + 1e-8), 2.0 / (2 + 1e-8)]
    e = [math.exp(-x) for x in h]
    g = [x / (sum(e) / 3 + 1e-8) for x in e]
    modulated = [g[0] * 0.5 + 0.1 * e[1], g[1] * 0.5, g[2] * -0.5]  # only step 0 has a next step
    mean = sum(modulated) / 3
    expected = [x - mean for x in modulated]
    actual = flat(compute_advantages("grpo", batch(), norm="mean_norm", empg=True))
    np.testing.assert_allclose(actual, expected, rtol=1e-12)


def test_zero_steepness_and_bonus_without_centring_is_the_estimator():
    off = {"k": 0.0, "zeta": 0.0, "center": False}
    for name in ESTIMATORS:
        np.testing.assert_allclose(
            flat(compute_advantages(name, batch(), empg=off)), flat(compute_advantages(name, batch())), rtol=1e-7,
            err_msg=name,
        )


def test_confident_steps_are_scaled_up_and_uncertain_ones_down():
    plain = flat(compute_advantages("grpo", batch(), norm="mean_norm"))
    scaled = flat(compute_advantages("grpo", batch(), norm="mean_norm", empg={"zeta": 0.0, "center": False}))
    ratio = scaled / plain
    assert ratio[0] > 1 > ratio[2] and ratio[0] > ratio[1] > ratio[2]
    assert np.mean(ratio) == pytest.approx(1.0, rel=1e-7)  # g has mean 1 over the batch


def test_the_bonus_goes_to_the_step_before_a_confident_one_and_centring_zeroes_the_mean():
    confident_next = flat(compute_advantages("grpo", batch(((2.0, 0.0), (1.0,))), empg={"k": 0.0, "center": False}))
    uncertain_next = flat(compute_advantages("grpo", batch(((0.0, 2.0), (1.0,))), empg={"k": 0.0, "center": False}))
    assert confident_next[0] - uncertain_next[0] == pytest.approx(0.1 * (1 - math.exp(-1)), rel=1e-6)
    assert confident_next[1:].tolist() == uncertain_next[1:].tolist()
    centred = flat(compute_advantages("gigpo", batch(), empg=True))
    assert abs(centred.mean()) < 1e-12


def test_steps_without_a_recorded_entropy_are_refused():
    with pytest.raises(ValueError, match=r"empg needs each step's policy entropy.*1 step"):
        compute_advantages("grpo", batch(((0.0, None), (1.0,))), empg=True)
    assert flat(compute_advantages("grpo", batch(((0.0, None), (1.0,))))).size == 3  # off: no entropy needed


@pytest.mark.parametrize("value", [1, "yes", {"k": -1.0}, {"kf": 1.0}, {"center": 1}, {"zeta": math.inf}])
def test_bad_settings_name_the_key(value):
    with pytest.raises(ValueError, match=r"empg=.* is invalid .*: empg \(entropy-modulated"):
        compute_advantages("grpo", batch(), empg=value)


def test_the_config_keeps_complete_settings():
    config = TrainConfig.from_dict({"algo": "gigpo", "algo_config": {"empg": {"zeta": 0.05}}})
    assert config.algorithm.config["empg"] == {"k": 1.0, "k_f": 1.0, "zeta": 0.05, "center": True}
    with pytest.raises(ValueError, match=r"algorithm.config \(algo_config\): empg="):
        TrainConfig.from_dict({"algo": "gigpo", "algo_config": {"empg": {"beta": 1}}})


def test_a_short_run_trains_with_empg(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=8, algo="gigpo",
        algo_config={"empg": True}, group_size=4, tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2,
        checkpoint_every=2, ppo_epochs=1, minibatch_size=16, out_dir=str(tmp_path / "run"),
        tiny={"hidden_size": 32, "pretrain_steps": 0},
    ))
    assert run_training(config, progress=False).iterations == 2
