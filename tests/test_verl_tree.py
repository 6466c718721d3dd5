"""PTGPO's prefix tree in verl: decision-row credit, the ``ptgpo_tree`` agent loop and the ``ptgpo`` trainer mode.

The credit of decision rows is checked by hand on a small tree and against our trainer's rule for
shared steps (:func:`ptgpo_algos.updates.samples.flatten_batch`); the tests marked ``verl`` grow trees in verl's
own agent-loop base with a scripted LLM server, pass the outputs through verl's v1 worker
(``AgentLoopWorkerTQ._agent_loop_postprocess``) into a TransferQueue stand-in and run the registered
trainer mode's advantage step on them (``bash scripts/test_verl_cpu.sh``).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

from ptgpo_algos.advantages import compute_advantages
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.integrations.verl.steps import DECISION_KEY, compute_decision_advantage, decision_advantages
from ptgpo_algos.updates.samples import flatten_batch


def _hand_tree():
    """Three leaves: A and B share their first step (s0, "go a"); C goes elsewhere at s0. Returns 1, 0, 0."""
    shared = Step("s0", "go a", 0.0, True, response_ids=[0])
    leaves = [[shared, Step("s1", "take x", 1.0, True, response_ids=[0])],
              [shared, Step("s1", "look", 0.0, True, response_ids=[0])],
              [Step("s0", "go b", 0.0, True, response_ids=[0])]]
    rows = []  # one per distinct step, as the tree loop returns them
    for j, steps in enumerate(leaves):
        for k, step in enumerate(steps):
            if not any(step is seen for seen, _ in rows):
                rows.append((step, {"tree": "t", "trajectory": f"leaf-{j}", "index": k, "leaves": [],
                                    "state_key": step.state_key, "action": step.action, "reward": step.reward,
                                    "valid": step.valid}))
            next(fields for seen, fields in rows if seen is step)["leaves"].append(f"leaf-{j}")
    return [Trajectory(steps) for steps in leaves], rows


def test_a_shared_node_gets_the_mean_of_its_leaves_credit_by_hand():
    group, rows = _hand_tree()
    values = decision_advantages(["u"] * len(rows), [fields for _, fields in rows], "grpo")
    # GRPO on returns (1, 0, 0): mean 1/3, std (ddof 1) sqrt(1/3); the shared first step is on leaves A and B.
    a, b = (2 / 3) / math.sqrt(1 / 3), (-1 / 3) / math.sqrt(1 / 3)
    assert values == pytest.approx([(a + b) / 2, a, b, b], abs=1e-5)


@pytest.mark.parametrize("name", ["ptgpo", "gigpo", "grpo", "hgpo"])
def test_decision_rows_get_our_trainers_credit_for_the_same_tree(name):
    group, rows = _hand_tree()
    values = decision_advantages(["u"] * len(rows), [fields for _, fields in rows], name)
    samples = flatten_batch([group], compute_advantages(name, [group]))
    assert values == pytest.approx([sample.advantage for sample in samples], abs=1e-6)


def test_a_missing_tree_node_is_refused_with_what_to_keep():
    _, rows = _hand_tree()
    with pytest.raises(ValueError, match="keep every decision row"):
        decision_advantages(["u"] * 3, [fields for _, fields in rows[1:]], "ptgpo")
    with pytest.raises(ValueError, match="expected a decision's fields"):
        decision_advantages(["u"], [{"state_key": "s0"}], "ptgpo")


def test_compute_decision_advantage_puts_each_rows_credit_on_its_tokens():
    from types import SimpleNamespace

    _, rows = _hand_tree()
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]])
    column = np.empty(len(rows), dtype=object)
    column[:] = [fields for _, fields in rows]
    data = SimpleNamespace(batch={"response_mask": mask},
                           non_tensor_batch={"uid": np.array(["u"] * len(rows), dtype=object), DECISION_KEY: column})
    scores = compute_decision_advantage(data, "grpo").batch["advantages"]
    values = decision_advantages(["u"] * len(rows), list(column), "grpo", mask.sum(-1).tolist())
    assert torch.allclose(scores, torch.tensor(values).unsqueeze(-1) * mask)


# ---------------------------------------------------------------- inside verl
class _TreeServer:
    """verl's LLM server client for a tree: reads the admissible actions off the prompt and answers one
    of them (a nonsense action every fourth call), as token ids ending with the end-of-turn token."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.prompts = tokenizer, 0, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        text = self.tokenizer.decode(prompt_ids)
        self.prompts.append(text)
        listed = text.rsplit("Admissible actions:\n", 1)[1].split("\n\nAnswer", 1)[0].splitlines()
        actions = [line[2:] for line in listed]
        action = "xyzzy" if self.calls % 4 == 0 else actions[(self.calls * 7) % len(actions)]
        ids = self.tokenizer.encode(f"I will act.\n{action}", add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def _grow(tree: dict, monkeypatch, seed: int = 0):
    """Grow one tree in the ptgpo_tree loop; its outputs, the batch our tree rollouts built and the server."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from ptgpo_algos.integrations import verl_tree
    from test_verl_steps import VERL_DATA, VERL_MODEL, _chat_tokenizer

    grown, collect = [], verl_tree.collect_rollouts

    def recording(*args, **kwargs):
        batch, stats = collect(*args, **kwargs)
        grown.append((batch, stats))
        return batch, stats

    monkeypatch.setattr(verl_tree, "collect_rollouts", recording)
    tokenizer = _chat_tokenizer()
    server = _TreeServer(tokenizer)
    config = OmegaConf.create({"actor_rollout_ref": {"model": VERL_MODEL,
                                                     "rollout": {"prompt_length": 8192, "response_length": 64}},
                               "data": VERL_DATA})
    extra_info = {"env_id": "ptgpo/Household-v0", "seed": seed, "env_kwargs": {"difficulty": "easy"}, "tree": tree}

    async def play():  # verl makes the loop inside its worker's running event loop
        loop = verl_tree.TreeAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server,
                                       tokenizer=tokenizer, processor=None, dataset_cls=None,
                                       data_config=DictConfigWrap(config.data))
        return await loop.run({"logprobs": True}, extra_info=extra_info)

    outputs = asyncio.run(play())
    return outputs, grown[0], server


TREE = {"group_size": 5, "initial_rollouts": 2, "branch": "uniform", "max_steps": 6, "branch_seed": 3}


@pytest.mark.verl
def test_the_tree_loop_grows_ptgpos_prefix_tree_one_output_per_node(monkeypatch):
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from ptgpo_algos.integrations.verl.tree import TREE_AGENT_NAME

    assert _agent_loop_registry[TREE_AGENT_NAME]["_target_"].endswith("TreeAgentLoop")
    outputs, (batch, stats), server = _grow(TREE, monkeypatch)
    group = batch[0]
    distinct = {id(step): step for trajectory in group for step in trajectory.steps}
    assert len(group) == 5 and len(outputs) == len(distinct)
    assert stats.decisions_saved > 0 and server.calls == stats.decisions  # branches reuse their prefix
    _check_restored(outputs)
    fields = [output.extra_fields[DECISION_KEY] for output in outputs]
    nodes = {f["node"]: f for f in fields}
    assert any(len(f["leaves"]) > 1 for f in fields)  # a node shared by leaves
    for f, output in zip(fields, outputs):
        assert f["parent"] is None if f["index"] == 0 else nodes[f["parent"]]["index"] == f["index"] - 1
        assert set(f["leaves"]) <= set(nodes[f["parent"]]["leaves"]) if f["parent"] else True
        assert output.reward_score == f["reward"] and output.response_mask == [1] * len(output.response_ids)
        assert f["valid"] == (f["action"] != "xyzzy")
    # A child's context holds the action its parent sent: a branch continues its prefix's conversation.
    for f, output in zip(fields, outputs):
        if f["parent"]:
            from test_verl_steps import _chat_tokenizer

            context = _chat_tokenizer().decode(output.prompt_ids)
            assert f"<|im_start|>assistant\n{nodes[f['parent']]['action']}<|im_end|>" in context


def _check_restored(outputs):
    """Siblings were taken in the state their parent led to: each branch was restored to its point."""
    state_after: dict = {}
    for output in outputs:
        fields = output.extra_fields[DECISION_KEY]
        assert state_after.setdefault(fields["parent"], fields["state_key"]) == fields["state_key"]
    assert len(state_after) < len(outputs)  # some node has several children: the tree branched


@pytest.mark.verl
def test_the_group_decision_budget_is_kept(monkeypatch):
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    outputs, (batch, stats), server = _grow({**TREE, "max_decisions": 9}, monkeypatch)
    assert server.calls == stats.decisions <= 9 and len(outputs) <= 9


@pytest.mark.verl
def test_bad_tree_settings_are_refused_with_the_key():
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    from ptgpo_algos.integrations.verl.tree import tree_spec

    for tree, message in [({"group_size": 0}, "group_size"), ({"initial_rollouts": 9, "group_size": 4}, "at most"),
                          ({"branch": "best"}, "branch"), ({"width": 3}, "unknown"), ("wide", "a mapping"),
                          ({"env_backend": "gpu"}, "env_backend")]:
        with pytest.raises(ValueError, match=message):
            tree_spec(tree, {"logprobs": True})
    with pytest.raises(ValueError, match="calculate_log_probs"):
        tree_spec({"branch": "entropy"}, {"logprobs": False})


@pytest.fixture(scope="module")
def transfer_queue():
    """verl's v1 storage, for real: TransferQueue's controller and storage units on a local Ray instance."""
    pytest.importorskip("transfer_queue", reason="transferqueue is not installed: bash scripts/test_verl_cpu.sh")
    import ray
    import transfer_queue as tq

    # Logical CPUs: the controller and its two storage units each ask for one. The setup hook is the
    # one a run gives verl's Ray workers, so that they know our trainer mode and agent loops.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "ptgpo_algos.integrations.verl.trainer.register"})
    try:
        tq.init()
        yield tq
        tq.close()
    finally:
        ray.shutdown()


@pytest.mark.verl
@pytest.mark.parametrize("name", ["ptgpo", "gigpo"])
def test_the_trainer_mode_gives_our_trainers_tree_credit_through_verls_v1_storage(monkeypatch, transfer_queue, name):
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    from ptgpo_algos.integrations import verl_trainer

    outputs, (batch, _), _ = _grow(TREE, monkeypatch, seed=1)
    # verl's v1 worker stores the outputs (its Ray actor's method, called here on a stand-in worker).
    worker = SimpleNamespace(reward_loop_worker_handles=None, distillation_enabled=False, processor=None,
                             _compute_multi_modal_inputs=lambda *a: {},
                             _compute_position_ids=lambda ids, mask, *a: torch.clamp(mask.cumsum(-1) - 1, min=0))
    worker._compute_score = lambda *a, **k: AgentLoopWorker._compute_score(worker, *a, **k)
    worker._compute_teacher_logprobs = lambda *a, **k: AgentLoopWorker._compute_teacher_logprobs(worker, *a, **k)
    postprocess = AgentLoopWorkerTQ.__ray_metadata__.modified_class._agent_loop_postprocess
    uid = f"prompt-{name}"
    asyncio.run(postprocess(worker, outputs, False, uid=uid, session_id=0, global_steps=1))
    keys = [f"{uid}_0_{i}" for i in range(len(outputs))]
    stored = transfer_queue.kv_batch_get(keys=keys, partition_id="train", select_fields=["rm_scores", "extra_fields"])
    assert [extra[DECISION_KEY] for extra in stored["extra_fields"]] == [o.extra_fields[DECISION_KEY] for o in outputs]
    # What verl's v1 worker does to rewards: every row's rm_scores ends with the last output's.
    assert all(float(row[-1]) == outputs[-1].reward_score for row in stored["rm_scores"].unbind())

    trainer_cls = get_trainer_cls(verl_trainer.TRAINER_MODE)
    assert trainer_cls is verl_trainer.PTGPOTrainer
    trainer = trainer_cls.__new__(trainer_cls)  # the advantage step alone: no workers
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": name, "use_kl_in_reward": False,
                                                     "rollout_correction": {"rollout_is": None, "rollout_rs": None}}})
    shuffled = keys[::-1]  # verl balances rows across ranks in any order
    trainer._compute_advantage(KVBatchMeta(keys=shuffled, tags=[{}] * len(keys), partition_id="train"), {})
    written = transfer_queue.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "returns"])
    expected = [sample.advantage for sample in flatten_batch(batch, compute_advantages(name, batch))]
    assert any(value != 0 for value in expected)
    for row, (advantages, returns) in enumerate(zip(written["advantages"].unbind(), written["returns"].unbind())):
        assert len(advantages) == len(outputs[row].response_ids)
        assert torch.allclose(advantages, torch.full_like(advantages, expected[row]), atol=1e-6)
        assert torch.equal(advantages, returns)


@pytest.mark.verl
def test_rays_setup_hook_registers_the_trainer_mode_and_the_loops_in_verls_workers(transfer_queue):
    import ray

    @ray.remote
    def registered():
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

        return "ptgpo" in TRAINER_REGISTRY, sorted(name for name in _agent_loop_registry if name.startswith("ptgpo"))

    assert ray.get(registered.remote(), timeout=300) == (True, ["ptgpo_env", "ptgpo_env_steps", "ptgpo_tree"])


@pytest.mark.verl
def test_the_tree_loop_steps_its_environments_on_ray_actors_when_configured(monkeypatch, transfer_queue):
    from ptgpo_envs.ray_vector import RayVectorTextEnv

    made = []
    original = RayVectorTextEnv.__init__

    def recording(self, *args, **kwargs):
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(RayVectorTextEnv, "__init__", recording)
    # A tenth of a CPU per actor: the local instance's logical CPUs also hold TransferQueue's actors.
    tree = {**TREE, "env_backend": "ray", "env_options": {"num_cpus": 0.1}}
    outputs, (batch, stats), _ = _grow(tree, monkeypatch)
    assert len(made) == 1 and len(batch[0]) == 5 and stats.decisions_saved > 0
    _check_restored(outputs)


@pytest.mark.verl
def test_the_trainer_mode_refuses_what_it_does_not_do():
    pytest.importorskip("transfer_queue", reason="transferqueue is not installed: bash scripts/test_verl_cpu.sh")
    from ptgpo_algos.integrations.verl.trainer import trainer_estimator

    assert trainer_estimator({"adv_estimator": "ptgpo_grpo"}) == ("grpo", {})
    assert trainer_estimator({"adv_estimator": "ptgpo", "ptgpo_config": {"omega": 0.5}}) == ("ptgpo", {"omega": 0.5})
    for algorithm, message in [({"adv_estimator": "gae"}, "not one of our estimators"),
                               ({"adv_estimator": "ptgpo", "use_kl_in_reward": True}, "use_kl_loss"),
                               ({"adv_estimator": "ptgpo", "rollout_correction": {"rollout_is": "token"}}, "bypass_mode"),
                               ({"adv_estimator": "ptgpo", "ptgpo_config": {"width": 1}}, "width")]:
        with pytest.raises(ValueError, match=message):
            trainer_estimator(algorithm)


@pytest.mark.verl
def test_tree_rows_survive_verls_batch_operations(monkeypatch, tmp_path):
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    from verl import DataProto

    outputs, (batch, _), _ = _grow(TREE, monkeypatch, seed=2)
    width = max(len(output.response_ids) for output in outputs)
    mask = torch.zeros(len(outputs), width, dtype=torch.long)
    for row, output in enumerate(outputs):
        mask[row, :len(output.response_ids)] = 1
    column = np.empty(len(outputs), dtype=object)
    column[:] = [output.extra_fields[DECISION_KEY] for output in outputs]
    data = DataProto.from_dict(tensors={"response_mask": mask},
                               non_tensors={"uid": np.array(["p"] * len(outputs), dtype=object), DECISION_KEY: column})
    data = DataProto.concat(data.chunk(len(outputs)))
    order = torch.randperm(len(outputs), generator=torch.Generator().manual_seed(0))
    data.reorder(order)
    data.save_to_disk(tmp_path / "batch.pkl")
    data = compute_decision_advantage(DataProto.load_from_disk(tmp_path / "batch.pkl"), "ptgpo")
    expected = torch.tensor([s.advantage for s in flatten_batch(batch, compute_advantages("ptgpo", batch))])[order]
    assert torch.allclose(data.batch["advantages"], expected.unsqueeze(-1) * mask[order], atol=1e-6)
