"""A new rollout backend: rollouts and evaluation run on a separate copy of the model, synced after
every update and checked, the shape of an inference engine such as vLLM.

    python examples/custom_rollout_backend.py

A backend is a function ``build(trainable_policy, config, device)`` that returns the policy that
samples. When it returns another object than the trainable policy, the trainer hands it the new
weights after every update (``load_weights``) and asks it to show that it acts like the trained
model (``verify_sync``); a difference above 4 x the noise floor it measured before the first update
(or ``rollouts.sync_tolerance``) stops the run.
"""

from types import SimpleNamespace

import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS
from ptgpo_algos.training.trainer import run_training


class CopyEngine:
    """Samples with a frozen copy of the trainable policy; counts what it was asked."""

    def __init__(self, policy):
        self.engine = policy.reference_policy()  # a frozen copy with the current weights
        self.mode = policy.mode
        self.decisions = 0
        self.syncs = 0

    def decide(self, contexts, **options):
        self.decisions += len(contexts)
        return self.engine.decide(contexts, **options)

    def load_weights(self, weights):
        self.engine.load_weights(weights)
        self.syncs += 1

    @torch.no_grad()
    def verify_sync(self, reference, prompts, max_tokens=4):
        """Compare next-token log-probabilities of the engine and the trained model on ``prompts``."""
        diffs = []
        for prompt in prompts:
            ids = torch.tensor([list(prompt)], device=reference.device)
            mine = torch.log_softmax(self.engine.model(ids).logits[0, -1], -1)
            theirs = torch.log_softmax(reference.model(ids).logits[0, -1], -1)
            diffs.append((mine - theirs).abs())
        diffs = torch.cat(diffs)
        return SimpleNamespace(mean_logprob_diff=float(diffs.mean()), max_logprob_diff=float(diffs.max()), tokens=[])


engines = []


def build_copy_engine(policy, config, device):
    engines.append(CopyEngine(policy))
    return engines[-1]


ROLLOUT_BACKENDS.register("copy-engine", build_copy_engine)

summary = run_training(TrainConfig.from_dict({
    "env": {"id": "ptgpo/FrozenLake-v0", "kwargs": {"desc": ["SFF", "FHF", "FFG"]}, "max_steps": 6},
    "algorithm": {"name": "gigpo"},
    "policy": {"tiny": {"hidden_size": 32, "pretrain_steps": 0}},
    "rollouts": {"backend": "copy-engine", "group_size": 4, "tasks_per_iteration": 2},
    "evaluation": {"every": 2, "seeds": 4},
    "run": {"iterations": 2, "out_dir": "runs/example-copy-engine"},
}), progress=False)
engine = engines[-1]
print(f"copy-engine: {engine.decisions} decisions sampled (rollouts and evaluation), {engine.syncs} weight syncs")
assert engine.decisions >= summary.decisions and engine.syncs >= summary.iterations
