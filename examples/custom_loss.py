"""A new policy loss, registered from outside the package and chosen with ``algorithm.loss``.

    python examples/custom_loss.py

The loss: PPO-clip whose ratio is clipped more tightly for negative advantages (``clip_low``) than
for positive ones, a common variant for sparse rewards (one win should move the policy, many losses
should not wipe it out). A loss takes the per-unit tensors of a mini-batch and returns ``(loss,
stats)``; the trainer passes the optimiser section's keywords (``clip_ratio``, the KL and entropy
terms) and logs every number in ``stats`` to metrics.jsonl.
"""

import json

import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.losses import LOSSES, policy_loss, weighted_token_mean
from ptgpo_algos.trainer import run_training


calls = []


def asymmetric_clip_loss(logprobs, old_logprobs, advantages, mask, weight, *, clip_ratio=0.2, clip_low=0.1,
                         **keywords):
    """PPO-clip with range ``[1 - clip_low, 1 + clip_ratio]`` on negative advantages."""
    calls.append(logprobs.shape[0])
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    low = torch.where(adv < 0, 1.0 - clip_low, 1.0 - clip_ratio)
    clipped = torch.minimum(torch.maximum(ratio, low), torch.full_like(ratio, 1.0 + clip_ratio))
    per_unit = -torch.minimum(ratio * adv, clipped * adv)
    # The KL and entropy terms, and the token-mean aggregation, are the built-in loss's: reuse them by
    # calling it for everything but the PPO term.
    _, stats = policy_loss(logprobs, old_logprobs, advantages, mask, weight, clip_ratio=clip_ratio, **keywords)
    loss = weighted_token_mean(per_unit, mask, weight, keywords.get("total_units"))
    stats.update(loss=float(loss.detach()), pg_loss=float(loss.detach()))
    return loss, stats


LOSSES.register("asymmetric-clip", asymmetric_clip_loss)

# On one batch: a negative advantage whose ratio fell to 0.5 is held at 1 - clip_low = 0.9.
ones = torch.ones(1, 1)
loss, _ = asymmetric_clip_loss(torch.log(0.5 * ones), torch.zeros(1, 1), -torch.ones(1), ones, torch.ones(1))
print(f"loss on a negative advantage at ratio 0.5: {loss.item():.2f}")
assert abs(loss.item() - 0.9) < 1e-6

summary = run_training(TrainConfig.from_dict({
    "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 6},
    "algorithm": {"name": "grpo", "loss": "asymmetric-clip"},
    "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
    "rollouts": {"group_size": 4, "tasks_per_iteration": 2},
    "evaluation": {"every": 2, "seeds": 4},
    "run": {"iterations": 2, "out_dir": "runs/example-asymmetric-clip"},
}), progress=False)
with open(summary.metrics_path) as handle:
    rows = [json.loads(line) for line in handle]
# An iteration whose groups all had equal outcomes has no advantage to learn from and no loss.
print(f"trained {summary.iterations} iterations with asymmetric-clip: {len(calls) - 1} mini-batches; "
      f"loss per iteration {[row.get('loss') for row in rows]}")
assert len(calls) > 1  # the trainer called it (the first call was the check above)
