"""The real pretrained model, SmolLM2-135M-Instruct, in the loop: converted from its wheel's GGUF file
into an ordinary model folder, prompted through its chat template, scored, trained (full fine-tuning
and LoRA), saved and reloaded.

Selected with ``-m smollm2``; skipped, with the reason in the summary, where its wheel is not installed
(``ptgpo models fetch smollm2``). The conversion happens once per cache (``$PTGPO_CACHE/models``): the
session's fixture converts it, or finds it converted. A forward pass of the 134.5 M-parameter model
takes seconds on one CPU thread, so each test runs few of them, on short prompts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ptgpo_algos.policy import Context, load_policy, parse_response
from ptgpo_algos.policy.pretrained import PRETRAINED, SOURCE_FILE, converted_folder
from ptgpo_algos.policy.prompts import SYSTEM_TEXT

SMOLLM2 = PRETRAINED["smollm2"]
pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.skipif(SMOLLM2.gguf_path() is None,
                       reason=f"SMOLLM2 NOT INSTALLED, its real-model tests skipped: {SMOLLM2.how_to_get()}"),
]


@pytest.fixture(scope="session")
def folder():
    return converted_folder("smollm2")


@pytest.fixture(scope="module")
def policy(folder):
    return load_policy("smollm2", mode="choose", history_length=0)


def _context(actions=("go left", "go right", "go down")):
    return Context(task="Reach the goal G without falling into a hole H.",
                   observation="S F\nH G\nYou are on S.", admissible_actions=list(actions), history=[])


def _step(policy, decisions, lr: float) -> None:
    """One policy-gradient step through the policy's own scoring: raise the chosen actions' log-probability."""
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr)
    scored = policy.score(decisions)
    assert scored.logprobs.dtype == torch.float32  # the importance ratio's terms, whatever the compute dtype
    (-(scored.logprobs * scored.mask).sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_the_wheel_converts_to_an_ordinary_model_folder_that_knows_paris(folder):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", SOURCE_FILE):
        assert (folder / name).is_file(), name
    # The cache is keyed by the file's bytes, so a cache shared by two installs names the first one's path.
    source = json.loads((folder / SOURCE_FILE).read_text())
    assert Path(source["gguf"]).name == SMOLLM2.gguf_path().name
    assert folder.name == f"{SMOLLM2.gguf_path().name[:-len('.gguf')]}-{source['digest']}"
    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == "llama" and not hasattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    ids = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        following = int(model(input_ids=ids).logits[0, -1].argmax())
    assert tokenizer.decode([following]) == " Paris"


def test_the_prompt_is_the_chat_template_with_task_observation_and_actions(policy):
    text = policy.tokenizer.decode(policy.prompts.prompt_ids(_context()))
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_TEXT['choose']}<|im_end|>\n<|im_start|>user\nTask: Reach")
    assert "Current observation: S F\nH G\nYou are on S." in text
    assert text.endswith("Admissible actions: go left | go right | go down<|im_end|>\n<|im_start|>assistant\n")
    # A candidate is a complete assistant turn: the action, then the end of the turn.
    assert policy.tokenizer.decode(policy.prompts.candidate_ids("go left")) == "go left<|im_end|>"


def test_kv_cached_choose_scoring_equals_a_full_forward_pass(policy):
    context = _context()
    probabilities = policy.action_distribution([context])[0]
    prompt = policy.prompts.prompt_ids(context)
    scores = []
    for action in context.admissible_actions:
        candidate = policy.prompts.candidate_ids(action)
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([prompt + candidate])).logits[0]
        logp = F.log_softmax(logits[len(prompt) - 1: -1].float(), dim=-1)
        scores.append(logp[torch.arange(len(candidate)), torch.tensor(candidate)].mean())
    assert torch.allclose(probabilities, F.softmax(torch.stack(scores), dim=-1), atol=1e-4)
    assert math.isclose(float(probabilities.sum()), 1.0, rel_tol=1e-6)


def test_a_saved_and_reloaded_policy_scores_the_same(policy, tmp_path):
    context = _context()
    policy.save_pretrained(tmp_path / "saved")
    reloaded = load_policy(tmp_path / "saved")
    assert reloaded.prompts.history_length == 0
    assert reloaded.prompts.prompt_ids(context) == policy.prompts.prompt_ids(context)
    assert torch.allclose(reloaded.action_distribution([context])[0], policy.action_distribution([context])[0],
                          atol=1e-6)


def test_full_fine_tuning_changes_the_weights_and_the_choice(folder):
    policy = load_policy("smollm2", mode="choose", history_length=0)
    context = _context()
    before = policy.action_distribution([context])[0]
    decisions = policy.decide([context], greedy=True)
    weight = policy.model.model.layers[0].self_attn.q_proj.weight
    start = weight.detach().clone()
    _step(policy, decisions, lr=1e-5)
    assert not torch.equal(weight.detach(), start)
    after = policy.action_distribution([context])[0]
    assert after[decisions[0].choice] > before[decisions[0].choice]


def test_lora_changes_its_adapters_and_not_the_base_weights(folder):
    policy = load_policy("smollm2", mode="choose", history_length=0, lora={"r": 4, "alpha": 8})
    trainable = policy.named_trainable()
    # Every adapter trains (none silently frozen), in float32; nothing else does.
    assert trainable and all("lora_" in name for name in trainable)
    assert sum("lora_A" in n for n in trainable) == sum("lora_B" in n for n in trainable) == 30 * 7
    assert all(p.dtype == torch.float32 for p in trainable.values())
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in trainable.items()}
    _step(policy, policy.decide([_context()], greedy=True), lr=1e-3)
    changed = [n for n, p in policy.named_trainable().items() if not torch.equal(p.detach(), adapters[n])]
    # lora_B starts at zero, so one step moves every B; lora_A only once B is nonzero (its gradient is B^T ...).
    assert {n for n in trainable if "lora_B" in n} <= set(changed)
    assert all(torch.equal(p.detach(), base[n]) for n, p in policy.model.named_parameters() if not p.requires_grad)


def test_generate_mode_answers_through_the_chat_template_and_is_parsed(folder):
    policy = load_policy("smollm2", mode="generate", history_length=0, max_new_tokens=24)
    decision = policy.decide([_context()], greedy=True)[0]
    assert 1 <= len(decision.response_ids) <= 24 and len(decision.logprobs) == len(decision.response_ids)
    parsed = parse_response(decision.text)
    # Valid or not, the answer is parsed into an action or an error the invalid-action rate counts.
    assert (decision.action, decision.format_error) == (parsed.action, parsed.error)
    scored = policy.score([decision])
    assert scored.logprobs.dtype == torch.float32
    assert torch.allclose(scored.logprobs[0, : len(decision.logprobs)].detach(), torch.tensor(decision.logprobs),
                          atol=1e-3)


@pytest.mark.slow
def test_train_with_lora_then_evaluate_from_the_command_line(folder, tmp_path, capsys):
    from ptgpo_harness import cli

    out = tmp_path / "run"
    code = cli.main(["train", "--env", "ptgpo/FrozenLake-v0", "--model", "smollm2", "--algo", "grpo",
                     "--iterations", "1", "--group-size", "2", "--tasks", "1", "--eval-every", "1",
                     "--eval-episodes", "1", "--set", "env.max_steps=2", "--set", "policy.lora={r: 4, alpha: 8}",
                     "--set", "optim.micro_batch_size=2",
                     "--out", str(out), "--no-progress"])
    assert code == 0
    # The adapters are saved alone, naming the converted folder as their base: the run reloads anywhere
    # the model is installed.
    adapter = json.loads((out / "final_model" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(folder)
    assert json.loads((out / "config.json").read_text())["policy"]["model"] == "smollm2"
    capsys.readouterr()
    assert cli.main(["evaluate", str(out), "--episodes", "1", "--no-progress"]) == 0
    assert "success over 1 episodes" in capsys.readouterr().out


@pytest.mark.slow
def test_the_first_answers_script_records_what_the_model_writes(folder, tmp_path):
    from test_scripts import _script

    out = tmp_path / "answers.json"
    assert _script("first_answers").main(["--envs", "frozenlake", "--max-new-tokens", "4", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["env"], r["max_new_tokens"], r["greedy"]) for r in rows] == [("frozenlake", 4, True),
                                                                            ("frozenlake", 4, False)]
    for row in rows:
        parsed = parse_response(row["text"])
        assert 1 <= row["tokens"] <= 4 and (row["action"], row["error"]) == (parsed.action, parsed.error)
        assert row["has_action_tag"] == ("<action>" in row["text"].lower())


@pytest.mark.slow
def test_the_speed_benchmark_runs_at_a_toy_size(folder, tmp_path):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_smollm2.py"
    spec = importlib.util.spec_from_file_location("bench_smollm2", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_smollm2"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "bench.json"
    assert module.main(["--models", "smollm2", "--modes", "generate", "--tasks", "1", "--group-size", "1",
                        "--max-steps", "1", "--max-new-tokens", "4", "--threads", "1",
                        "--update-dtypes", "float32", "bfloat16", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["mode"], r["decisions"], r["update_dtype"]) for r in rows] == [
        ("smollm2", "generate", 1, "float32"), ("smollm2", "generate", 1, "bfloat16")]
    assert all(r["decisions_per_s"] > 0 and r["train_tokens"] > 0 and r["recompute_s"] > 0 for r in rows)


def test_under_bf16_compute_the_scores_and_the_ratio_are_float32(folder):
    from ptgpo_algos.updates.losses import ppo_clip_loss
    from ptgpo_algos.policy.precision import precision_for
    from ptgpo_algos.updates.updater import old_logprobs_mode

    # A GPU's precision rehearsed on the CPU: frozen weights and forward passes in bf16, trainable
    # weights in float32. The log-probabilities leave the output layer in float32, so the ratio
    # exp(log p - log p_old) is taken in float32 (in bf16 a log-ratio near 0 rounds to steps of 2^-8).
    policy = load_policy("smollm2", mode="choose", history_length=0, precision=precision_for("cuda", "bfloat16"))
    assert policy.autocast_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    decisions = policy.decide([_context()], greedy=True)
    scored = policy.score(decisions)
    assert scored.logprobs.dtype == torch.float32
    # Under bf16 the rollout's path (the prompt's cache, then the candidates) and the update's (shared
    # prefixes packed) round differently, so the trainer recomputes pi_old on the update's path there
    # (optim.old_logprobs: auto): with the same weights and path the ratio is 1.
    assert old_logprobs_mode("auto", elsewhere=False, float32_scores=policy.autocast_dtype is None) == "recompute"
    with torch.no_grad():
        old = policy.score(decisions).logprobs
    loss, _ = ppo_clip_loss(scored.logprobs, old, torch.ones(1))
    assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
    assert torch.allclose(scored.logprobs.detach(), old, atol=1e-5)
    rollout = torch.tensor([[d.choice_logprob] for d in decisions])
    assert torch.allclose(scored.logprobs.detach(), rollout, atol=0.1)  # bf16's rounding, not another policy
