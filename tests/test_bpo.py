"""BPO (arXiv 2607.14171): the sibling-return credit on hand-computed groups, its unbiasedness on an
exact tree MDP, the entropy-chosen branch points, the ``bpo`` rollout strategy on a small lake (its
forks replay from reset), the typed config, ``ptgpo algos`` and training end to end."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from ptgpo_algos.advantages import compute_advantages, compute_advantages_with_diagnostics
from ptgpo_algos.bpo_rollout import BpoConfig, branch_points, collect_bpo_rollouts
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.data import Decision, Step, Task, Trajectory
from ptgpo_envs import make_env


def _fork(steps: list[Step], point: int) -> Trajectory:
    return Trajectory(steps=steps, meta={"branch_point": point})


# ----------------------------------------------------------------------------- credit by hand
def test_sibling_credit_and_trunk_credit_by_hand():
    root, middle = Step("s0", "a", 0.0), Step("s1", "a", 1.0)
    trunk_won = Trajectory([root, middle])
    trunk_lost = Trajectory([Step("s0", "b", 0.0)])
    # Three forks of the first trunk at t = 1 (state s1): returns from there G = 0, 1, 0 + 0.5 * 1.
    forks = [_fork([root, Step("s1", "b", 0.0)], 1), _fork([root, Step("s1", "a", 1.0)], 1),
             _fork([root, Step("s1", "c", 0.0), Step("s3", "a", 1.0)], 1)]
    advantages = compute_advantages("bpo", [[trunk_won, trunk_lost, *forks]], gamma=0.5, invalid_penalty=0.0)
    # Trunks: R - mean of the other trunk's R. Forks: G - mean of the other siblings' G, on every step
    # from the branch point on; their shared prefix is the trunk's to credit (0 here).
    assert advantages == [[[1.0, 1.0], [-1.0], [0.0, -0.75], [0.0, 0.75], [0.0, 0.0, 0.0]]]


def test_siblings_are_the_forks_of_one_node_in_one_group():
    start = Step("s0", "a", 0.0)
    lone = _fork([start, Step("s1", "b", 1.0)], 1)  # the only fork at its node: nothing to compare
    elsewhere = [_fork([Step("s0", "b", 0.0), Step("s2", action, reward)], 1)
                 for action, reward in (("a", 1.0), ("b", 0.0))]
    at_root = [_fork([Step("s0", action, reward)], 0) for action, reward in (("a", 1.0), ("b", 3.0))]
    advantages, diagnostics = compute_advantages_with_diagnostics(
        "bpo", [[Trajectory([start, Step("s1", "a", 0.0)]), lone, *elsewhere], at_root],
        gamma=1.0, invalid_penalty=0.1)
    assert advantages == [[[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, -1.0]], [[-2.0], [2.0]]]
    assert [d.counts["branch_points"] for d in diagnostics] == [1, 1]
    assert [d.counts["fork_steps"] for d in diagnostics] == [3, 2]


def test_an_invalid_step_costs_its_penalty_in_the_siblings_returns():
    forks = [_fork([Step("s0", "a", 0.0, valid=False)], 0), _fork([Step("s0", "b", 0.0)], 0)]
    assert compute_advantages("bpo", [forks], invalid_penalty=0.2) == [[[-0.2], [0.2]]]


@pytest.mark.parametrize("point", [-1, 1.5, "2", True])
def test_a_branch_point_that_is_no_step_index_fails_naming_the_trajectory(point):
    group = [Trajectory([Step("s", "a", 1.0)]), _fork([Step("s", "b", 0.0)], point)]
    with pytest.raises(ValueError, match=r"batch\[0\]\[1\].meta\['branch_point'\] must be a step index"):
        compute_advantages("bpo", [group])


def test_trajectories_without_branch_points_get_rloo():
    group = [[Step("s", "a", 1.0)], [Step("s", "b", 0.0)], [Step("s", "c", 0.5)]]
    assert compute_advantages("bpo", [group]) == compute_advantages("rloo", [group])


# ------------------------------------------------------------------- unbiasedness on an exact MDP
#: A depth-3 tree MDP with two actions everywhere: a state is its history ("", "0", "01", ...), the
#: episode ends after the third action. Tabular softmax policy, one logit per (state, action).
DEPTH, ACTIONS = 3, 2
STATES = ["".join(path) for depth in range(DEPTH) for path in itertools.product("01", repeat=depth)]
INDEX = {state: i for i, state in enumerate(STATES)}
_world = np.random.default_rng(10)
REWARD = {(state, a): float(_world.uniform(0, 1)) * (1.0 if len(state) == DEPTH - 1 else 0.5)
          for state in STATES for a in range(ACTIONS)}
LOGITS = _world.normal(0.0, 1.0, size=(len(STATES), ACTIONS))
GAMMA = 0.9


def _policy(logits: np.ndarray, state: str) -> np.ndarray:
    z = np.exp(logits[INDEX[state]] - logits[INDEX[state]].max())
    return z / z.sum()


def _value(logits: np.ndarray, state: str, gamma: float) -> float:
    if len(state) == DEPTH:
        return 0.0
    p = _policy(logits, state)
    return sum(p[a] * (REWARD[state, a] + gamma * _value(logits, state + str(a), gamma)) for a in range(ACTIONS))


def _value_gradient(state: str, gamma: float) -> np.ndarray:
    """d V_gamma(state) / d logits, by central differences of the exact value (error ~1e-10)."""
    gradient, h = np.zeros_like(LOGITS), 1e-5
    for index in np.ndindex(LOGITS.shape):
        up, down = LOGITS.copy(), LOGITS.copy()
        up[index] += h
        down[index] -= h
        gradient[index] = (_value(up, state, gamma) - _value(down, state, gamma)) / (2 * h)
    return gradient


def _entropy(state: str) -> float:
    p = _policy(LOGITS, state)
    return float(-(p * np.log(p)).sum())


def _play(state: str, rng: np.random.Generator) -> list[Step]:
    steps = []
    while len(state) < DEPTH:
        a = int(rng.choice(ACTIONS, p=_policy(LOGITS, state)))
        steps.append(Step(state, str(a), REWARD[state, a]))
        state += str(a)
    return steps


def _group_gradients(batch: list[list[Trajectory]], forks: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group, sum over its steps of A * grad log pi(a | s) (what the update follows), and the same
    with the forks' advantages scaled by (K - 1) / K: the credit of a baseline that keeps the fork's
    own return (G_k - mean of all K siblings), which is biased."""
    advantages = compute_advantages("bpo", batch, gamma=GAMMA, invalid_penalty=0.0)
    exact = np.zeros((len(batch), *LOGITS.shape))
    biased = np.zeros_like(exact)
    for g, (group, group_advantages) in enumerate(zip(batch, advantages)):
        for trajectory, credit in zip(group, group_advantages):
            forked = trajectory.meta.get("branch_point") is not None
            for step, advantage in zip(trajectory.steps, credit):
                score = -_policy(LOGITS, step.state_key)
                score[int(step.action)] += 1.0
                exact[g, INDEX[step.state_key]] += advantage * score
                biased[g, INDEX[step.state_key]] += advantage * score * ((forks - 1) / forks if forked else 1.0)
    return exact, biased


def _z_scores(samples: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """(mean - expected) / standard error, per logit."""
    error = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    return np.abs(samples.mean(axis=0) - expected) / np.maximum(error, 1e-12)


#: The stated tolerance: every logit's mean within 4.5 standard errors of the exact gradient (seeded,
#: so deterministic; an unbiased estimator exceeds it on one of 14 logits with probability ~1e-4).
Z_TOLERANCE = 4.5


def test_forks_at_the_root_are_an_unbiased_policy_gradient():
    rng, K, n = np.random.default_rng(0), 4, 6000
    batch = [[_fork(_play("", rng), 0) for _ in range(K)] for _ in range(n)]
    exact, biased = _group_gradients(batch, K)
    truth = _value_gradient("", GAMMA)  # the policy gradient of J = V_gamma(start)
    assert np.abs(truth).max() > 0.05
    assert _z_scores(exact / K, truth).max() < Z_TOLERANCE
    # The test can fail: the own-return baseline, 3/4 of the gradient in expectation, is rejected.
    assert _z_scores(biased / K, truth).max() > 2 * Z_TOLERANCE


def test_forks_at_entropy_chosen_points_estimate_the_value_gradients_there():
    # Per group: 2 trunks from the start, each forked K times at its highest-entropy decision. The
    # expected update is 2 grad J (the trunks' RLOO, undiscounted) plus 2 K sum_s P(trunk picks s)
    # grad V_gamma(s): the choice looks at the trunk only, so each fork's credit stays unbiased.
    rng, K, n, trunks = np.random.default_rng(1), 4, 4000, 2
    batch, trunk_as_sibling = [], []
    for _ in range(n):
        group, variant = [], []
        for _ in range(trunks):
            trunk = _play("", rng)
            [t] = branch_points([_entropy(step.state_key) for step in trunk], 1)
            forks = [_fork(trunk[:t] + _play(trunk[t].state_key, rng), t) for _ in range(K)]
            group += [Trajectory(trunk), *forks]
            variant += [Trajectory(trunk), _fork(list(trunk), t), *forks]
        batch.append(group)
        trunk_as_sibling.append(variant)
    exact, _ = _group_gradients(batch, K)

    chosen = {}
    for path in itertools.product(range(ACTIONS), repeat=DEPTH):
        states = ["".join(map(str, path[:depth])) for depth in range(DEPTH)]
        probability = math.prod(_policy(LOGITS, s)[a] for s, a in zip(states, path))
        [t] = branch_points([_entropy(s) for s in states], 1)
        chosen[states[t]] = chosen.get(states[t], 0.0) + probability
    assert len(chosen) >= 2  # the branch point really depends on the trunk
    subtrees = sum(probability * _value_gradient(state, GAMMA) for state, probability in chosen.items())
    truth = trunks * _value_gradient("", 1.0) + trunks * K * subtrees
    assert _z_scores(exact, truth).max() < Z_TOLERANCE
    # Counting the trunk's own continuation as a sibling is biased: the choice of the branch point saw
    # the states the trunk's action there led to, so that action is no fresh sample.
    variant, _ = _group_gradients(trunk_as_sibling, K)
    assert _z_scores(variant, trunks * _value_gradient("", 1.0) + trunks * (K + 1) * subtrees).max() > Z_TOLERANCE


# ----------------------------------------------------------------------------- branch points
@pytest.mark.parametrize("entropies, count, expected", [
    ([0.1, math.nan, 0.7, 0.7, 0.3], 2, [2, 3]),
    ([0.1, math.nan, 0.7, 0.7, 0.3], 1, [2]),
    ([0.2, math.nan], 5, [0, 1]),
    ([0.5], 0, []),
    ([], 1, []),
])
def test_branch_points_are_the_highest_entropies_earliest_first(entropies, count, expected):
    assert branch_points(entropies, count) == expected


# ----------------------------------------------------------------------------- the rollout strategy
#: S F F
#: F F G   -- no hole: every episode runs to the goal or to the step cap.
FIELD = Task("ptgpo/FrozenLake-v0", 3, {"desc": ["SFF", "FFG"]}, max_steps=5)
ORDER = ("go right", "go down", "go left", "go up")


class Cycling:
    """A policy that cycles through ``ORDER`` across all its decisions and is most uncertain at its
    second decision (entropy 1.0 there, 0.1 elsewhere)."""

    def __init__(self):
        self.calls = 0

    def decide(self, contexts, generator=None):
        decisions = []
        for context in contexts:
            action = ORDER[self.calls % len(ORDER)]
            self.calls += 1
            decisions.append(Decision(text=action, action=action, prompt_ids=[1], response_ids=[2, 3], logprobs=[0.0],
                                      entropy=1.0 if len(context.history) == 1 else 0.1))
        return decisions


def _replay(task: Task, trajectory: Trajectory) -> None:
    env = make_env(task.env_id, task.env_kwargs, task.max_steps).unwrapped
    observation, info = env.reset(seed=task.seed)
    for step in trajectory.steps:
        assert (step.state_key, step.context.observation) == (info["state_key"], observation)
        observation, reward, terminated, truncated, info = env.step(step.sent)
        assert reward == step.reward
    assert terminated or truncated
    assert info["won"] == trajectory.meta["won"]


def test_bpo_rollouts_fork_each_trunk_k_times_at_its_most_uncertain_decision():
    settings = BpoConfig(trunks=2, branch_points=1, forks=3)
    batch, stats = collect_bpo_rollouts(Cycling(), [FIELD], settings)
    [group] = batch
    trunks = [t for t in group if t.meta["branch_point"] is None]
    forks = [t for t in group if t.meta["branch_point"] is not None]
    assert len(trunks) == 2 and len(forks) == 6 == stats.started - 2
    for trunk in trunks:
        mine = [f for f in forks if f.steps[0] is trunk.steps[0]]
        assert len(mine) == 3
        point = 1 if len(trunk.steps) > 1 else 0  # the second decision, where the policy is least sure
        for fork in mine:
            assert fork.meta["branch_point"] == point
            assert all(a is b for a, b in zip(fork.steps[:point], trunk.steps[:point]))  # the prefix is shared
            assert fork.steps[point] is not trunk.steps[point]  # the branch point's action is sampled afresh
            assert fork.steps[point].state_key == trunk.steps[point].state_key
    for trajectory in group:
        _replay(FIELD, trajectory)
    assert stats.decisions_saved == sum(f.meta["branch_point"] for f in forks)
    assert stats.tokens_saved == 2 * stats.decisions_saved
    assert stats.as_dict()["bpo_branch_points"] == 2 and stats.as_dict()["bpo_branch_entropy"] == pytest.approx(
        np.mean([1.0 if len(t.steps) > 1 else 0.1 for t in trunks]))
    assert all(len(a) == len(t.steps) for a, t in zip(compute_advantages("bpo", batch)[0], group))


def test_bpo_rollouts_spend_the_decision_budget_exactly():
    batch, stats = collect_bpo_rollouts(Cycling(), [FIELD, FIELD], BpoConfig(), max_decisions=9)
    assert stats.decisions == 9
    assert sum(len(t.steps) - (t.meta["branch_point"] or 0) for group in batch for t in group) <= 9


def test_a_bpo_groups_decision_cap_is_its_trunks_and_forks_not_group_size():
    from ptgpo_algos.collectors import most_decisions

    def config(**bpo):
        return TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "algo": "bpo", "group_size": 2, "bpo": bpo})

    # Per trunk: its own 5 decisions, and 3 forks at each of two distinct steps, which decide from
    # there to the horizon: at most 3 x 5 (step 0) + 3 x 4 (step 1). Two trunks: 2 x 32.
    assert most_decisions(config(trunks=2, branch_points=2, forks=3), FIELD, 8) == 64
    # A trunk of 5 decisions has at most 5 branch points: 2 x (5 + 3 x (5 + 4 + 3 + 2 + 1)).
    assert most_decisions(config(trunks=2, branch_points=7, forks=3), FIELD, 8) == 100
    assert most_decisions(config(trunks=3, branch_points=0), FIELD, 8) == 15
    # Capped there, the group plays every leaf: none is cut off by the budget.
    settings = config(trunks=2, branch_points=2, forks=3).rollouts.bpo
    cap = most_decisions(config(trunks=2, branch_points=2, forks=3), FIELD, 8)
    batch, stats = collect_bpo_rollouts(Cycling(), [FIELD], settings, max_decisions=cap)
    assert len(batch[0]) == settings.leaves == 14 and stats.decisions <= cap


# ----------------------------------------------------------------------------- config and CLI
def test_bpo_is_a_typed_section_and_the_default_strategy_of_its_estimator():
    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "algo": "bpo"})
    assert config.rollouts.strategy == "bpo" and config.rollouts.bpo == BpoConfig()
    assert config.to_dict()["rollouts"]["bpo"] == {"trunks": 2, "branch_points": 1, "forks": 4}
    assert TrainConfig.from_dict(config.to_dict()) == config
    given = TrainConfig.from_dict({"algo": "bpo", "rollouts.bpo.forks": 6, "bpo": {"trunks": 3}})
    assert (given.rollouts.bpo.forks, given.rollouts.bpo.trunks, given.rollouts.bpo.leaves) == (6, 3, 21)


@pytest.mark.parametrize("data, message", [
    ({"algo": "bpo", "bpo": {"fork": 4}}, "rollouts.bpo (bpo): unknown key(s) 'fork' (did you mean 'forks'?)"),
    ({"algo": "bpo", "bpo": {"forks": 1}}, "rollouts.bpo.forks: expected an integer >= 2, got 1"),
    ({"algo": "bpo", "bpo": {"trunks": 0}}, "rollouts.bpo.trunks: expected an integer >= 1"),
    ({"algo": "bpo", "rollout": "tree"},
     "rollouts.strategy (rollout): the bpo estimator credits what only the bpo strategy records, not tree"),
    ({"algo": "bpo", "bpo": {"forks": 2**19}, "tasks_per_iteration": 8}, "lower one of them"),
])
def test_bad_bpo_settings_fail_naming_the_key(data, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict(data)
    assert message in str(error.value)


def test_algos_lists_bpo_with_its_paper_and_strategy(capsys):
    from ptgpo_harness.cli import main

    assert main(["algos"]) == 0
    estimators, strategies = capsys.readouterr().out.split("rollout strategies", 1)
    assert "\n  bpo     bpo.trunks=2, bpo.branch_points=1, bpo.forks=4\n" in strategies  # its settings' keys
    [line] = [line for line in estimators.splitlines() if line.split()[:1] == ["bpo"]]
    assert "(arXiv 2607.14171)" in line and "gamma=0.95" in line


# ----------------------------------------------------------------------------- training
def test_training_with_bpo_on_frozenlake_end_to_end(tmp_path, monkeypatch):
    from ptgpo_algos.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SF", "HG"]}, max_steps=6, algo="bpo", bpo={"forks": 2},
        tasks_per_iteration=2,
        iterations=3, eval_every=3, eval_seeds=2, out_dir=str(tmp_path / "run"),
        tiny={"hidden_size": 32, "pretrain_steps": 0}))
    summary = run_training(config, progress=False)
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    assert len(rows) == 3
    assert all(row["bpo_branch_points"] == 4 for row in rows)  # 2 tasks x 2 trunks x 1 point
    assert all(1 <= row["adv_branch_points"] <= 4 for row in rows)  # forks of two trunks at one node pool
    assert sum(row["decisions_saved"] for row in rows) == summary.decisions_saved
    assert any(row["adv_abs_mean"] > 0 for row in rows)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["rollouts"]["strategy"] == "bpo" and saved["rollouts"]["bpo"]["forks"] == 2
