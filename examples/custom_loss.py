"""A new policy loss, registered from outside the package and chosen with ``algorithm.loss``.

    python examples/custom_loss.py

The loss: PPO-clip whose ratio is clipped more tightly for negative advantages (``clip_low``) than
for positive ones, a common variant for sparse rewards (one win should move the policy, many losses
should not wipe it out). A loss is the policy-gradient term only: it takes the per-unit tensors of a
mini-batch and its keys, and returns the per-unit loss and which units were clipped. The trainer
weighs, aggregates and adds the KL and entropy terms (``optim.kl_coef``, ``optim.entropy_coef``) to
it as to the built-in loss, and logs ``update/pg_loss``, ``update/clip_fraction`` and the rest to metrics.jsonl.
``clip_ratio`` is the ``optim`` section's; ``clip_low`` is this loss's own key, set in
``algorithm.loss_config`` and checked by the rule it is registered with.
"""

import json

import torch

from ptgpo_algos.advantages.config import ConfigKey, real_rule
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.updates.loss_registry import register_loss
from ptgpo_algos.training.trainer import run_training


calls = []


@register_loss("asymmetric-clip", keys={"clip_low": ConfigKey("clip range below 1 on negative advantages",
                                                              "a number in [0, 1]", real_rule(0.0, 1.0))})
def asymmetric_clip_loss(logprobs, old_logprobs, advantages, *, clip_ratio=0.2, clip_low=0.1):
    """PPO-clip with range ``[1 - clip_low, 1 + clip_ratio]`` on negative advantages."""
    calls.append(logprobs.shape[0])
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    low = torch.where(adv < 0, 1.0 - clip_low, 1.0 - clip_ratio)
    clipped = torch.minimum(torch.maximum(ratio, low), torch.full_like(ratio, 1.0 + clip_ratio))
    return -torch.minimum(ratio * adv, clipped * adv), (clipped * adv < ratio * adv).float()


# On one unit: a negative advantage whose ratio fell to 0.5 is held at 1 - clip_low = 0.9.
loss, clipped = asymmetric_clip_loss(torch.log(torch.full((1, 1), 0.5)), torch.zeros(1, 1), -torch.ones(1))
print(f"loss on a negative advantage at ratio 0.5: {loss.item():.2f}")
assert abs(loss.item() - 0.9) < 1e-6 and clipped.item() == 1.0

summary = run_training(TrainConfig.from_dict({
    "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 6},
    "algorithm": {"name": "grpo", "loss": "asymmetric-clip", "loss_config": {"clip_low": 0.05}},
    "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
    "rollouts": {"group_size": 4, "tasks_per_iteration": 2},
    "optim": {"entropy_coef": 0.01},
    "evaluation": {"every": 2, "seeds": 4},
    "run": {"iterations": 2, "out_dir": "runs/example-asymmetric-clip"},
}), progress=False)
with open(summary.metrics_path) as handle:
    rows = [json.loads(line) for line in handle]
# The entropy bonus is on, so every iteration trains on every step, whatever its advantage.
print(f"trained {summary.iterations} iterations with asymmetric-clip: {len(calls) - 1} mini-batches; "
      f"pg_loss per iteration {[round(row['update/pg_loss'], 4) for row in rows]}, "
      f"entropy {[round(row['update/entropy'], 3) for row in rows]}")
assert len(calls) > 1  # the trainer called it (the first call was the check above)
