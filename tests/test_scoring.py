"""Scoring at scale on the CPU: the chunked output layer, precision (fp32 weights under bf16 compute),
the packed candidates' temperature, entropy without gradients, and the LoRA reference without a copy."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ptgpo_algos.policy import Context, load_policy
from ptgpo_algos.policy.precision import Precision, precision_for
from ptgpo_algos.policy.token_logprobs import token_logprobs

ENV = "ptgpo/FrozenLake-v0"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(seed=5, pretrain_steps=0), env_ids=[ENV],
                            cache_dir=tmp_path_factory.mktemp("cache"))


def _context(actions=("go left", "go right", "go up", "go down")):
    return Context(task="Walk across the frozen lake to the goal G.",
                   observation="You stand on the start S.\nP F F\nF H F\nF F G", admissible_actions=list(actions))


# ----------------------------------------------------------------------------- the chunked output layer
def test_token_logprobs_match_a_full_log_softmax_and_its_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(9, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(13, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 13, (9,))
    logp, entropy = token_logprobs(hidden, weight, targets, bias=bias, temperature=0.6, chunk=4)
    full = F.log_softmax((hidden @ weight.T + bias) / 0.6, dim=-1)
    assert torch.allclose(logp, full.gather(-1, targets[:, None]).squeeze(-1), atol=1e-12)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-12)
    # Both outputs' gradients, through the hand-derived backward, against finite differences.
    assert torch.autograd.gradcheck(
        lambda h, w, b: token_logprobs(h, w, targets, bias=b, temperature=0.6, chunk=4), (hidden, weight, bias))


def test_token_logprobs_entropy_gradient_only_when_used():
    torch.manual_seed(1)
    hidden = torch.randn(5, 4, requires_grad=True)
    weight = torch.randn(7, 4)
    targets = torch.randint(0, 7, (5,))
    logp, entropy = token_logprobs(hidden, weight, targets, chunk=2)
    logp.sum().backward()
    alone = hidden.grad.clone()
    hidden.grad = None
    reference = F.log_softmax(hidden @ weight.T, dim=-1).gather(-1, targets[:, None]).sum()
    reference.backward()
    assert torch.allclose(alone, hidden.grad, atol=1e-6)  # the entropy output added nothing
    assert not weight.requires_grad and entropy.shape == (5,)


def test_generate_scores_never_form_the_full_logits(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=10)
    decisions = policy.decide([_context(), _context(("go up",))], generator=torch.Generator().manual_seed(0))
    vocabulary = policy.model.config.vocab_size
    positions = sum(len(d.prompt_ids) + len(d.response_ids) for d in decisions)
    head_calls, largest = [], [0]
    hook = policy.model.lm_head.register_forward_hook(lambda *args: head_calls.append(1))

    def pack(tensor):
        if tensor.dim() >= 2 and tensor.shape[-1] == vocabulary:
            largest[0] = max(largest[0], tensor.numel() // vocabulary)
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            scored = policy.score(decisions)
    finally:
        hook.remove()
    assert not head_calls  # the output layer's weight is used directly, chunk by chunk
    assert largest[0] <= sum(len(d.response_ids) for d in decisions) < positions
    for i, d in enumerate(decisions):
        assert torch.allclose(scored.logprobs[i, : len(d.response_ids)].detach(), torch.tensor(d.logprobs), atol=1e-4)


def test_entropy_is_scored_without_gradients_when_its_coefficient_is_zero(tiny_path):
    for mode in ("generate", "choose"):
        policy = load_policy(tiny_path, mode=mode, max_new_tokens=6)
        decisions = policy.decide([_context()], generator=torch.Generator().manual_seed(2))
        scored = policy.score(decisions, entropy_grad=False)
        assert scored.logprobs.requires_grad and not scored.entropy.requires_grad
        assert policy.score(decisions).entropy.requires_grad


# ----------------------------------------------------------------------------- temperature
def test_packed_and_cached_candidates_agree_at_a_temperature_other_than_one(tiny_path):
    # Under gradient checkpointing (the GPU default) choose mode scores candidates as packed full
    # sequences; the policy's temperature must apply once, to the softmax over the candidates' scores.
    contexts = [_context(), _context(("go left", "go down"))]
    for temperature in (0.5, 2.0):
        cached = load_policy(tiny_path, mode="choose", temperature=temperature)
        packed = load_policy(tiny_path, mode="choose", temperature=temperature, gradient_checkpointing=True)
        for a, b in zip(cached.action_distribution(contexts), packed.action_distribution(contexts)):
            assert torch.allclose(a, b, atol=1e-5)
        decisions = cached.decide(contexts, generator=torch.Generator().manual_seed(0))
        expected = torch.tensor([[d.choice_logprob] for d in decisions])
        assert torch.allclose(packed.score(decisions).logprobs.detach(), expected, atol=1e-5)


# ----------------------------------------------------------------------------- precision
def test_precision_table():
    assert precision_for("cuda", "auto") == Precision("float32", "bfloat16", "bfloat16")
    assert precision_for("cuda:1", "bfloat16").compute == "bfloat16"
    assert precision_for("cuda", "float32") == Precision("float32", "float32", None)
    # CPUs compute in float32 whatever the dtype says (bf16 matmuls run several times slower there).
    assert precision_for("cpu", "bfloat16") == Precision("float32", "float32", None)
    assert precision_for("cpu", "auto").compute == "float32"
    with pytest.raises(ValueError, match="dtype"):
        precision_for("cpu", "int8")


def _adamw_step_changes(policy, lr=1e-6) -> float:
    """The fraction of trainable entries one AdamW step at ``lr`` changes."""
    decisions = policy.decide([_context(), _context(("go left", "go down"))], generator=torch.Generator().manual_seed(1))
    before = [p.detach().clone() for p in policy.parameters()]
    optimizer = torch.optim.AdamW(list(policy.parameters()), lr=lr, weight_decay=0.0)
    (-policy.score(decisions).logprobs.sum()).backward()
    optimizer.step()
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(policy.parameters(), before))
    with_gradient = sum(int((p.grad != 0).sum()) for p in policy.parameters())
    return changed / with_gradient


def test_a_bf16_configured_model_learns_at_lr_1e_6(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=6, dtype="bfloat16")
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert _adamw_step_changes(policy) > 0.99
    # The GPU's recipe rehearsed on the CPU: fp32 weights, forward passes under bf16 autocast.
    gpu = load_policy(tiny_path, mode="generate", max_new_tokens=6, precision=precision_for("cuda", "bfloat16"))
    assert gpu.autocast_dtype == torch.bfloat16 and all(p.dtype == torch.float32 for p in gpu.parameters())
    with gpu.computing():
        assert gpu.model.model.layers[0].mlp.down_proj(torch.ones(1, 256)).dtype == torch.bfloat16
    assert _adamw_step_changes(gpu) > 0.99
    # What the trainer did before: the weights themselves in bf16. Most updates round away.
    bare = load_policy(tiny_path, mode="generate", max_new_tokens=6)
    bare.model.to(torch.bfloat16)
    assert _adamw_step_changes(bare) < 0.2


def test_lora_keeps_a_frozen_bf16_base_with_fp32_adapters(tiny_path):
    policy = load_policy(tiny_path, mode="choose", lora={"r": 4, "alpha": 8},
                         precision=precision_for("cuda", "bfloat16"))
    trainable = policy.named_trainable()
    assert trainable and all(p.dtype == torch.float32 for p in trainable.values())
    frozen = [p for p in policy.model.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    assert _adamw_step_changes(policy, lr=1e-6) > 0.99


# ----------------------------------------------------------------------------- the KL reference
def test_lora_reference_is_the_base_through_disable_adapter(tiny_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=8, lora={"r": 4, "alpha": 8})
    base = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    reference = policy.reference_policy()
    assert reference.model is policy.model  # no copy of the model
    with torch.no_grad():
        for name, parameter in policy.named_trainable().items():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    decisions = base.decide([_context(), _context(("go up",))], generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = base.score(decisions).logprobs
        assert torch.allclose(reference.score(decisions).logprobs, expected, atol=1e-5)
        assert not torch.allclose(policy.score(decisions).logprobs, expected, atol=1e-3)
    # Exporting merges the adapters into copies: the model's own base weights are untouched.
    base_weights = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    exported = dict(policy.export_weights())
    for name, parameter in policy.model.named_parameters():
        if not parameter.requires_grad:
            assert torch.equal(parameter, base_weights[name])
    merged = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    merged.load_weights(iter(exported.items()))
    with torch.no_grad():
        assert torch.allclose(merged.score(decisions).logprobs, policy.score(decisions).logprobs, atol=1e-5)


def test_full_model_reference_is_a_frozen_copy(tiny_path):
    policy = load_policy(tiny_path, mode="choose")
    reference = policy.reference_policy()
    assert reference.model is not policy.model
    assert not any(p.requires_grad for p in reference.model.parameters())
    assert math.isclose(sum(p.numel() for p in reference.model.parameters()),
                        sum(p.numel() for p in policy.model.parameters()))


# ----------------------------------------------------------------------------- saved models
def test_a_lora_policy_saves_its_float32_adapters_and_loads_them_back_on_its_base(tiny_path, tmp_path):
    policy = load_policy(tiny_path, mode="generate", max_new_tokens=8, lora={"r": 4, "alpha": 8},
                         precision=precision_for("cuda", "bfloat16"))
    with torch.no_grad():
        for name, parameter in policy.named_trainable().items():
            if "lora_B" in name:
                parameter.normal_(0.0, 1e-4)  # a small trained delta: a bf16 merge would round most of it away
    policy.save_pretrained(tmp_path / "final_model")
    files = {p.name for p in (tmp_path / "final_model").iterdir()}
    assert "adapter_config.json" in files and "model.safetensors" not in files  # no merged copy of the base
    loaded = load_policy(tmp_path / "final_model", mode="generate", max_new_tokens=8,
                         precision=precision_for("cuda", "bfloat16"))
    assert loaded.has_adapters and loaded.max_new_tokens == 8
    saved = {n.replace(".default", ""): p for n, p in policy.named_trainable().items()}
    restored = {n.replace(".default", ""): p for n, p in loaded.named_trainable().items()}
    assert saved.keys() == restored.keys() and all(p.dtype == torch.float32 for p in restored.values())
    assert all(torch.equal(saved[n].detach(), restored[n].detach()) for n in saved)
    frozen = [p for p in loaded.model.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)


def test_adapters_without_a_base_name_are_refused_naming_the_file(tmp_path):
    folder = tmp_path / "adapters"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"r": 4}')
    with pytest.raises(ValueError, match=r"adapter_config.json: names no base_model_name_or_path"):
        load_policy(folder, mode="generate")


def test_a_fully_trained_policy_is_saved_at_its_compute_dtype(tiny_path, tmp_path):
    from safetensors import safe_open

    gpu = load_policy(tiny_path, mode="generate", max_new_tokens=6, precision=precision_for("cuda", "bfloat16"))
    gpu.save_pretrained(tmp_path / "bf16")
    cpu = load_policy(tiny_path, mode="generate", max_new_tokens=6)
    cpu.save_pretrained(tmp_path / "fp32")
    for folder, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        with safe_open(str(tmp_path / folder / "model.safetensors"), "pt") as handle:
            assert {handle.get_tensor(k).dtype for k in handle.keys()} == {dtype}
    assert all(p.dtype == torch.float32 for p in gpu.parameters())  # the masters stay float32
    reloaded = load_policy(tmp_path / "bf16", mode="generate")
    expected = {n: p.detach().to(torch.bfloat16).float() for n, p in gpu.named_trainable().items()}
    assert all(torch.equal(p.detach(), expected[n]) for n, p in reloaded.named_trainable().items())


# ----------------------------------------------------------------------------- the sync check's floor
def test_the_transformers_sync_statistic_is_rounding_in_float32_and_larger_under_bf16(tiny_path):
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], [11, 12, 13, 14]]
    cpu = load_policy(tiny_path, mode="generate", max_new_tokens=8)
    report = cpu.verify_sync(cpu, prompts, max_tokens=32)
    assert [len(t) for t in report.tokens] == [32, 32, 32]
    assert report.mean_logprob_diff < 1e-4
    bf16 = load_policy(tiny_path, mode="generate", max_new_tokens=8, precision=precision_for("cuda", "bfloat16"))
    bf16.autocast_dtype = torch.bfloat16  # the GPU's compute dtype, rehearsed on the CPU
    noisy = bf16.verify_sync(cpu, prompts, max_tokens=32)
    assert noisy.mean_logprob_diff > 10 * report.mean_logprob_diff


# ----------------------------------------------------------------------------- rollouts under autocast
class _WeightCasts:
    """Counts the casts made of ``parameters``' storage while active (``aten::_to_copy``; in inference
    mode the dispatcher shows them as ``aten::to``)."""

    def __init__(self, parameters):
        self.storages = {p.untyped_storage().data_ptr() for p in parameters}
        self.count = 0

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                source = args[0] if args else None
                if (func.overloadpacket in (torch.ops.aten._to_copy, torch.ops.aten.to)
                        and isinstance(source, torch.Tensor)
                        and source.untyped_storage().data_ptr() in counter.storages):
                    counter.count += 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


@pytest.mark.parametrize("mode", ["generate", "choose"])
def test_rollouts_under_autocast_cast_each_weight_once_not_at_every_token(tiny_path, mode):
    # The GPU recipe rehearsed on the CPU: float32 weights, forward passes under bf16 autocast.
    policy = load_policy(tiny_path, mode=mode, max_new_tokens=8, min_new_tokens=8,
                         precision=precision_for("cuda", "bfloat16"))
    weights = [p for p in policy.model.parameters() if p.dtype == torch.float32]
    with _WeightCasts(weights) as casts:
        policy.decide([_context(), _context(("go up",))], generator=torch.Generator().manual_seed(0))
    # Each weight at most once per call (autocast's cache), whatever the number of decoded tokens;
    # in inference mode autocast keeps no cache and generate mode cast every weight 9 times.
    assert 0 < casts.count <= len(weights)
    if mode == "choose":
        with _WeightCasts(weights) as casts:
            policy.action_distribution([_context()])
        assert 0 < casts.count <= len(weights)


def _random_qwen2_policy(tiny_path, **settings):
    """The tiny model's tokenizer on a random-init Qwen2 of another shape (GQA, q/k/v biases, untied head)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ptgpo_algos.policy.hf import CausalLMPolicy, load_tokenizer

    tokenizer = load_tokenizer(tiny_path)
    torch.manual_seed(11)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=96, intermediate_size=160,
                                         num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                                         tie_word_embeddings=False, max_position_embeddings=4096))
    return CausalLMPolicy(model, tokenizer, mode="generate", **settings)


@pytest.mark.parametrize("model", ["tiny", "qwen2"])
@pytest.mark.parametrize("gpu_recipe", [False, True])
def test_static_cache_decoding_gives_the_reference_decodings_tokens_and_logprobs(tiny_path, model, gpu_recipe):
    settings = {"max_new_tokens": 10, "min_new_tokens": 6}
    if gpu_recipe:  # fp32 weights under bf16 autocast, as on a GPU
        settings.update(autocast_dtype="bfloat16", frozen_dtype="bfloat16")
    contexts = [_context(), _context(("go up",)), _context(("go left", "go down"))]
    decisions = {}
    for cache in ("dynamic", "static"):
        policy = (load_policy(tiny_path, mode="generate", decode_cache=cache, **settings) if model == "tiny"
                  else _random_qwen2_policy(tiny_path, decode_cache=cache, **settings))
        sampled = policy.decide(contexts, generator=torch.Generator().manual_seed(3))
        greedy = policy.decide(contexts[:2], greedy=True)
        decisions[cache] = sampled + greedy
    for reference, static in zip(decisions["dynamic"], decisions["static"]):
        assert static.response_ids == reference.response_ids and len(reference.response_ids) >= 6
        assert static.logprobs == pytest.approx(reference.logprobs, abs=1e-5)
    with pytest.raises(ValueError, match="decode_cache: one of dynamic, static"):
        load_policy(tiny_path, mode="generate", decode_cache="paged")


def test_the_decode_cache_is_a_checked_setting_that_the_built_policy_uses(tiny_path):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.policy.backends import build_policy

    with pytest.raises(ValueError, match="policy.decode_cache"):
        TrainConfig.from_dict({"policy": {"decode_cache": "paged"}})
    config = TrainConfig.from_dict({"policy": {"model": str(tiny_path), "mode": "generate", "decode_cache": "static"}})
    assert build_policy(config, "cpu").decode_cache == "static"


# ----------------------------------------------------------------------------- the rollouts' own dtype
def _linear_output_dtypes(policy, call):
    """The dtypes the model's linear layers compute at during ``call()``."""
    seen = set()
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
             for m in policy.model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        call()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_a_bf16_rollout_dtype_plays_in_bf16_and_scores_the_update_in_float32(tiny_path, mode):
    fp32 = load_policy(tiny_path, mode=mode, max_new_tokens=6, min_new_tokens=6)
    bf16 = load_policy(tiny_path, mode=mode, max_new_tokens=6, min_new_tokens=6, rollout_dtype="bfloat16")
    contexts = [_context(), _context(("go up",))]
    assert _linear_output_dtypes(bf16, lambda: bf16.decide(contexts, greedy=True)) == {torch.bfloat16}
    assert _linear_output_dtypes(fp32, lambda: fp32.decide(contexts, greedy=True)) == {torch.float32}
    played = bf16.decide(contexts, greedy=True)
    scored = {}
    for name, policy in (("bf16", bf16), ("fp32", fp32)):
        assert _linear_output_dtypes(policy, lambda: scored.__setitem__(name, policy.score(played))) == {torch.float32}
    # The update's scores (pi_old recomputed, the ratio's terms) are float32 whatever the rollouts ran at.
    assert scored["bf16"].logprobs.dtype == torch.float32
    assert torch.equal(scored["bf16"].logprobs, scored["fp32"].logprobs)
    recorded = torch.tensor([[d.choice_logprob] for d in played] if mode == "choose"
                            else [d.logprobs for d in played])
    drift = (recorded - scored["bf16"].logprobs.detach()).abs().max()
    assert 0 < drift < 0.1  # bf16's rounding, not another policy
    if mode == "choose":
        assert _linear_output_dtypes(bf16, lambda: bf16.action_distribution(contexts)) == {torch.bfloat16}
    float32_rollouts = load_policy(tiny_path, mode=mode, rollout_dtype="float32",
                                   precision=precision_for("cuda", "bfloat16"))
    assert float32_rollouts.autocast_dtype == torch.bfloat16 and float32_rollouts.rollout_autocast_dtype is None


def test_a_bf16_rollout_dtype_makes_the_trainer_recompute_pi_old():
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.policy.precision import float32_rollouts
    from ptgpo_algos.updates.updater import old_logprobs_mode

    def pi_old(device, dtype, rollout_dtype):
        float32_scores = float32_rollouts(precision_for(device, dtype), rollout_dtype)  # as Trainer.build_updater
        return old_logprobs_mode("auto", elsewhere=False, float32_scores=float32_scores)

    # Rollouts in float32 are the trainer's own scores; in bf16 they are not, so pi_old is recomputed.
    assert [pi_old("cpu", "auto", r) for r in (None, "float32", "bfloat16")] == ["rollout", "rollout", "recompute"]
    assert [pi_old("cuda", "bfloat16", r) for r in (None, "float32")] == ["recompute", "recompute"]
    with pytest.raises(ValueError, match="policy.rollout_dtype: 'float16' is not valid"):
        TrainConfig.from_dict({"policy": {"rollout_dtype": "float16"}})


def test_cpu_autocast_gives_a_cpu_the_gpus_precision_with_float32_weights_and_scores(tiny_path):
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.policy.precision import float32_rollouts
    from ptgpo_algos.updates.updater import old_logprobs_mode

    assert precision_for("cpu", "auto", cpu_autocast=True) == Precision("float32", "bfloat16", "bfloat16")
    assert precision_for("cpu", "bfloat16", cpu_autocast=True) == precision_for("cuda", "bfloat16")
    assert precision_for("cpu", "auto") == Precision("float32", "float32", None)  # off: float32, as before
    with pytest.raises(ValueError, match="policy.cpu_autocast: true computes in bfloat16, which policy.dtype: float32"):
        TrainConfig.from_dict({"policy": {"cpu_autocast": True, "dtype": "float32"}})
    with pytest.raises(ValueError, match="policy.cpu_autocast"):
        TrainConfig.from_dict({"policy": {"cpu_autocast": "yes"}})

    config = TrainConfig.from_dict({"env_id": ENV, "model": str(tiny_path), "mode": "choose",
                                    "policy": {"cpu_autocast": True}})
    policy = build_policy(config, "cpu")
    assert policy.autocast_dtype == torch.bfloat16 and policy.rollout_autocast_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    played = policy.decide([_context(), _context(("go up", "go down"))], generator=torch.Generator().manual_seed(0))
    # The update's forward and backward in bf16, its log-probabilities (the ratio's terms) in float32.
    scored = {}
    assert _linear_output_dtypes(policy, lambda: scored.__setitem__("s", policy.score(played))) == {torch.bfloat16}
    assert scored["s"].logprobs.dtype == torch.float32
    assert _adamw_step_changes(policy) > 0.99
    # Rollouts under autocast are not the update's float32 scores: pi_old is recomputed at its precision.
    float32_scores = float32_rollouts(precision_for("cpu", "auto", True), config.policy.rollout_dtype)
    assert old_logprobs_mode("auto", elsewhere=False, float32_scores=float32_scores) == "recompute"
