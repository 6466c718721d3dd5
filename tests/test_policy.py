"""The policy layer: tiny model build/reload, choose-mode probabilities, generate parsing and
scoring, the prompt template's truncation, and the evaluation adapter."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from ptgpo_algos.policy import Context, format_response, load_policy, parse_response
from ptgpo_algos.policy.prompts import PromptBuilder

ENV = "ptgpo/FrozenLake-v0"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(seed=3, pretrain_steps=0), env_ids=[ENV], cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def policy(tiny_path):
    return load_policy(tiny_path, mode="choose")


def _context(actions=("go left", "go right"), history=()):
    return Context(
        task="Walk across the frozen lake to the goal G.",
        observation="You stand on the start S.\nP F F\nF H F\nF F G",
        admissible_actions=list(actions),
        history=list(history),
    )


# ----------------------------------------------------------------------------- tiny model
def test_tiny_model_saves_and_reloads_offline(tiny_path, monkeypatch):
    from ptgpo_algos.policy.tiny import TINY_MARKER, TinyModelSpec, build_tiny_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert (tiny_path / TINY_MARKER).is_file() and (tiny_path / "config.json").is_file()
    # Same spec and corpus: the cached folder is reused, not rebuilt.
    assert build_tiny_model(TinyModelSpec(seed=3, pretrain_steps=0), env_ids=[ENV], cache_dir=tiny_path.parent) == tiny_path
    first, second = load_policy(tiny_path), load_policy(tiny_path)
    assert first.model.config.model_type == "qwen2"
    assert sum(p.numel() for p in first.model.parameters()) < 400_000
    ids = first.prompts.prompt_ids(_context())
    with torch.no_grad():
        a = first.model(input_ids=torch.tensor([ids])).logits
        b = second.model(input_ids=torch.tensor([ids])).logits
    assert torch.equal(a, b)
    # The trained BPE keeps game words whole and round-trips text exactly.
    text = "go left"
    assert first.tokenizer.decode(first.tokenizer.encode(text)) == text
    assert len(first.tokenizer.encode(" go left")) <= 3


def test_saved_policy_reloads_with_the_settings_it_acted_with(tiny_path, tmp_path):
    trained = load_policy(tiny_path, mode="generate", score="sum", temperature=0.7, history_length=1,
                          max_prompt_tokens=300, max_new_tokens=9)
    trained.save_pretrained(tmp_path / "saved")
    loaded = load_policy(tmp_path / "saved")
    assert (loaded.mode, loaded.score_mode, loaded.temperature, loaded.max_new_tokens) == ("generate", "sum", 0.7, 9)
    assert (loaded.prompts.history_length, loaded.prompts.max_tokens, loaded.prompts.mode) == (1, 300, "generate")
    context = _context(history=[("first", "go left"), ("second", "go right")])
    assert loaded.prompts.prompt_ids(context) == trained.prompts.prompt_ids(context)
    # Explicit arguments still win over the saved ones.
    assert load_policy(tmp_path / "saved", mode="choose", history_length=2).prompts.history_length == 2
    # A plain model folder has no saved settings: the defaults apply.
    assert load_policy(tiny_path).prompts.history_length == 2


def test_a_recipes_prompt_and_response_rule_are_saved_with_the_policy(tiny_path, tmp_path):
    from ptgpo_algos.config import TrainConfig

    template = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": ENV}).policy.prompt_template
    trained = load_policy(tiny_path, mode="generate", prompt_template=template, require_think=True)
    trained.save_pretrained(tmp_path / "saved")
    loaded = load_policy(tmp_path / "saved")
    assert loaded.prompts.template == trained.prompts.template and loaded.require_think
    context = _context(history=[("first", "go left")])
    assert loaded.prompts.prompt_ids(context) == trained.prompts.prompt_ids(context)
    assert "This is step 2." in loaded.tokenizer.decode(loaded.prompts.prompt_ids(context))
    # A generated response without <think> keeps its action, and the reason it is an invalid step.
    for policy, error in ((loaded, "missing <think>...</think>"), (load_policy(tiny_path, mode="generate"), None)):
        tokens = policy.tokenizer.encode("<action>go left</action>", add_special_tokens=False)
        decision = policy._generated_decision([1], tokens, [0.0] * len(tokens), [0.0] * len(tokens))
        assert (decision.action, decision.format_error) == ("go left", error)


def test_tiny_model_is_deterministic_per_seed(tiny_path, tmp_path):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    other = build_tiny_model(TinyModelSpec(seed=3, pretrain_steps=0), env_ids=[ENV], cache_dir=tmp_path)
    a, b = load_policy(tiny_path).model.state_dict(), load_policy(other).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_pretraining_learns_the_text_of_random_play_deterministically(tmp_path):
    from ptgpo_algos.policy.tiny import TinyModelSpec, _random_play_transcripts, build_tiny_model, load_tiny_tokenizer
    from transformers import AutoModelForCausalLM

    spec = dict(seed=4, hidden_size=32, intermediate_size=64, pretrain_steps=40, pretrain_batch_size=16)
    path = build_tiny_model(TinyModelSpec(**spec), env_ids=[ENV], cache_dir=tmp_path / "a")
    again = build_tiny_model(TinyModelSpec(**spec), env_ids=[ENV], cache_dir=tmp_path / "b")
    bare = build_tiny_model(TinyModelSpec(**{**spec, "pretrain_steps": 0}), env_ids=[ENV], cache_dir=tmp_path / "c")
    models = [AutoModelForCausalLM.from_pretrained(p) for p in (path, again, bare)]
    a, b = models[0].state_dict(), models[1].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    tokenizer = load_tiny_tokenizer(path)
    # Transcripts of another seed: each response is the random action taken, one of the admissible.
    rows = _random_play_transcripts([ENV], tokenizer, 64, seed=99)
    assert len(rows) == 64
    for prompt, response in rows:
        text = tokenizer.decode(response, skip_special_tokens=True).strip()
        action = text.removeprefix("<think></think><action>").removesuffix("</action>")
        admissible = tokenizer.decode(prompt).split("Admissible actions: ")[1].split("\n")[0].split(" | ")
        assert action in admissible

    def loss(model):
        total = 0.0
        with torch.no_grad():
            for prompt, response in rows[:16]:
                ids = torch.tensor([prompt + response])
                total += float(model(input_ids=ids, labels=ids).loss)
        return total / 16

    # A bare model predicts ~log(vocabulary) nats per token; 40 steps already learn much of the text.
    assert loss(models[0]) < loss(models[2]) - 1.0


def test_hindsight_transcripts_state_tasks_that_concern_what_the_random_play_did(tmp_path):
    from ptgpo_algos.policy.tiny import TinyModelSpec, _random_play_transcripts, build_tiny_model, load_tiny_tokenizer

    household = "ptgpo/Household-v0"
    path = build_tiny_model(TinyModelSpec(seed=5, hidden_size=32, intermediate_size=64, pretrain_steps=0),
                            env_ids=[household], cache_dir=tmp_path)
    tokenizer = load_tiny_tokenizer(path)

    def acts_on_task_object(hindsight: bool) -> float:
        """The share of transcript rows whose action handles an object of the kind the task names."""
        hits = 0
        rows = _random_play_transcripts([household], tokenizer, 1500, seed=7, hindsight=hindsight)
        for prompt, response in rows:
            text = tokenizer.decode(prompt)
            task = text.split("Task: ")[1].split("\n")[0]
            # The first observation repeats the task: relabelling rewrites it there too.
            assert all(seen == task for seen in re.findall(r"Your task is to: ([^\n]*)", text))
            action = tokenizer.decode(response, skip_special_tokens=True).strip()
            action = action.removeprefix("<think></think><action>").removesuffix("</action>")
            verb, _, rest = action.partition(" ")
            hits += verb in ("take", "move", "heat", "cool", "clean") and f" {rest.split(' ')[0]} " in f" {task} "
        return hits / len(rows)

    given, relabelled = acts_on_task_object(False), acts_on_task_object(True)
    assert relabelled > 2 * given + 0.05, (given, relabelled)
    with pytest.raises(ValueError, match="pretrain_tasks"):
        TinyModelSpec(pretrain_tasks="expert")


# ----------------------------------------------------------------------------- choose mode
@pytest.mark.parametrize("score", ["mean", "sum"])
def test_choose_probabilities_match_hand_computation(tiny_path, score):
    policy = load_policy(tiny_path, mode="choose", score=score)
    context = _context(("go left", "go right"))
    probabilities = policy.action_distribution([context])[0]
    assert math.isclose(float(probabilities.sum()), 1.0, rel_tol=1e-6)
    # By hand: each candidate's full sequence, no KV cache, token log-probs summed or averaged.
    prompt = policy.prompts.prompt_ids(context)
    scores = []
    for action in context.admissible_actions:
        candidate = policy.prompts.candidate_ids(action)
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([prompt + candidate])).logits[0]
        logp = F.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        token_logp = logp[torch.arange(len(candidate)), torch.tensor(candidate)]
        scores.append(token_logp.sum() if score == "sum" else token_logp.mean())
    expected = F.softmax(torch.stack(scores), dim=-1)
    assert torch.allclose(probabilities, expected, atol=1e-5)
    decision = policy.decide([context], greedy=True)[0]
    assert decision.choice == int(expected.argmax())
    assert math.isclose(decision.choice_logprob, float(expected.log()[decision.choice]), abs_tol=1e-5)


def test_choose_batch_with_different_candidate_counts_sums_to_one(policy):
    contexts = [_context(("go left",)), _context(("go up", "go down", "go left", "go right")), _context()]
    distributions = policy.action_distribution(contexts)
    assert [len(d) for d in distributions] == [1, 4, 2]
    for d in distributions:
        assert math.isclose(float(d.sum()), 1.0, rel_tol=1e-6)
    # Batched results equal one-at-a-time results (padding does not leak into scores).
    for context, d in zip(contexts, distributions):
        assert torch.allclose(policy.action_distribution([context])[0], d, atol=1e-5)


def test_choose_score_recomputes_behaviour_logprobs_with_gradients(policy):
    generator = torch.Generator().manual_seed(0)
    decisions = policy.decide([_context(), _context(("go up", "go down", "go left"))], generator=generator)
    scored = policy.score(decisions)
    assert scored.logprobs.shape == (2, 1) and scored.logprobs.requires_grad
    behaviour = torch.tensor([[d.choice_logprob] for d in decisions])
    assert torch.allclose(scored.logprobs.detach(), behaviour, atol=1e-5)
    scored.logprobs.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    policy.model.zero_grad(set_to_none=True)



@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_repeated_contexts_are_scored_once_with_the_same_values_and_gradients(tiny_path, mode):
    # Rollouts of a group repeat contexts (the first step always): the policy computes each distinct
    # context once. Values and gradients must equal scoring every decision on its own.
    policy = load_policy(tiny_path, mode=mode, max_new_tokens=6)
    contexts = [_context(), _context(("go up", "go down", "go left")), _context(), _context()]
    decisions = policy.decide(contexts, generator=torch.Generator().manual_seed(4))
    if mode == "choose":  # the same context with another choice must still get its own log-prob
        decisions[3].choice = 1 - decisions[0].choice
    else:  # the same prompt and response, and one response that differs
        decisions[2] = decisions[0]
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def loss_and_grads(batch_scores):
        policy.model.zero_grad(set_to_none=True)
        loss = (batch_scores.logprobs.sum(-1) * weights).sum() + batch_scores.entropy.sum()
        loss.backward()
        grads = [p.grad.clone() for p in policy.parameters()]
        policy.model.zero_grad(set_to_none=True)
        return batch_scores.logprobs.detach(), grads

    together, grads = loss_and_grads(policy.score(decisions))
    calls = []
    original = policy.model.forward
    policy.model.forward = lambda *a, **k: calls.append(k["input_ids"].shape[0]) or original(*a, **k)
    try:
        policy.score(decisions)
    finally:
        del policy.model.forward
    assert sum(calls) < len(decisions) * (2 if mode == "choose" else 1)  # fewer rows than decisions
    alone_rows, alone_grads = [], None
    for i, d in enumerate(decisions):
        policy.model.zero_grad(set_to_none=True)
        scored = policy.score([d])
        loss = scored.logprobs.sum() * weights[i] + scored.entropy.sum()
        loss.backward()
        alone_rows.append(scored.logprobs.detach()[0])
        step = [p.grad.clone() for p in policy.parameters()]
        alone_grads = step if alone_grads is None else [a + b for a, b in zip(alone_grads, step)]
    policy.model.zero_grad(set_to_none=True)
    for i, row in enumerate(alone_rows):
        assert torch.allclose(together[i, : row.shape[0]], row, atol=1e-5)
    if mode == "choose":
        assert not torch.allclose(together[3], together[0])
    for a, b in zip(grads, alone_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)

def test_decide_temperature_override_rescales_the_softmax(policy):
    context = _context(("go up", "go down", "go left", "go right"))
    base = policy.action_distribution([context])[0]
    decision = policy.decide([context], generator=torch.Generator().manual_seed(0), temperature=0.25)[0]
    # Under the override the distribution is softmax(log p / 0.25) = p^4 renormalised.
    expected = base**4 / (base**4).sum()
    assert math.isclose(decision.choice_logprob, float(expected.log()[decision.choice]), abs_tol=1e-5)
    assert math.isclose(decision.entropy, float(-(expected * expected.log()).sum()), abs_tol=1e-5)
    assert policy.temperature == 1.0  # the override is for that call only
    with pytest.raises(ValueError, match="temperature must be > 0"):
        policy.decide([context], temperature=0.0)


def test_choose_sampling_is_seeded(policy):
    contexts = [_context(("go up", "go down", "go left", "go right"))] * 32
    a = [d.choice for d in policy.decide(contexts, generator=torch.Generator().manual_seed(5))]
    b = [d.choice for d in policy.decide(contexts, generator=torch.Generator().manual_seed(5))]
    assert a == b and len(set(a)) > 1


# ----------------------------------------------------------------------------- generate mode
@pytest.mark.parametrize(
    "text, action",
    [
        ("<think>the goal is right</think><action>go right</action>", "go right"),
        ("<action> go left </action>", "go left"),
        ("<THINK>x</THINK><Action>go up</Action>\n", "go up"),
        (format_response("take apple 1 from table 1", "hungry"), "take apple 1 from table 1"),
    ],
)
def test_parse_valid_responses(text, action):
    parsed = parse_response(text)
    assert parsed.valid and parsed.action == action and parsed.error is None


@pytest.mark.parametrize(
    "text, reason",
    [
        ("go right", "missing"),
        ("<think>hmm</think>", "missing"),
        ("<action>go left</action><action>go right</action>", "duplicated"),
        ("<think>a</think><think>b</think><action>go up</action>", "duplicated"),
        ("<action>go left", "missing"),
        ("go left</action>", "missing"),
        ("</action>go left<action>", "before"),
        ("<think>unclosed<action>go up</action>", "unclosed"),
        ("<action>go up</action><think>late</think>", "closed before"),
        ("<action>go up</action> and then go down", "after"),
        ("<action>   </action>", "empty"),
        ("<act ion>go</action>", "missing"),
    ],
)
def test_parse_rejects_garbled_responses(text, reason):
    parsed = parse_response(text)
    assert not parsed.valid and parsed.action is None and reason in parsed.error


def test_generate_mode_logprobs_match_training_scores(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=12)
    decisions = policy.decide([_context(), _context(("go up",))], generator=torch.Generator().manual_seed(1))
    for d in decisions:
        assert 1 <= len(d.response_ids) <= 12 and len(d.logprobs) == len(d.response_ids)
        assert d.action == parse_response(d.text).action
    scored = policy.score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.response_ids)
        assert scored.mask[i].sum() == n
        assert torch.allclose(scored.logprobs[i, :n].detach(), torch.tensor(d.logprobs), atol=1e-4)
    greedy = policy.decide([_context()], greedy=True)[0]
    assert greedy.response_ids == policy.decide([_context()], greedy=True)[0].response_ids


# ----------------------------------------------------------------------------- prompts
def test_prompt_keeps_recent_history_and_never_cuts_the_observation(policy):
    history = [(f"observation number {i} " * 5, "go left") for i in range(6)]
    context = _context(history=history)
    builder = PromptBuilder(policy.tokenizer, "choose", history_length=2, max_tokens=100_000)
    text = policy.tokenizer.decode(builder.prompt_ids(context))
    assert "observation number 5" in text and "observation number 4" in text
    assert "observation number 3" not in text
    assert "Admissible actions: go left | go right" in text
    full = len(builder.prompt_ids(context))
    without_history = len(PromptBuilder(policy.tokenizer, "choose", 0, 100_000).prompt_ids(context))
    tight = PromptBuilder(policy.tokenizer, "choose", history_length=2, max_tokens=without_history)
    text = policy.tokenizer.decode(tight.prompt_ids(context))
    assert len(tight.prompt_ids(context)) <= without_history < full
    assert "observation number" not in text and context.observation in text
    tiniest = PromptBuilder(policy.tokenizer, "choose", history_length=2, max_tokens=5)
    text = policy.tokenizer.decode(tiniest.prompt_ids(context))
    assert context.observation in text and context.task in text


# ----------------------------------------------------------------------------- agent adapter
def test_policy_agent_plays_through_evaluate(policy):
    from ptgpo_algos.rollouts.evaluation import Agent, evaluate
    from ptgpo_algos.rollouts.agent import PolicyAgent

    agent = PolicyAgent(policy, greedy=True, name="tiny")
    assert isinstance(agent.name, str) and callable(agent.act)
    _: Agent = agent
    result = evaluate(agent, ENV, seeds=[100, 101, 102], max_steps=8, batch_size=2)
    assert len(result.episodes) == 3 and result.invalid_rate == 0.0
    again = evaluate(PolicyAgent(policy, greedy=True), ENV, seeds=[100, 101, 102], max_steps=8)
    assert [e.length for e in again.episodes] == [e.length for e in result.episodes]


def test_lora_trains_adapters_only_and_exports_base_weights(tiny_path):
    policy = load_policy(tiny_path, mode="choose", lora={"r": 4, "alpha": 8})
    base = load_policy(tiny_path).model.state_dict()
    trainable = policy.named_trainable()
    assert trainable and all("lora_" in name for name in trainable)
    exported = dict(policy.export_weights())
    assert set(exported) == set(base)
    # Fresh LoRA adapters are zero-initialised on one side: merged weights equal the base weights.
    assert all(torch.allclose(exported[k], base[k]) for k in base)
    rollout_side = load_policy(tiny_path)
    rollout_side.load_weights(iter(exported.items()))


def test_gradient_checkpointing_scores_like_the_cached_path(tiny_path, policy):
    # Under gradient checkpointing (the GPU setting for large models) the KV cache is off, so
    # training scores full prompt+candidate sequences; it must give the same numbers.
    checkpointed = load_policy(tiny_path, mode="choose", gradient_checkpointing=True)
    contexts = [_context(), _context(("go up", "go down", "go left"))]
    decisions = checkpointed.decide(contexts, generator=torch.Generator().manual_seed(2))
    scored = checkpointed.score(decisions)
    assert scored.logprobs.requires_grad
    assert torch.allclose(scored.logprobs.detach(), policy.score(decisions).logprobs.detach(), atol=1e-5)
    assert torch.allclose(scored.logprobs.detach(), torch.tensor([[d.choice_logprob] for d in decisions]), atol=1e-5)
