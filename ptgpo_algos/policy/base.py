"""The policy protocol every backend implements, and the records it exchanges.

A policy has two sides, kept apart so that a separate rollout engine (vLLM) can implement the first
while the trainer keeps the second:

* **rollout side** -- :meth:`RolloutPolicy.decide`: one :class:`Decision` per context, for a whole
  batch of live episodes in one call (one forward pass per step of the batch);
* **trainer side** -- :meth:`TrainablePolicy.score`: log-probabilities (with gradients) of responses
  that were already decided, under the current weights, plus :meth:`TrainablePolicy.export_weights`
  to hand the weights to a rollout engine.

Two action modes exist (see :data:`ACTION_MODES`):

``generate``
    The model writes free text in the ReAct style, ``<think>...</think><action>...</action>``; the action
    is parsed from the tags (:mod:`ptgpo_algos.policy.parsing`). ``Decision.logprobs`` are the sampled
    tokens' log-probabilities and the loss is taken on those tokens.
``choose``
    The model scores each admissible action by its token log-probabilities given the prompt (``mean``
    by default, or ``sum``) and samples from the softmax over the scores. The log-probability used by
    the loss is the chosen action's log-softmax (``Decision.choice_logprob``); ``Decision.logprobs``
    still holds the chosen action's per-token log-probabilities for inspection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

__all__ = [
    "ACTION_MODES",
    "SCORE_MODES",
    "Context",
    "Decision",
    "ScoredBatch",
    "RolloutPolicy",
    "TrainablePolicy",
    "Policy",
    "call_temperature",
    "check_sampling_settings",
]

ACTION_MODES = ("choose", "generate")
SCORE_MODES = ("mean", "sum")


def check_sampling_settings(mode: str, score: str, temperature: float) -> None:
    """Validate the settings every backend shares, with a message that says what is allowed."""
    if mode not in ACTION_MODES:
        raise ValueError(f"mode must be one of {ACTION_MODES}, got {mode!r}")
    if score not in SCORE_MODES:
        raise ValueError(f"score must be one of {SCORE_MODES}, got {score!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {temperature}")


def call_temperature(mode: str, score: str, own: float, override: float | None) -> float:
    """The temperature of one ``decide`` call: ``override`` when given (validated), else the policy's own."""
    if override is None:
        return own
    check_sampling_settings(mode, score, override)
    return float(override)


@dataclass
class Context:
    """What the policy sees at one decision: the prompt's ingredients (rendered by ``prompts``)."""

    task: str
    observation: str
    admissible_actions: list[str]
    history: list[tuple[str, str]] = field(default_factory=list)

    def with_task(self, task: str) -> "Context":
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


@dataclass
class ScoredBatch:
    """The trainer-side scores of a batch of decisions, as tensors with gradients.

    ``logprobs`` has shape ``(batch, units)`` with ``mask`` marking real units: the response tokens in
    ``generate`` mode, a single unit (the choice) in ``choose`` mode. ``entropy`` has the same shape.
    """

    logprobs: Any
    entropy: Any
    mask: Any


@runtime_checkable
class RolloutPolicy(Protocol):
    """The sampling side: what a rollout engine must provide."""

    mode: str

    def decide(
        self, contexts: Sequence[Context], *, greedy: bool = False, generator: Any = None,
        temperature: float | None = None,
    ) -> list[Decision]:
        """One decision per context, computed in one batched pass; ``generator`` seeds sampling.

        ``temperature`` overrides the policy's own for this call (evaluation protocols that sample at
        a lower temperature than training); the decisions' log-probabilities are then under it.
        """
        ...

    def load_weights(self, weights: Iterator[tuple[str, Any]]) -> None:
        """Take new weights (``(name, tensor)`` pairs, as :meth:`TrainablePolicy.export_weights`)."""
        ...


@runtime_checkable
class TrainablePolicy(Protocol):
    """The training side: log-probabilities with gradients, parameters, weight export."""

    mode: str

    def score(self, decisions: Sequence[Decision]) -> ScoredBatch:
        """Log-probabilities and entropies of the given decisions under the current weights."""
        ...

    def parameters(self) -> Iterator[Any]:
        """The trainable parameters (for the optimiser)."""
        ...

    def export_weights(self) -> Iterator[tuple[str, Any]]:
        """``(name, tensor)`` pairs of the full model, ``state_dict`` style, for a rollout engine."""
        ...


class Policy(RolloutPolicy, TrainablePolicy, Protocol):
    """A backend that both samples and trains (the transformers backend, the tiny model)."""
