"""GraphGPO: distances over a group's transition graph and the advantages they give, on hand-computed
groups; its properties; a short training run with it."""

from __future__ import annotations

import numpy as np
import pytest

from ptgpo_algos import Step, Trajectory, compute_advantages
from ptgpo_algos.advantages import StepTable
from ptgpo_algos.advantages.graphgpo import success_distances
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.trainer import run_training


def T(*steps: Step) -> Trajectory:
    return Trajectory(list(steps))


def S(state: str, action: str, reward: float = 0.0, valid: bool = True) -> Step:
    return Step(state, action, reward, valid)


def detour_group() -> list[Trajectory]:
    """A -> B -> C -> success; A -> D -> A -> E (fails); A -> B (fails)."""
    return [
        T(S("A", "x"), S("B", "y"), S("C", "z", 1.0)),
        T(S("A", "w"), S("D", "u"), S("A", "x"), S("E", "q")),
        T(S("A", "x"), S("B", "v")),
    ]


def flat(nested) -> np.ndarray:
    return np.array([x for group in nested for trajectory in group for x in trajectory], dtype=float)


def test_distances_by_hand():
    # d(success) = 0, d(C) = 1, d(B) = 2, d(A) = 3, d(D) = 4; E and the failed ends lead nowhere:
    # the largest finite distance + 1 = 5.
    table = StepTable.from_batch([detour_group()])
    next_distance, reachable, has_success = success_distances(table, 1.0)
    assert next_distance.tolist() == [2, 1, 0, 4, 3, 5, 5, 2, 5]
    assert reachable.tolist() == [True, True, True, True, True, False, False, True, False]
    assert has_success.tolist() == [True]


def test_advantages_by_hand_mean_norm():
    # Episode term: R = 1, 0, 0 -> 2/3, -1/3, -1/3. Graph returns 0.1^d(s'):
    # pool A = [1e-2 (A->B), 1e-4 (A->D), 1e-5 (A->E), 1e-2 (A->B)], mean 5.0275e-3;
    # pool B = [1e-1 (B->C), 1e-5 (B->end)], mean 5.0005e-2; C and D are left once: 0.
    mean_a, mean_b = (2e-2 + 1e-4 + 1e-5) / 4, (1e-1 + 1e-5) / 2
    expected = [
        2 / 3 + 1e-2 - mean_a, 2 / 3 + 1e-1 - mean_b, 2 / 3,
        -1 / 3 + 1e-4 - mean_a, -1 / 3, -1 / 3 + 1e-5 - mean_a, -1 / 3,
        -1 / 3 + 1e-2 - mean_a, -1 / 3 + 1e-5 - mean_b,
    ]
    actual = flat(compute_advantages("graphgpo", [detour_group()], norm="mean_norm", distance_base=0.1))
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-15)


def test_a_step_towards_success_in_a_failed_trajectory_gains_and_a_detour_loses():
    graph = flat(compute_advantages("graphgpo", [detour_group()], omega=1.0))
    episode = flat(compute_advantages("grpo", [detour_group()]))
    credit = graph - episode
    assert credit[7] > 0  # the failed A -> B took the step the success took
    assert credit[3] < 0 and credit[5] < 0  # the detour A -> D and the dead end A -> E
    assert credit[2] == 0 and credit[4] == 0  # C and D are left by one step each


def test_a_group_without_success_is_grpo():
    group = [T(S("A", "x"), S("B", "y")), T(S("A", "z"), S("C", "y", valid=False)), T(S("A", "x"))]
    np.testing.assert_array_equal(
        flat(compute_advantages("graphgpo", [group])), flat(compute_advantages("grpo", [group]))
    )


def test_the_success_scale_cancels_under_mean_std_norm_and_scales_mean_norm():
    scaled = [
        [Trajectory([Step(s.state_key, s.action, 10 * s.reward, s.valid) for s in t]) for t in detour_group()]
    ]
    ours = flat(compute_advantages("graphgpo", [detour_group()], invalid_penalty=0.0))
    recipe = flat(compute_advantages("graphgpo", scaled, success_reward=10.0, invalid_penalty=0.0))
    # Equal but for the 1e-6 guard added to each std, which weighs more against the smaller scale.
    np.testing.assert_allclose(ours, recipe, rtol=5e-3)
    # mean_norm is linear in the scale: the recipe's 10-for-success gives 10 times our advantages.
    ours = flat(compute_advantages("graphgpo", [detour_group()], invalid_penalty=0.0, norm="mean_norm"))
    recipe = flat(compute_advantages("graphgpo", scaled, success_reward=10.0, invalid_penalty=0.0, norm="mean_norm"))
    np.testing.assert_allclose(10 * ours, recipe, rtol=1e-12)


def test_groups_are_independent():
    other = [T(S("A", "x", 1.0)), T(S("A", "y"))]
    together = compute_advantages("graphgpo", [detour_group(), other])
    assert together[0] == compute_advantages("graphgpo", [detour_group()])[0]
    assert together[1] == compute_advantages("graphgpo", [other])[0]


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, "x", True])
def test_distance_base_must_be_in_the_open_unit_interval(value):
    with pytest.raises(ValueError, match=r"distance_base=.* must be a number in \(0, 1\)"):
        compute_advantages("graphgpo", [detour_group()], distance_base=value)


def test_a_short_run_trains_with_graphgpo(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=8, algo="graphgpo",
        group_size=4, tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, checkpoint_every=2,
        ppo_epochs=1, minibatch_size=16, out_dir=str(tmp_path / "run"),
        tiny={"hidden_size": 32, "pretrain_steps": 0},
    ))
    summary = run_training(config, progress=False)
    assert summary.iterations == 2
    rows = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line]
    assert len(rows) == 2 and all('"advantages/reachable_steps"' in row for row in rows)
