"""The weight stream of a sync: bounded messages, tensors cut across them and put back exactly, over the
real socket with a worker thread standing in for the engine's worker (the engine itself is in
tests/test_vllm_backend.py)."""

from __future__ import annotations

import threading

import pytest
import torch

from ptgpo_algos.policy.weight_stream import WeightSender, assemble, receive_weights, weight_messages


def _weights():
    torch.manual_seed(0)
    return [
        ("embed.weight", torch.randn(37, 11)),
        ("norm.weight", torch.randn(11).to(torch.bfloat16)),
        ("empty.bias", torch.zeros(0)),
        ("layer.weight", torch.randn(5, 3)),
        ("step", torch.tensor(7, dtype=torch.int64)),
    ]


@pytest.mark.parametrize("limit", [1, 7, 64, 1000, 10**9])
def test_messages_stay_within_the_limit_and_reassemble_exactly(limit):
    weights = _weights()
    messages = list(weight_messages(iter(weights), limit))
    assert all(sum(p.size for p in pieces) <= limit for pieces, _ in messages)
    total = sum(t.numel() * t.element_size() for _, t in weights)
    assert len(messages) == -(-total // limit)  # every message full but the last
    back = list(assemble(messages))
    assert [name for name, _ in back] == [name for name, _ in weights]
    for (_, a), (_, b) in zip(back, weights):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_weights_are_cast_to_the_engines_dtype_but_integers_are_not():
    back = dict(assemble(weight_messages(iter(_weights()), 100, dtype=torch.bfloat16)))
    assert back["embed.weight"].dtype == torch.bfloat16
    assert torch.equal(back["embed.weight"], _weights()[0][1].to(torch.bfloat16))
    assert back["step"].dtype == torch.int64 and int(back["step"]) == 7


def test_a_stream_cut_inside_a_tensor_is_refused():
    messages = list(weight_messages(iter(_weights()), 50))
    with pytest.raises(ValueError, match="ended inside"):
        list(assemble(messages[:3]))


@pytest.mark.parametrize("receivers", [1, 2])
def test_the_socket_carries_the_stream_to_every_worker(receivers):
    weights = _weights()
    sender = WeightSender(receivers=receivers)
    got: list[list] = [[] for _ in range(receivers)]

    def worker(k):  # what each engine worker does inside reload_weights
        got[k] = list(receive_weights(sender.address, sender.authkey))

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(receivers)]
    for thread in workers:
        thread.start()
    sender.serve(weight_messages(iter(weights), 40))
    for thread in workers:
        thread.join(timeout=30)
    sender.close()
    assert sender.error is None and sender.messages >= 10
    assert sender.bytes == sum(t.numel() * t.element_size() for _, t in weights)
    for received in got:
        assert [n for n, _ in received] == [n for n, _ in weights]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(received, weights))


def test_a_failing_export_reaches_the_caller_and_the_worker():
    def broken():
        yield "embed.weight", torch.randn(4, 4)
        raise RuntimeError("export failed")

    sender = WeightSender()
    errors = []

    def worker():
        try:
            list(receive_weights(sender.address, sender.authkey))
        except (EOFError, OSError, ValueError) as error:
            errors.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    sender.serve(weight_messages(broken(), 16))
    thread.join(timeout=30)
    sender.close()
    assert isinstance(sender.error, RuntimeError) and errors  # the worker saw the stream break off


def test_tied_weights_travel_once_and_reach_the_loader_under_both_names():
    from ptgpo_algos.policy.weight_stream import with_aliases

    embedding = torch.randn(6, 3)
    weights = [("model.embed_tokens.weight", embedding), ("model.norm.weight", torch.ones(3))]
    received = list(with_aliases(assemble(weight_messages(iter(weights), 32)),
                                 {"lm_head.weight": "model.embed_tokens.weight"}))
    assert [name for name, _ in received] == ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"]
    assert received[1][1] is received[0][1] and torch.equal(received[1][1], embedding)


# ----------------------------------------------------------------------------------------- a whole model
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0), env_ids=["ptgpo/FrozenLake-v0"],
                            cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("lora", [None, {"r": 4}])
def test_a_model_synced_in_many_small_messages_scores_as_the_trainer(tiny_path, lora):
    """What a vLLM sync does, with another transformers model as the receiver: the trainer's weights
    (a LoRA policy's merged into copies) cut into 4 KiB messages over the socket, tied weights sent
    once and aliased on arrival."""
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.weight_stream import with_aliases

    trainer = load_policy(tiny_path, mode="generate", lora=lora)
    receiver = load_policy(tiny_path, mode="generate")
    with torch.no_grad():  # the trainer has moved away from the weights both started from
        for parameter in trainer.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    aliases = trainer.tied_weights()
    assert aliases == {"lm_head.weight": "model.embed_tokens.weight"}
    sent = ((name, tensor) for name, tensor in trainer.export_weights() if name not in aliases)
    sender = WeightSender()
    worker = threading.Thread(target=lambda: receiver.load_weights(
        with_aliases(receive_weights(sender.address, sender.authkey), aliases)))
    worker.start()
    sender.serve(weight_messages(sent, 4096))
    worker.join(timeout=60)
    sender.close()
    assert sender.error is None and sender.messages > 50
    embedding = receiver.model.get_input_embeddings().weight
    assert sender.bytes == sum(t.numel() * t.element_size() for t in receiver.model.state_dict().values()) \
        - embedding.numel() * embedding.element_size()  # the tied output layer travelled once
    prompts, responses = [[5, 9, 13, 2, 7]], [[11, 4, 6]]
    expected = trainer.response_logprobs(prompts, responses)[0]
    assert receiver.response_logprobs(prompts, responses)[0] == pytest.approx(expected, abs=1e-5)
    assert load_policy(tiny_path, mode="generate").response_logprobs(prompts, responses)[0] != \
        pytest.approx(expected, abs=1e-3)
