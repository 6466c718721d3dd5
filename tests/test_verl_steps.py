"""Step-level credit on verl's episode rows (``ptgpo_algos.integrations.verl.steps``).

The step-wise mask is checked everywhere against our estimators on the same trajectories and against
the one-row-per-step layout; the tests marked ``verl`` pass our fields through verl's own
``AgentLoopWorker._postprocess`` and ``DataProto`` operations (``bash scripts/test_verl_cpu.sh``).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from ptgpo_algos.advantages import ESTIMATORS, compute_advantages
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.integrations.verl import bridged_estimators, verl_estimator
from ptgpo_algos.integrations.verl.steps import (
    STEPS_KEY,
    TRAJECTORY_KEY,
    DecisionSpan,
    compute_step_advantage,
    episodes_to_batch,
)

WIDTH = 40  # response tokens per row, right-padded
OBSERVATION_TOKENS = 3  # the environment's tokens after each decision (response_mask 0)

# Two groups; states repeat across a group's trajectories and actions branch at them (a prefix tree).
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
    return [ord(c) for c in action.replace(" ", "")]


def _episode_rows():
    """One row per episode, as a multi-turn agent loop returns it: each decision's tokens, then the
    observation's, then padding; each row's decisions as DecisionSpan dicts."""
    rows = [(g, t, trajectory) for g, group in enumerate(GROUPS) for t, trajectory in enumerate(group)]
    mask = torch.zeros(len(rows), WIDTH, dtype=torch.long)
    responses = torch.zeros(len(rows), WIDTH, dtype=torch.long)
    uid, steps, names = [], [], []
    for row, (g, t, trajectory) in enumerate(rows):
        cursor, spans, parent = 0, [], None
        for k, (state, action, reward, valid) in enumerate(trajectory):
            tokens = _tokens(action)
            responses[row, cursor:cursor + len(tokens)] = torch.tensor(tokens)
            mask[row, cursor:cursor + len(tokens)] = 1
            node = f"g{g}/" + "/".join(a for _, a, _, _ in trajectory[:k + 1])  # a path names a tree node
            spans.append(DecisionSpan(state, action, reward, valid, cursor, cursor + len(tokens), node, parent).to_dict())
            parent = node
            responses[row, cursor + len(tokens):cursor + len(tokens) + OBSERVATION_TOKENS] = 7
            cursor += len(tokens) + OBSERVATION_TOKENS
        uid.append(f"uid-{g}")
        steps.append(spans)
        names.append(f"traj-{g}-{t}")
    columns = {"uid": np.array(uid, dtype=object), STEPS_KEY: _objects(steps), TRAJECTORY_KEY: np.array(names, dtype=object)}
    return mask, responses, columns, [(g, t) for g, t, _ in rows]


def _objects(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def _ours() -> list[list[Trajectory]]:
    return [[Trajectory([Step(s, a, r, v, response_ids=_tokens(a)) for s, a, r, v in t]) for t in g] for g in GROUPS]


def _holder(mask, responses, columns):
    return types.SimpleNamespace(batch={"response_mask": mask, "responses": responses}, non_tensor_batch=dict(columns))


def _check_mask(scores, mask, columns, where, expected):
    for row, (g, t) in enumerate(where):
        covered = torch.zeros(WIDTH, dtype=torch.bool)
        for k, span in enumerate(columns[STEPS_KEY][row]):
            tokens = scores[row, span["start"]:span["end"]]
            assert torch.allclose(tokens, torch.full_like(tokens, expected[g][t][k]), atol=1e-6), (row, k)
            covered[span["start"]:span["end"]] = True
        # The environment's tokens between decisions and the padding get no advantage.
        assert torch.all(scores[row][~covered] == 0)
        assert torch.all(scores[row][mask[row] == 0] == 0)


@pytest.mark.parametrize("name", bridged_estimators())
def test_each_decision_gets_its_step_advantage_on_its_own_tokens(name):
    mask, responses, columns, where = _episode_rows()
    data = compute_step_advantage(_holder(mask, responses, columns), name)
    _check_mask(data.batch["advantages"], mask, columns, where, compute_advantages(name, _ours()))
    assert torch.equal(data.batch["advantages"], data.batch["returns"])


@pytest.mark.parametrize("name", ["gigpo", "ptgpo", "grpo"])
def test_episode_rows_agree_with_the_one_row_per_step_layout(name):
    mask, responses, columns, where = _episode_rows()
    episode = compute_step_advantage(_holder(mask, responses, columns), name).batch["advantages"]
    step_rows = [(row, span) for row in range(len(where)) for span in columns[STEPS_KEY][row]]
    step_mask = torch.zeros(len(step_rows), WIDTH)
    step_tokens = torch.zeros(len(step_rows), WIDTH, dtype=torch.long)
    rewards = torch.zeros(len(step_rows), WIDTH)
    for r, (row, span) in enumerate(step_rows):
        length = span["end"] - span["start"]
        step_mask[r, :length] = 1
        step_tokens[r, :length] = responses[row, span["start"]:span["end"]]
        rewards[r, length - 1] = span["reward"]
    scores, _ = verl_estimator(name)(
        rewards, step_mask, [columns["uid"][row] for row, _ in step_rows],
        traj_index=[columns[TRAJECTORY_KEY][row] for row, _ in step_rows],
        anchor_obs=[span["state_key"] for _, span in step_rows], responses=step_tokens,
        is_action_valid=[span["valid"] for _, span in step_rows])
    for r, (row, span) in enumerate(step_rows):
        assert torch.allclose(episode[row, span["start"]], scores[r, 0], atol=1e-6)


def test_episodes_to_batch_keeps_node_ids_and_trajectory_ids():
    mask, _, columns, where = _episode_rows()
    batch, placed = episodes_to_batch(mask, columns["uid"], columns[STEPS_KEY], columns[TRAJECTORY_KEY])
    assert [len(group) for group in batch] == [3, 2]
    assert batch[0][2].meta["trajectory"] == "traj-0-2"
    assert batch[0][0].meta["nodes"][:1] == batch[0][2].meta["nodes"][:1] == ["g0/go a"]  # a shared tree prefix
    assert placed[1][1][:3] == (0, 1, 1)


@pytest.mark.parametrize("edit, message", [
    (lambda spans: spans[1].update(start=spans[0]["start"]), "overlaps"),
    (lambda spans: spans[-1].update(end=WIDTH + 5), "responses are 40 long"),
    (lambda spans: spans[1].update(parent="elsewhere"), "is not the node before it"),
    (lambda spans: spans[0].pop("state_key"), "missing"),
    (lambda spans: spans[0].update(start=3, end=3), "0 <= start < end"),
    (lambda spans: spans[0].update(start=True), "integers"),
])
def test_bad_decision_records_are_refused_with_the_key(edit, message):
    mask, responses, columns, _ = _episode_rows()
    edit(columns[STEPS_KEY][0])
    with pytest.raises(ValueError, match=message):
        compute_step_advantage(_holder(mask, responses, columns), "gigpo")


def test_rows_without_our_fields_say_what_the_agent_loop_must_return():
    mask, responses, columns, _ = _episode_rows()
    del columns[STEPS_KEY]
    with pytest.raises(ValueError, match="extra_fields"):
        compute_step_advantage(_holder(mask, responses, columns), "gigpo")


# ---------------------------------------------------------------- inside verl
def _agent_loop_outputs(mask, responses, columns):
    """Each row as verl's padded per-sample agent-loop output, our fields in ``extra_fields``."""
    from verl.experimental.agent_loop.agent_loop import _InternalAgentLoopOutput

    prompt = torch.tensor([[0, 0, 5, 6]])
    outputs = []
    for row in range(mask.shape[0]):
        ids = torch.cat([prompt, responses[row:row + 1]], dim=1)
        attention = torch.cat([torch.tensor([[0, 0, 1, 1]]), (responses[row:row + 1] != 0).long()], dim=1)
        outputs.append(_InternalAgentLoopOutput(
            prompt_ids=prompt, response_ids=responses[row:row + 1], input_ids=ids,
            position_ids=torch.clamp(attention.cumsum(-1) - 1, min=0), response_mask=mask[row:row + 1],
            attention_mask=attention, num_turns=2 * len(columns[STEPS_KEY][row]), metrics={},
            extra_fields={STEPS_KEY: columns[STEPS_KEY][row], TRAJECTORY_KEY: columns[TRAJECTORY_KEY][row]}))
    return outputs


@pytest.mark.verl
def test_our_fields_survive_verls_postprocess_and_batch_operations(tmp_path):
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    mask, responses, columns, where = _episode_rows()
    worker = types.SimpleNamespace(reward_loop_worker_handles=None)
    data = AgentLoopWorker._postprocess(worker, _agent_loop_outputs(mask, responses, columns),
                                        input_non_tensor_batch={"uid": columns["uid"]})
    assert data.non_tensor_batch[STEPS_KEY][3] == columns[STEPS_KEY][3]
    expected = compute_advantages("ptgpo", _ours())
    # What verl does to a batch between rollout and update: chunks to workers and back, balancing
    # reorders, a round trip through disk.
    data = DataProto.concat(data.chunk(5))
    order = torch.tensor([4, 2, 0, 3, 1])
    data.reorder(order)
    data.save_to_disk(tmp_path / "batch.pkl")
    data = DataProto.load_from_disk(tmp_path / "batch.pkl")
    compute_step_advantage(data, "ptgpo")
    reordered = {key: value[order.numpy()] for key, value in columns.items()}
    _check_mask(data.batch["advantages"], mask[order], reordered, [where[i] for i in order.tolist()], expected)
    assert torch.equal(data.batch["response_mask"], mask[order])


# ---------------------------------------------------------------- verl's agent loop playing our environments
#: The data section our loops need: verl 0.9.0 builds the Continuous Token builder only when enabled
#: (verl 0.9.1 always builds it and ignores the key).
VERL_DATA = {"continuous_token": {"enable": True, "model_family": "auto"}}
#: No model on disk: the builder falls back to the tokenizer's own chat template.
VERL_MODEL = {"path": None, "tokenizer_path": None}

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _chat_tokenizer():
    """A small byte-level BPE tokenizer with a ChatML template, trained here (nothing is downloaded)."""
    import gymnasium as gym
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from ptgpo_algos.integrations.verl.agent_loop import observation_message

    corpus = []
    for seed in range(3):
        env = gym.make("ptgpo/Household-v0", difficulty="easy").unwrapped
        observation, info = env.reset(seed=seed)
        while not env.done:
            corpus.append(observation_message(observation, info))
            observation, _, _, _, info = env.step(env.expert_action())
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


class _ScriptedServer:
    """verl's LLM server client, answering with the expert's action of a replica of the episode (and a
    bad action every third turn), as token ids ending with the end-of-turn token."""

    def __init__(self, tokenizer, seed: int):
        import gymnasium as gym

        self.tokenizer, self.turns = tokenizer, 0
        self.env = gym.make("ptgpo/Household-v0", difficulty="easy").unwrapped
        self.env.reset(seed=seed)
        self.actions: list[str] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.turns += 1
        action = "xyzzy" if self.turns % 3 == 0 else self.env.expert_action()
        self.env.step(action)
        self.actions.append(action)
        ids = self.tokenizer.encode(f"I will act.\n{action}", add_special_tokens=False)
        return TokenOutput(token_ids=ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")])


@pytest.mark.verl
def test_verls_agent_loop_plays_our_environment_one_span_per_decision():
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    import asyncio

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry

    from ptgpo_algos.integrations.verl.agent_loop import AGENT_NAME, EnvAgentLoop

    assert _agent_loop_registry[AGENT_NAME]["_target_"].endswith("EnvAgentLoop")
    tokenizer = _chat_tokenizer()
    config = OmegaConf.create({"actor_rollout_ref": {"model": VERL_MODEL,
                                                     "rollout": {"prompt_length": 2048, "response_length": 8192}},
                               "data": VERL_DATA})

    async def play(seed: int):
        server = _ScriptedServer(tokenizer, seed)
        loop = EnvAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                            processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data))
        output = await loop.run({}, extra_info={"env_id": "ptgpo/Household-v0", "seed": seed,
                                                "env_kwargs": {"difficulty": "easy"}})
        return output, server

    outputs = [asyncio.run(play(seed)) for seed in (0, 0)]
    for output, server in outputs:
        spans = output.extra_fields[STEPS_KEY]
        assert [span["action"] for span in spans] == server.actions  # one span per decision, in order
        assert [span["valid"] for span in spans] == [action != "xyzzy" for action in server.actions]
        assert output.reward_score == 1.0 and spans[-1]["reward"] == 1.0
        for span in spans:
            generated = [t for t, m in zip(output.response_ids[span["start"]:span["end"]],
                                           output.response_mask[span["start"]:span["end"]]) if m]
            assert tokenizer.decode(generated, skip_special_tokens=True).strip().endswith(span["action"])
        # Between decisions the environment's tokens are masked out.
        assert 0 in output.response_mask[spans[0]["end"]:spans[1]["start"] + 1]
    # Two episodes of one group through verl's postprocess: the advantage lands on the decisions' tokens only.
    width = max(len(output.response_ids) for output, _ in outputs)
    mask = torch.zeros(2, width, dtype=torch.long)
    responses = torch.zeros(2, width, dtype=torch.long)
    for row, (output, _) in enumerate(outputs):
        mask[row, :len(output.response_mask)] = torch.tensor(output.response_mask)
        responses[row, :len(output.response_ids)] = torch.tensor(output.response_ids)
    columns = {"uid": np.array(["u", "u"], dtype=object),
               STEPS_KEY: _objects([output.extra_fields[STEPS_KEY] for output, _ in outputs]),
               TRAJECTORY_KEY: np.array([output.extra_fields[TRAJECTORY_KEY] for output, _ in outputs], dtype=object)}
    scores = compute_step_advantage(_holder(mask, responses, columns), "gigpo").batch["advantages"]
    assert torch.all(scores[mask == 0] == 0)
    in_spans = torch.zeros_like(mask, dtype=torch.bool)
    for row in range(2):
        for span in columns[STEPS_KEY][row]:
            in_spans[row, span["start"]:span["end"]] = True
    assert torch.all(scores[~in_spans] == 0) and torch.any(scores[in_spans] != 0)


@pytest.mark.verl
def test_the_per_decision_agent_loop_gives_verls_v1_rows_with_our_fields():
    pytest.importorskip("verl", reason="verl is not installed: bash scripts/test_verl_cpu.sh")
    import asyncio

    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from ptgpo_algos.integrations.verl import compute_advantage
    from ptgpo_algos.integrations.verl.agent_loop import STEPS_AGENT_NAME, EnvStepsAgentLoop
    from ptgpo_algos.integrations.verl.steps import DECISION_KEY, decision_columns

    assert _agent_loop_registry[STEPS_AGENT_NAME]["_target_"].endswith("EnvStepsAgentLoop")
    tokenizer = _chat_tokenizer()
    config = OmegaConf.create({"actor_rollout_ref": {"model": VERL_MODEL,
                                                     "rollout": {"prompt_length": 8192, "response_length": 64}},
                               "data": VERL_DATA})

    async def play(seed: int):
        server = _ScriptedServer(tokenizer, seed)
        loop = EnvStepsAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                 processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data))
        return await loop.run({}, extra_info={"env_id": "ptgpo/Household-v0", "seed": seed,
                                              "env_kwargs": {"difficulty": "easy"}}), server

    played = [asyncio.run(play(seed)) for seed in (1, 2)]
    outputs = [output for episode, _ in played for output in episode]
    for episode, server in played:
        assert [output.extra_fields[DECISION_KEY]["action"] for output in episode] == server.actions
        assert [output.extra_fields[DECISION_KEY]["index"] for output in episode] == list(range(len(episode)))
        assert len(episode) > 3 and episode[-1].reward_score == 1.0  # played to the end: the budget is per decision
        assert all(len(b.prompt_ids) > len(a.prompt_ids) for a, b in zip(episode, episode[1:]))  # growing context
    # verl's v1 worker stores each output's as_dict() through list_of_dict_to_tensordict; read our fields back.
    stored = list_of_dict_to_tensordict([output.as_dict() for output in outputs])
    decisions = [stored["extra_fields"][row][DECISION_KEY] for row in range(len(outputs))]
    assert decisions == [output.extra_fields[DECISION_KEY] for output in outputs]
    width = max(len(output.response_ids) for output in outputs)
    mask = torch.zeros(len(outputs), width, dtype=torch.long)
    rewards = torch.zeros(len(outputs), width)
    for row, output in enumerate(outputs):
        mask[row, :len(output.response_ids)] = 1
        rewards[row, len(output.response_ids) - 1] = output.reward_score
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": rewards},
                               non_tensors={"uid": np.array(["u"] * len(outputs), dtype=object),
                                            **decision_columns(decisions)})
    scores = compute_advantage(data, "gigpo").batch["advantages"]
    trajectories = [[Step(d["state_key"], d["action"], d["reward"], d["valid"]) for d in decisions
                     if d["trajectory"] == trajectory] for trajectory in dict.fromkeys(d["trajectory"] for d in decisions)]
    expected = compute_advantages("gigpo", [[Trajectory(steps) for steps in trajectories]])[0]
    flat = [value for trajectory in expected for value in trajectory]
    for row in range(len(outputs)):
        assert torch.allclose(scores[row][mask[row] == 1], torch.tensor(flat[row]), atol=1e-6)
        assert torch.all(scores[row][mask[row] == 0] == 0)
    with pytest.raises(ValueError, match="sort the rows"):
        decision_columns(decisions[1:])
