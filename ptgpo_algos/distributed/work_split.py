"""Who plays what: tasks, the decision budget and evaluation episodes split across ranks (pure).

* **Tasks** go to ranks whole, in consecutive blocks (:func:`split_evenly`): a task's group -- a
  prefix tree included -- lives on one rank, which computes its shared contexts once, estimates its
  advantages where the group is, and trains on its steps. Gathering the ranks' blocks in rank order
  gives back the single-process order.
* **The decision budget** (``run.total_decisions``) stays one exact global budget:
  :func:`share_budget` gives each rank a cap, its share of what is left, in proportion to the most
  its tasks could spend this iteration. The caps add up to exactly what is left (or to everything
  the tasks could spend, when that is less), so the ranks together never spend more than the
  budget; a rank that finishes under its cap leaves the rest to the next iteration, whose shares
  are taken again from the global count (the ranks' decisions summed). The run therefore ends with
  exactly ``total_decisions`` spent, as a single process does.
* **Evaluation episodes** are split in consecutive blocks too, and gathered in order.

Every function is deterministic: every rank computes the same split from the same inputs, with no
communication.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["BudgetPlan", "share_budget", "split_evenly"]


def _check_world(world_size: int) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")


def split_evenly(count: int, world_size: int) -> list[range]:
    """``range(count)`` cut into ``world_size`` consecutive blocks whose sizes differ by at most one
    (the first ``count % world_size`` ranks take one more; ranks beyond ``count`` take none)."""
    _check_world(world_size)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got {count!r}")
    base, extra = divmod(count, world_size)
    blocks, start = [], 0
    for rank in range(world_size):
        size = base + (1 if rank < extra else 0)
        blocks.append(range(start, start + size))
        start += size
    return blocks


@dataclass(frozen=True)
class BudgetPlan:
    """One iteration's split: each rank's ``tasks`` (indices into the iteration's tasks) and ``caps``
    (the decisions it may spend; None: no decision budget)."""

    tasks: tuple[range, ...]
    caps: tuple[int | None, ...]

    def for_rank(self, rank: int) -> tuple[range, int | None]:
        """``(tasks, cap)`` of ``rank``."""
        return self.tasks[rank], self.caps[rank]


def share_budget(planned: Sequence[int], world_size: int, remaining: int | None) -> BudgetPlan:
    """Split an iteration's tasks and what is left of the decision budget across ranks.

    ``planned[i]``: the most decisions task ``i``'s group can spend this iteration (its episodes
    times their step limit; a tree's leaves times the step limit). ``remaining``: the global
    budget left (``total_decisions`` minus all ranks' decisions so far), None without one. Each
    rank's cap is its share of ``remaining`` in proportion to its tasks' planned decisions, by
    largest remainders (ties to the lower rank), never more than its tasks can spend; the caps add
    up to ``min(remaining, sum(planned))``.
    """
    if any(not isinstance(p, int) or isinstance(p, bool) or p < 0 for p in planned):
        raise ValueError(f"planned decisions must be integers >= 0, got {list(planned)!r}")
    if remaining is not None and (not isinstance(remaining, int) or isinstance(remaining, bool) or remaining < 0):
        raise ValueError(f"remaining must be an integer >= 0 or None, got {remaining!r}")
    blocks = split_evenly(len(planned), world_size)
    per_rank = [sum(planned[i] for i in block) for block in blocks]
    total = sum(per_rank)
    if remaining is None:
        return BudgetPlan(tuple(blocks), (None,) * world_size)
    if remaining >= total:
        return BudgetPlan(tuple(blocks), tuple(per_rank))
    caps = [remaining * p // total for p in per_rank]
    # The parts left over go to the largest remainders of remaining * p / total.
    order = sorted(range(world_size), key=lambda r: (-(remaining * per_rank[r] % total), r))
    for rank in order[: remaining - sum(caps)]:
        caps[rank] += 1
    return BudgetPlan(tuple(blocks), tuple(caps))
