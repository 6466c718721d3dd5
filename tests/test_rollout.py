"""Rollout collection: linear groups, prefix-tree groups that share their prefixes exactly and replay
the environment correctly, and the accounting of decisions saved by prefix reuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptgpo_envs import make_env
from ptgpo_algos.policy import load_policy
from ptgpo_algos.records import Task
from ptgpo_algos.rollouts.patr.collection import SCORERS, PatrConfig, collect_patr_rollouts
from ptgpo_algos.rollouts.collection import collect_rollouts

FROZEN = Task("ptgpo/FrozenLake-v0", 7, {"is_slippery": True}, max_steps=12)
HOUSE = Task("ptgpo/Household-v0", 3, {"difficulty": "easy"}, max_steps=10)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    path = build_tiny_model(
        TinyModelSpec(seed=1, pretrain_steps=0),
        env_ids=["ptgpo/FrozenLake-v0", "ptgpo/Household-v0"],
        cache_dir=tmp_path_factory.mktemp("cache"),
    )
    return load_policy(path, mode="choose")


def _collect(policy, tasks, seed=0, **kwargs):
    return collect_rollouts(
        policy, tasks, rng=np.random.default_rng(seed), generator=torch.Generator().manual_seed(seed), **kwargs
    )


def _collect_patr(policy, tasks, seed=0, max_decisions=None, **settings):
    return collect_patr_rollouts(policy, tasks, PatrConfig(**settings), rng=np.random.default_rng(seed),
                                 generator=torch.Generator().manual_seed(seed), max_decisions=max_decisions)


def _replay(task: Task, trajectory) -> None:
    """Replaying the recorded actions from reset reproduces every recorded state, context, reward,
    completed task and outcome. A leaf that PATR pruned ends unfinished, and its last reward carries
    the pruned reward on top of the environment's."""
    env = make_env(task.env_id, task.env_kwargs, task.max_steps).unwrapped
    observation, info = env.reset(seed=task.seed)
    for step in trajectory.steps:
        assert step.state_key == info["state_key"]
        context = step.context
        assert (context.task, context.observation, context.admissible_actions) == (
            info["task"], observation, info["admissible_actions"])
        observation, reward, terminated, truncated, info = env.step(step.sent)
        assert reward + step.extras.get("pruned_reward", 0.0) == step.reward and info["action_valid"] == step.valid
        assert step.achieved == env.achieved_tasks()
    assert (terminated or truncated) != bool(trajectory.meta.get("pruned"))
    assert info["won"] == trajectory.meta["won"]


def test_linear_groups_are_independent(policy):
    batch, stats = _collect(policy, [FROZEN, HOUSE], group_size=4, mode="linear")
    assert [len(group) for group in batch] == [4, 4]
    for task, group in zip([FROZEN, HOUSE], batch):
        ids = [id(step) for trajectory in group for step in trajectory.steps]
        assert len(ids) == len(set(ids))
        for trajectory in group:
            assert trajectory.meta["branch_point"] is None and trajectory.meta["seed"] == task.seed
            _replay(task, trajectory)
    assert stats.decisions == sum(len(t) for g in batch for t in g)
    assert stats.decisions_saved == 0 and stats.tokens_saved == 0


@pytest.mark.parametrize("branch", ["uniform", "entropy", "novel"])
def test_tree_branches_share_prefixes_exactly_and_replay(policy, branch):
    tasks = [FROZEN, HOUSE]
    batch, stats = _collect(policy, tasks, group_size=6, mode="tree", initial_rollouts=2, branch=branch)
    assert [len(group) for group in batch] == [6, 6]
    total_steps = 0
    for task, group in zip(tasks, batch):
        roots = [t for t in group if t.meta["branch_point"] is None]
        assert len(roots) == 2
        for trajectory in group:
            _replay(task, trajectory)
            total_steps += len(trajectory)
            t = trajectory.meta["branch_point"]
            if t is None:
                continue
            # The prefix is the same Step objects as in an earlier leaf: same actions, tokens, log-probs.
            sources = [o for o in group if o is not trajectory and len(o) > t and all(
                o.steps[k] is trajectory.steps[k] for k in range(t))]
            assert sources, "a branch must reuse an existing prefix"
            for k in range(t):
                step = trajectory.steps[k]
                assert step.decision.response_ids == step.response_ids
            # After the branch point the steps are new objects.
            assert all(step not in sources[0].steps[t:] for step in trajectory.steps[t:])
    assert stats.decisions + stats.decisions_saved == total_steps
    assert stats.decisions_saved > 0 and stats.tokens_saved > 0


def test_tree_success_counts_episodes_from_reset_apart_from_branched_leaves(policy):
    # A 1x3 lake: 'right' twice wins, so a fair share of leaves win and branches from won prefixes too.
    lake = Task("ptgpo/FrozenLake-v0", 0, {"desc": ["SFG"]}, max_steps=6)
    batch, stats = _collect(policy, [lake] * 3, group_size=8, mode="tree", initial_rollouts=3, branch="uniform")
    leaves = [t for group in batch for t in group]
    from_reset = [t.meta["won"] for t in leaves if t.meta["branch_point"] is None]
    row = stats.as_dict()
    assert (row["episodes"], row["reset_episodes"], row["episodes_cut"]) == (24, 9, 0)
    assert len(from_reset) == 9 and 0 < sum(from_reset) < 9
    assert row["success"] == sum(from_reset) / 9
    assert row["leaf_success"] == sum(t.meta["won"] for t in leaves) / 24


def test_a_decision_budget_cuts_episodes_and_says_so(policy):
    # 9 decisions for 3 tasks x 2 initial episodes on a lake that takes 5 moves: 6 start, none can
    # finish; the second step has room for 3 of them, and all 6 are cut.
    lake = Task("ptgpo/FrozenLake-v0", 0, {"desc": ["SFFFFG"]}, max_steps=6)
    batch, stats = _collect(policy, [lake] * 3, group_size=4, mode="tree", initial_rollouts=2, max_decisions=9)
    row = stats.as_dict()
    assert batch == [] and stats.decisions == 9
    assert (row["episodes"], row["episodes_cut"], row["reset_episodes"], row["success"]) == (0, 6, 0, 0.0)


def test_tree_rollouts_are_reproducible(policy):
    a, sa = _collect(policy, [HOUSE], seed=4, group_size=4, mode="tree")
    b, sb = _collect(policy, [HOUSE], seed=4, group_size=4, mode="tree")
    assert [[s.action for s in t] for t in a[0]] == [[s.action for s in t] for t in b[0]]
    assert [t.meta["branch_point"] for t in a[0]] == [t.meta["branch_point"] for t in b[0]]
    assert sa.decisions == sb.decisions


def test_tree_with_one_initial_rollout_grows_sequentially(policy):
    batch, stats = _collect(policy, [FROZEN], group_size=3, mode="tree", initial_rollouts=1)
    assert len(batch[0]) == 3
    assert [t.meta["branch_point"] is None for t in batch[0]] == [True, False, False]


def test_rollout_arguments_are_checked(policy):
    with pytest.raises(ValueError, match="rollout mode"):
        _collect(policy, [FROZEN], mode="bush")
    with pytest.raises(ValueError, match="branch"):
        _collect(policy, [FROZEN], mode="tree", branch="random")
    with pytest.raises(ValueError, match="initial_rollouts"):
        _collect(policy, [FROZEN], mode="tree", group_size=4, initial_rollouts=5)


# ----------------------------------------------------------------------------- PATR
LAKE = Task("ptgpo/FrozenLake-v0", 7, {"is_slippery": True}, max_steps=14)


@pytest.fixture
def first_is_worst():
    """A process scorer that ranks a group's first active branch last and the others equal."""
    SCORERS.register("first_is_worst", lambda branches, finished: [0.0] + [1.0] * (len(branches) - 1))
    yield "first_is_worst"
    SCORERS.unregister("first_is_worst")


def _check_patr_groups(tasks, batch, stats, settings: PatrConfig) -> None:
    """Every leaf replays from reset; roots, forks, prunes and counts are as PATR's rules say."""
    every, limit = settings.every, settings.repeat_limit or 10**9
    total_steps = 0
    for task, group in zip(tasks, batch):
        assert [t.meta["branch_point"] for t in group].count(None) == settings.initial_branches
        assert len(group) <= settings.max_leaves
        for trajectory in group:
            _replay(task, trajectory)
            total_steps += len(trajectory)
            sent = [step.sent for step in trajectory.steps]
            # A branch is pruned the turn its last `limit` actions agree, never later.
            assert all(len(set(sent[j - limit:j])) > 1 for j in range(limit, len(sent)))
            pruned, t = trajectory.meta["pruned"], trajectory.meta["branch_point"]
            looped = len(sent) >= limit and len(set(sent[-limit:])) == 1
            # A loop is pruned, unless its last turn ended the episode (a finished leaf: _replay checks it).
            assert pruned in (("repeat", None) if looped else (None, "score"))
            if pruned == "score":
                assert len(trajectory) % every == 0
            if t is not None:
                # A child forks at a checkpoint and shares its parent's steps up to it, as objects.
                assert t % every == 0 and t > 0
                assert any(o is not trajectory and all(o.steps[k] is trajectory.steps[k] for k in range(t))
                           for o in group)
    leaves = [t for group in batch for t in group]
    assert len(leaves) == stats.started == stats.leaves == stats.episodes
    assert len(leaves) == len(batch) * settings.initial_branches + stats.expansions * (settings.children - 1)
    assert stats.pruned_score == sum(t.meta["pruned"] == "score" for t in leaves)
    assert stats.pruned_repeat == sum(t.meta["pruned"] == "repeat" for t in leaves)
    assert stats.decisions + stats.decisions_saved == total_steps


def test_patr_trees_replay_and_follow_their_rules(policy):
    tasks = [LAKE, HOUSE]
    settings = PatrConfig(every=3, repeat_limit=3, max_leaves=8, alpha=0.2)
    batch, stats = _collect_patr(policy, tasks, **{k: getattr(settings, k) for k in ("every", "repeat_limit",
                                                                                       "max_leaves", "alpha")})
    assert len(batch) == 2
    _check_patr_groups(tasks, batch, stats, settings)
    assert stats.expansions > 0 and stats.decisions_saved > 0 and stats.tokens_saved > 0
    assert stats.pruned_repeat > 0 and stats.checkpoints > 0
    row = stats.as_dict()
    assert row["patr_expansions"] == stats.expansions and row["patr_leaves_per_group"] == stats.leaves / 2


def test_patr_prunes_below_the_median_and_keeps_pruned_leaves_as_negatives(policy, first_is_worst):
    tasks = [LAKE, HOUSE]
    settings = PatrConfig(every=2, scorer=first_is_worst, repeat_limit=None, pruned_reward=-0.5, top_k=1,
                          max_leaves=6)
    batch, stats = _collect_patr(policy, tasks, every=2, scorer=first_is_worst, repeat_limit=None,
                                 pruned_reward=-0.5, top_k=1, max_leaves=6)
    _check_patr_groups(tasks, batch, stats, settings)
    pruned = [t for group in batch for t in group if t.meta["pruned"]]
    assert pruned and stats.pruned_score == len(pruned) and stats.pruned_repeat == 0
    for trajectory in pruned:
        last = trajectory.steps[-1]
        assert last.extras["pruned_reward"] == -0.5 and last.reward <= -0.5 and not trajectory.meta["won"]
    assert all("pruned_reward" not in step.extras for group in batch for t in group if not t.meta["pruned"]
               for step in t.steps)


def test_patr_spends_a_decision_budget_exactly_and_is_reproducible(policy):
    batch, stats = _collect_patr(policy, [LAKE, HOUSE], seed=3, every=3, max_decisions=41)
    assert stats.decisions == 41
    for task, group in zip([LAKE, HOUSE], batch):
        for trajectory in group:
            _replay(task, trajectory)  # only finished or pruned leaves: the ones cut short are left out
    again, same = _collect_patr(policy, [LAKE, HOUSE], seed=3, every=3, max_decisions=41)
    assert [[[s.action for s in t] for t in g] for g in again] == [[[s.action for s in t] for t in g] for g in batch]
    assert same.as_dict() | {"time_s": 0, "decisions_per_s": 0} == stats.as_dict() | {"time_s": 0, "decisions_per_s": 0}


def test_patr_plays_the_same_in_worker_processes(policy):
    def played(backend):
        batch, stats = collect_patr_rollouts(policy, [LAKE, HOUSE], PatrConfig(every=3), rng=np.random.default_rng(2),
                                             generator=torch.Generator().manual_seed(2), env_backend=backend,
                                             env_workers=2)
        return [[[(s.state_key, s.action, s.reward) for s in t] for t in g] for g in batch], stats.expansions

    assert played("processes") == played("in-process")
