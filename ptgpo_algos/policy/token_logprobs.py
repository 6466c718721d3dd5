"""Log-probabilities and entropies of given tokens through the output layer, a chunk of positions at a time.

A score needs, at each response position, ``log_softmax(hidden @ W.T / T)`` at one token. Taking the
logits of a whole batch at once holds a (positions x vocabulary) tensor, 0.6 MB a position in
float32 at Qwen2.5's 151,936 tokens, several times over: the logits, their float copy, the
log-softmax, its exponential, the gradient. :func:`token_logprobs` sends ``chunk`` positions at a
time through the output layer instead. The forward keeps no logits; the backward recomputes one
chunk's logits at a time from the saved hidden states, so at most one chunk's (chunk x vocabulary)
tensors are alive, in the forward or the backward.

Gradients (with ``z = logits / T``, ``p = softmax(z)``, ``y`` the given token):

* log-probability ``z_y - logsumexp(z)``: ``d/dz = onehot(y) - p``;
* entropy ``H = logsumexp(z) - sum(p * z)``: ``d/dz = -p * (z - sum(p * z))``;

then ``d/dlogits = d/dz / T``, ``d/dhidden = g @ W`` and ``d/dW = g.T @ hidden``. The entropy's
backward runs only when a loss uses it (an entropy bonus): with coefficient 0 its gradient is never
formed.

The matrix products run in ``compute_dtype`` (bf16 on GPUs, as autocast would run the output layer)
and everything after them in float32.
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs"]


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  temperature: float) -> torch.Tensor:
    logits = hidden.to(weight.dtype) @ weight.T
    if bias is not None:
        logits = logits + bias.to(logits.dtype)
    return logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, compute_dtype):
        with torch.autocast(hidden.device.type, enabled=False):
            cast = weight.to(compute_dtype)
            count = hidden.shape[0]
            out = torch.promote_types(compute_dtype, torch.float32)
            logp = torch.empty(count, dtype=out, device=hidden.device)
            entropy = torch.empty(count, dtype=out, device=hidden.device)
            for start in range(0, count, chunk):
                stop = min(count, start + chunk)
                z = _chunk_logits(hidden[start:stop], cast, bias, temperature)
                lse = torch.logsumexp(z, dim=-1)
                logp[start:stop] = z.gather(-1, targets[start:stop, None]).squeeze(-1) - lse
                entropy[start:stop] = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
                del z
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.settings = (temperature, chunk, compute_dtype)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets = ctx.saved_tensors
        temperature, chunk, compute_dtype = ctx.settings
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        with torch.autocast(hidden.device.type, enabled=False):
            cast = weight.to(compute_dtype)
            grad_hidden = torch.empty_like(hidden) if need_hidden else None
            out = torch.promote_types(compute_dtype, torch.float32)
            grad_weight = torch.zeros(weight.shape, dtype=out, device=weight.device) if need_weight else None
            grad_bias = torch.zeros(weight.shape[0], dtype=out, device=weight.device) if need_bias else None
            for start in range(0, hidden.shape[0], chunk):
                stop = min(hidden.shape[0], start + chunk)
                z = _chunk_logits(hidden[start:stop], cast, bias, temperature)
                p = torch.softmax(z, dim=-1)
                g = torch.zeros_like(z)
                if grad_logp is not None:
                    g -= p * grad_logp[start:stop, None]
                    g.scatter_add_(-1, targets[start:stop, None], grad_logp[start:stop, None].to(g.dtype))
                if grad_entropy is not None:
                    centred = z - (p * z).sum(-1, keepdim=True)
                    g -= p * centred * grad_entropy[start:stop, None]
                    del centred
                del z, p
                g /= temperature
                g_cast = g.to(compute_dtype)
                if need_hidden:
                    grad_hidden[start:stop] = (g_cast @ cast).to(hidden.dtype)
                if need_weight:
                    grad_weight += g_cast.T @ hidden[start:stop].to(compute_dtype)
                if need_bias:
                    grad_bias += g.sum(0)
                del g, g_cast
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk: int = 512,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(targets), entropy)`` in float32, shape ``(N,)``, of ``softmax(hidden @ weight.T / T)``.

    ``hidden``: ``(N, H)`` hidden states at the positions that predict ``targets`` (``(N,)`` token
    ids); ``weight``: the output layer's ``(V, H)`` matrix (``bias``: its ``(V,)`` bias, if any).
    Gradients flow to ``hidden``, ``weight`` and ``bias`` as far as they require them.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be (N, H) and targets (N,), got {tuple(hidden.shape)} and "
                         f"{tuple(targets.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32) + 0.0 * hidden.sum()
        return empty, empty
    return _TokenLogprobs.apply(hidden, weight, bias, targets.long(), float(temperature), int(chunk),
                                compute_dtype or weight.dtype)
