"""The policy protocol every backend implements, and the records it exchanges.

A policy has two sides, kept apart so that a separate rollout engine (vLLM) can implement the first
while the trainer keeps the second:

* **rollout side** (:class:`RolloutPolicy`) -- ``decide``: one :class:`~ptgpo_algos.records.Decision`
  per :class:`~ptgpo_algos.records.Context`, for a whole batch of live episodes in one call (one forward
  pass per step of the batch); ``load_weights``: take the trainer's weights (a sync); an engine
  separate from the trainer also ``verify_sync``.
* **trainer side** (:class:`TrainablePolicy`) -- ``score``: log-probabilities (with gradients) of
  decisions already taken, under the current weights (also pi_old and the reference's, without
  gradients, before an update); the trainable parameters (by name, for
  checkpoints); a frozen ``reference_policy`` for the KL term; ``export_weights`` for a rollout
  engine; ``save_pretrained``; and the ``prompts`` it renders contexts with.

Every backend is built by :mod:`ptgpo_algos.policy.backends`, which names the rollout backends.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

from ptgpo_algos.records import Context, Decision

__all__ = [
    "ACTION_MODES",
    "SCORE_MODES",
    "SYNC_TOKENS",
    "ScoredBatch",
    "SyncReport",
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


#: Tokens a sync check samples per prompt (one engine decode, one trainer forward pass).
SYNC_TOKENS = 32


@dataclass
class SyncReport:
    """The outcome of a sync check (``verify_sync``): the engine's sampled ``tokens``, its and the
    trainer's log-probabilities of them, and their mean and largest absolute differences."""

    mean_logprob_diff: float
    max_logprob_diff: float
    tokens: list[list[int]]
    engine_logprobs: list[list[float]]
    trainer_logprobs: list[list[float]]

    @classmethod
    def compare(cls, sampled: Sequence[tuple[list[int], list[float]]], reference: Any,
                prompts: Sequence[Sequence[int]]) -> "SyncReport":
        """Have ``reference`` (the trainer's policy: ``response_logprobs``) score the engine's ``sampled``
        ``(tokens, log-probabilities)`` of ``prompts``; no second decode."""
        tokens = [t for t, _ in sampled]
        engine = [lp for _, lp in sampled]
        trainer = reference.response_logprobs(prompts, tokens, temperature=1.0)
        diffs = [abs(a - b) for row_e, row_t in zip(engine, trainer) for a, b in zip(row_e, row_t)]
        return cls(mean_logprob_diff=sum(diffs) / max(1, len(diffs)), max_logprob_diff=max(diffs, default=0.0),
                   tokens=tokens, engine_logprobs=engine, trainer_logprobs=trainer)

    def ok(self, tolerance: float = 1e-3) -> bool:
        """Whether the mean log-probability difference is within ``tolerance``."""
        return self.mean_logprob_diff <= tolerance


def call_temperature(mode: str, score: str, own: float, override: float | None) -> float:
    """The temperature of one ``decide`` call: ``override`` when given (validated), else the policy's own."""
    if override is None:
        return own
    check_sampling_settings(mode, score, override)
    return float(override)


@dataclass
class ScoredBatch:
    """The trainer-side scores of a batch of decisions, as tensors with gradients.

    ``logprobs`` has shape ``(batch, units)`` with ``mask`` marking real units: the response tokens in
    ``generate`` mode, a single unit (the choice) in ``choose`` mode. ``entropy`` has the same shape.
    ``computed_tokens``: the token positions the forward pass ran through the model, each shared
    prefix counted once and padding not at all (0: the backend does not count them).
    """

    logprobs: Any
    entropy: Any
    mask: Any
    computed_tokens: int = 0


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

    def load_weights(self, weights: Iterator[tuple[str, Any]]) -> Any:
        """Take new weights (``(name, tensor)`` pairs, as :meth:`TrainablePolicy.export_weights`). A
        backend may also take ``aliases={alias: name}``: tied weights left out of ``weights``."""
        ...


@runtime_checkable
class TrainablePolicy(Protocol):
    """The training side: what the trainer uses of the policy it updates."""

    mode: str
    #: Renders a :class:`Context` as prompt token ids (hindsight relabelling rebuilds prompts with it).
    prompts: Any

    @property
    def device(self) -> Any:
        """Where the parameters live (tensors of the loss are made there)."""
        ...

    def score(self, decisions: Sequence[Decision], *, entropy_grad: bool = True) -> ScoredBatch:
        """Log-probabilities and entropies of the given decisions under the current weights, with
        gradients; the entropies without them when ``entropy_grad`` is false (no entropy bonus)."""
        ...

    def parameters(self) -> Iterator[Any]:
        """The trainable parameters (for the optimiser)."""
        ...

    def named_trainable(self) -> dict[str, Any]:
        """The trainable parameters by name (what a checkpoint and a rollout request carry)."""
        ...

    def reference_policy(self) -> Any:
        """A frozen policy with the current weights that ``score``s decisions: the KL term's reference
        (a LoRA policy's may be its own model with the adapters switched off, rather than a copy)."""
        ...

    def export_weights(self) -> Iterator[tuple[str, Any]]:
        """``(name, tensor)`` pairs of the full model, ``state_dict`` style, for a rollout engine."""
        ...

    def save_pretrained(self, folder: str | Path) -> None:
        """The model, its tokenizer and its acting settings, loadable as a policy again."""
        ...


class Policy(RolloutPolicy, TrainablePolicy, Protocol):
    """A backend that both samples and trains (the transformers backend, the tiny model)."""
