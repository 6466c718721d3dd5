"""Batching helpers of the transformers policy: padded rows, distinct rows, KV-cached forward passes
and token sampling on the model's device (:mod:`ptgpo_algos.policy.hf` and its scoring use them)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["DECODE_CACHES", "new_decode_cache", "device_generator", "distinct", "forward_with_cache", "left_pad",
           "position_ids", "right_pad", "sample_next"]

#: The KV caches decoding can use: ``dynamic`` grows by a token a step; ``static`` is allocated once at
#: the decode's full length, so every step has the same shapes (what CUDA graphs and torch.compile
#: need; uncompiled, it attends over the unfilled slots too, masked).
DECODE_CACHES = ("dynamic", "static")


def left_pad(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of ``rows`` padded on the left to one width (prompts: their last tokens align)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def distinct(items, key) -> tuple[list[int], list[int]]:
    """``(index, first)``: item ``i`` equals item ``first[index[i]]``. The rollouts of a group share
    their first context and often later ones (the states GiGPO anchors on), and the trainer puts
    steps with the same prompt in one mini-batch, so each distinct context is computed once."""
    seen: dict[Any, int] = {}
    index, first = [], []
    for i, item in enumerate(items):
        k = key(item)
        j = seen.get(k)
        if j is None:
            j = seen[k] = len(first)
            first.append(i)
        index.append(j)
    return index, first


def device_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """The generator token sampling draws from on ``device``: ``generator`` itself on a CPU; on an
    accelerator one of its own, seeded from ``generator``, so that a vocabulary's probabilities
    never cross to the host at every token (151,936 x rows floats a step)."""
    if device.type == "cpu" or generator is None:
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def sample_next(logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``logp`` (``(rows, vocabulary)`` log-probabilities), on ``logp``'s device
    (``generator`` from :func:`device_generator`)."""
    return torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)


def right_pad(rows: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of ``rows`` padded on the right to one width (whole prompt+response rows)."""
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted from its row's first real token (left padding sits at 0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def forward_with_cache(model, cache=None, **inputs):
    """Call ``model`` with a KV cache under the keyword its transformers version uses.

    Returns ``(logits, cache)`` (a decoder without its output layer: ``(hidden states, cache)``).
    transformers 5.x renamed ``past_key_values`` to ``cache``.
    """
    # A peft model passes keywords through to its base model, whose name for the cache counts.
    names = _cache_names(type(model.get_base_model() if hasattr(model, "get_base_model") else model))
    if cache is not None:
        inputs[names[0]] = cache
    out = model(**inputs)
    first = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return first, getattr(out, names[1], None)


def new_decode_cache(model, kind: str, length: int):
    """A fresh KV cache of ``kind`` (:data:`DECODE_CACHES`) for decoding up to ``length`` tokens with
    ``model`` (a transformers model, not a peft wrapper); None for ``dynamic``, which the model makes."""
    if kind not in DECODE_CACHES:
        raise ValueError(f"decode cache: one of {', '.join(DECODE_CACHES)}, got {kind!r}")
    if kind == "dynamic":
        return None
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=int(length))


_CACHE_NAMES: dict[type, tuple[str, str]] = {}


def _cache_names(model_type: type) -> tuple[str, str]:
    if model_type not in _CACHE_NAMES:
        import inspect

        new = "cache" in inspect.signature(model_type.forward).parameters
        _CACHE_NAMES[model_type] = ("cache", "cache") if new else ("past_key_values", "past_key_values")
    return _CACHE_NAMES[model_type]
