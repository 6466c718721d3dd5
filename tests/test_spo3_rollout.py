"""The ``3spo`` rollout strategy: a search on a 2x2 lake computed by hand, its steps replaying from
reset, the exact decision budget, the typed config, the environment it needs, training over it and a
resume that reproduces the uninterrupted run (the state statistics travel in the checkpoint)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from ptgpo_algos.advantages import compute_advantages
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Decision, Task
from ptgpo_algos.rollouts.spo3.search import StateStats
from ptgpo_algos.rollouts.spo3.collection import Spo3Config, collect_spo3_rollouts, start_key
from ptgpo_algos.rollouts.registry import collect_with
from ptgpo_envs import make_env

from resume_scenarios import killed_and_resumed

#: S F
#: H G   -- right then down wins; down from the start falls in the hole; right at (0,1) stays.
POND = Task("ptgpo/FrozenLake-v0", 0, {"desc": ["SF", "HG"]}, max_steps=6)
#: S F
#: F G   -- no hole: every first move is safe.
MEADOW = Task("ptgpo/FrozenLake-v0", 1, {"desc": ["SF", "FG"]}, max_steps=6)
ORDER = ("go right", "go down", "go left", "go up")


class Scripted:
    """A policy that answers the n equal contexts of one state with the first n actions of ``ORDER``."""

    def decide(self, contexts, generator=None):
        seen: dict = {}
        decisions = []
        for context in contexts:
            same = (context.observation, tuple(context.history))
            action = ORDER[seen.setdefault(same, 0)]
            seen[same] += 1
            decisions.append(Decision(text=action, action=action, prompt_ids=[1], response_ids=[2], logprobs=[0.0],
                                      entropy=0.0))
        return decisions


def _replay(task: Task, trajectory) -> None:
    env = make_env(task.env_id, task.env_kwargs, task.max_steps).unwrapped
    observation, info = env.reset(seed=task.seed)
    for step in trajectory.steps:
        assert (step.state_key, step.context.observation) == (info["state_key"], observation)
        observation, reward, terminated, truncated, info = env.step(step.sent)
        assert reward == step.reward
    assert info["won"] == trajectory.meta["won"]
    assert (terminated or truncated) != trajectory.meta["spo3_cut"]


def test_a_search_on_a_small_lake_by_hand():
    memory = StateStats()
    batch, stats = collect_spo3_rollouts(Scripted(), [POND], Spo3Config(g_max=2, trajectories=3), memory)
    [group] = batch
    # Start: n = 2 (unseen): right (to (0,1)) and down (the hole), both R = w * 1 = 0.5; ties keep the order.
    # (0,1): n = 2: down wins, R = 0.5 * 1 + 0.5 * 1 = 1.0; right stays, R = 0. Down first: won.
    # Back at (0,1)'s right: (0,1) now has SR ~ 1 and S = 2^-50, so n = 1, and the one sample (right)
    # is explored: the trajectory is cut there. Last, the start's down: lost.
    assert [[step.sent for step in t.steps] for t in group] == [["go right", "go down"], ["go right", "go right"],
                                                                 ["go down"]]
    assert [[step.extras["strategy_reward"] for step in t.steps] for t in group] == [[0.5, 1.0], [0.5, 0.0], [0.5]]
    assert [t.meta["won"] for t in group] == [True, False, False]
    assert [t.meta["spo3_cut"] for t in group] == [False, True, False]
    assert [t.meta["branch_point"] for t in group] == [None, 1, 0]
    assert group[1].steps[0] is group[0].steps[0]  # the shared prefix is the same step
    for trajectory in group:
        _replay(POND, trajectory)
    # Five decisions: two at the start, two at (0,1), one more at (0,1) that found nothing new.
    counts = (stats.decisions, stats.tokens, stats.expansions, stats.episodes, stats.wins, stats.cut)
    assert counts == (5, 5, 3, 3, 1, 1)
    assert (stats.decisions_saved, stats.reset_episodes, stats.reset_wins, stats.states) == (1, 1, 1, 2)
    start = start_key(group[0].steps[0].context.observation, {"layout": group[0].meta["layout"]})
    assert memory.total == {f"{start}\n0,0": 3, f"{start}\n0,1": 2}
    assert memory.success == {f"{start}\n0,0": 1, f"{start}\n0,1": 1}
    assert memory.t == 4
    # The 3spo estimator: each step's R against the steps from its state (mean_norm).
    advantages = compute_advantages("3spo", batch)
    assert advantages == [[[0.0, 0.5], [0.0, -0.5], [0.0]]]
    row = stats.as_dict()
    assert (row["spo3_expansions"], row["spo3_cut"], row["spo3_trajectories_per_group"]) == (3, 1, 3.0)


def test_the_budget_is_exact_and_an_unfinished_trajectory_is_left_out():
    # Both searches step together; each round grants the budget in task order.
    settings = Spo3Config(g_max=2, trajectories=3)
    batch, stats = collect_spo3_rollouts(Scripted(), [POND, MEADOW], settings, StateStats(), max_decisions=3)
    # Round 1: the pond's start gets 2, the meadow's 1 (right). Round 2: nothing is left, both stop.
    assert batch == [] and stats.decisions == 3 and stats.expansions == 2
    assert stats.as_dict()["episodes_cut"] == 2
    whole, spent = collect_spo3_rollouts(Scripted(), [POND, MEADOW], settings, StateStats(), max_decisions=7)
    # Round 2: the pond's (0,1) gets 2 (down wins), the meadow's (0,1) the last one; round 3: none left.
    assert spent.decisions == 7 and [[t.meta["won"] for t in group] for group in whole] == [[True]]
    assert whole[0][0].meta["seed"] == POND.seed and [s.sent for s in whole[0][0].steps] == ["go right", "go down"]
    # Without a budget, searching beside another changes nothing of a search: the pond's is the one by hand.
    unlimited, _ = collect_spo3_rollouts(Scripted(), [POND, MEADOW], settings, StateStats())
    assert [len(group) for group in unlimited] == [3, 3]
    assert [[step.sent for step in t.steps] for t in unlimited[0]] == [["go right", "go down"],
                                                                      ["go right", "go right"], ["go down"]]


def test_statistics_carry_over_between_collections():
    memory = StateStats()
    rollouts = TrainConfig.from_dict({"algo": "3spo", "spo3": {"g_max": 2, "trajectories": 3}}).rollouts
    collect_with("3spo", Scripted(), [POND], rollouts, memory=memory, rng=np.random.default_rng(0),
                 generator=torch.Generator())
    batch, stats = collect_with("3spo", Scripted(), [POND], rollouts, memory=memory, rng=np.random.default_rng(0),
                                generator=torch.Generator())
    # The start has SR 1/3 (t = 4) and (0,1) SR 1/2: tiny scores, one rollout each. Right, then right
    # again at (0,1), where the next sample (right) is explored in this search: cut after 3 decisions.
    assert [[step.sent for step in t.steps] for t in batch[0]] == [["go right", "go right"]]
    assert stats.decisions == 3 and sorted(memory.total.values()) == [3, 4] and memory.t == 5
    w = 0.5 * math.exp(-0.1 * 3)
    score_start, score_next = math.exp(-50 * math.log(4) / (3 + 1e-6)), math.exp(-50 * math.log(4) / (2 + 1e-6))
    assert batch[0][0].steps[0].extras["strategy_reward"] == pytest.approx(w + (0.5 - w) * (score_start - score_next))


def test_explored_pairs_last_the_run_when_asked_as_the_official_collector_keeps_them():
    memory = StateStats()
    settings = Spo3Config(g_max=2, trajectories=3, explored="run")
    collect_spo3_rollouts(Scripted(), [POND], settings, memory)
    batch, stats = collect_spo3_rollouts(Scripted(), [POND], settings, memory)
    # The start now gets one sample (right), explored in the first search: nothing is left to try.
    assert batch == [] and stats.decisions == 1 and stats.started == 0
    again, _ = collect_spo3_rollouts(Scripted(), [POND], Spo3Config(g_max=2, trajectories=3), memory)
    assert len(again) == 1  # forgotten at the start of a search (the default)


def test_3spo_is_a_typed_section_and_the_default_strategy_of_its_estimator():
    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "algo": "3spo"})
    assert config.rollouts.strategy == "3spo" and config.rollouts.spo3 == Spo3Config()
    assert config.to_dict()["rollouts"]["spo3"] == {
        "alpha": 50.0, "xi": 10.0, "zeta": 0.1, "omega_k": 0.1, "g_max": 8, "epsilon": 1e-6, "trajectories": 8,
        "explored": "iteration", "min_start": 1}
    assert TrainConfig.from_dict(config.to_dict()) == config
    given = TrainConfig.from_dict({"algo": "grpo", "rollout": "3spo", "rollouts.spo3.g_max": 4, "spo3": {"xi": "2e1"}})
    assert (given.rollouts.spo3.g_max, given.rollouts.spo3.xi) == (4, 20.0)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"rollout": "3spo", "spo3": {"gmax": 4}},
         "rollouts.spo3 (spo3): unknown key(s) 'gmax' (did you mean 'g_max'?)"),
        ({"rollout": "3spo", "spo3": {"g_max": 0}}, "rollouts.spo3.g_max: expected an integer >= 1"),
        ({"rollout": "3spo", "spo3": {"alpha": -1}}, "rollouts.spo3.alpha: expected a number >= 0.0"),
        ({"rollout": "3spo", "spo3": {"epsilon": 0}}, "rollouts.spo3.epsilon: expected a number > 0.0"),
        ({"rollout": "3spo", "spo3": {"explored": "forever"}}, "rollouts.spo3.explored: 'forever' is not valid"),
        ({"rollout": "3spo", "spo3": {"min_start": 9}},
         "rollouts.spo3.min_start: expected an integer in [0, 8], got 9 (at most g_max)"),
        ({"rollout": "3spo", "spo3": 5}, "rollouts.spo3 (spo3): expected a mapping"),
        ({"algo": "3spo", "rollout": "tree"}, "rollouts.strategy (rollout): the 3spo estimator credits what only "
                                              "the 3spo strategy records, not tree; set it to 3spo"),
        ({"algo": "3spo", "async_rollouts": True}, "rollouts.asynchronous (async_rollouts): the 3spo strategy learns"),
    ],
)
def test_bad_3spo_settings_fail_naming_the_key(data, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict(data)
    assert message in str(error.value)


def test_the_3spo_estimator_refuses_steps_without_3spo_rewards():
    from ptgpo_algos.rollouts.collection import collect_rollouts

    batch, _ = collect_rollouts(Scripted(), [POND], group_size=2)
    with pytest.raises(ValueError, match="only rollouts.strategy: 3spo records them"):
        compute_advantages("3spo", batch)


class _NoSnapshot:
    """FrozenLake seen through an object that cannot fork its episode."""

    def __init__(self):
        self.inner = make_env(POND.env_id, POND.env_kwargs, POND.max_steps)

    @property
    def unwrapped(self):
        return self

    def reset(self, seed=None):
        return self.inner.reset(seed=seed)

    def close(self):
        self.inner.close()


def test_3spo_refuses_an_environment_without_snapshot(tmp_path, monkeypatch):
    import ptgpo_algos.training.preflight as preflight

    config = _config(tmp_path)
    preflight.check_environment(config)
    monkeypatch.setattr(preflight, "make_env", lambda *args: _NoSnapshot())
    with pytest.raises(ValueError, match=r"rollouts.strategy \(rollout\): 3spo rollouts needs snapshot\(\)/restore\(\) "
                                         r"to fork an episode, which ptgpo/FrozenLake-v0 does not have"):
        preflight.check_environment(config)


# ----------------------------------------------------------------------------- training
def _config(tmp_path, **change):
    data = dict(env_id="ptgpo/FrozenLake-v0", max_steps=12, algo="3spo", spo3={"g_max": 4, "trajectories": 4},
                tasks_per_iteration=2, iterations=100, total_decisions=150, eval_every=2, eval_seeds=2,
                out_dir=str(tmp_path / "run"), tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict(data)


def test_training_over_3spo_rollouts_spends_the_budget_exactly(tmp_path, monkeypatch):
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    summary = run_training(_config(tmp_path), progress=False)
    assert summary.decisions == 150
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    names = ("expansions", "cut", "states", "trajectories_per_group")
    assert {f"rollout/spo3_{name}" for name in names} <= set(rows[0])
    assert sum(row["rollout/decisions_saved"] for row in rows) == summary.decisions_saved > 0
    assert rows[-1]["rollout/spo3_states"] > rows[0]["rollout/spo3_states"] > 0  # the statistics grow across iterations
    assert any(row["advantages/abs_mean"] > 0 for row in rows)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["rollouts"]["strategy"] == "3spo" and saved["rollouts"]["spo3"]["g_max"] == 4


def test_a_budget_that_is_not_spent_does_not_cut_3spo_groups_short(tmp_path, monkeypatch):
    # Each task's group is capped at the most its strategy declares it can spend: at group_size x the
    # horizon (2 x 12), 3SPO's searches were stopped there with most of the budget left.
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    runs = {}
    for name, budget in (("budget", 10**6), ("free", None)):
        summary = run_training(_config(tmp_path, out_dir=str(tmp_path / name), group_size=2, iterations=1,
                                       total_decisions=budget, eval_every=100), progress=False)
        [row] = [json.loads(line) for line in open(summary.metrics_path)]
        runs[name] = (row["rollout/decisions"], row["rollout/episodes"], row["rollout/spo3_expansions"])
    assert runs["budget"] == runs["free"]
    assert runs["free"][0] > 2 * 2 * 12


def test_a_killed_3spo_run_resumes_to_the_uninterrupted_runs_metrics(tmp_path, monkeypatch):
    # The scores that steer the search live across iterations: the checkpoint must carry them.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))

    def config(out_dir, **change):
        return _config(tmp_path, out_dir=str(tmp_path / out_dir), **change)

    resumed, whole = killed_and_resumed(monkeypatch, config, "ptgpo_algos.rollouts.spo3.collection.collect_spo3_rollouts")
    assert resumed == whole
    assert whole[-1]["rollout/spo3_states"] > 0
