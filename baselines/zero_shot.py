"""The zero-shot baseline: the benchmark's LLM policy before any training, evaluated like the trainer does.

It is built exactly as the trainer builds its starting policy (same model, action mode, prompt
settings and, for the tiny model, the same seed-dependent initialisation), so it equals an RL
method's iteration-0 evaluation and shows what training added.
"""

from __future__ import annotations

from baselines.registry import BaselineOutcome, BaselineRun
from ptgpo_algos.rollouts.evaluation import evaluate

__all__ = ["run"]


def run(job: BaselineRun) -> BaselineOutcome:
    """The ``zero_shot`` baseline: the benchmark's policy (its options override policy settings), untrained,
    evaluated with the trainer's own protocol."""
    from ptgpo_algos.config import TrainConfig

    # The trainer's own builder and evaluation protocol, so the zero-shot policy cannot drift from the
    # trained methods' start.
    from ptgpo_algos.device import resolve_device
    from ptgpo_algos.policy.backends import build_policy
    from ptgpo_algos.training.run_evaluation import evaluation_agent

    from ptgpo_algos.config import merge_overrides

    # Its options are policy settings over the policy section's (eval_temperature: 1.0, mode: generate),
    # so that one benchmark evaluates the same model under several protocols (labelled entries).
    config = TrainConfig.from_dict(
        {
            **merge_overrides(job.policy, job.options),
            "env_id": job.env_id,
            "env_kwargs": job.env_kwargs,
            "max_steps": job.max_steps,
            "train_seeds": [job.train_seeds.start, job.train_seeds.stop],
            "eval_seeds": list(job.eval_seeds),
            "seed": job.seed,
        }
    )
    policy = build_policy(config, resolve_device(config.policy.device))
    agent = evaluation_agent(policy, config, name="zero_shot")
    final = evaluate(
        agent, job.env_id, job.eval_seeds, job.evaluation_kwargs,
        max_steps=job.max_steps, batch_size=config.evaluation.batch_size,
    ).summary()
    return BaselineOutcome(final_eval=final, best_success=final["success"])
