"""The records exchanged between environments, policies, rollouts, estimators and the trainer.

* :class:`Task` -- an episode to play: an environment (id, keywords, horizon) and a seed.
* :class:`Context` -- what a policy sees at one decision (the prompt's ingredients).
* :class:`Decision` -- what it decided: the action, and the token ids and log-probabilities the
  trainer recomputes and the loss compares.
* :class:`Step` -- one decision in an episode: the state it was taken in, the action, the reward, and
  the typed records above; a :class:`Trajectory` is an episode's steps in order; a *group* is a list
  of trajectories of one task instance; a *batch* is a list of groups.

In a prefix-tree group, trajectories that share a prefix hold the *same* ``Step`` objects for it
(identity, not copies), which is how the trainer trains a shared step once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

__all__ = ["Batch", "Context", "Decision", "Group", "Step", "Task", "Trajectory"]


@dataclass(frozen=True)
class Task:
    """A task instance: the environment and the seed of its episode."""

    env_id: str
    seed: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None


@dataclass
class Context:
    """What the policy sees at one decision: the prompt's ingredients (rendered by ``policy.prompts``)."""

    task: str
    observation: str
    admissible_actions: list[str]
    history: list[tuple[str, str]] = field(default_factory=list)

    def with_task(self, task: str) -> Context:
        """The same moment under another task, also where the observations quote the task (an
        episode's first observation says "Your task is to: ...")."""
        return Context(task, self.observation.replace(self.task, task), self.admissible_actions,
                       [(o.replace(self.task, task), a) for o, a in self.history])


@dataclass
class Decision:
    """One decision of the policy.

    ``text`` is the raw response (``generate``) or the chosen candidate (``choose``); ``action`` is the
    action to send to the environment, ``None`` when no action could be parsed (an invalid step).
    ``prompt_ids``/``response_ids`` are the token ids the trainer recomputes log-probabilities on;
    ``logprobs`` are the behaviour policy's per-token log-probabilities of ``response_ids``.
    ``entropy`` is the policy's entropy at this decision (over candidates in ``choose``, mean per-token
    entropy in ``generate``). In ``choose`` mode ``candidate_ids`` are the tokenised admissible
    actions, ``choice`` the chosen index and ``choice_logprob`` its log-probability under the softmax.
    ``format_error`` says why a generated response breaks the response rules (None: it keeps them); a
    response with an ``action`` and a ``format_error`` is played, but its step counts as invalid.
    """

    text: str
    action: str | None
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    entropy: float
    candidate_ids: list[list[int]] | None = None
    choice: int | None = None
    choice_logprob: float | None = None
    format_error: str | None = None


@dataclass(eq=False)
class Step:
    """One decision: the state it was taken in, the action, the environment's reward.

    ``state_key`` is the environment's ``info["state_key"]`` *before* the action; ``reward`` is the
    environment reward of this step (the estimators apply the invalid-action penalty themselves);
    ``valid`` says whether the action was admissible; ``response_ids`` the tokens of the response
    (the estimators that weigh turns by their length read it). Collected steps also carry the
    policy's ``decision`` (token ids and behaviour log-probabilities, for the loss), the ``context``
    it was taken in, and the tasks the step completed (``achieved``, as the environment's
    ``achieved_tasks()`` reported them; for hindsight relabelling). ``extras`` is free for callers.
    """

    state_key: str
    action: str
    reward: float
    valid: bool = True
    response_ids: Sequence[int] | None = None
    decision: Decision | None = None
    context: Context | None = None
    achieved: dict[str, str | None] | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def sent(self) -> str:
        """The action text the environment got (an unparsable response was sent as ``""``)."""
        if self.decision is None:
            return self.action
        return self.decision.action if self.decision.action is not None else ""


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
        """The sum of the steps' rewards."""
        return float(sum(step.reward for step in self.steps))


Group = list[Trajectory]
Batch = list[Group]
