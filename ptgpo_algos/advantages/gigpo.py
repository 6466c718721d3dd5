"""GiGPO: GRPO's episode term plus a step term that compares steps taken from the same state."""

from __future__ import annotations

from ptgpo_algos.advantages.ops import episode_norm, pooled_norm
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal
from ptgpo_algos.advantages.table import StepTable

__all__ = ["gigpo"]


def gigpo(
    table: StepTable, signal: Signal, *, norm: str = "mean_std_norm", omega: float = 1.0
) -> Estimate:
    """Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978).

    ``A_{i,t} = A^E_i + omega * A^S_{i,t}`` with ``A^E_i = norm(R_i, {R_j})`` (GRPO) and
    ``A^S_{i,t} = norm(G_{i,t}, {G_{j,u} : s_{j,u} = s_{i,t}})``: the step return against every step of
    the group taken from the same ``state_key`` (anchor state), repeats within one trajectory
    included. ``R``/``G`` are ``signal.episode``/``signal.step``; one ``norm`` serves both terms.
    """
    episode = episode_norm(table, signal.episode, norm)[table.trajectory]
    step = pooled_norm(signal.step, table.state, table.n_states, norm)
    return Estimate(episode + omega * step)
