"""Our estimators inside verl (``ptgpo_algos.integrations.verl``).

The mapping is checked against verl's documented data layout (response-token tensors, ``uid`` groups,
verl-agent's ``traj_uid``/``anchor_obs`` step rows) everywhere; the tests marked ``verl`` run verl's
own ``compute_advantage`` on hand-built ``DataProto`` batches, where verl is installed
(``bash scripts/test_verl_cpu.sh``: verl pins a transformers older than the main venv's).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptgpo_algos.advantages import ESTIMATORS, compute_advantages
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.integrations.verl import bridged_estimators, rows_to_batch, verl_estimator

WIDTH = 6  # response tokens per row (right-padded)

# Two groups of trajectories, each step (state, action, reward, valid). States repeat across the
# trajectories of a group (GiGPO's anchors), actions differ at shared states (PTGPO's branching nodes).
GROUPS = [
    [
        [("s0", "go a", 0.0, True), ("s1", "take x", 0.0, True), ("s2", "put x", 1.0, True)],
        [("s0", "go b", 0.0, True), ("s3", "look", 0.0, False)],
        [("s0", "go a", 0.0, True), ("s1", "look", 0.0, True), ("s1", "take x", 0.0, True), ("s2", "put x", 1.0, True)],
    ],
    [
        [("t0", "open it", 0.0, True), ("t1", "go c", 0.0, True)],
        [("t0", "go c", 0.0, True), ("t1", "go c", 1.0, True)],
    ],
]


def _tokens(action: str) -> list[int]:
    return [ord(c) for c in action.replace(" ", "")][:WIDTH]


def _ours() -> list[list[Trajectory]]:
    return [[Trajectory([Step(s, a, r, v, response_ids=_tokens(a)) for s, a, r, v in t]) for t in g] for g in GROUPS]


def _step_rows(order_seed: int = 0):
    """verl-agent's layout: one row per step, a trajectory's rows in order but interleaved with the
    other trajectories' (rows are gathered environment by environment, step by step)."""
    rows = []
    for g, group in enumerate(GROUPS):
        for i, trajectory in enumerate(group):
            for t, step in enumerate(trajectory):
                rows.append((t, g, i, step))
    rng = np.random.default_rng(order_seed)
    rows.sort(key=lambda row: (row[0], rng.random()))  # by time, trajectories shuffled within a time
    n = len(rows)
    rewards, mask, responses = torch.zeros(n, WIDTH), torch.zeros(n, WIDTH), torch.zeros(n, WIDTH, dtype=torch.long)
    columns = {"index": [], "traj_index": [], "anchor_obs": [], "is_action_valid": []}
    where = []
    for r, (t, g, i, (state, action, reward, valid)) in enumerate(rows):
        tokens = _tokens(action)
        responses[r, : len(tokens)] = torch.tensor(tokens)
        mask[r, : len(tokens)] = 1
        rewards[r, len(tokens) - 1] = reward  # verl's reward sits on the last response token
        columns["index"].append(f"uid-{g}")
        columns["traj_index"].append(f"traj-{g}-{i}")
        columns["anchor_obs"].append(state)
        columns["is_action_valid"].append(valid)
        where.append((g, i, t))
    arrays = {k: np.array(v, dtype=object) for k, v in columns.items()}
    return rewards, mask, responses, arrays, where


@pytest.mark.parametrize("name", bridged_estimators())
def test_step_rows_give_our_numbers_on_their_tokens(name):
    rewards, mask, responses, columns, where = _step_rows()
    expected = compute_advantages(name, _ours())
    scores, returns = verl_estimator(name)(rewards, mask, columns.pop("index"), config=None, responses=responses,
                                           reward_baselines=None, **columns)
    assert torch.equal(scores, returns)
    for row, (g, i, t) in enumerate(where):
        tokens = int(mask[row].sum())
        assert torch.allclose(scores[row, :tokens], torch.full((tokens,), expected[g][i][t]), atol=1e-6)
        assert torch.all(scores[row, tokens:] == 0)


def test_an_estimator_of_our_own_rollouts_is_refused_on_verls_rows():
    # 3SPO credits the step rewards its search records; verl's rollouts do not run the search.
    with pytest.raises(ValueError, match="3spo credits what our 3spo rollout strategy records, which verl's rollouts"):
        verl_estimator("3spo")


def test_rows_map_to_groups_trajectories_and_steps_and_back():
    rewards, mask, responses, columns, where = _step_rows(order_seed=3)
    batch, placement = rows_to_batch(rewards, mask, columns["index"], traj_index=columns["traj_index"],
                                     anchor_obs=columns["anchor_obs"], responses=responses,
                                     is_action_valid=columns["is_action_valid"])
    # Groups and trajectories in order of first appearance, each trajectory's steps in time order.
    assert [sorted([(s.state_key, s.reward, s.valid) for s in t] for t in g) for g in batch] == \
        [sorted([(s, r, v) for s, _, r, v in t] for t in g) for g in GROUPS]
    for row, (g, i, t) in enumerate(placement.steps):
        step = batch[g][i].steps[t]
        state, _, reward, valid = GROUPS[where[row][0]][where[row][1]][where[row][2]]
        assert (step.state_key, step.reward, step.valid) == (state, reward, valid)
        assert step.response_ids == responses[row][mask[row].bool()].tolist()
    # An inactive row (verl-agent's active_masks) is left out and gets no advantage.
    active = np.ones(len(where), dtype=bool)
    active[0] = False
    scores, _ = verl_estimator("gigpo")(rewards, mask, columns["index"], traj_index=columns["traj_index"],
                                        anchor_obs=columns["anchor_obs"], active_masks=active)
    assert torch.all(scores[0] == 0)


def test_one_row_per_episode_is_verls_grpo_formula():
    # verl's GRPO: (score - mean) / (std + 1e-6) over a uid's rows, std unbiased, score = sum of token rewards.
    scores = torch.tensor([[0, 0, 1.0], [0, 0, 0], [0, 0.5, 0], [0, 0, 0], [0, 0, 1], [0, 0, 1]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.float32)
    index = np.array(["a", "a", "a", "a", "b", "b"], dtype=object)
    totals = scores.sum(-1).numpy()
    expected = np.zeros(6)
    for uid in ("a", "b"):
        rows = index == uid
        expected[rows] = (totals[rows] - totals[rows].mean()) / (totals[rows].std(ddof=1) + 1e-6)
    advantages, _ = verl_estimator("grpo")(scores, mask, index)
    assert torch.allclose(advantages, torch.tensor(expected, dtype=torch.float32).unsqueeze(-1) * mask, atol=1e-6)
    # RLOO: the other responses' mean return.
    rloo, _ = verl_estimator("rloo")(scores, mask, index)
    leave_one_out = np.array([totals[i] - np.mean([totals[j] for j in range(6) if index[j] == index[i] and j != i])
                              for i in range(6)])
    assert torch.allclose(rloo[:, 0], torch.tensor(leave_one_out, dtype=torch.float32), atol=1e-6)


def test_bad_batches_are_refused_naming_the_key():
    rewards, mask, _, columns, _ = _step_rows()
    with pytest.raises(ValueError, match="anchor_obs: one row per step"):
        rows_to_batch(rewards, mask, columns["index"], traj_index=columns["traj_index"])
    with pytest.raises(ValueError, match="index: 3 rows, but response_mask has"):
        rows_to_batch(rewards, mask, columns["index"][:3])
    moved = columns["index"].copy()
    first = list(columns["traj_index"]).index("traj-0-0")
    moved[first] = "uid-1"
    with pytest.raises(ValueError, match="traj_index: trajectory traj-0-0 is in groups"):
        rows_to_batch(rewards, mask, moved, traj_index=columns["traj_index"], anchor_obs=columns["anchor_obs"])
    with pytest.raises(ValueError, match="omega"):
        verl_estimator("gigpo", omega=-1)
    with pytest.raises(ValueError, match="unknown"):
        verl_estimator("gipgo")
    with pytest.raises(ValueError, match="no index"):
        verl_estimator("grpo")(rewards, mask)


# ------------------------------------------------------------------ inside verl (where installed)
@pytest.fixture(scope="module")
def verl():
    pytest.importorskip("verl", reason="verl is not installed here: bash scripts/test_verl_cpu.sh runs these "
                                       "tests in a venv of their own (verl pins transformers < 5.11)")
    from verl.trainer.ppo import core_algos, ray_trainer

    return core_algos, ray_trainer


def _data_proto(rewards, mask, responses, non_tensors):
    from verl import DataProto

    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": responses},
                               non_tensors=non_tensors)


@pytest.mark.verl
def test_registered_in_verls_registry_under_free_names(verl):
    from ptgpo_algos.integrations.verl import register_estimators

    core_algos, _ = verl
    names = register_estimators()
    assert names["gigpo"] == "gigpo" and names["ptgpo"] == "ptgpo" and names["hgpo"] == "hgpo"
    assert names["grpo"] == "ptgpo_grpo" and names["rloo"] == "ptgpo_rloo"  # verl's own keep theirs
    # 3SPO's and BPO's rollouts (searched, forked) are not what verl's agent loops record; ppo and hiper
    # read our critic.
    critic = {"ppo", "hiper"}
    assert critic <= set(ESTIMATORS.names())
    assert set(names) == set(bridged_estimators()) == set(ESTIMATORS.names()) - {"3spo", "bpo"} - critic
    for ours, theirs in names.items():
        assert core_algos.get_adv_estimator_fn(theirs).ptgpo_estimator == ours
    assert register_estimators({"gigpo": {"omega": 2.0}}) == names  # again: replaced, not refused


@pytest.mark.verl
@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "hgpo", "ptgpo"])
def test_verls_compute_advantage_runs_ours_on_one_row_per_episode(verl, name):
    from ptgpo_algos.integrations.verl import register_estimators

    _, ray_trainer = verl
    names = register_estimators()
    rng = np.random.default_rng(0)
    rows = 12
    mask = (torch.arange(WIDTH) < torch.tensor(rng.integers(2, WIDTH + 1, rows)).unsqueeze(-1)).float()
    rewards = torch.zeros(rows, WIDTH)
    rewards[torch.arange(rows), mask.sum(-1).long() - 1] = torch.tensor(rng.integers(0, 2, rows), dtype=torch.float32)
    uid = np.array([f"prompt-{i // 4}" for i in range(rows)], dtype=object)
    data = ray_trainer.compute_advantage(_data_proto(rewards, mask, torch.zeros(rows, WIDTH, dtype=torch.long),
                                                     {"uid": uid}), adv_estimator=names[name], config=None)
    batch = [[Trajectory([Step("prompt", f"response {i}", float(rewards[i].sum()),
                                response_ids=[0] * int(mask[i].sum()))])
              for i in range(rows) if uid[i] == group] for group in dict.fromkeys(uid)]
    expected = [a[0] for group in compute_advantages(name, batch) for a in group]
    assert torch.allclose(data.batch["advantages"], torch.tensor(expected).unsqueeze(-1) * mask, atol=1e-6)
    if name == "grpo":
        # verl's own GRPO on the same batch: the same numbers.
        theirs = ray_trainer.compute_advantage(_data_proto(rewards, mask, torch.zeros(rows, WIDTH, dtype=torch.long),
                                                           {"uid": uid}), adv_estimator="grpo")
        assert torch.allclose(theirs.batch["advantages"], data.batch["advantages"], atol=1e-5)


@pytest.mark.verl
@pytest.mark.parametrize("name", ["gigpo", "hgpo", "ptgpo", "g2po"])
def test_compute_advantage_on_a_verl_agent_step_batch(verl, name):
    from ptgpo_algos.integrations.verl import compute_advantage

    rewards, mask, responses, columns, where = _step_rows(order_seed=1)
    non_tensors = {"uid": columns["index"], "traj_uid": columns["traj_index"], "anchor_obs": columns["anchor_obs"],
                   "is_action_valid": columns["is_action_valid"]}
    data = compute_advantage(_data_proto(rewards, mask, responses, non_tensors), name)
    expected = compute_advantages(name, _ours())
    for row, (g, i, t) in enumerate(where):
        assert torch.allclose(data.batch["advantages"][row], expected[g][i][t] * mask[row], atol=1e-6)
    assert torch.equal(data.batch["returns"], data.batch["advantages"])
