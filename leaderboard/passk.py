"""pass@k and pass^k over repeated trials of a fixed panel of tasks, as agent benchmarks report them.

Each task of a panel is played ``n`` times (trials that differ only in the policy's sampling seed);
``c`` of them succeed. Two questions, two estimators, both unbiased for any ``k <= n``:

* pass@k, "does one of k tries succeed?" (Chen et al. 2021, the HumanEval paper, eq. 1):
  ``1 - C(n - c, k) / C(n, k)``, the chance that k trials drawn without replacement from the n are not
  all failures;
* pass^k, "do all k tries succeed?" (Yao et al. 2024, tau-bench): ``C(c, k) / C(n, k)``, the chance
  that k trials drawn from the n all succeed: how reliably the agent solves the task, not whether it
  can.

Both are averaged over the panel's tasks. pass@1 = pass^1 = the success rate. The intervals are
percentile bootstrap intervals over the tasks (:mod:`leaderboard.stats`' generator, so a table is
reproducible); a panel of one task has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

from leaderboard.stats import CONFIDENCE, REPS, Estimate, generator

__all__ = ["PassK", "pass_at_k", "pass_hat_k", "pass_k"]


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task: ``1 - C(n-c, k) / C(n, k)`` (n trials, c successes)."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The unbiased pass^k of one task: ``C(c, k) / C(n, k)`` (n trials, c successes)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True)
class PassK:
    """A panel's figures: its tasks and trials per task, the success rate, and pass@k and pass^k for
    each k from 1 to the trials, each an :class:`~leaderboard.stats.Estimate` over tasks."""

    tasks: int
    trials: int
    success: Estimate
    pass_at: dict[int, Estimate]
    pass_hat: dict[int, Estimate]

    def to_dict(self) -> dict:
        """Plain data (what ``ptgpo evaluate --out`` and a result record keep): ``k -> [point, low, high]``."""
        def plain(estimate: Estimate) -> list:
            return [estimate.point, estimate.low, estimate.high]

        return {"tasks": self.tasks, "trials": self.trials, "success": plain(self.success),
                "pass_at": {str(k): plain(e) for k, e in self.pass_at.items()},
                "pass_hat": {str(k): plain(e) for k, e in self.pass_hat.items()}}


def _over_tasks(values: np.ndarray, key: Sequence[object], reps: int, confidence: float) -> Estimate:
    """The mean of per-task ``values`` with a percentile interval from resampling the tasks."""
    point = float(values.mean())
    if values.size < 2:
        return Estimate(point)
    draws = generator(*key).integers(0, values.size, size=(reps, values.size))
    means = values[draws].mean(axis=1)
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return Estimate(point, float(low), float(high), "tasks")


def pass_k(outcomes: Sequence[Sequence[bool]], *, key: Sequence[object] = (), reps: int = REPS,
           confidence: float = CONFIDENCE) -> PassK:
    """pass@k and pass^k for k = 1..n from ``outcomes[task][trial]`` (every task played n times)."""
    trials = {len(task) for task in outcomes}
    if not outcomes or len(trials) != 1 or 0 in trials:
        raise ValueError("pass@k needs at least one task, every task played the same number (>= 1) of times")
    (n,) = trials
    successes = [sum(bool(o) for o in task) for task in outcomes]

    def estimate(name: str, k: int, per_task) -> Estimate:
        return _over_tasks(np.array([per_task(n, c, k) for c in successes]), (*key, name, k), reps, confidence)

    return PassK(
        tasks=len(outcomes), trials=n,
        success=_over_tasks(np.array(successes) / n, (*key, "success"), reps, confidence),
        pass_at={k: estimate("pass@k", k, pass_at_k) for k in range(1, n + 1)},
        pass_hat={k: estimate("pass^k", k, pass_hat_k) for k in range(1, n + 1)},
    )
