"""PTGPO's algorithms: rollout data model, group advantage estimators, policies, rollouts, trainer."""

from ptgpo_algos.data import Batch, Group, Step, Trajectory

__all__ = ["Batch", "Group", "Step", "Trajectory"]
