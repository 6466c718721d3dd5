"""The rollout data model shared by rollout collection, the advantage estimators and the trainer.

A :class:`Step` is one decision; a :class:`Trajectory` is an episode's steps in order; a *group* is a
list of trajectories for one task instance (same environment id and seed); a *batch* is a list of
groups. In a prefix-tree group, trajectories that share a prefix hold the *same* ``Step`` objects for
it (identity, not copies), which is how the trainer trains a shared step once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

__all__ = ["Step", "Trajectory", "Group", "Batch"]


@dataclass(eq=False)
class Step:
    """One decision: the state it was taken in, the action, the environment's reward.

    ``state_key`` is the environment's ``info["state_key"]`` *before* the action; ``reward`` is the
    environment reward of this step (the estimators apply the invalid-action penalty themselves);
    ``valid`` says whether the action was admissible. The optional fields carry what the trainer
    needs: token ids of the prompt and of the response, the behaviour policy's per-token
    log-probabilities, and backend-specific extras (``extras``).
    """

    state_key: str
    action: str
    reward: float
    valid: bool = True
    prompt_ids: Sequence[int] | None = None
    response_ids: Sequence[int] | None = None
    logprobs: Sequence[float] | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Trajectory:
    """An ordered list of steps, plus free-form metadata (task id, seed, outcome...)."""

    steps: list[Step] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __getitem__(self, index: int) -> Step:
        return self.steps[index]

    @property
    def total_reward(self) -> float:
        return float(sum(step.reward for step in self.steps))


Group = list[Trajectory]
Batch = list[Group]
