"""Properties of the advantage estimators on random groups, a loop-by-loop reference implementation
written straight from the definitions, and the bad-input errors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ptgpo_algos import (
    ESTIMATORS,
    Step,
    Trajectory,
    compute_advantages,
    compute_advantages_with_diagnostics,
    estimator_defaults,
)
from ptgpo_algos.advantages import StepTable, estimate_advantages

# ------------------------------------------------------------------ random groups

STATES = "ABCD"
ACTIONS = "xyz"


def random_group(rng: random.Random, share_objects: bool = True, action_of=None) -> list[Trajectory]:
    """1-5 trajectories of 0-6 steps; later ones often restart from an earlier one's prefix, sharing
    its Step objects (or copies of them). Rewards are dyadic so sums and means are exact in floats;
    a third of the groups are all-failed (every reward 0), where coverage credit applies. Responses
    are 0-4 tokens long (None for 0), a function of the history so the random stream stays the same."""
    group: list[Trajectory] = []
    rewards = [0.0] if rng.random() < 0.35 else [0.0, 0.0, 0.5, 1.0, -1.0]
    for _ in range(rng.randint(1, 5)):
        steps: list[Step] = []
        meta = {}
        if group and rng.random() < 0.6:
            parent = rng.choice(group).steps
            prefix = parent[: rng.randint(0, len(parent))]
            meta["branch_point"] = len(prefix)  # a fork, as tree rollouts record it (bpo reads it)
            steps = list(prefix) if share_objects else [
                Step(s.state_key, s.action, s.reward, s.valid, response_ids=s.response_ids, extras=dict(s.extras))
                for s in prefix
            ]
        for t in range(len(steps), rng.randint(len(steps), 6)):
            state = rng.choice(STATES)
            history = tuple(s.state_key for s in steps) + (state,)
            action = action_of(history) if action_of else rng.choice(ACTIONS)
            tokens = (7 * len(history) + ord(action) + ord(state)) % 5
            # A rollout strategy's own reward (3SPO's), dyadic and a function of the history like the tokens.
            own = ((3 * len(history) + ord(action) + 2 * ord(state)) % 8) / 4 - 0.75
            # A critic's value of the state (what ppo reads, recorded by the trainer), dyadic likewise.
            value = ((5 * len(history) + ord(state)) % 8) / 8
            # A turn's credit computed before the estimator (HiPER's critic records it), dyadic likewise.
            credit = ((3 * len(history) + ord(action)) % 8) / 4 - 1.0
            steps.append(Step(state, action, rng.choice(rewards), rng.random() > 0.2,
                              response_ids=[0] * tokens if tokens else None,
                              extras={"strategy_reward": own, "value": value, "credit": credit}))
        group.append(Trajectory(steps, meta=meta))
    return group


def random_batch(seed: int, groups: int = 6, **kwargs) -> list[list[Trajectory]]:
    rng = random.Random(seed)
    return [random_group(rng, **kwargs) for _ in range(groups)] + [[]]


def random_config(name: str, rng: random.Random) -> dict:
    """Dyadic values only, so the reference's exact float comparisons agree with the 1e-9 snapping."""
    choices = {
        "gamma": [0.5, 0.75, 1.0],
        "invalid_penalty": [0.0, 0.25, 0.5],
        "coverage_beta": [0.0, 0.5],
        "coverage_when": ["all_failed", "all_equal"],
        "norm": ["mean_norm", "mean_std_norm"],
        "omega": [0.5, 1.0],
        "K": [0, 1, 2, 3],
        "alpha": [0.0, 1.0, 2.0],
        "include_episode": [False, True],
        "lam": [0.5, 1.0],
        "success_reward": [0.5, 1.0],
        "alpha_init": [0.0, 0.5],
        "alpha_final": [0.25, 1.0],
        "progress": [0.0, 0.5, 1.0],
        "turn_group": ["index", "pooled"],
        "coverage_weight": [0.5, 1.0],
        "variant": ["trajectory", "step"],
        "transition_weight": [0.5, 1.0],
        "variance_prior": [0.25, 1.0],
        "distance_base": [0.5, 0.25],
        "empg": [None],  # needs recorded entropies; tests/test_advantages_empg.py
        "gae_lambda": [0.0, 0.5, 1.0],
        "whiten": [False, True],
    }
    return {key: rng.choice(choices[key]) for key in estimator_defaults(name)}


# ------------------------------------------------------------------ reference implementation


def ref_norm(x: float, pool: list[float], norm: str) -> float:
    """With the estimators' documented rounding rule: a deviation within 1e-9 relative is 0."""
    if len(pool) < 2:
        return 0.0
    mean = sum(pool) / len(pool)
    if abs(x - mean) <= 1e-9 * (1 + abs(mean)):
        return 0.0
    if norm == "mean_norm":
        return x - mean
    std = math.sqrt(sum((p - mean) ** 2 for p in pool) / (len(pool) - 1))
    return (x - mean) / (std + 1e-6)


def discounted(values: list[float], gamma: float) -> list[float]:
    out, running = [], 0.0
    for v in reversed(values):
        running = v + gamma * running
        out.append(running)
    return out[::-1]


def reference(name: str, batch, *, gamma, invalid_penalty, coverage_beta=0.0, coverage_when="all_failed", empg=None,
              norm="mean_std_norm",
              omega=1.0, K=2, alpha=1.0, include_episode=False, lam=1.0, success_reward=1.0,
              alpha_init=0.1, alpha_final=0.05, progress=0.0, turn_group="index", coverage_weight=0.1,
              variant="trajectory", transition_weight=1.0, variance_prior=0.25, distance_base=0.2):
    """Every definition of the estimators' docstrings as plain loops over (i, t) pairs; O(n^2), small
    groups only."""
    result = []
    for group in batch:
        trajs = [t.steps for t in group]
        live = [i for i, steps in enumerate(trajs) if steps]
        zeros = [[0.0] * len(steps) for steps in trajs]
        if len(live) < 2:
            result.append(zeros)
            continue
        env_returns = {sum(s.reward for s in trajs[i]) for i in live}
        triggered = env_returns == {0.0} if coverage_when == "all_failed" else len(env_returns) == 1
        coverage = triggered and coverage_beta > 0
        states = [[s.state_key for s in steps] for steps in trajs]
        if coverage:
            c = [[(1.0 if t + 1 < len(st) and st[t + 1] not in st[: t + 1] else 0.0)
                  - (invalid_penalty if not s.valid else 0.0) for t, s in enumerate(steps)]
                 for st, steps in zip(states, trajs)]
            G = [discounted(ci, gamma) for ci in c]
            R = [g[0] if g else 0.0 for g in G]
        else:
            r = [[s.reward - (invalid_penalty if not s.valid else 0.0) for s in steps] for steps in trajs]
            G = [discounted(ri, gamma) for ri in r]
            R = [sum(ri) for ri in r]
        steps_of = [(j, u) for j in live for u in range(len(trajs[j]))]

        def episode(i):
            return ref_norm(R[i], [R[j] for j in live], norm)

        def hgpo_at(i, t, with_episode):
            num = den = 0.0
            for k in range(K + 1):
                if t < k:
                    continue
                key = states[i][t - k: t + 1]
                pool = [G[j][u] for j, u in steps_of if u >= k and states[j][u - k: u + 1] == key]
                a = ref_norm(G[i][t], pool, norm)
                if a != 0:
                    num, den = num + (k + 1) ** alpha * a, den + (k + 1) ** alpha
            if with_episode and episode(i) != 0:
                num, den = num + episode(i), den + 1
            return num / den if den else 0.0

        def history(j, t):
            return [(s.state_key, s.action) for s in trajs[j][:t]] + [trajs[j][t].state_key]

        env = [sum(s.reward for s in steps) for steps in trajs]
        succeeded = [bool(trajs[j]) and env[j] >= success_reward for j in range(len(trajs))]

        def penalty(j, u):
            return 0.0 if trajs[j][u].valid else invalid_penalty

        def novel(j, u):
            return 1.0 if u + 1 < len(trajs[j]) and states[j][u + 1] not in states[j][: u + 1] else 0.0

        def g2po_at(i, t):
            visits = {}
            for j, u in steps_of:
                visits.setdefault(states[j][u], []).append(gamma ** (len(trajs[j]) - u) * env[j])
            value = {state: sum(v) / len(v) for state, v in visits.items()}

            def after(j, u):
                if u + 1 < len(trajs[j]):
                    return value[states[j][u + 1]]
                return success_reward if succeeded[j] else 0.0

            node = [after(j, u) - penalty(j, u) for j, u in steps_of if states[j][u] == states[i][t]]
            edges = [after(j, u) - value[states[j][u]] for j, u in steps_of]
            rows = [env[j] - penalty(j, u) for j, u in steps_of]
            return (ref_norm(env[i] - penalty(i, t), rows, norm)
                    + omega * (ref_norm(after(i, t) - penalty(i, t), node, norm)
                               + ref_norm(after(i, t) - value[states[i][t]], edges, norm)))

        def planpo_at(i, t):
            credit = [R[j] if succeeded[j] else 0.0 for j in range(len(trajs))]
            per_turn = [credit[j] / len(trajs[j]) for j in live]

            def per_token(j, u):
                return credit[j] / max(len(trajs[j][u].response_ids or ()), 1)

            pool = [per_token(j, u) for j, u in steps_of if turn_group == "pooled" or u == t]
            weight = alpha_init + (alpha_final - alpha_init) * progress
            return (ref_norm(credit[i] / len(trajs[i]), per_turn, norm)
                    + weight * ref_norm(per_token(i, t), pool, norm))

        def covgpo_at(i, t):
            if any(env[j] != 0 for j in live):
                return episode(i)
            if variant == "trajectory":
                rate = {j: sum(novel(j, u) for u in range(len(trajs[j]))) / len(trajs[j]) for j in live}
                coverage = ref_norm(rate[i], list(rate.values()), norm)
            else:
                coverage = ref_norm(novel(i, t), [novel(j, u) for j, u in steps_of], norm)
            return episode(i) + coverage_weight * coverage

        potential = {}
        for j, u in steps_of:
            num = den = 0.0
            for k in range(min(K, u) + 1):
                key = states[j][u - k: u + 1]
                pool = [R[m] for m, v in steps_of if v >= k and states[m][v - k: v + 1] == key]
                mean = sum(pool) / len(pool)
                variance = sum((x - mean) ** 2 for x in pool) / (len(pool) - 1) if len(pool) > 1 else 0.0
                precision = len(pool) / (variance + variance_prior)
                num, den = num + precision * mean, den + precision
            potential[j, u] = num / den
        transition = {
            (j, u): gamma * (potential[j, u + 1] if u + 1 < len(trajs[j]) else R[j]) - potential[j, u]
            for j, u in steps_of
        }

        def progpo_at(i, t):
            prefix = [G[j][t] for j in live if len(trajs[j]) > t and history(j, t) == history(i, t)]
            return episode(i) + omega * (ref_norm(G[i][t], prefix, norm) + transition_weight
                                         * ref_norm(transition[i, t], list(transition.values()), norm))

        def graph_distances():
            """Shortest unit-step distances to success by breadth-first search from it, backwards."""
            leads = {}
            for j, u in steps_of:
                after = states[j][u + 1] if u + 1 < len(trajs[j]) else ("SUCCESS" if succeeded[j] else None)
                if after is not None:
                    leads.setdefault(after, set()).add(states[j][u])
            if not any(succeeded[j] for j in live):
                return None
            distance, frontier = {"SUCCESS": 0}, ["SUCCESS"]
            while frontier:
                node = frontier.pop(0)
                for before in sorted(leads.get(node, ())):
                    if before not in distance:
                        distance[before] = distance[node] + 1
                        frontier.append(before)
            return distance

        distances = graph_distances()

        def graphgpo_at(i, t):
            if distances is None:
                return episode(i)
            unreachable = max(distances.values()) + 1

            def reward(j, u):
                after = states[j][u + 1] if u + 1 < len(trajs[j]) else ("SUCCESS" if succeeded[j] else None)
                return success_reward * distance_base ** distances.get(after, unreachable)

            pool = [reward(j, u) for j, u in steps_of if states[j][u] == states[i][t]]
            return episode(i) + omega * ref_norm(reward(i, t), pool, norm)

        def bpo_at(i, t):
            point = [trajectory.meta.get("branch_point") for trajectory in group]
            if point[i] is None:
                others = [R[j] for j in live if point[j] is None and j != i]
                return R[i] - sum(others) / len(others) if others else 0.0
            tau = point[i]
            if t < tau:
                return 0.0
            others = [G[j][tau] for j in live if j != i and point[j] == tau and tau < len(trajs[j])
                      and history(j, tau) == history(i, tau)]
            return G[i][tau] - sum(others) / len(others) if others else 0.0

        def advantage(i, t):
            if name == "bpo":
                return bpo_at(i, t)
            if name == "3spo":
                pool = [trajs[j][u].extras["strategy_reward"] - penalty(j, u) for j, u in steps_of
                        if states[j][u] == states[i][t]]
                return ref_norm(trajs[i][t].extras["strategy_reward"] - penalty(i, t), pool, norm)
            if name == "graphgpo":
                return graphgpo_at(i, t)
            if name == "grpo":
                return episode(i)
            if name == "rloo":
                others = [R[j] for j in live if j != i]
                return R[i] - sum(others) / len(others)
            if name == "gigpo":
                pool = [G[j][u] for j, u in steps_of if states[j][u] == states[i][t]]
                return episode(i) + omega * ref_norm(G[i][t], pool, norm)
            if name == "hgpo":
                return hgpo_at(i, t, include_episode)
            seed_methods = {"g2po": g2po_at, "planpo": planpo_at, "covgpo": covgpo_at, "progpo": progpo_at}
            if name in seed_methods:
                return seed_methods[name](i, t)
            through = [j for j in live if len(trajs[j]) > t and history(j, t) == history(i, t)]
            actions = {trajs[j][t].action for j in through}
            if len(actions) >= 2:
                values = [G[j][t] for j in through]
                v = sum(values) / len(values)
                same = [G[j][t] for j in through if trajs[j][t].action == trajs[i][t].action]
                tree = sum(same) / len(same) - v
                if norm == "mean_std_norm":
                    tree /= math.sqrt(sum((x - v) ** 2 for x in values) / (len(values) - 1)) + 1e-6
            else:
                tree = lam * hgpo_at(i, t, False)
            return episode(i) + omega * tree

        scale = coverage_beta if coverage else 1.0
        result.append([[scale * advantage(i, t) for t in range(len(trajs[i]))] for i in range(len(trajs))])
    return result


def ppo_reference(batch, *, gamma, invalid_penalty, gae_lambda, whiten, **_):
    """ppo's docstring as loops: GAE per trajectory (every random trajectory terminated), whitened over
    the batch, then the driver's zeros for groups of fewer than two non-empty trajectories."""
    advantages = []
    for group in batch:
        for trajectory in group:
            steps, out, running = trajectory.steps, [], 0.0
            for t in range(len(steps) - 1, -1, -1):
                following = steps[t + 1].extras["value"] if t + 1 < len(steps) else 0.0
                reward = steps[t].reward - (invalid_penalty if not steps[t].valid else 0.0)
                running = reward + gamma * following - steps[t].extras["value"] + gamma * gae_lambda * running
                out.insert(0, running)
            advantages.append(out)
    every = [a for out in advantages for a in out]
    if whiten and len(every) > 1:
        mean, std = sum(every) / len(every), math.sqrt(sum((a - sum(every) / len(every)) ** 2 for a in every) / len(every))
        advantages = [[(a - mean) / (std + 1e-8) for a in out] for out in advantages]
    result, k = [], 0
    for group in batch:
        live = sum(1 for t in group if t.steps) >= 2
        result.append([[a if live else 0.0 for a in advantages[k + i]] for i in range(len(group))])
        k += len(group)
    return result


def hiper_reference(batch, **_):
    """hiper's docstring: the recorded credit of each turn, with the driver's zeros for groups of fewer
    than two non-empty trajectories."""
    return [[[s.extras["credit"] if sum(1 for t in group if t.steps) >= 2 else 0.0 for s in trajectory.steps]
             for trajectory in group] for group in batch]


def flat(nested) -> np.ndarray:
    return np.array([x for group in nested for traj in group for x in traj], dtype=float)


# ------------------------------------------------------------------ properties


@pytest.mark.parametrize("name", ESTIMATORS)
def test_matches_reference_on_random_groups(name):
    rng = random.Random(name)
    for seed in range(25):
        batch = random_batch(seed)
        config = random_config(name, rng)
        known = {**estimator_defaults(name), **config}
        own = {"ppo": ppo_reference, "hiper": hiper_reference}
        expected = own[name](batch, **known) if name in own else reference(name, batch, **known)
        actual = compute_advantages(name, batch, **config)
        assert [[len(t) for t in g] for g in actual] == [[len(t) for t in g] for g in batch]
        np.testing.assert_allclose(flat(actual), flat(expected), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{name} seed {seed} config {config}")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_permuting_trajectories_and_groups_permutes_advantages(name):
    for seed in range(10):
        batch = random_batch(seed)
        rng = random.Random(seed)
        orders = [rng.sample(range(len(g)), len(g)) for g in batch]
        group_order = rng.sample(range(len(batch)), len(batch))
        permuted = [[batch[g][i] for i in orders[g]] for g in group_order]
        original = compute_advantages(name, batch)
        shuffled = compute_advantages(name, permuted)
        for position, g in enumerate(group_order):
            for slot, i in enumerate(orders[g]):
                np.testing.assert_allclose(shuffled[position][slot], original[g][i], atol=1e-12)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_advantages_are_finite_with_default_config(name):
    for seed in range(10):
        values = flat(compute_advantages(name, random_batch(seed)))
        assert values.size > 0 and np.isfinite(values).all()


@pytest.mark.parametrize("name", ESTIMATORS)
def test_shared_step_objects_and_equal_copies_agree(name):
    shared = compute_advantages(name, random_batch(3, share_objects=True))
    copies = compute_advantages(name, random_batch(3, share_objects=False))
    np.testing.assert_allclose(flat(shared), flat(copies), atol=0)


def test_ptgpo_without_forks_is_grpo_plus_weighted_hgpo():
    # The action is a function of the state history, so no node has two distinct actions.
    def action_of(history):
        return ACTIONS[hash(history) % len(ACTIONS)]

    omega, lam, K, alpha = 0.7, 1.3, 3, 2.0
    for seed in range(10):
        batch = random_batch(seed, action_of=action_of)
        ptgpo, diagnostics = compute_advantages_with_diagnostics(
            "ptgpo", batch, omega=omega, lam=lam, K=K, alpha=alpha, coverage_beta=0.0
        )
        grpo = flat(compute_advantages("grpo", batch))
        hgpo = flat(compute_advantages("hgpo", batch, K=K, alpha=alpha))
        np.testing.assert_allclose(flat(ptgpo), grpo + omega * lam * hgpo, rtol=1e-12, atol=1e-12)
        assert all(d.counts["branching_nodes"] == 0 for d in diagnostics)


def test_array_form_agrees_with_nested_form():
    batch = random_batch(7)
    table = StepTable.from_batch(batch)
    result = estimate_advantages("ptgpo", table, K=1)
    np.testing.assert_array_equal(result.advantages, flat(compute_advantages("ptgpo", batch, K=1)))
    assert len(result.diagnostics) == len(batch)


def test_degenerate_batches_give_zeros():
    lone = [Trajectory([Step("a", "x", 1.0, extras={"strategy_reward": 1.0, "value": 0.5, "credit": 0.5}),
                        Step("a", "x", 0.0, extras={"strategy_reward": 0.0, "value": 0.25, "credit": -1.0})])]
    for name in ESTIMATORS:
        assert compute_advantages(name, []) == []
        assert compute_advantages(name, [[], [Trajectory()], [Trajectory(), Trajectory()]]) == [
            [], [[]], [[], []]
        ]
        assert compute_advantages(name, [lone]) == [[[0.0, 0.0]]]


# ------------------------------------------------------------------ errors


def test_unknown_estimator_lists_the_valid_names():
    names = "grpo, rloo, gigpo, hgpo, ptgpo, g2po, planpo, progpo, covgpo, graphgpo, 3spo, bpo, ppo, hiper"
    with pytest.raises(ValueError, match=f"unknown advantage estimator .ptgpx. \\(did you mean .ptgpo.\\?\\); choose one of {names}$"):
        compute_advantages("ptgpx", [])


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        ("grpo", {"omega": 1.0}, r"'omega'.*valid keys: coverage_beta, coverage_when, empg, gamma, invalid_penalty, norm"),
        ("rloo", {"norm": "mean_norm"}, r"'norm'.*valid keys"),
        ("ptgpo", {"include_episode": True}, r"'include_episode'.*valid keys"),
        ("grpo", {"gamma": 1.5}, r"gamma=1.5.*\[0, 1\]"),
        ("grpo", {"gamma": float("nan")}, r"gamma=nan"),
        ("grpo", {"gamma": True}, r"gamma=True"),
        ("grpo", {"norm": "std"}, r"norm='std'.*one of mean_norm, mean_std_norm"),
        ("rloo", {"invalid_penalty": -0.1}, r"invalid_penalty=-0.1.*>= 0"),
        ("hgpo", {"K": -1}, r"K=-1.*integer >= 0"),
        ("hgpo", {"K": 1.5}, r"K=1.5.*integer >= 0"),
        ("hgpo", {"include_episode": "yes"}, r"include_episode='yes'.*True or False"),
        ("ptgpo", {"coverage_beta": float("inf")}, r"coverage_beta=inf"),
        ("ptgpo", {"lam": "one"}, r"lam='one'"),  # a string that spells a number ('1') is that number
        ("g2po", {"coverage_beta": 0.1}, r"'coverage_beta'.*valid keys: empg, gamma, invalid_penalty, norm, omega"),
        ("g2po", {"success_reward": 0.0}, r"success_reward=0.0.*> 0"),
        ("planpo", {"progress": 1.5}, r"progress=1.5.*\[0, 1\]"),
        ("planpo", {"turn_group": "all"}, r"turn_group='all'.*one of index, pooled"),
        ("planpo", {"alpha_final": -0.1}, r"alpha_final=-0.1.*>= 0"),
        ("covgpo", {"variant": "episode"}, r"variant='episode'.*one of trajectory, step"),
        ("covgpo", {"lam": 0.5}, r"'lam'.*valid keys.*coverage_weight"),
        ("progpo", {"variance_prior": 0}, r"variance_prior=0.*> 0"),
        ("progpo", {"transition_weight": float("nan")}, r"transition_weight=nan"),
    ],
)
def test_bad_config_raises_value_error(name, config, message):
    with pytest.raises(ValueError, match=message):
        compute_advantages(name, [], **config)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_reward_raises(bad):
    group = [Trajectory([Step("a", "x", 0.0)]), Trajectory([Step("a", "y", 0.0), Step("b", "y", bad)])]
    for name in ESTIMATORS:
        with pytest.raises(ValueError, match=r"batch\[0\]\[1\] step 1 is not finite"):
            compute_advantages(name, [group])


def test_malformed_batch_raises():
    group = [Trajectory([Step("a", "x", 0.0)])]
    with pytest.raises(ValueError, match=r"wrap a single group as \[group\]"):
        compute_advantages("grpo", group)
    with pytest.raises(ValueError, match="must be a number"):
        compute_advantages("grpo", [[Trajectory([Step("a", "x", "one")])]])
