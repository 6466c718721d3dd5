"""PPO's clipped value loss (verl's ``compute_value_loss``, Schulman et al. 2017's ``L^VF``) as a pure
function on tensors, and the explained variance of the old values."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["clipped_value_loss", "explained_variance"]


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       value_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample ``0.5 max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)`` and whether the clipped
    term was the larger (the value was clipped); ``value_clip`` None: the plain ``0.5 (V - R)^2``.

    All tensors have the same shape. The clip keeps a value from moving more than ``c`` from the
    value it had when the rollouts were scored, as the ratio clip does for the policy.
    """
    unclipped = (values - returns) ** 2
    if value_clip is None:
        return 0.5 * unclipped, torch.zeros_like(unclipped)
    moved = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    clipped = (moved - returns) ** 2
    # Where the value stayed inside the range the two terms are equal but for rounding: not clipped.
    outside = (values - old_values).abs() > value_clip
    return 0.5 * torch.maximum(unclipped, clipped), (outside & (clipped > unclipped)).float()


#: Targets whose variance is below this share of their mean square (a spread of 1e-6 of their size) are
#: equal but for rounding: float32's (the head's values), or float64's in sums taken in another order.
_ROUNDING_VARIANCE = 1e-12


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 when the values predict the targets, 0 or below when they do not
    (0.0 for targets without variance, where nothing is left to explain: equal ones, or equal but for
    rounding, as the same state's value scored in another batch is)."""
    values, returns = np.asarray(values, dtype=np.float64), np.asarray(returns, dtype=np.float64)
    variance = float(np.var(returns)) if returns.size else 0.0
    if variance <= _ROUNDING_VARIANCE * (float(np.mean(returns ** 2)) if returns.size else 0.0):
        return 0.0
    return 1.0 - float(np.var(returns - values)) / variance
