"""HiPER's per-turn advantage: the low (executor's) level of its hierarchical credit, which the trainer's
HiPER critic computes from its value heads before the estimator runs (:mod:`ptgpo_algos.hiper.critic`)."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["hiper"]


def hiper(table: StepTable, signal: Signal) -> Estimate:
    """Each turn's low-level HAE advantage as the HiPER critic recorded it (``Step.extras["credit"]``,
    whitened over the batch with ``hiper.normalize``). The update puts it on the action block's tokens
    and adds the high and switch levels on their own blocks (:func:`ptgpo_algos.hiper.critic.token_advantages`);
    the discount, the lambdas and the penalties are ``algorithm.hiper``'s. ``signal`` is unused."""
    if np.isnan(table.credit).any():
        raise ValueError("the hiper estimator reads the credit the HiPER critic records on every step "
                         "(Step.extras['credit']); the trainer records it when algorithm.name is hiper")
    return Estimate(table.credit.copy())
