"""How long a benchmark's remaining cells will take, from the CPU time of the cells that finished.

Each cell runs on one thread, so its CPU seconds approximate its wall time on an idle core, and
``workers`` cells run at once. A training cell's cost grows with its decision budget: its CPU seconds
per decision, pooled over the finished training cells, prices the remaining ones; a baseline cell
(no budget) is priced at the mean of the finished baseline cells. A cell that pretrained the tiny
model carries that once-only cost, so the first estimates err long.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["remaining_seconds"]


def remaining_seconds(finished: Sequence[tuple[int | None, float]], todo: Sequence[int | None],
                      workers: int) -> float | None:
    """Wall seconds the ``todo`` cells (their decision budgets; None for a baseline) need on ``workers``
    cores, priced by the ``finished`` cells' ``(budget, cpu_seconds)``; None while a kind of cell that
    remains has no finished cell to price it."""
    if workers < 1:
        raise ValueError(f"workers must be positive, got {workers}")
    trained = [(budget, cpu) for budget, cpu in finished if budget]
    baselines = [cpu for budget, cpu in finished if not budget]
    total = 0.0
    remaining_budget = sum(budget for budget in todo if budget)
    if remaining_budget:
        if not trained:
            return None
        total += remaining_budget * sum(cpu for _, cpu in trained) / sum(budget for budget, _ in trained)
    remaining_baselines = sum(1 for budget in todo if not budget)
    if remaining_baselines:
        if not baselines:
            return None
        total += remaining_baselines * sum(baselines) / len(baselines)
    # No more cores are busy than there are cells left.
    return total / max(1, min(workers, len(todo)))
