"""PTGPO's trees in verl's default trainer (``RayPPOTrainer``, ``trainer.use_v1=false``): the ``ptgpo_tree_leaf``
loop, the group hub and the tree-aware registered estimators (``ptgpo_algos.integrations.verl.leaves``).

A group's samples play in verl's own agent-loop base against a scripted LLM server, their rows go
through verl's own worker postprocessing, batch operations and ``compute_advantage`` (the function
``RayPPOTrainer.fit`` calls, with verl's default algorithm config), and the advantages must be those our
trainer gives the same tree (``bash scripts/test_verl_cpu.sh``, once per pinned verl release).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
pytestmark = pytest.mark.verl

from ptgpo_algos.advantages import compute_advantages  # noqa: E402
from ptgpo_algos.integrations.verl.steps import STEPS_KEY, TRAJECTORY_KEY  # noqa: E402
from ptgpo_algos.updates.samples import flatten_batch  # noqa: E402

TREE = {"group_size": 5, "initial_rollouts": 2, "branch": "uniform", "max_steps": 6, "branch_seed": 3}
HOOK = "ptgpo_algos.integrations.verl.leaves.register"


@pytest.fixture(scope="module")
def ray_job():
    """A local Ray instance whose workers run the setup hook a run gives verl's TaskRunner and workers."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": HOOK})
    try:
        from ptgpo_algos.integrations import verl_leaves

        verl_leaves.register()  # this process is the TaskRunner of the test
        yield ray
    finally:
        ray.shutdown()


def _verl_defaults():
    """verl's own default trainer config (what ``main_ppo`` starts from), of the installed release."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo import ray_trainer

    return OmegaConf.load(f"{ray_trainer.__file__.rsplit('/ppo/', 1)[0]}/config/_generated_ppo_trainer.yaml")


def _worker(tokenizer, config):
    """verl's v0 agent-loop worker with what its postprocessing reads (no servers, no reward workers)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = object.__new__(AgentLoopWorker)
    worker.config, worker.rollout_config = config, config.actor_rollout_ref.rollout
    worker.tokenizer, worker.processor = tokenizer, None
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False
    worker.mm_processor_kwargs = {}
    return worker


def _play(group_rows: list[dict], monkeypatch, tokenizer, server, response_length: int = 4096):
    """Play the samples of ``group_rows`` (each ``{"uid", "extra_info"}``) concurrently, as verl's
    worker does; their rows as verl's ``DataProto``, the trees our rollouts grew and the loops' outputs."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from ptgpo_algos.integrations import verl_leaves

    grown, collect = [], verl_leaves.collect_rollouts

    def recording(*args, **kwargs):
        batch, stats = collect(*args, **kwargs)
        grown.append(batch)
        return batch, stats

    monkeypatch.setattr(verl_leaves, "collect_rollouts", recording)
    config = _verl_defaults()
    config.actor_rollout_ref.rollout.prompt_length = 4096
    config.actor_rollout_ref.rollout.response_length = response_length
    if "continuous_token" in config.data:  # verl 0.9.0's default is off; 0.9.1 has no switch
        config.data.continuous_token.enable = True
    worker = _worker(tokenizer, config)

    async def play():
        async def one(row):
            loop = verl_leaves.TreeLeafAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server,
                                                 tokenizer=tokenizer, processor=None, dataset_cls=None,
                                                 data_config=DictConfigWrap(config.data))
            kwargs = {"uid": row["uid"], "extra_info": row["extra_info"], "raw_prompt": []}
            output = await loop.run({"logprobs": True}, **kwargs)
            return output, await worker._agent_loop_postprocess(output, False, **kwargs)

        return await asyncio.gather(*(one(row) for row in group_rows))

    played = asyncio.run(play())
    columns = {"uid": np.array([row["uid"] for row in group_rows], dtype=object)}
    data = worker._postprocess([internal for _, internal in played], input_non_tensor_batch=columns)
    return data, grown, [output for output, _ in played]


def _rows(group: str, uids: list[str], seed: int = 0, tree: dict | None = None) -> list[dict]:
    info = {"env_id": "ptgpo/Household-v0", "seed": seed, "env_kwargs": {"difficulty": "easy"},
            "tree": tree or TREE, "group": group}
    return [{"uid": uid, "extra_info": dict(info)} for uid in uids]


def _through_the_trainer(data, name: str, order: torch.Tensor):
    """What ``RayPPOTrainer.fit`` does to the rollout's rows up to its advantages: the union with the
    prompts' batch, balancing's reorder, the reward as token-level scores, and verl's own
    ``compute_advantage`` with verl's default algorithm config."""
    from verl import DataProto
    from verl.trainer.ppo import core_algos, ray_trainer

    from ptgpo_algos.integrations.verl import verl_name

    uids = data.non_tensor_batch["uid"]
    prompts = DataProto.from_dict(tensors={"dummy_tensor": torch.zeros(len(uids), 1, dtype=torch.uint8)},
                                  non_tensors={"uid": uids.copy()})
    batch = prompts.union(data)
    batch = DataProto.concat(batch.chunk(len(batch)))
    batch.reorder(order)
    batch.batch["token_level_scores"] = batch.batch["rm_scores"]
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    algorithm = _verl_defaults().algorithm
    taken = [key for key, fn in core_algos.ADV_ESTIMATOR_REGISTRY.items() if not hasattr(fn, "ptgpo_estimator")]
    algorithm.adv_estimator = verl_name(name, taken)
    return ray_trainer.compute_advantage(batch, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma,
                                         lam=algorithm.lam, num_repeat=1,
                                         norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo, config=algorithm)


@pytest.mark.parametrize("name", ["ptgpo", "gigpo", "grpo"])
def test_a_trees_advantages_in_verls_default_trainer_equal_our_trainers(ray_job, monkeypatch, name):
    from test_verl_steps import _chat_tokenizer
    from test_verl_tree import _TreeServer

    tokenizer = _chat_tokenizer()
    uids = [f"{name}-{i}" for i in range(TREE["group_size"])]
    data, grown, outputs = _play(_rows(f"group-{name}", uids), monkeypatch, tokenizer, _TreeServer(tokenizer))
    assert len(grown) == 1  # one tree for the group, grown once
    (group,) = grown[0]
    assert len(group) == TREE["group_size"]
    assert len({id(step) for trajectory in group for step in trajectory.steps}) < sum(len(t.steps) for t in group)
    expected_of = {id(sample.decision): sample.advantage
                   for sample in flatten_batch(grown[0], compute_advantages(name, grown[0]))}
    assert any(value != 0 for value in expected_of.values())
    order = torch.randperm(len(uids), generator=torch.Generator().manual_seed(1))
    batch = _through_the_trainer(data, name, order)
    mask = batch.batch["response_mask"]
    for row in range(len(uids)):
        leaf = int(str(batch.non_tensor_batch[TRAJECTORY_KEY][row]).rsplit("-", 1)[1])
        steps = group[leaf].steps
        spans = batch.non_tensor_batch[STEPS_KEY][row]
        assert len(spans) == len(steps)
        expected = torch.zeros(mask.shape[-1])
        for step, span in zip(steps, spans):
            expected[span["start"]:span["end"]] = expected_of[id(step.decision)]
        expected *= mask[row].float()
        assert torch.allclose(batch.batch["advantages"][row], expected, atol=1e-6)
        assert torch.equal(batch.batch["advantages"][row], batch.batch["returns"][row])
        assert float(batch.batch["token_level_rewards"][row].sum()) == pytest.approx(sum(s.reward for s in steps))


def test_each_decision_is_trained_in_the_very_context_it_was_generated_in(ray_job, monkeypatch):
    from test_verl_steps import _chat_tokenizer
    from test_verl_tree import _TreeServer

    tokenizer = _chat_tokenizer()
    data, grown, outputs = _play(_rows("context", [f"c-{i}" for i in range(5)], seed=2), monkeypatch, tokenizer,
                                 _TreeServer(tokenizer))
    (group,) = grown[0]
    for output in outputs:
        leaf = group[int(output.extra_fields[TRAJECTORY_KEY].rsplit("-", 1)[1])]
        row = list(output.prompt_ids) + list(output.response_ids)
        for step, span in zip(leaf.steps, output.extra_fields[STEPS_KEY]):
            start = len(output.prompt_ids) + span["start"]
            # What the server was asked is the row up to the decision; its answer is the span's tokens.
            assert row[:start] == step.decision.prompt_ids
            assert row[start:start + len(step.decision.response_ids)] == step.decision.response_ids
            assert output.response_mask[span["start"]:span["end"]] == [1] * (span["end"] - span["start"])
        between = [m for span, after in zip(output.extra_fields[STEPS_KEY], output.extra_fields[STEPS_KEY][1:])
                   for m in output.response_mask[span["end"]:after["start"]]]
        assert between and set(between) == {0}  # the environment's turns are not trained


def test_a_group_split_between_batches_is_refused_with_what_to_set(ray_job, monkeypatch):
    from test_verl_steps import _chat_tokenizer
    from test_verl_tree import _TreeServer

    tokenizer = _chat_tokenizer()
    data, _, _ = _play(_rows("split", [f"s-{i}" for i in range(5)]), monkeypatch, tokenizer, _TreeServer(tokenizer))
    with pytest.raises(ValueError, match="data.shuffle=False"):
        _through_the_trainer(data.slice(0, 3), "ptgpo", torch.arange(3))


def test_rows_of_one_group_naming_different_episodes_are_refused(ray_job):
    from ptgpo_algos.integrations.verl.hub import hub

    actor = hub()
    assert ray_job.get(actor.join.remote("mixed", "m-0", '{"seed": 0}', 3))[1] == 0
    with pytest.raises(ValueError, match="same env_id, seed"):
        ray_job.get(actor.join.remote("mixed", "m-1", '{"seed": 1}', 3))
    with pytest.raises(ValueError, match="already joined"):
        ray_job.get(actor.join.remote("other", "m-0", '{"seed": 0}', 3))


def test_batches_without_trees_get_the_row_level_credit(ray_job):
    from verl.trainer.ppo import core_algos

    from ptgpo_algos.integrations.verl import verl_estimator

    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    index = np.array(["plain-a", "plain-a", "plain-b", "plain-b"], dtype=object)
    registered = core_algos.get_adv_estimator_fn("gigpo")
    scores, _ = registered(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    assert torch.equal(scores, verl_estimator("gigpo")(rewards, mask, index)[0])


def test_rays_setup_hook_registers_the_estimators_and_loops_in_verls_workers(ray_job):
    @ray_job.remote
    def registered():
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        return (sorted(name for name in _agent_loop_registry if name.startswith("ptgpo")),
                ADV_ESTIMATOR_REGISTRY["ptgpo"].__name__)

    loops, estimator = ray_job.get(registered.remote(), timeout=300)
    assert loops == ["ptgpo_env", "ptgpo_env_steps", "ptgpo_tree", "ptgpo_tree_leaf"]
    assert estimator == "ptgpo_tree_ptgpo"


def test_the_default_route_uses_nothing_that_verls_neo_line_removes():
    # verl's neo branch removes TransferQueue and the v1 trainer: the route imports and registers without them.
    code = ("import sys; sys.modules['transfer_queue'] = None; sys.modules['verl.trainer.ppo.v1'] = None\n"
            "from ptgpo_algos.integrations import verl_leaves; verl_leaves.register()\n"
            "assert not any(m.startswith(('transfer_queue', 'verl.trainer.ppo.v1')) for m in sys.modules "
            "if sys.modules[m] is not None)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_the_dataset_keeps_each_group_together_and_round_trips_through_parquet(tmp_path):
    import pandas as pd

    from ptgpo_algos.integrations.verl.agent_loop import episode_spec
    from ptgpo_algos.integrations.verl.dataset import main
    from ptgpo_algos.integrations.verl.tree import tree_spec

    out = tmp_path / "train.parquet"
    assert main(["--env-id", "ptgpo/Household-v0", "--seeds", "0:4", "--group-size", "3", "--env-kwargs",
                 '{"difficulty": "easy"}', "--tree", '{"initial_rollouts": 2, "branch": "novel"}',
                 "--out", str(out)]) == 0
    rows = pd.read_parquet(out).to_dict("records")
    assert len(rows) == 12 and {row["agent_name"] for row in rows} == {"ptgpo_tree_leaf"}
    groups = [row["extra_info"]["group"] for row in rows]
    assert all(len(set(groups[i:i + 3])) == 1 for i in range(0, 12, 3)) and len(set(groups)) == 4
    for row in rows:
        env_id, seed, env_kwargs = episode_spec(row["extra_info"])
        assert (env_id, env_kwargs) == ("ptgpo/Household-v0", {"difficulty": "easy"})
        spec = tree_spec(row["extra_info"]["tree"], {"logprobs": True})
        assert (spec.group_size, spec.initial_rollouts, spec.branch) == (3, 2, "novel")
    assert main(["--env-id", "x", "--seeds", "0:2", "--group-size", "2", "--tree", '{"width": 2}',
                 "--out", str(out)]) == 2
    assert main(["--env-id", "x", "--seeds", "0:2", "--group-size", "1", "--agent-name", "tool_agent",
                 "--out", str(out)]) == 2
    assert len(pd.read_parquet(out)) == 12  # a refused command leaves the file as it was


def test_verls_policy_loss_on_a_tiny_model_moves_the_leaves_toward_our_advantages(ray_job, monkeypatch):
    """verl's PPO policy loss (its default ``vanilla`` loss, token-mean) on our advantages in verl's
    batch, with a real (tiny, randomly initialised) Qwen2 model on the CPU: one optimiser step raises
    the log-probability of the decisions our estimator credits and lowers that of those it blames.
    verl's FSDP training engine around this loss needs GPUs (docs/integrations/verl.md)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.trainer.ppo import core_algos

    from test_verl_steps import _chat_tokenizer
    from test_verl_tree import _TreeServer

    tokenizer = _chat_tokenizer()
    data, _, _ = _play(_rows("update", [f"p-{i}" for i in range(5)], seed=3), monkeypatch, tokenizer,
                       _TreeServer(tokenizer))
    batch = _through_the_trainer(data, "ptgpo", torch.arange(5))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=8192))
    width = batch.batch["responses"].shape[-1]

    def response_log_probs() -> torch.Tensor:
        rows = []
        for row in range(len(batch)):
            keep = batch.batch["attention_mask"][row].bool()
            ids = batch.batch["input_ids"][row][keep].unsqueeze(0)
            logits = model(input_ids=ids, position_ids=batch.batch["position_ids"][row][keep].unsqueeze(0)).logits
            log_probs = torch.log_softmax(logits[0, :-1].float(), dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
            response = int(keep[-width:].sum())  # the response's real tokens end the kept sequence
            padded = torch.zeros(width)
            padded = padded.index_put((torch.arange(response),), log_probs[-response:]) if response else padded
            rows.append(padded)
        return torch.stack(rows)

    config = _verl_defaults().actor_rollout_ref.actor
    config.global_batch_info = {"dp_size": 1, "batch_num_tokens": int(batch.batch["response_mask"].sum()),
                                "global_batch_size": len(batch)}
    mask, advantages = batch.batch["response_mask"].float(), batch.batch["advantages"]
    assert torch.any(advantages > 0) and torch.any(advantages < 0)
    old = response_log_probs().detach()
    loss, _ = core_algos.get_policy_loss_fn(config.policy_loss.loss_mode)(
        old_log_prob=old, log_prob=response_log_probs(), advantages=advantages, response_mask=mask,
        loss_agg_mode=config.loss_agg_mode, config=config)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.05).step()
    with torch.no_grad():
        moved = (response_log_probs() - old) * mask
    assert float((moved * advantages).sum()) > 0


def test_the_v1_trainer_mode_names_the_default_route_where_verl_has_no_v1_trainer():
    code = ("import sys; sys.modules['transfer_queue'] = None; sys.modules['verl.trainer.ppo.v1'] = None\n"
            "import ptgpo_algos.integrations.verl.trainer")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "verl.leaves.register" in run.stderr and "trainer.use_v1=false" in run.stderr
