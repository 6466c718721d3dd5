"""The trainer's loss terms as pure functions on tensors (verl ``core_algos`` style), the built-in
policy-gradient losses that ``algorithm.loss`` names (their registry, :data:`~ptgpo_algos.updates.loss_registry.LOSSES`,
and how to add one: :mod:`ptgpo_algos.updates.loss_registry`), and the update's whole loss (:class:`PolicyLoss`).

Shapes: ``(batch, units)`` where a unit is a response token (``generate`` mode) or the single choice
among candidates (``choose`` mode). ``mask`` marks real units; ``weight`` (``(batch,)``) counts how
many trajectories go through each step, since a step shared by several leaves of a prefix tree is
trained once. Aggregation is the token mean: every real unit of every step counts ``weight`` times,
divided by the weighted number of units.

The update (:class:`PolicyLoss`) weighs a registered loss's per-unit term by the importance weights,
aggregates it, and adds the entropy bonus and the KL term, so ``optim.entropy_coef`` and
``optim.kl_coef`` act on every loss alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

# The registry's names stay importable here too: a plugin written against this module registers through it.
from ptgpo_algos.updates.loss_registry import (COMMON_LOSS_KEYS, LOSS_AGGREGATIONS, LOSSES, LossSpec,  # noqa: F401
                                               get_loss, register_loss)

__all__ = ["LOG_RATIO_LIMIT", "PolicyLoss", "low_var_kl", "policy_loss", "ppo_clip_loss", "weighted_token_mean"]

#: Log-ratios ``log pi - log pi_old`` are clamped to [-20, 20] before ``exp`` (as verl does).
LOG_RATIO_LIMIT = 20.0


def weighted_token_mean(
    values: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor, total_units: float | None = None
) -> torch.Tensor:
    """``sum(values * mask * weight) / sum(mask * weight)``, with ``weight`` broadcast over units.

    ``total_units`` replaces the denominator when rows known to contribute zero were left out.
    """
    w = mask * weight[:, None]
    denominator = w.sum() if total_units is None else torch.as_tensor(float(total_units))
    return (values * w).sum() / denominator.clamp(min=1e-8)


def ppo_clip_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, clip_ratio: float = 0.2,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-unit PPO-clip loss ``-min(r A, clip(r, 1-e, 1+e) A)`` and whether it was clipped.

    ``advantages`` has shape ``(batch,)`` (one advantage per step, shared by its units) or ``(batch,
    units)`` (one per unit: HiPER's levels on their own tokens, 0 on tokens no level reaches). The log-ratio
    is clamped to +-:data:`LOG_RATIO_LIMIT` before it is exponentiated, so that a unit whose old
    log-probability is far off (a stale or mismatched behaviour policy) cannot overflow the ratio.
    ``clip_ratio_c`` (dual clip, Ye et al. 2020, > 1): where ``A < 0`` the loss is at most ``-c A``,
    since PPO's clip does not bound ``-r A`` from above when ``r`` is large and ``A`` negative.
    """
    log_ratio = torch.clamp(logprobs - old_logprobs, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    loss = -torch.minimum(unclipped, clipped)
    if clip_ratio_c is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -clip_ratio_c * adv), loss)
    return loss, (clipped < unclipped).float()


def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(policy || reference): ``exp(q - p) - (q - p) - 1``, clamped to [-10, 10]
    like verl's ``low_var_kl`` (p: policy log-prob, q: reference log-prob of the sampled unit)."""
    diff = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
    return torch.clamp(torch.exp(diff) - diff - 1.0, -10.0, 10.0)


@dataclass(frozen=True)
class PolicyLoss:
    """The update's loss: a registered policy-gradient loss called with its ``keywords``, weighed by
    the importance weights, token-mean aggregated, plus ``kl_coef`` x low-variance KL minus
    ``entropy_coef`` x entropy. ``tis_cap`` caps the importance weights the update computes between
    the trainer's pi_old and the rollout engine's (None: none)."""

    spec: LossSpec
    keywords: Mapping[str, Any] = field(default_factory=dict)
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    tis_cap: float | None = None

    def __call__(
        self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
        weight: torch.Tensor, *, entropy: torch.Tensor | None = None, ref_logprobs: torch.Tensor | None = None,
        total_units: float | None = None, is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss and its stats.

        ``total_units``: the weighted unit count of the whole mini-batch when this call sees only part
        of it (zero-advantage rows skipped, or one micro-batch of several); it is every term's
        denominator, so the losses of the parts add up to the mini-batch's. ``is_weights``: per-unit
        importance weights on the policy-gradient term.

        Stats: the entries named ``*loss`` are parts of the loss (they add up over parts of a
        mini-batch); the others are means over the units given here.
        """
        pg, clipped = self.spec.function(logprobs, old_logprobs, advantages, **self.keywords)
        if is_weights is not None:
            pg = pg * is_weights
        loss = weighted_token_mean(pg, mask, weight, total_units)
        stats = {"pg_loss": float(loss.detach())}
        if clipped is not None:
            stats["clip_fraction"] = float(weighted_token_mean(clipped, mask, weight))
        stats["approx_kl_old"] = float(weighted_token_mean((old_logprobs - logprobs).detach(), mask, weight))
        if entropy is not None:
            stats["entropy"] = float(weighted_token_mean(entropy.detach(), mask, weight))
            if self.entropy_coef:
                loss = loss - self.entropy_coef * weighted_token_mean(entropy, mask, weight, total_units)
        if ref_logprobs is not None:
            kl = low_var_kl(logprobs, ref_logprobs)
            stats["kl"] = float(weighted_token_mean(kl.detach(), mask, weight))
            if self.kl_coef:
                loss = loss + self.kl_coef * weighted_token_mean(kl, mask, weight, total_units)
        stats["loss"] = float(loss.detach())
        return loss, stats


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_c: float | None = None,
    entropy_coef: float = 0.0,
    kl_coef: float = 0.0,
    **inputs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The update's loss with PPO-clip (dual-clipped with ``clip_ratio_c``): :class:`PolicyLoss` as a
    function; ``inputs`` are its call's (``entropy``, ``ref_logprobs``, ``total_units``, ``is_weights``)."""
    loss = PolicyLoss(get_loss("ppo-clip"), {"clip_ratio": clip_ratio, "clip_ratio_c": clip_ratio_c},
                      entropy_coef, kl_coef)
    return loss(logprobs, old_logprobs, advantages, mask, weight, **inputs)
