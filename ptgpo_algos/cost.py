"""What a run costs, in every unit a user pays in, and a budget in any one of them.

A matched budget in policy decisions (``run.total_decisions``) does not match what a run costs: a
prefix tree plays more, shorter episodes and trains on more tokens per decision. :class:`Cost` counts
the rest as the run goes, cumulatively (``cost.jsonl`` in the run folder, one row per iteration):

======================  ==================================================================================
``episodes``            training episodes finished
``trained_tokens``      prompt and response tokens through the loss, over every PPO epoch
``unique_tokens``       the token positions the update ran through the model (``computed_tokens`` in
                        ``metrics.jsonl``): each prefix its rows share once (``policy.share_prefixes``)
``optimizer_updates``   optimiser steps
``train_cpu_s``         process CPU seconds of rollouts, advantages and updates, all threads of the trainer's
                        process and of an asynchronous rollout worker (environment worker processes and
                        evaluation excluded)
``eval_cpu_s``          process CPU seconds of held-out evaluations
``gpu_s``               on a GPU: wall seconds of rollouts and updates times the GPUs the run holds (None on a
                        CPU)
======================  ==================================================================================

Policy decisions and generated tokens are the run's own counters (:class:`~ptgpo_algos.rollouts.collection.Spend`).
Model building (the tiny model's pretraining included) counts in none of them.

``run.budget`` (:class:`Budget`) stops a run once its spend in one unit reaches an amount. A run stops at
an iteration boundary. By its ``stop`` rule: ``reached`` (the default), the first boundary at or after the
amount, never before it, so the spend overshoots by at most one iteration's; ``nearest``, the boundary
nearest the amount as far as the last iteration's spend foretells the next one's (stop once the amount is
within half an iteration), so the spend lands within about half an iteration on either side and runs
whose iterations cost more are not handed more of the unit. ``TrainSummary.budget_overshoot`` and the
cell record keep the signed difference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ptgpo_algos.validation import check_choice, check_mapping, check_number, settings_from_mapping

__all__ = ["BUDGET_UNITS", "COST_UNITS", "STOP_RULES", "Budget", "Cost", "standard_error"]

#: Every unit a run's cost is counted in, as ``cost.jsonl`` names it: ``decisions`` and ``tokens``
#: (generated) are the run's own counters, the rest :class:`Cost`'s fields (``eval_cpu_s`` is no cost
#: of training). The leaderboard reads curves in these units (``leaderboard.curves.AXES``).
COST_UNITS = ("decisions", "episodes", "tokens", "trained_tokens", "unique_tokens", "optimizer_updates",
              "train_cpu_s", "gpu_s")
#: The units ``run.budget`` takes. Decisions have their own field, ``run.total_decisions``, which also
#: caps the rollouts inside an iteration.
BUDGET_UNITS = ("trained_tokens", "optimizer_updates", "train_cpu_s", "gpu_s")
#: Where a budget stops a run (see the module docstring).
STOP_RULES = ("reached", "nearest")


@dataclass
class Cost:
    """A run's cumulative cost beyond decisions and generated tokens (see the module docstring)."""

    episodes: int = 0
    trained_tokens: int = 0
    unique_tokens: int = 0
    optimizer_updates: int = 0
    train_cpu_s: float = 0.0
    eval_cpu_s: float = 0.0
    gpu_s: float | None = None

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain data (the checkpoint's ``cost``)."""
        return dataclasses.asdict(self)

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Take back the counters; None (a checkpoint older than them) leaves them at zero, so a run
        resumed from one counts from the resume."""
        for name, value in (state or {}).items():
            setattr(self, name, value)


@dataclass(frozen=True)
class Budget:
    """Stop once the run's spend in ``unit`` (one of :data:`BUDGET_UNITS`) reaches ``amount``, by the
    ``stop`` rule (:data:`STOP_RULES`, see the module docstring)."""

    unit: str
    amount: float
    stop: str = "reached"

    def __post_init__(self) -> None:
        if self.unit == "decisions":
            raise ValueError("run.budget.unit: a budget in decisions is run.total_decisions; set that instead")
        check_choice("run.budget.unit", self.unit, BUDGET_UNITS)
        object.__setattr__(self, "amount", check_number("run.budget.amount", self.amount, 0.0, exclusive_low=True))
        check_choice("run.budget.stop", self.stop, STOP_RULES)

    @classmethod
    def from_mapping(cls, values: Any) -> Budget:
        """The budget from a config's ``run.budget`` mapping (``{unit: trained_tokens, amount: 2e6}``)."""
        values = check_mapping("run.budget", values)
        missing = [name for name in ("unit", "amount") if name not in values]
        if missing:
            raise ValueError(f"run.budget: give both unit and amount, e.g. {{unit: trained_tokens, amount: 2e6}} "
                             f"(missing {', '.join(missing)})")
        return settings_from_mapping(cls, values, "run.budget")

    def spent(self, spend: float, last_step: float = 0.0) -> bool:
        """Whether a run that has spent ``spend`` (in :attr:`unit`), ``last_step`` of it in its last
        iteration, stops here."""
        if self.stop == "nearest":
            return spend + last_step / 2 >= self.amount
        return spend >= self.amount

    def fraction(self, spend: float) -> float:
        """How much of the budget ``spend`` is (may exceed 1 at the last iteration)."""
        return spend / self.amount

    def overshoot(self, spend: float) -> float:
        """How far ``spend`` went past the amount (negative: short of it)."""
        return spend - self.amount


def standard_error(success: float, episodes: int) -> float:
    """The binomial standard error of a success rate measured on ``episodes`` independent episodes,
    sqrt(p (1 - p) / n)."""
    return (success * (1.0 - success) / episodes) ** 0.5 if episodes > 0 else 0.0
