"""GRPO: every step of a trajectory gets its episode's return, normalised within the group."""

from __future__ import annotations

from ptgpo_algos.advantages.ops import episode_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["grpo"]


def grpo(table: StepTable, signal: Signal, *, norm: str = "mean_std_norm") -> Estimate:
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

    ``A_{i,t} = norm(R_i, {R_j : j in the group})`` for every step t of trajectory i, where ``R_i`` is
    ``signal.episode`` (the return after the invalid-action penalty, or ``C_{i,0}`` under coverage)
    and ``norm`` is ``mean_norm`` (``R_i - mean``) or ``mean_std_norm`` (``/ (std + 1e-6)``, ddof 1).
    """
    return Estimate(episode_norm(table, signal.episode, norm)[table.trajectory])
