"""The median-baseline estimator: every step of trajectory i gets ``(R_i - median_j R_j) / scale`` over
its group, a baseline that one lucky rollout cannot move."""

import numpy as np

from ptgpo_algos.advantages import Estimate, register_estimator
from ptgpo_algos.advantages.config import ConfigKey


def _positive(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError  # the config check turns this into a message naming the key and the rule
    return float(value)


def median_baseline(table, signal, *, scale: float = 1.0) -> Estimate:
    """``A_{i,t} = (R_i - median_{j in group(i)} R_j) / scale``."""
    returns = signal.episode  # one value per trajectory
    medians = np.zeros(table.n_groups)
    for group in range(table.n_groups):
        medians[group] = np.median(returns[table.trajectory_group == group])
    return Estimate(((returns - medians[table.trajectory_group]) / scale)[table.trajectory])


def register() -> None:
    """The ``ptgpo.estimators`` entry point (called once per process): add ``plugin_median``."""
    register_estimator("plugin_median", keys={"scale": ConfigKey("divides every advantage", "a number > 0",
                                                                   _positive)})(median_baseline)
