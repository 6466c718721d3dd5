"""Hand-worked groups for every advantage estimator: numbers written out, arithmetic in comments.

Notation: R = episode return after the invalid-action penalty, G = discounted step return,
norm = mean_std_norm unless a test says mean_norm; e = 1e-6 (the std guard); s(x) = sample std.
Shared numbers: for R = {1, -0.1, 0}: mean 0.3, deviations 0.7 / -0.4 / -0.3,
s = sqrt((0.49 + 0.16 + 0.09) / 2) = sqrt(0.37) = 0.608276253, so norm gives
0.7 / 0.608277253 = 1.150791019, -0.4 / ... = -0.657594868, -0.3 / ... = -0.493196151.
For a pool of two values at distance d: norm = +-(d / 2) / (d / sqrt(2) + e).
"""

from __future__ import annotations

import numpy as np
import pytest

from ptgpo_algos import (
    ESTIMATORS,
    Step,
    Trajectory,
    compute_advantages,
    compute_advantages_with_diagnostics,
    estimator_defaults,
    summarize_diagnostics,
)

E0, E1, E2 = 1.150791019249, -0.657594868142, -0.493196151107  # norm of R = {1, -0.1, 0}


def S(state: str, action: str, reward: float = 0.0, valid: bool = True, tokens: int | None = None) -> Step:
    """A step; ``tokens``: the length of its recorded response (None: no response recorded)."""
    return Step(state, action, reward, valid, response_ids=None if tokens is None else [0] * tokens)


def T(*steps: Step) -> Trajectory:
    return Trajectory(list(steps))


def assert_advantages(actual, expected, rel=1e-9):
    assert [[len(t) for t in g] for g in actual] == [[len(t) for t in g] for g in expected]
    for got_group, want_group in zip(actual, expected):
        for got, want in zip(got_group, want_group):
            assert got == pytest.approx(want, rel=rel, abs=1e-12)


def three_returns_group() -> list[Trajectory]:
    """Unequal lengths and one invalid action: R = 1, -0.1 (penalty 0.1), 0."""
    return [
        T(S("a", "x"), S("b", "y", 1.0)),
        T(S("a", "x", 0.0, valid=False)),
        T(S("a", "z"), S("c", "x"), S("d", "y")),
    ]


def all_failed_group() -> list[Trajectory]:
    """Environment returns 0 and 0; the states give coverage C (gamma 0.5, penalty 0.1):
    T0 states A B A: c = [1 (B new), 0 (A seen), 0 (last)] -> C = [1, 0, 0];
    T1 states A A, last step invalid: c = [0 (A seen), -0.1] -> C = [0 + 0.5 * -0.1, -0.1] = [-0.05, -0.1]."""
    return [
        T(S("A", "x"), S("B", "x"), S("A", "x")),
        T(S("A", "y"), S("A", "y", 0.0, valid=False)),
    ]


# ---------------------------------------------------------------- grpo


def test_grpo_unequal_lengths_and_invalid_action():
    # R = {1, -0.1, 0} -> E0, E1, E2 on every step of each trajectory.
    actual = compute_advantages("grpo", [three_returns_group()])
    assert_advantages(actual, [[[E0, E0], [E1], [E2, E2, E2]]])


def test_grpo_mean_norm_with_singleton_empty_group_and_zero_length_trajectory():
    batch = [
        [T(S("a", "x", 2.0)), T(S("a", "y"), S("b", "y", 1.0))],  # R = 2, 1; mean 1.5 -> +-0.5
        [T(S("a", "x", 3.0))],  # one trajectory: zeros
        [],  # empty group
        [T(), T(S("a", "x", 5.0))],  # an empty trajectory does not count: one trajectory left
    ]
    actual = compute_advantages("grpo", batch, norm="mean_norm")
    assert_advantages(actual, [[[0.5], [-0.5, -0.5]], [[0.0]], [], [[], [0.0]]])


def test_grpo_all_failed_group_still_ranks_invalid_actions():
    # Env returns 0, 0; penalised R = 0, -0.1: mean -0.05, s = sqrt(2 * 0.05^2) = 0.070710678,
    # norm = +-0.05 / 0.070711678 = +-0.707096781. Coverage is off for grpo by default.
    actual = compute_advantages("grpo", [all_failed_group()])
    assert_advantages(actual, [[[0.707096781328] * 3, [-0.707096781328] * 2]])


# ---------------------------------------------------------------- rloo


def test_rloo_unequal_lengths_and_invalid_action():
    # R = 1, -0.1, 0: 1 - (-0.1 + 0) / 2 = 1.05; -0.1 - (1 + 0) / 2 = -0.6; 0 - (1 - 0.1) / 2 = -0.45.
    actual = compute_advantages("rloo", [three_returns_group()])
    assert_advantages(actual, [[[1.05, 1.05], [-0.6], [-0.45, -0.45, -0.45]]])


def test_rloo_pair_and_singleton():
    batch = [
        [T(S("a", "x", 3.0)), T(S("a", "y", 0.5), S("b", "y", 0.5))],  # R = 3, 1: 3 - 1 = 2, 1 - 3 = -2
        [T(S("a", "x", 1.0))],  # singleton: zeros
    ]
    assert_advantages(compute_advantages("rloo", batch), [[[2.0], [-2.0, -2.0]], [[0.0]]])


def test_rloo_all_failed_group_with_penalty():
    # invalid_penalty 0.5: R = 0, -0.5, 0. 0 - (-0.5 + 0) / 2 = 0.25; -0.5 - 0 = -0.5; 0.25.
    group = [T(S("a", "x")), T(S("a", "y", 0.0, valid=False)), T(S("b", "x"), S("c", "x"))]
    actual = compute_advantages("rloo", [group], invalid_penalty=0.5)
    assert_advantages(actual, [[[0.25], [-0.5], [0.25, 0.25]]])


# ---------------------------------------------------------------- gigpo


def test_gigpo_repeated_states_mean_norm():
    # gamma 0.5, no penalty. T0: A B A, rewards 0 0 1 -> G = [0.25, 0.5, 1], R = 1.
    # T1: A C, rewards 0 0 -> G = [0, 0], R = 0. Episode: mean 0.5 -> +0.5 / -0.5.
    # State A pools {0.25, 1, 0} (two from T0): mean 1.25 / 3 = 0.416667 ->
    #   T0t0 -0.166667, T0t2 0.583333, T1t0 -0.416667. B and C are alone -> 0.
    # A = episode + A^S: T0 = [0.5 - 0.166667, 0.5, 0.5 + 0.583333], T1 = [-0.5 - 0.416667, -0.5].
    group = [T(S("A", "x"), S("B", "y"), S("A", "x", 1.0)), T(S("A", "y"), S("C", "x"))]
    actual = compute_advantages("gigpo", [group], gamma=0.5, invalid_penalty=0.0, norm="mean_norm")
    expected = [[[0.333333333333, 0.5, 1.083333333333], [-0.916666666667, -0.5]]]
    assert_advantages(actual, expected)


def test_gigpo_mean_std_norm_omega_and_invalid_action():
    # gamma 1, penalty 0.1, omega 0.5.
    # T0: A B, rewards 0 1 -> G = [1, 1], R = 1.  T1: A A, first step invalid -> G = [-0.1, 0], R = -0.1.
    # T2: B -> G = [0], R = 0.  Episode norm of {1, -0.1, 0} -> E0, E1, E2.
    # Pool A = {1, -0.1, 0} (T0t0, T1t0, T1t1) -> E0, E1, E2 again.
    # Pool B = {1 (T0t1), 0 (T2t0)}: d = 1 -> +-0.5 / (0.707106781 + e) = +-0.707105781.
    group = [
        T(S("A", "x"), S("B", "y", 1.0)),
        T(S("A", "x", 0.0, valid=False), S("A", "x")),
        T(S("B", "z")),
    ]
    actual = compute_advantages("gigpo", [group], gamma=1.0, omega=0.5)
    b = 0.707105781188
    expected = [[[E0 + 0.5 * E0, E0 + 0.5 * b], [E1 + 0.5 * E1, E1 + 0.5 * E2], [E2 - 0.5 * b]]]
    assert_advantages(actual, expected)


def test_gigpo_equal_returns_and_lone_trajectory():
    # gamma 0.5, mean_norm. T0: A(r 1) B(r 0) -> G = [1, 0]; T1: B(r 0) A(r 1) -> G = [0.5, 1].
    # R = 1, 1 -> episode 0. Pool A = {1, 1} -> 0, 0. Pool B = {0 (T0t1), 0.5 (T1t0)} -> -0.25, +0.25.
    # The second group has one trajectory: zeros, although its state A repeats.
    batch = [
        [T(S("A", "x", 1.0), S("B", "x")), T(S("B", "y"), S("A", "y", 1.0))],
        [T(S("A", "x"), S("A", "x", 1.0))],
    ]
    actual = compute_advantages("gigpo", batch, gamma=0.5, norm="mean_norm")
    assert_advantages(actual, [[[0.0, -0.25], [0.25, 0.0]], [[0.0, 0.0]]])


# ---------------------------------------------------------------- hgpo


def test_hgpo_level_weights():
    # gamma 1, no penalty, K 1, alpha 1 (w0 = 1, w1 = 2), mean_norm.
    # T0: A B (r 0 1) G = [1, 1]; T1: A B (r 0 0) G = [0, 0]; T2: C B (r 0 1) G = [1, 1].
    # Level 0: A {1, 0} -> +-0.5; B {1, 0, 1}, mean 2/3 -> 1/3, -2/3, 1/3; C alone -> invalid.
    # Level 1: (A, B) {T0t1 1, T1t1 0} -> +-0.5; (C, B) alone -> invalid.
    # T0t1 = (1 * 1/3 + 2 * 0.5) / 3 = 0.444444; T1t1 = (-2/3 - 1) / 3 = -0.555556; T2t1 = 1/3.
    group = [
        T(S("A", "x"), S("B", "x", 1.0)),
        T(S("A", "y"), S("B", "y")),
        T(S("C", "y"), S("B", "x", 1.0)),
    ]
    actual = compute_advantages(
        "hgpo", [group], gamma=1.0, invalid_penalty=0.0, K=1, norm="mean_norm"
    )
    expected = [[[0.5, 0.444444444444], [-0.5, -0.555555555556], [0.0, 0.333333333333]]]
    assert_advantages(actual, expected)


def test_hgpo_include_episode_equal_weights_invalid_action():
    # gamma 0.5, penalty 0.1, K 2, alpha 0 (all weights 1), mean_std_norm, include_episode.
    # T0: A B C, rewards 0 0 1 -> G = [0.25, 0.5, 1], R = 1.
    # T1: A B C, last invalid -> r = 0 0 -0.1, G = [-0.025, -0.05, -0.1], R = -0.1.
    # Every pool pairs T0t with T1t: d = 0.275, 0.55, 1.1 at t = 0, 1, 2, and the episode d = 1.1:
    # v(d) = (d / 2) / (d / sqrt 2 + e): v0 = 0.707103145, v1 = 0.707104963, v2 = 0.707105872.
    # t0: levels {0, episode} -> (v0 + v2) / 2 = 0.707104508; t1: (2 v1 + v2) / 3 = 0.707105266;
    # t2: (3 v2 + v2) / 4 = v2. T1 gets the negatives.
    group = [
        T(S("A", "x"), S("B", "x"), S("C", "x", 1.0)),
        T(S("A", "y"), S("B", "y"), S("C", "y", 0.0, valid=False)),
    ]
    actual = compute_advantages("hgpo", [group], gamma=0.5, alpha=0.0, include_episode=True)
    row = [0.707104508469, 0.707105266039, 0.707105872097]
    assert_advantages(actual, [[row, [-x for x in row]]])


def test_hgpo_zero_level_is_not_valid():
    # gamma 1, no penalty, K 1, mean_norm. T0: A A B (r 0 0 1) G = [1, 1, 1]; T1: A B G = [0, 0];
    # T2: A A (r 0 1) G = [1, 1].
    # Level 0: A {1, 1, 0, 1, 1} mean 0.8 -> 0.2 (T0t0, T0t1, T2t0, T2t1), -0.8 (T1t0);
    #          B {1 (T0t2), 0 (T1t1)} -> +-0.5.
    # Level 1: (A, A) {T0t1 1, T2t1 1} -> a = 0: not valid, so T0t1 = 0.2 (not (0.2 + 0) / 3);
    #          (A, B) {T0t2 1, T1t1 0} -> +-0.5; T0t2 = (0.5 + 2 * 0.5) / 3 = 0.5, T1t1 = -0.5.
    group = [
        T(S("A", "x"), S("A", "x"), S("B", "x", 1.0)),
        T(S("A", "y"), S("B", "y")),
        T(S("A", "z"), S("A", "z", 1.0)),
    ]
    actual = compute_advantages(
        "hgpo", [group], gamma=1.0, invalid_penalty=0.0, K=1, norm="mean_norm"
    )
    assert_advantages(actual, [[[0.2, 0.2, 0.5], [-0.8, -0.5], [0.2, 0.2]]])


# ---------------------------------------------------------------- ptgpo


def test_ptgpo_exact_prefix_credit_and_backoff_mean_norm():
    # gamma 1, no penalty, mean_norm, omega 1, lam 0.5, K 2. T0 and T1 share their first Step object.
    # T0: S-a-> X-c (r 1): G = [1, 1]; T1: S-a-> X-d (r 0): G = [0, 0];
    # T2: S-b-> X-c (r 1): G = [1, 1];  T3: S-b (r 1): G = [1].  R = 1, 0, 1, 1: mean 0.75 ->
    # episode 0.25, -0.75, 0.25, 0.25.
    # Root S: V = 3/4; Q(a) = 0.5 -> -0.25 (T0, T1); Q(b) = 1 -> +0.25 (T2, T3).
    # Node S,a,X: V = 0.5; Q(c) = 1 -> +0.5 (T0); Q(d) = 0 -> -0.5 (T1).
    # Node S,b,X: only T2 -> back-off, HGPO at T2t1: level 0 X {1, 0, 1} mean 2/3 -> 1/3;
    #   level 1 (S, X) the same pool -> 1/3; hgpo = (1/3 + 2/3) / 3 = 1/3, times lam 0.5 = 1/6.
    shared = S("S", "a")
    group = [
        T(shared, S("X", "c", 1.0)),
        T(shared, S("X", "d")),
        T(S("S", "b"), S("X", "c", 1.0)),
        T(S("S", "b", 1.0)),
    ]
    advantages, diagnostics = compute_advantages_with_diagnostics(
        "ptgpo", [group], gamma=1.0, invalid_penalty=0.0, norm="mean_norm", lam=0.5
    )
    expected = [[[0.0, 0.75], [-1.0, -1.25], [0.5, 0.25 + 1 / 6], [0.5]]]
    assert_advantages(advantages, expected)
    (d,) = diagnostics
    assert dict(d.counts) == {"branching_nodes": 2, "backoff_steps": 1}
    assert (d.nonzero_steps, d.n_steps) == (6, 7)
    assert not d.outcome_all_equal and not d.coverage_applied


def test_ptgpo_mean_std_norm_with_invalid_action():
    # gamma 0.5, penalty 0.1, omega 0.5. T0: S-a X-c Z-e (r 0 0 1): G = [0.25, 0.5, 1], R = 1.
    # T1: S-a X-d (invalid): G = [-0.05, -0.1], R = -0.1.  T2: S-b: G = [0], R = 0. Episode: E0, E1, E2.
    # Root: G {0.25, -0.05, 0}, V = 0.2 / 3 = 0.066667, s = 0.160727513; Q(a) = 0.1, Q(b) = 0:
    #   a -> 0.033333 / 0.160728513 = 0.207389049; b -> -0.066667 / 0.160728513 = -0.414778097.
    # Node S,a,X: G {0.5, -0.1}: V = 0.2, s = sqrt(0.18) = 0.424264069; c -> 0.3 / 0.424265069
    #   = 0.707105115, d -> -0.707105115.
    # Node S,a,X,c,Z: only T0 -> back-off; Z is alone at every level -> 0.
    group = [
        T(S("S", "a"), S("X", "c"), S("Z", "e", 1.0)),
        T(S("S", "a"), S("X", "d", 0.0, valid=False)),
        T(S("S", "b")),
    ]
    advantages, (d,) = compute_advantages_with_diagnostics("ptgpo", [group], gamma=0.5, omega=0.5)
    r, q = 0.207389048632, 0.707105114524
    expected = [[[E0 + 0.5 * r, E0 + 0.5 * q, E0], [E1 + 0.5 * r, E1 - 0.5 * q], [E2 - r]]]
    assert_advantages(advantages, expected)
    assert dict(d.counts) == {"branching_nodes": 2, "backoff_steps": 1}


def test_ptgpo_without_forks_is_all_backoff():
    # gamma 1, no penalty, mean_norm, K 1. Different root states: every node has one trajectory.
    # T0: A B (r 0 1) G = [1, 1], R = 1; T1: C B G = [0, 0], R = 0 -> episode +-0.5.
    # HGPO: A, C alone -> 0; B {1, 0} -> +-0.5 at level 0; level 1 (A, B), (C, B) alone.
    # A = episode + hgpo: T0 = [0.5, 1.0], T1 = [-0.5, -1.0]. The singleton group gets zeros.
    batch = [
        [T(S("A", "x"), S("B", "x", 1.0)), T(S("C", "x"), S("B", "y"))],
        [T(S("A", "x"), S("A", "x", 1.0))],
    ]
    advantages, diagnostics = compute_advantages_with_diagnostics(
        "ptgpo", batch, gamma=1.0, invalid_penalty=0.0, norm="mean_norm", K=1
    )
    assert_advantages(advantages, [[[0.5, 1.0], [-0.5, -1.0]], [[0.0, 0.0]]])
    assert [(d.counts["branching_nodes"], d.counts["backoff_steps"]) for d in diagnostics] == [(0, 4), (0, 0)]


# ---------------------------------------------------------------- g2po


def test_g2po_nodes_edges_terminals_and_step_weighted_episode_mean_norm():
    # gamma 0.5, penalty 0.1, mean_norm, omega 1, success_reward 1.
    # T0: A B (r 0 1), R = 1, success: visits A 0.5^2 = 0.25, B 0.5^1 = 0.5.
    # T1: A A, second step invalid, R = 0: visits 0, 0.  T2: B, R = 0: visit 0.
    # V(A) = (0.25 + 0 + 0) / 3 = 1/12, V(B) = (0.5 + 0) / 2 = 0.25.
    # Successor values: T0 [V(B) 0.25, success 1], T1 [V(A) 1/12, failure 0], T2 [failure 0].
    # Node term on V+ minus penalty: A leaves by {0.25, 1/12, -0.1}, mean 7/90 -> 0.172222, 0.005556,
    #   -0.177778; B by {1, 0} -> +-0.5.
    # Edge term on jumps {1/6, 3/4, 0, -1/12, -1/4}, mean 7/60 -> 0.05, 0.633333, -0.116667, -0.2,
    #   -0.366667.
    # Episode term on step rows {1, 1, 0, -0.1, 0}, mean 0.38 -> 0.62, 0.62, -0.38, -0.48, -0.38.
    # Second group, all failed: every V is 0, so only the penalty survives: node B {0, -0.1} -> +-0.05,
    # episode rows {0, 0, 0, -0.1} mean -0.025 -> T0 [0.025, 0.025 + 0.05], T1 [0.025, -0.075 - 0.05].
    mixed = [
        T(S("A", "x"), S("B", "y", 1.0)),
        T(S("A", "y"), S("A", "x", 0.0, valid=False)),
        T(S("B", "z")),
    ]
    failed = [T(S("A", "x"), S("B", "x")), T(S("A", "y"), S("B", "y", 0.0, valid=False))]
    advantages, diagnostics = compute_advantages_with_diagnostics(
        "g2po", [mixed, failed], gamma=0.5, norm="mean_norm"
    )
    expected = [
        [[0.842222222222, 1.753333333333], [-0.491111111111, -0.857777777778], [-1.246666666667]],
        [[0.025, 0.075], [0.025, -0.125]],
    ]
    assert_advantages(advantages, expected)
    assert [dict(d.counts) for d in diagnostics] == [{"multi_edge_nodes": 2}] * 2


def test_g2po_all_succeeded_group_prefers_the_shorter_path_mean_std_norm():
    # gamma 0.5, no penalty, mean_std_norm. T0: A (r 1), T1: A B (r 0 1); R = 1, 1: episode term 0.
    # Visits: T0t1 A 0.5, T1t1 A 0.25, T1t2 B 0.5 -> V(A) = 0.375, V(B) = 0.5.
    # Successors: T0t1 success 1, T1t1 V(B) 0.5, T1t2 success 1.
    # Node A: {1, 0.5} -> +-0.25 / (0.353553391 + e) = +-0.707104781; node B alone -> 0.
    # Edge jumps {0.625, 0.125, 0.5}: mean 5/12, s = 0.260208250 -> 0.800637692, -1.120892769,
    # 0.320255077.
    group = [T(S("A", "x", 1.0)), T(S("A", "y"), S("B", "y", 1.0))]
    actual = compute_advantages("g2po", [group], gamma=0.5, invalid_penalty=0.0)
    assert_advantages(actual, [[[1.507742473306], [-1.827997550152, 0.320255076846]]])


def test_g2po_success_reward_sets_the_terminal_value_and_the_threshold():
    # gamma 1, no penalty, mean_norm, success_reward 2. T0 returns 2 (success), T1 returns 1 (a
    # failure now, although > 0). Visits: A {2, 1} -> V(A) = 1.5. Successors: success 2, failure 0.
    # Node A {2, 0} -> +-1; edge jumps {0.5, -1.5} -> +-1; episode rows {2, 1} -> +-0.5.
    group = [T(S("A", "x", 2.0)), T(S("A", "y", 1.0))]
    actual = compute_advantages(
        "g2po", [group], gamma=1.0, invalid_penalty=0.0, norm="mean_norm", success_reward=2.0
    )
    assert_advantages(actual, [[[2.5], [-2.5]]])


# ---------------------------------------------------------------- planpo


def test_planpo_length_normalised_success_rewards_both_turn_groups():
    # mean_norm, no penalty, alpha_init 0.5 -> alpha_final 0.1 at progress 0.5: alpha = 0.3.
    # T0: success, 2 turns of 4 and 2 tokens; T1: success, 1 turn of 5 tokens; T2: failure, 2 turns.
    # R^E = 1/2, 1/1, 0: mean 0.5 -> 0, 0.5, -0.5.  R^S = T0 [1/4, 1/2], T1 [1/5], T2 [0, 0].
    # index: t = 0 pools {0.25, 0.2, 0} mean 0.15 -> 0.1, 0.05, -0.15; t = 1 pools {0.5, 0} -> +-0.25.
    #   T0 = [0.3 * 0.1, 0.3 * 0.25], T1 = [0.5 + 0.3 * 0.05], T2 = [-0.5 - 0.3 * 0.15, -0.5 - 0.3 * 0.25].
    # pooled: all five {0.25, 0.5, 0.2, 0, 0} mean 0.19 -> 0.06, 0.31, 0.01, -0.19, -0.19.
    # The second group has no success: zeros.
    group = [
        T(S("A", "x", tokens=4), S("B", "x", 1.0, tokens=2)),
        T(S("A", "y", 1.0, tokens=5)),
        T(S("A", "z", tokens=1), S("C", "z", tokens=1)),
    ]
    failed = [T(S("A", "x", tokens=3)), T(S("A", "y", tokens=2))]
    config = dict(norm="mean_norm", invalid_penalty=0.0, alpha_init=0.5, alpha_final=0.1, progress=0.5)
    advantages, diagnostics = compute_advantages_with_diagnostics("planpo", [group, failed], **config)
    assert_advantages(advantages, [[[0.03, 0.075], [0.515], [-0.545, -0.575]], [[0.0], [0.0]]])
    assert [d.counts["succeeded_trajectories"] for d in diagnostics] == [2, 0]
    pooled = compute_advantages("planpo", [group], turn_group="pooled", **config)
    assert_advantages(pooled, [[[0.018, 0.093], [0.503], [-0.557, -0.557]]])


def test_planpo_penalty_and_missing_tokens_mean_std_norm():
    # Defaults: penalty 0.1, progress 0 so alpha = alpha_init = 0.1, index turn groups, mean_std_norm.
    # T0: success in 1 turn of 2 tokens: R = 1, R^E = 1, R^S = 0.5.
    # T1: success in 2 turns, the first invalid with no recorded tokens (counts as 1), then 3 tokens:
    #   R = 1 - 0.1 = 0.9, R^E = 0.45, R^S = [0.9, 0.3].
    # A^E: {1, 0.45}, d = 0.55 -> +-v(0.55) = +-0.707104963; A^S at t = 0: {0.5, 0.9}, d = 0.4 ->
    #   -+v(0.4) = -+0.707104281; t = 1 alone -> 0.  (v(d) = (d / 2) / (d / sqrt 2 + e).)
    group = [T(S("A", "x", 1.0, tokens=2)), T(S("A", "y", 0.0, valid=False), S("B", "y", 1.0, tokens=3))]
    actual = compute_advantages("planpo", [group])
    assert_advantages(actual, [[[0.636394534890], [-0.636394534890, -0.707104963009]]])


def test_planpo_weight_decays_linearly_with_progress():
    group = [
        T(S("A", "x", tokens=4), S("B", "x", 1.0, tokens=2)),
        T(S("A", "y", 1.0, tokens=5)),
        T(S("A", "z", tokens=1)),
    ]
    at = {p: compute_advantages("planpo", [group], progress=p)[0] for p in (0.0, 0.25, 1.0)}
    for start, quarter, end in zip(sum(at[0.0], []), sum(at[0.25], []), sum(at[1.0], [])):
        assert quarter == pytest.approx(0.75 * start + 0.25 * end, rel=1e-12)
    assert at[0.0] != at[1.0]


# ---------------------------------------------------------------- covgpo


def coverage_groups() -> tuple[list[Trajectory], list[Trajectory]]:
    """An all-failed group with T1's first action invalid, and a mixed group (returns 1 and 0).

    Novelty n (1 if the next state is new in the trajectory; the last step never counts):
    T0 A B C: [1, 1, 0], C = 2, P = 2/3;  T1 A A B: [0 (A unchanged), 1, 0], C = 1, P = 1/3;
    T2 A B A B: [1, 0, 0, 0], C = 1, P = 1/4.
    GRPO base, mean_norm: R = 0, -0.1, 0, mean -1/30 -> 1/30, -1/15, 1/30."""
    failed = [
        T(S("A", "x"), S("B", "x"), S("C", "x")),
        T(S("A", "y", 0.0, valid=False), S("A", "y"), S("B", "y")),
        T(S("A", "z"), S("B", "z"), S("A", "z"), S("B", "z")),
    ]
    return failed, [T(S("A", "x", 1.0)), T(S("A", "y"))]


def test_covgpo_trajectory_coverage_in_all_failed_groups_only():
    # coverage_weight 1, mean_norm. P = {2/3, 1/3, 1/4}, mean 5/12 -> 1/4, -1/12, -1/6.
    # T0 = 1/30 + 1/4, T1 = -1/15 - 1/12, T2 = 1/30 - 1/6 on every step; the mixed group is grpo's.
    failed, mixed = coverage_groups()
    config = dict(norm="mean_norm", coverage_weight=1.0)
    advantages, diagnostics = compute_advantages_with_diagnostics("covgpo", [failed, mixed], **config)
    expected = [[0.283333333333] * 3, [-0.15] * 3, [-0.133333333333] * 4]
    assert_advantages(advantages[:1], [expected])
    assert_advantages(advantages[1:], compute_advantages("grpo", [mixed], norm="mean_norm"))
    assert [dict(d.counts) for d in diagnostics] == [{"covgpo_groups": 1}, {"covgpo_groups": 0}]
    summary = summarize_diagnostics(diagnostics)
    assert summary["covgpo_groups"] == 1 and summary["coverage_groups"] == 0


def test_covgpo_step_variant():
    # n over the group's 10 steps: four 1s, mean 0.4 -> +0.6 / -0.4, plus the GRPO base.
    failed, _ = coverage_groups()
    actual = compute_advantages("covgpo", [failed], norm="mean_norm", coverage_weight=1.0, variant="step")
    a, b = 1 / 30, -1 / 15
    expected = [
        [a + 0.6, a + 0.6, a - 0.4],
        [b - 0.4, b + 0.6, b - 0.4],
        [a + 0.6, a - 0.4, a - 0.4, a - 0.4],
    ]
    assert_advantages(actual, [expected])


def test_covgpo_leaves_all_succeeded_groups_to_grpo_unlike_coverage_when_all_equal():
    # Equal non-zero returns: coverage_beta with coverage_when all_equal acts, covgpo (all-zero only) not.
    succeeded = [T(S("A", "x"), S("B", "x", 1.0)), T(S("A", "y"), S("A", "y"), S("C", "y", 1.0, valid=False))]
    covgpo = compute_advantages("covgpo", [succeeded], coverage_weight=1.0)
    assert covgpo == compute_advantages("grpo", [succeeded])
    assert covgpo == compute_advantages("grpo", [succeeded], coverage_beta=1.0)
    assert covgpo != compute_advantages("grpo", [succeeded], coverage_beta=1.0, coverage_when="all_equal")


# ---------------------------------------------------------------- progpo


def test_progpo_prefix_credit_and_fused_potentials():
    # gamma 0.5, no penalty, mean_norm, K 1, variance_prior 1/4, omega 1, transition_weight 1.
    # T0: A-x B-x (r 0 1), R = 1, G = [0.5, 1]; T1: C-y B-y, R = 0, G = [0, 0]; T2: A-x B-z, R = 0.
    # Episode: mean 1/3 -> 2/3, -1/3, -1/3.
    # Exact prefix: t0 node A {0.5 (T0), 0 (T2)} -> +-0.25; C alone; t1 node (A, x, B) {1, 0} -> +-0.5.
    # Potentials on R, precision n / (s^2 + 1/4): depth 0: A {1, 0} mean 1/2, s^2 1/2 -> 8/3;
    #   B {1, 0, 0} mean 1/3, s^2 1/3 -> 36/7; C {0} -> 4. Depth 1: (A, B) {1, 0} mean 1/2 -> 8/3;
    #   (C, B) {0} -> 4.  Phi(A) = 1/2, Phi(C) = 0,
    #   Phi(B after A) = (36/7 * 1/3 + 8/3 * 1/2) / (36/7 + 8/3) = 16/41,
    #   Phi(B after C) = (36/7 * 1/3) / (36/7 + 4) = 3/16.
    # c = 0.5 * Phi(next) - Phi, the terminal's potential being R: T0 [8/41 - 1/2, 1/2 - 16/41] =
    #   [-25/82, 9/82]; T1 [3/32, -3/16]; T2 [-25/82, -16/41]. Mean -1291/7872.
    advantages, (d,) = compute_advantages_with_diagnostics(
        "progpo",
        [[T(S("A", "x"), S("B", "x", 1.0)), T(S("C", "y"), S("B", "y")), T(S("A", "x"), S("B", "z"))]],
        gamma=0.5, invalid_penalty=0.0, norm="mean_norm", K=1,
    )
    mean = -1291 / 7872
    expected = [
        [2 / 3 + 0.25 + (-25 / 82 - mean), 2 / 3 + 0.5 + (9 / 82 - mean)],
        [-1 / 3 + (3 / 32 - mean), -1 / 3 + (-3 / 16 - mean)],
        [-1 / 3 - 0.25 + (-25 / 82 - mean), -1 / 3 - 0.5 + (-16 / 41 - mean)],
    ]
    assert_advantages(advantages, [expected])
    assert dict(d.counts) == {"prefix_steps": 4}


# ---------------------------------------------------------------- coverage credit


def test_ptgpo_coverage_credit_in_all_failed_group():
    # Default coverage_beta 0.1; gamma 0.5, mean_norm, K 0. C = [1, 0, 0] and [-0.05, -0.1] (see
    # all_failed_group). Episode on C_0 = {1, -0.05}: mean 0.475 -> +-0.525.
    # Root A: actions x (T0, C 1), y (T1, C -0.05) -> Q - V = +-0.525.
    # Back-off (HGPO level 0 on C): state B {0} alone -> 0 (T0t1); state A {1, 0, -0.05, -0.1}
    #   mean 0.2125 -> T0t2 -0.2125, T1t1 -0.3125.
    # Before beta: T0 = [1.05, 0.525, 0.3125], T1 = [-1.05, -0.8375]; times 0.1.
    # The second group has returns 1 and 0: untouched (same as with coverage off).
    mixed = [T(S("A", "x", 1.0)), T(S("A", "y"))]
    config = dict(gamma=0.5, norm="mean_norm", K=0)
    advantages, diagnostics = compute_advantages_with_diagnostics(
        "ptgpo", [all_failed_group(), mixed], **config
    )
    expected_failed = [[0.105, 0.0525, 0.03125], [-0.105, -0.08375]]
    assert_advantages(advantages[:1], [expected_failed])
    untouched = compute_advantages("ptgpo", [mixed], coverage_beta=0.0, **config)
    assert_advantages(advantages[1:], untouched)
    assert [(d.outcome_all_equal, d.coverage_applied) for d in diagnostics] == [
        (True, True),
        (False, False),
    ]
    summary = summarize_diagnostics(diagnostics)
    assert summary["all_equal_groups"] == 1 and summary["coverage_groups"] == 1


def two_successes_group() -> list[Trajectory]:
    """Both paths succeed from state s0 (return 1), each twice: a 3-step one (actions a) and a 6-step
    one (actions b), every step reaching a new state but the last. gamma 0.95:
    G_0 = 0.95^2 = 0.9025 (short) and 0.95^5 = 0.7738 (long); C_0 = 1 + 0.95 = 1.95 (short) and
    1 + 0.95 + 0.95^2 + 0.95^3 + 0.95^4 = 4.5244 (long). A pool of four, two at each of two values
    d apart, normalises to +-(d / 2) / (d / sqrt 3 + e), about +-sqrt(3) / 2 = +-0.866."""
    short = T(S("s0", "a0"), S("a1", "a1"), S("a2", "a2", 1.0))
    long = T(S("s0", "b0"), S("b1", "b1"), S("b2", "b2"), S("b3", "b3"), S("b4", "b4"), S("b5", "b5", 1.0))
    return [short, short, long, long]


def pair_norm(d: float) -> float:
    """mean_std_norm of the higher value in a pool of four, two at each of two values d apart."""
    return (d / 2) / (d / np.sqrt(3) + 1e-6)


def test_ptgpo_default_credits_a_short_success_above_a_long_one():
    # Default (coverage_when all_failed): the outcome formula. R equal -> episode term 0; the root forks
    # (a0 vs b0) and credits G_0: +-sqrt(3)/2; later steps have one action and HGPO's pools are
    # single-valued -> 0. GiGPO credits the first steps the same.
    root = pair_norm(0.95**2 - 0.95**5)  # 0.866
    advantages, (d,) = compute_advantages_with_diagnostics("ptgpo", [two_successes_group()])
    short, long = [root, 0.0, 0.0], [-root] + [0.0] * 5
    assert_advantages(advantages, [[short, short, long, long]])
    assert d.outcome_all_equal and not d.coverage_applied
    gigpo = compute_advantages("gigpo", [two_successes_group()])
    assert [t[0] for t in gigpo[0]] == pytest.approx([root] * 2 + [-root] * 2, rel=1e-9)


def test_ptgpo_coverage_when_all_equal_credits_the_longer_success():
    # The explicit old rule: coverage credit, beta 0.1. Episode on C_0 {1.95 x2, 4.52 x2} -> -+0.866;
    # root fork on C_0 -> -+0.866: first step 0.1 * (-0.866 - 0.866) = -0.173 (short), +0.173 (long).
    # Later steps: the episode term -+0.0866 only (single-action nodes, single-valued HGPO pools).
    h = 0.1 * pair_norm(sum(0.95**k for k in range(5)) - 1.95)  # 0.0866
    advantages, (d,) = compute_advantages_with_diagnostics(
        "ptgpo", [two_successes_group()], coverage_when="all_equal"
    )
    short, long = [-2 * h, -h, -h], [2 * h] + [h] * 5
    assert_advantages(advantages, [[short, short, long, long]])
    assert d.coverage_applied


def test_coverage_when_rejects_other_values_and_estimators_without_coverage():
    with pytest.raises(ValueError, match=r"coverage_when='always'.*one of all_failed, all_equal"):
        compute_advantages("ptgpo", [all_failed_group()], coverage_when="always")
    with pytest.raises(ValueError, match=r"'coverage_when'.*valid keys"):
        compute_advantages("covgpo", [all_failed_group()], coverage_when="all_equal")


def test_grpo_with_coverage_is_covgpo():
    # coverage_beta 0.5, gamma 0.5: C_0 = {1, -0.05}, d = 1.05:
    # 0.5 * 0.525 / (1.05 / sqrt 2 + e) = 0.353552914 on every step of T0, the negative on T1.
    actual = compute_advantages("grpo", [all_failed_group()], gamma=0.5, coverage_beta=0.5)
    assert_advantages(actual, [[[0.353552914403] * 3, [-0.353552914403] * 2]])


def test_rloo_gigpo_hgpo_with_coverage():
    batch = [all_failed_group()]
    # rloo, beta 1: C_0 = {1, -0.05} -> 1 + 0.05 = 1.05 and -1.05.
    assert_advantages(
        compute_advantages("rloo", batch, gamma=0.5, coverage_beta=1.0),
        [[[1.05] * 3, [-1.05] * 2]],
    )
    # gigpo, beta 1, mean_norm: episode +-0.525; state A pool on C {1, 0, -0.05, -0.1} mean 0.2125:
    # T0t0 0.7875, T0t2 -0.2125, T1t0 -0.2625, T1t1 -0.3125; B alone -> 0.
    assert_advantages(
        compute_advantages("gigpo", batch, gamma=0.5, coverage_beta=1.0, norm="mean_norm"),
        [[[1.3125, 0.525, 0.3125], [-0.7875, -0.8375]]],
    )
    # hgpo, beta 1, K 0, mean_norm: level 0 only, the same pools without the episode term.
    assert_advantages(
        compute_advantages("hgpo", batch, gamma=0.5, coverage_beta=1.0, norm="mean_norm", K=0),
        [[[0.7875, 0.0, -0.2125], [-0.2625, -0.3125]]],
    )


def test_coverage_beta_is_taken_by_signal_estimators_and_zero_disables_it():
    # g2po, planpo, covgpo and graphgpo read the outcomes from the table, 3spo its rollouts' own step
    # rewards: a substituted signal would be ignored.
    takes = [name for name in ESTIMATORS if "coverage_beta" in estimator_defaults(name)]
    assert sorted(set(ESTIMATORS) - set(takes)) == ["3spo", "covgpo", "g2po", "graphgpo", "hiper", "planpo", "ppo"]
    for name in takes:
        assert estimator_defaults(name)["coverage_when"] == "all_failed", name
        with_coverage = compute_advantages(name, [all_failed_group()], coverage_beta=0.3)
        without = compute_advantages(name, [all_failed_group()], coverage_beta=0.0)
        assert with_coverage != without, name  # the outcome signal is the invalid penalty only
    for name in set(ESTIMATORS) - set(takes):
        with pytest.raises(ValueError, match=r"'coverage_beta'.*valid keys"):
            compute_advantages(name, [all_failed_group()], coverage_beta=0.3)


def test_diagnostics_nonzero_fraction():
    # grpo on a group with R = 1, 0, 1: all three steps non-zero; a group with equal returns: none.
    batch = [
        [T(S("a", "x", 1.0)), T(S("a", "y")), T(S("b", "x", 1.0))],
        [T(S("a", "x")), T(S("a", "y"))],
    ]
    _, diagnostics = compute_advantages_with_diagnostics("grpo", batch)
    assert [d.nonzero_fraction for d in diagnostics] == [1.0, 0.0]
    assert [d.outcome_all_equal for d in diagnostics] == [False, True]
    assert diagnostics[0].counts == {}
    summary = summarize_diagnostics(diagnostics)
    assert summary["nonzero_fraction"] == pytest.approx(3 / 5)
    assert sorted(summary) == ["all_equal_groups", "coverage_groups", "groups", "nonzero_fraction", "steps"]


def test_summary_sums_each_estimators_own_counts_under_its_name():
    batch = [three_returns_group(), all_failed_group(), [T(S("a", "x"))]]
    for step in {id(s): s for group in batch for trajectory in group for s in trajectory.steps}.values():
        step.extras["strategy_reward"] = 0.0  # what 3spo credits, recorded by its rollouts
        step.extras["value"] = 0.5  # what ppo reads, its critic's value recorded by the trainer
        step.extras["credit"] = 0.25  # what hiper reads, the credit its critic records
    base = ["all_equal_groups", "coverage_groups", "groups", "nonzero_fraction", "steps"]
    own = {"ptgpo": ["backoff_steps", "branching_nodes"], "g2po": ["multi_edge_nodes"],
           "planpo": ["succeeded_trajectories"], "progpo": ["prefix_steps"], "covgpo": ["covgpo_groups"],
           "graphgpo": ["reachable_steps"], "bpo": ["branch_points", "fork_steps"]}
    for name in ESTIMATORS:
        _, diagnostics = compute_advantages_with_diagnostics(name, batch)
        summary = summarize_diagnostics(diagnostics)
        assert sorted(summary) == sorted(base + own.get(name, [])), name
        for key in own.get(name, []):
            assert summary[key] == sum(d.counts[key] for d in diagnostics)
            assert diagnostics[2].counts[key] == 0  # a lone trajectory is not compared
    # ptgpo: each group's root forks (x/z, x/y); the 3 + 3 later steps back off; the lone group: 0.
    _, diagnostics = compute_advantages_with_diagnostics("ptgpo", batch)
    assert [dict(d.counts) for d in diagnostics] == [{"branching_nodes": 1, "backoff_steps": 3}] * 2 + [
        {"branching_nodes": 0, "backoff_steps": 0}
    ]


def test_any_estimator_can_report_counts_but_not_shadow_the_summary():
    from ptgpo_algos.advantages import registry

    def counting(table, signal):
        return registry.Estimate(np.zeros(table.n_steps), {name: np.arange(table.n_groups)})

    batch = [three_returns_group(), all_failed_group()]
    registry.register_estimator("counting", coverage_beta=None)(counting)
    try:
        for name, error in (("visits", None), ("steps", RuntimeError)):
            if error:
                with pytest.raises(error, match="summary keys"):
                    compute_advantages_with_diagnostics("counting", batch)
            else:
                _, diagnostics = compute_advantages_with_diagnostics("counting", batch)
                assert [d.counts["visits"] for d in diagnostics] == [0, 1]
                assert summarize_diagnostics(diagnostics)["visits"] == 1
    finally:
        registry.ESTIMATORS.unregister("counting")
