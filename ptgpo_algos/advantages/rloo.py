"""RLOO: every step of a trajectory gets its return minus the mean return of the other trajectories."""

from __future__ import annotations

from ptgpo_algos.advantages.ops import episode_leave_one_out
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["rloo"]


def rloo(table: StepTable, signal: Signal) -> Estimate:
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics", arXiv 2402.14740).

    ``A_{i,t} = R_i - mean_{j != i} R_j`` for every step t of trajectory i, with ``R_i`` the
    ``signal.episode`` value (return after the invalid-action penalty, or ``C_{i,0}`` under coverage).
    No normalisation.
    """
    return Estimate(episode_leave_one_out(table, signal.episode)[table.trajectory])
