"""A new advantage estimator, registered from outside the package, then trained with by name.

    python examples/custom_estimator.py

The estimator: every step of trajectory i gets ``(R_i - median_j R_j) / scale`` over its group, a
baseline that one lucky rollout cannot move. An estimator is a pure function of the batch's array
form (``StepTable``) and the values it credits (``Signal``); its keyword-only parameters are its
config keys. In a package of your own, put the function in a module and name it in your
``pyproject.toml`` (``[project.entry-points."ptgpo.estimators"]``) instead of importing it first.
"""

import numpy as np

from ptgpo_algos.advantages import Estimate, compute_advantages, estimator_defaults, register_estimator
from ptgpo_algos.advantages.config import ConfigKey
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Step
from ptgpo_algos.training.trainer import run_training


def _positive(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError  # the config check turns this into a message naming the key and the rule
    return float(value)


@register_estimator("median_baseline", keys={"scale": ConfigKey("divides every advantage", "a number > 0", _positive)})
def median_baseline(table, signal, *, scale: float = 1.0) -> Estimate:
    """``A_{i,t} = (R_i - median_{j in group(i)} R_j) / scale``."""
    returns = signal.episode  # one value per trajectory: the return after the invalid-action penalty
    medians = np.zeros(table.n_groups)
    for group in range(table.n_groups):
        medians[group] = np.median(returns[table.trajectory_group == group])
    per_trajectory = (returns - medians[table.trajectory_group]) / scale
    return Estimate(per_trajectory[table.trajectory])  # one advantage per step


print("keys and defaults:", estimator_defaults("median_baseline"))

# One group of three trajectories of one task: a win in two steps, two losses.
win = [Step("start", "go right", 0.0), Step("middle", "go right", 1.0)]
loss = [Step("start", "go left", 0.0)]
advantages = compute_advantages("median_baseline", [[win, loss, loss]], scale=2.0)
print("advantages:", advantages)
assert advantages == [[[0.5, 0.5], [0.0], [0.0]]]

# The trainer's config takes it by name and checks its keys like any built-in estimator's.
try:
    TrainConfig.from_dict({"algorithm": {"name": "median_baseline", "config": {"scale": -1}}})
except ValueError as error:
    print("rejected:", error)

summary = run_training(TrainConfig.from_dict({
    "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 6},
    "algorithm": {"name": "median_baseline", "config": {"scale": 2.0}},
    "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
    "rollouts": {"group_size": 4, "tasks_per_iteration": 2},
    "evaluation": {"every": 2, "seeds": 4},
    "run": {"iterations": 2, "out_dir": "runs/example-median-baseline"},
}), progress=False)
print(f"trained {summary.iterations} iterations with median_baseline, {summary.decisions} decisions")
