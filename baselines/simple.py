"""Baselines that do not train: the random agent (lower reference) and the environment's expert (upper).

Both only evaluate, on the job's evaluation seeds, so they spend no decision budget.
"""

from __future__ import annotations

from baselines.expert_agent import ExpertAgent
from baselines.random_agent import RandomAgent
from baselines.registry import BaselineOutcome, BaselineRun
from ptgpo_algos.evaluation import Agent, evaluate

__all__ = ["run_random", "run_expert"]


def _evaluate_only(agent: Agent, job: BaselineRun) -> BaselineOutcome:
    if job.options:
        raise ValueError(f"baseline {agent.name!r} takes no options, got {sorted(job.options)}")
    final = evaluate(agent, job.env_id, job.eval_seeds, job.evaluation_kwargs, max_steps=job.max_steps).summary()
    return BaselineOutcome(final_eval=final, best_success=final["success"])


def run_random(job: BaselineRun) -> BaselineOutcome:
    return _evaluate_only(RandomAgent(seed=job.seed), job)


def run_expert(job: BaselineRun) -> BaselineOutcome:
    return _evaluate_only(ExpertAgent(), job)
