"""Baselines that do not train: the random agent (lower reference) and the environment's expert (upper).

Both only evaluate, on the job's evaluation seeds, so they spend no decision budget.
"""

from __future__ import annotations

from baselines.expert_agent import ExpertAgent
from baselines.random_agent import RandomAgent
from baselines.registry import BaselineOutcome, BaselineRun
from ptgpo_algos.rollouts.evaluation import Agent, evaluate

__all__ = ["run_random", "run_expert"]


def _evaluate_only(agent: Agent, job: BaselineRun) -> BaselineOutcome:
    if job.options:
        raise ValueError(f"baseline {agent.name!r} takes no options, got {sorted(job.options)}")
    final = evaluate(agent, job.env_id, job.eval_seeds, job.evaluation_kwargs, max_steps=job.max_steps).summary()
    return BaselineOutcome(final_eval=final, best_success=final["success"])


def run_random(job: BaselineRun) -> BaselineOutcome:
    """The ``random`` baseline: a uniformly random admissible action at every step, evaluated on the job's
    seeds."""
    return _evaluate_only(RandomAgent(seed=job.seed), job)


def run_expert(job: BaselineRun) -> BaselineOutcome:
    """The ``expert`` baseline: the environment's own solver, evaluated on the job's seeds (an unranked
    reference)."""
    return _evaluate_only(ExpertAgent(), job)
