"""Shared prefixes computed once: the token trie's packing and mask by hand, and scores, entropies and
gradients equal to computing every row whole, on the tiny model and on a random-init Qwen2 shape, in
both action modes; the update counts the tokens it computed."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import distributed_scenarios as scenarios
from ptgpo_algos.updates.settings import OptimConfig
from ptgpo_algos.records import Decision
from ptgpo_algos.policy.hf import CausalLMPolicy
from ptgpo_algos.policy.hf_scoring import shared_row_tokens
from ptgpo_algos.policy.shared_prefix import attention_mask, pack_prefix_tree
from ptgpo_algos.updates.samples import TrainingSample
from ptgpo_algos.updates.updater import ppo_update

ENV = "ptgpo/FrozenLake-v0"


# ----------------------------------------------------------------------------- the trie, by hand
def test_a_shared_prefix_is_one_run_of_tokens_and_each_token_sees_its_ancestors():
    packed = pack_prefix_tree([[1, 2, 3], [1, 5], [1, 2, 4], [1, 2, 3]], max_tokens=100)
    (row,) = packed.packed
    # Sorted: 1 2 3 | 1 2 4 | 1 5 -> the trie in pre-order: 1, 2, 3, 4 (under 2), 5 (under 1).
    assert row.tokens == [1, 2, 3, 4, 5]
    assert row.parents == [-1, 0, 1, 1, 0]
    assert row.positions == [0, 1, 2, 2, 1]
    assert packed.columns == [[0, 1, 2], [0, 4], [0, 1, 3], [0, 1, 2]]
    assert packed.rows == [0, 0, 0, 0] and packed.computed_tokens == 5
    mask = attention_mask(packed.packed, width=6)[0, 0].int().tolist()
    assert mask == [[1, 0, 0, 0, 0, 0],
                    [1, 1, 0, 0, 0, 0],
                    [1, 1, 1, 0, 0, 0],
                    [1, 1, 0, 1, 0, 0],  # 4 sees 1, 2 and itself, not its sibling 3
                    [1, 0, 0, 0, 1, 0],  # 5 sees 1 and itself
                    [0, 0, 0, 0, 0, 1]]  # padding sees itself only


def test_rows_hold_at_most_max_tokens_distinct_tokens():
    packed = pack_prefix_tree([[1, 2, 3], [1, 2, 4], [7, 8, 9, 10, 11], [1, 6]], max_tokens=4)
    # 1 2 3 + 4 fills a row; 1 6 starts the next (its prefix 1 is computed again there); a sequence
    # longer than the budget gets a row of its own.
    assert [row.tokens for row in packed.packed] == [[1, 2, 3, 4], [1, 6], [7, 8, 9, 10, 11]]
    assert packed.rows == [0, 0, 2, 1] and packed.computed_tokens == 11
    with pytest.raises(ValueError, match="max_tokens"):
        pack_prefix_tree([[1]], max_tokens=0)


def test_the_mask_is_the_ancestor_relation_of_random_tries():
    rng = random.Random(0)
    sequences = [[rng.randrange(3) for _ in range(rng.randrange(1, 7))] for _ in range(40)]
    packed = pack_prefix_tree(sequences, max_tokens=25)
    width = max(len(row.tokens) for row in packed.packed) + 2
    mask = attention_mask(packed.packed, width)
    for r, row in enumerate(packed.packed):
        for a in range(width):
            seen = {a}
            node = row.parents[a] if a < len(row.tokens) else -1
            while node >= 0:
                seen.add(node)
                node = row.parents[node]
            assert mask[r, 0, a].nonzero().flatten().tolist() == sorted(seen)
    for i, sequence in enumerate(sequences):  # every sequence is a path of its row
        row = packed.packed[packed.rows[i]]
        assert [row.tokens[c] for c in packed.columns[i]] == sequence
        assert [row.positions[c] for c in packed.columns[i]] == list(range(len(sequence)))


# ----------------------------------------------------------------------------- equal to whole rows
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0), env_ids=[ENV],
                            cache_dir=tmp_path_factory.mktemp("cache"))


def _qwen2_policy(mode: str, checkpointing: bool) -> CausalLMPolicy:
    model = scenarios.build_model("qwen2", seed=3)
    if checkpointing:
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=0, chat_template=None)
    return CausalLMPolicy(model, tokenizer, mode=mode, temperature=0.7)


def _decisions(mode: str, vocab: int, seed: int = 0) -> list[Decision]:
    """A tree's worth of rows: siblings with one prompt and different responses (or choices), prompts
    that share a system text and a history and then part, a row repeated, candidates sharing tokens."""
    rng = np.random.default_rng(seed)

    def tokens(n):
        return [int(t) for t in rng.integers(1, vocab, n)]

    system, history = tokens(9), tokens(5)
    prompts = [system + history + tokens(4), system + history + tokens(3), system + tokens(6), tokens(7)]
    decisions = []
    for k, prompt in enumerate(prompts + prompts[:2]):
        if mode == "choose":
            stem = tokens(2)
            candidates = [stem + tokens(2), stem + tokens(1), tokens(3)][: 2 + k % 2]
            decisions.append(Decision("", "", prompt, candidates[k % len(candidates)], [], 0.0, candidates,
                                      k % len(candidates), -1.0))
        else:
            response = tokens(3 + k % 3)
            decisions.append(Decision("", "", prompt, response, [-1.0] * len(response), 0.0))
    decisions.append(decisions[0])
    return decisions


def _scores_and_gradients(policy, decisions, share: bool):
    policy.share_prefixes = share
    policy.model.zero_grad(set_to_none=True)
    scored = policy.score(decisions)
    weights = torch.linspace(-1.0, 2.0, scored.logprobs.numel()).reshape(scored.logprobs.shape)
    ((scored.logprobs * weights * scored.mask).sum() + 0.3 * (scored.entropy * scored.mask).sum()).backward()
    grads = [p.grad.clone() for p in policy.parameters()]
    return scored, grads


@pytest.mark.parametrize("model", ["tiny", "qwen2", "qwen2-checkpointing"])
@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_shared_prefixes_give_the_scores_and_gradients_of_whole_rows(tiny_path, model, mode):
    if model == "tiny":
        from ptgpo_algos.policy import load_policy

        policy = load_policy(tiny_path, mode=mode, temperature=0.7)
        vocab = policy.model.config.vocab_size
    else:
        policy = _qwen2_policy(mode, checkpointing=model.endswith("checkpointing"))
        vocab = scenarios.ARCHITECTURES["qwen2"]["vocab_size"]
    decisions = _decisions(mode, vocab)
    whole, whole_grads = _scores_and_gradients(policy, decisions, share=False)
    shared, shared_grads = _scores_and_gradients(policy, decisions, share=True)
    assert torch.equal(shared.mask, whole.mask)
    assert torch.allclose(shared.logprobs, whole.logprobs, atol=1e-5)
    assert torch.allclose(shared.entropy, whole.entropy, atol=1e-5)
    error = math.sqrt(sum(float((a - b).pow(2).sum()) for a, b in zip(shared_grads, whole_grads)))
    norm = math.sqrt(sum(float(b.pow(2).sum()) for b in whole_grads))
    assert norm > 0 and error / norm < 1e-5, error / norm
    sequences = list({tuple(d.prompt_ids) + tuple(r) for d in decisions for r in (d.candidate_ids or [d.response_ids])})
    assert shared.computed_tokens == pack_prefix_tree(sequences, shared_row_tokens(sequences)).computed_tokens
    assert shared.computed_tokens < whole.computed_tokens


def test_the_update_counts_the_tokens_it_computed(tiny_path):
    from ptgpo_algos.policy import load_policy

    policy = load_policy(tiny_path, mode="generate")
    decisions = _decisions("generate", policy.model.config.vocab_size)[:-1]
    samples = [TrainingSample(d, a, 1.0) for d, a in zip(decisions, [0.5, -1.0, 0.3, 1.2, -0.7, 0.9])]
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=1.0, epochs=2, minibatch_size=64)
    stats = {}
    for share in (False, True):
        policy.share_prefixes = share
        optimizer = torch.optim.AdamW(list(policy.parameters()), lr=0.0)
        stats[share] = ppo_update(policy, optimizer, samples, optim, rng=np.random.default_rng(0))
    # Two epochs of one mini-batch: whole rows count every row's prompt and response, the trie its nodes.
    rows = [d.prompt_ids + d.response_ids for d in decisions]
    assert stats[False]["computed_tokens"] == 2 * sum(map(len, rows))
    assert stats[True]["computed_tokens"] == 2 * pack_prefix_tree(rows, shared_row_tokens(rows)).computed_tokens
    assert stats[True]["train_tokens"] == stats[False]["train_tokens"] == 2 * sum(map(len, rows))
    assert math.isclose(stats[True]["pg_loss"], stats[False]["pg_loss"], rel_tol=1e-5, abs_tol=1e-7)
