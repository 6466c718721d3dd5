"""3SPO's credit: each step's composite reward against the other steps taken from the same state.

The reward is the one the ``3spo`` rollout strategy computed while it searched
(:func:`ptgpo_algos.rollouts.spo3.search.step_rewards`, from the state scores of that moment) and recorded in
``Step.extras["strategy_reward"]``; the estimator pools it by state, as the official
``compute_3spo_advantage`` does over GiGPO's step groups (:func:`ptgpo_algos.rollouts.spo3.search.step_credit`'s
formula; that module builds on this package, so the pooling is called here directly).
"""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import pooled_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["spo3"]


def spo3(table: StepTable, signal: Signal, *, norm: str = "mean_norm", invalid_penalty: float = 0.1) -> Estimate:
    """State-Score-Supervised Policy Optimization's step credit (arXiv 2606.09961).

    ``A_{i,t} = norm(R_{i,t} - p 1[invalid], {R_{j,u} - p 1[invalid] : s_{j,u} = s_{i,t}})`` with ``R`` 3SPO's
    composite reward of the transition and ``p`` the ``invalid_penalty``; the official default drops
    the std (``mean_norm``). Only the ``3spo`` rollout strategy records ``R``: a batch of another
    strategy is refused.
    """
    missing = np.isnan(table.strategy_reward)
    if missing.any():
        raise ValueError(f"the 3spo estimator credits 3SPO's step rewards, which {int(missing.sum())} of "
                         f"{table.n_steps} steps lack: only rollouts.strategy: 3spo records them")
    rewards = table.strategy_reward - invalid_penalty * ~table.valid
    return Estimate(pooled_norm(rewards, table.state, table.n_states, norm))
