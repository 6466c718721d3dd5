"""A run's evaluation protocol, shared by the trainer, the evaluation command and the baselines: the
agent (greedy, or sampled at ``evaluation.temperature``, seeded by the run seed), the held-out seeds,
and the trained policy a run folder holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ptgpo_algos.training.checkpoint import load_checkpoint
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.rollouts.evaluation import EvalResult, evaluate
from ptgpo_algos.training.placement import CHECKPOINT_FILE, restore_checkpoint_weights
from ptgpo_algos.rollouts.agent import PolicyAgent
from ptgpo_algos.policy.backends import build_policy, exported_config
from ptgpo_algos.training.run_folder import load_run_config

__all__ = ["evaluate_policy", "evaluation_agent", "evaluation_result", "evaluation_seeds", "load_trained_policy"]


def evaluation_agent(policy, config: TrainConfig, name: str = "policy") -> PolicyAgent:
    """The run's evaluation protocol (greedy, or sampled at ``evaluation.temperature``).

    A fresh generator seeded by the run seed each time: every evaluation of the same weights plays the
    same episodes.
    """
    return PolicyAgent.at_temperature(policy, config.evaluation.temperature, name=name, seed=config.run.seed)


def evaluate_policy(policy, config: TrainConfig, curve: bool = False) -> dict[str, Any]:
    """The run's evaluation of ``policy``: its held-out seeds (the curve's first ones with ``curve``),
    protocol and seed; the summary dict."""
    return evaluation_result(policy, config, evaluation_seeds(config, curve)).summary()


def evaluation_seeds(config: TrainConfig, curve: bool) -> list[int]:
    """The held-out seeds an evaluation plays: all, or the curve's first ``evaluation.curve_episodes``."""
    seeds = list(config.evaluation.seeds)
    if curve and config.evaluation.curve_episodes is not None:
        seeds = seeds[: config.evaluation.curve_episodes]
    return seeds


def evaluation_result(policy, config: TrainConfig, seeds: Sequence[int]) -> EvalResult:
    """``policy`` played on ``seeds`` under the run's evaluation protocol."""
    return evaluate(
        evaluation_agent(policy, config), config.env.id, seeds, config.env.evaluation_kwargs,
        max_steps=config.env.max_steps, batch_size=config.evaluation.batch_size,
        env_backend=config.env_workers.backend, env_workers=config.env_workers.num_workers,
        env_options=config.env_workers.options,
    )


def load_trained_policy(run_dir: str | Path, device: str = "cpu") -> tuple[Any, TrainConfig, str]:
    """The policy a training run left in ``run_dir``, its config, and which weights were loaded.

    ``final_model/`` when the run finished; otherwise the weights of its last ``checkpoint.pt`` (a
    killed or still running run) on the run's own base model. The acting settings (mode, history
    length, prompt budget...) come from the run's ``config.json``, so the policy sees the prompts it
    was trained on.
    """
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    final = run_dir / "final_model"
    if final.is_dir():
        return build_policy(exported_config(config, str(final)), device), config, str(final)
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} holds no final_model/ and no checkpoint.pt: the run has not reached its "
                         "first checkpoint, or it finished with run.keep_final_model and run.keep_checkpoint off")
    checkpoint = load_checkpoint(path, device)
    policy = build_policy(config, device)
    restore_checkpoint_weights(policy, checkpoint, path)
    return policy, config, f"{path} (iteration {checkpoint['counters']['iteration']})"
