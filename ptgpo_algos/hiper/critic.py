"""HiPER's critic as a trainer component: PPO's value head with a head per level, read where HiPER
reads them, its hierarchical credit (:func:`~ptgpo_algos.hiper.estimate.hiper_credit`), the credit
spread over each response's blocks, and the three value losses.

Each iteration, for ``algorithm.name: hiper`` (the same calls as :class:`~ptgpo_algos.critic.component.Critic`)::

    critic.annotate(batch, policy)     # per turn, without gradients: V_high and V_switch at the prompt's
                                       # last token, V_low at the response token that closes </subgoal>;
                                       # then HAE over the batch's episodes: Step.extras["credit"] (the low
                                       # advantage, what the hiper estimator returns) and ["hiper"]
    advantages = estimator(batch)      # ptgpo_algos.advantages.hiper: the recorded low advantage
    stats = critic.set_targets(...)    # each sample's per-token advantages and the heads' targets
    ... each micro-batch: loss += value_coef * critic.loss(policy, part, denominator)

Head columns: 0 low, 1 high, 2 switch (``hiper.switch_head``). Reading the low head at a response
token is one more pass per turn over the prompt and the response up to that token: in a causal model
its last hidden state is the response token's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ptgpo_algos.critic.component import Critic, unit_shares
from ptgpo_algos.critic.loss import clipped_value_loss, explained_variance
from ptgpo_algos.critic.settings import CriticSettings, ValuePasses
from ptgpo_algos.records import Batch, Decision, Step
from ptgpo_algos.hiper.estimate import EpisodeTurns, HiperCredit, hiper_credit, pad
from ptgpo_algos.hiper.plan_format import block_spans, low_value_index, parse_plan_response, token_span
from ptgpo_algos.hiper.settings import HiperSettings
from ptgpo_algos.rollouts.collection import FINAL_CONTEXT
from ptgpo_algos.updates.samples import TrainingSample

__all__ = ["HiperCritic", "LOW", "HIGH", "SWITCH", "response_pieces", "token_advantages"]

LOW, HIGH, SWITCH = 0, 1, 2


def response_pieces(tokenizer: Any, response_ids: Sequence[int]) -> list[str]:
    """Each response token's text (one decode per token: a character split across byte-level tokens
    becomes replacement characters, which only matter inside a block, never in its tags)."""
    return [tokenizer.decode([token], skip_special_tokens=False) for token in response_ids]


def token_advantages(pieces: list[str], low: float, high: float | None, switch: float | None) -> list[float]:
    """A response's per-token advantages: ``low`` on the action block (on every token when none
    parses), ``high`` on the subgoal block, ``switch`` on the switch block (tags included; None: that
    level does not reach this turn), 0 on the tokens no level reaches."""
    spans = block_spans("".join(pieces))
    out = np.zeros(len(pieces))
    action = token_span(pieces, spans["action"]) if "action" in spans else (0, len(pieces))
    out[action[0]:action[1]] += low
    for block, value in (("subgoal", high), ("switch", switch)):
        if value is not None and block in spans:
            first, stop = token_span(pieces, spans[block])
            out[first:stop] += value
    return out.tolist()


class HiperCritic(Critic):
    """The critic of ``algorithm.name: hiper`` (the module docstring): two heads, three with
    ``hiper.switch_head``."""

    def __init__(self, settings: CriticSettings, hiper: HiperSettings, policy: Any):
        super().__init__(settings, policy, n_values=3 if hiper.switch_head else 2)
        self.hiper = hiper
        #: Splits a response into its tokens' texts, to find its blocks.
        self.tokenizer = policy.tokenizer
        #: The last batch's level figures (``hiper_*``), reported with the targets.
        self.figures: dict[str, float] = {}

    @classmethod
    def from_algorithm(cls, algorithm: Any, policy: Any) -> HiperCritic:
        """The critic of an ``algorithm.name: hiper`` run: ``algorithm.critic`` and ``algorithm.hiper``."""
        return cls(algorithm.critic, algorithm.hiper, policy)

    @classmethod
    def value_passes(cls, algorithm: Any) -> ValuePasses:
        """Two heads (three with ``hiper.switch_head``), and the low head's pass into the response."""
        return ValuePasses(heads=3 if algorithm.hiper.switch_head else 2, response_pass=True)

    def low_prompts(self, decisions: Sequence[Decision]) -> tuple[list[list[int]], list[int]]:
        """Where the low head reads each decision: the prompt and the response up to the token that
        closes ``</subgoal>`` (:func:`~ptgpo_algos.hiper.plan_format.low_value_index`; -1: the prompt's
        last token), and that index."""
        prompts, indices = [], []
        for decision in decisions:
            index = low_value_index(response_pieces(self.tokenizer, decision.response_ids))
            indices.append(index)
            prompts.append(list(decision.prompt_ids) + list(decision.response_ids[: index + 1]))
        return prompts, indices

    def annotate(self, batch: Batch, policy: Any, batch_size: int,
                 gather: Callable[[Any], list[Any]] = lambda local: [local]) -> None:
        """Score the heads at their read positions on every turn and compute the batch's HAE credit
        (``Step.extras``: ``value``, ``value_high``, ``value_switch``, ``credit`` and ``hiper``); across
        ranks, whitened and reported over every rank's episodes (``gather``, in rank order)."""
        trajectories = [t for group in batch for t in group]
        steps = [s for t in trajectories for s in t.steps]
        if len({id(s) for s in steps}) != len(steps):
            raise ValueError("hiper credits each turn within its own episode, but a step is shared by several "
                             "trajectories (a tree rollout): set rollouts.strategy to linear")
        decisions = [_decision(s) for s in steps]
        high = self.score(policy, [d.prompt_ids for d in decisions], batch_size)
        low_prompts, _ = self.low_prompts(decisions)
        low = self.score(policy, low_prompts, batch_size)[:, LOW]
        for step, v_low, v_high in zip(steps, low, high):
            step.extras.update(value=float(v_low), value_high=float(v_high[HIGH]),
                               value_switch=float(v_high[SWITCH]) if self.hiper.switch_head else None)
        self.record_credit(trajectories, gather)

    def record_credit(self, trajectories: list, gather: Callable[[Any], list[Any]] = lambda local: [local]) -> None:
        """HAE over the annotated ``trajectories`` (each an episode), recorded per turn; the levels'
        whitening and figures over every rank's (``gather``)."""
        episodes = [EpisodeTurns([s.reward for s in t.steps], [parse_plan_response(s.decision.text) for s in t.steps],
                                 [s.valid for s in t.steps],
                                 not (t.steps and FINAL_CONTEXT in t.steps[-1].extras)) for t in trajectories]
        series = {key: pad([[s.extras[key] or 0.0 for s in t.steps] for t in trajectories])
                  for key in ("value", "value_high", "value_switch")}
        credit = hiper_credit(episodes, series["value"], series["value_high"], self.hiper,
                              series["value_switch"] if self.hiper.switch_head else None, gather)
        for b, trajectory in enumerate(trajectories):
            for t, step in enumerate(trajectory.steps):
                step.extras["credit"] = float(credit.low_advantages[b, t])
                step.extras["hiper"] = _turn(credit, b, t)
        self.figures = _level_figures(gather(_level_counts(credit, episodes)))

    def set_targets(self, batch: Batch, samples: Sequence[TrainingSample], estimator: Mapping[str, Any],
                    gather: Callable[[Any], list[Any]] = lambda local: [local]) -> dict[str, float]:
        """Each sample's per-token advantages (:func:`token_advantages`) and its heads' old values and
        targets (the low and switch heads every turn, the high head at segment starts); the value and
        level figures, across ranks over every rank's (``gather``, in rank order: the batch's)."""
        del estimator  # HiPER's discount and penalties are its own section's (algorithm.hiper)
        steps = {id(s.decision): s for group in batch for t in group for s in t.steps}
        # The estimators' rule: a group of fewer than two played episodes is not compared, no advantage.
        lone = {id(s.decision) for group in batch if sum(1 for t in group if t.steps) < 2 for t in group for s in t.steps}
        heads: dict[int, list[tuple[float, float]]] = {LOW: [], HIGH: [], SWITCH: []}
        for sample in samples:
            step = steps.get(id(sample.decision))
            if step is None:  # an auxiliary objective's item: no value target
                continue
            turn = step.extras["hiper"]
            pieces = response_pieces(self.tokenizer, sample.decision.response_ids)
            sample.token_advantages = [0.0] * len(pieces) if id(sample.decision) in lone else token_advantages(
                pieces, turn["low_advantage"], turn["high_advantage"], turn["switch_advantage"])
            sample.old_value, sample.value_return = step.extras["value"], turn["low_return"]
            sample.critic_targets = _targets(step, turn, low_value_index(pieces))
            for head, (old, target) in sample.critic_targets["heads"].items():
                heads[head].append((old, target))
        parts = gather(heads)
        heads = {head: [pair for part in parts for pair in part[head]] for head in heads}
        figures = {"value_mean": _mean([o for o, _ in heads[LOW]]), "value_return_mean": _mean([r for _, r in heads[LOW]])}
        for head, name in ((LOW, "low"), (HIGH, "high"), (SWITCH, "switch")):
            if heads[head]:
                old, target = np.array(heads[head]).T
                figures[f"value_explained_var_{name}"] = explained_variance(old, target)
        figures["value_explained_var"] = figures.get("value_explained_var_low", 0.0)
        return {**figures, **self.figures}

    def loss(self, policy: Any, part: Sequence[TrainingSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        """``value_coef`` x ``(L_low + high_value_coef L_high + switch_value_coef L_switch)``, each the
        clipped value loss of its head at its read position over the turns it is fitted on, weighted by
        the sample weights and divided by ``denominator`` (the mini-batch's summed weights); the figures
        ``value_loss`` (the unscaled sum) and ``value_low_loss``/``value_high_loss``/``value_switch_loss``
        (each a ``*loss``: a mini-batch's parts add up to it, as ``value_loss``'s do)."""
        rows = [s for s in part if s.critic_targets is not None]
        if not rows:
            return torch.zeros((), device=policy.device), {}
        at_prompt = self.values(policy, [s.decision.prompt_ids for s in rows])
        low_prompts = [list(s.decision.prompt_ids) + list(s.decision.response_ids[: s.critic_targets["low_index"] + 1])
                       for s in rows]
        predicted = {LOW: self.values(policy, low_prompts)[:, LOW], HIGH: at_prompt[:, HIGH]}
        if self.hiper.switch_head:
            predicted[SWITCH] = at_prompt[:, SWITCH]
        coefficients = {LOW: 1.0, HIGH: self.hiper.high_value_coef, SWITCH: self.hiper.switch_value_coef}
        total = torch.zeros((), device=policy.device)
        stats: dict[str, float] = {}
        for head, name in ((LOW, "low"), (HIGH, "high"), (SWITCH, "switch")):
            if head not in predicted:
                continue
            term, clipped = self.head_loss(predicted[head], rows, head, denominator)
            total = total + coefficients[head] * term
            stats[f"value_{name}_loss"] = float(term.detach())
            if head == LOW:  # every row fits the low head: its shares are the rows'
                share = unit_shares(rows, policy)
                stats["value_clip_fraction"] = float((clipped * share).sum())
                stats["value_pred_mean"] = float((predicted[LOW].detach() * share).sum())
        stats["value_loss"] = float(total.detach())
        return self.settings.value_coef * total, stats

    def idle_loss(self, policy: Any) -> torch.Tensor:
        """A zero through both reads of the trunk :meth:`loss` makes (the prompt's, the low head's)."""
        pad = [[policy.pad_id]]
        return (self.values(policy, pad).sum() + self.values(policy, pad).sum()) * 0.0

    def head_loss(self, predicted: torch.Tensor, rows: Sequence[TrainingSample], head: int,
                  denominator: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One head's clipped value loss over the rows that fit it, and whether each row was clipped
        (0 where the row does not fit the head)."""
        device = predicted.device
        fitted = [i for i, s in enumerate(rows) if head in s.critic_targets["heads"]]
        if not fitted:
            return torch.zeros((), device=device), torch.zeros(len(rows), device=device)
        index = torch.tensor(fitted, device=device)
        old, target = zip(*(rows[i].critic_targets["heads"][head] for i in fitted))
        weight = torch.tensor([rows[i].weight for i in fitted], dtype=torch.float32, device=device)
        per_sample, clipped = clipped_value_loss(predicted[index], torch.tensor(old, dtype=torch.float32, device=device),
                                                 torch.tensor(target, dtype=torch.float32, device=device),
                                                 self.settings.value_clip)
        was_clipped = torch.zeros(len(rows), device=device).index_copy(0, index, clipped)
        return (per_sample * weight).sum() / max(denominator, 1e-8), was_clipped


def _decision(step: Step) -> Decision:
    if step.decision is None:
        raise ValueError("the hiper critic reads the policy's responses: every step of a hiper batch needs its "
                         "Step.decision")
    return step.decision


def _turn(credit: HiperCredit, b: int, t: int) -> dict[str, Any]:
    """Turn ``t`` of episode ``b``'s credit as plain data: each level's advantage (None where that level
    does not reach the turn) and each head's target (None where that head is not fitted)."""
    start, switch = bool(credit.high_turns[b, t]), credit.switch_advantages is not None
    return {"segment_start": bool(credit.starts[b, t]),
            "low_advantage": float(credit.low_advantages[b, t]), "low_return": float(credit.low_returns[b, t]),
            "high_advantage": float(credit.high_advantages[b, t]) if start else None,
            "high_return": float(credit.high_returns[b, t]) if credit.starts[b, t] else None,
            "switch_advantage": float(credit.switch_advantages[b, t]) if switch and credit.switch_turns[b, t] else None,
            "switch_return": float(credit.switch_returns[b, t]) if switch else None}


def _targets(step: Step, turn: Mapping[str, Any], low_index: int) -> dict[str, Any]:
    """A sample's critic targets: where the low head reads it, and per fitted head (old value, target)."""
    heads = {LOW: (step.extras["value"], turn["low_return"])}
    if turn["high_return"] is not None:
        heads[HIGH] = (step.extras["value_high"], turn["high_return"])
    if turn["switch_return"] is not None:
        heads[SWITCH] = (step.extras["value_switch"], turn["switch_return"])
    return {"low_index": low_index, "heads": heads}


def _level_counts(credit: HiperCredit, episodes: Sequence[EpisodeTurns]) -> dict[str, Any]:
    """What the levels' figures are made of, for a batch's episodes (a rank's: the ranks' add up): the
    episodes, turns, segments and plans that kept the format, and each level's absolute advantages
    where it applies."""
    inside = np.arange(credit.starts.shape[1])[None, :] < credit.lengths[:, None]
    switch = None if credit.switch_advantages is None else np.abs(credit.switch_advantages[credit.switch_turns])
    return {"episodes": len(episodes), "turns": int(inside.sum()), "segments": int(credit.starts.sum()),
            "valid": sum(r.valid for e in episodes for r in e.responses),
            "low": np.abs(credit.low_advantages[inside]), "high": np.abs(credit.high_advantages[credit.high_turns]),
            "switch": switch}


def _level_figures(parts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The batch's figures of the two levels from every rank's :func:`_level_counts`: segments per
    episode and their mean length, the share of turns whose plan kept the format, and each level's
    mean absolute advantage where it applies."""
    total = {key: sum(part[key] for part in parts) for key in ("episodes", "turns", "segments", "valid")}
    level = {key: np.concatenate([part[key] for part in parts]) for key in ("low", "high")}
    figures = {"hiper_segments": total["segments"] / max(1, total["episodes"]),
               "hiper_segment_length": float(total["turns"]) / max(1, total["segments"]),
               "hiper_plan_valid_rate": total["valid"] / max(1, total["turns"]),
               "hiper_adv_low_abs_mean": _mean(level["low"]), "hiper_adv_high_abs_mean": _mean(level["high"])}
    if parts and parts[0]["switch"] is not None:
        figures["hiper_adv_switch_abs_mean"] = _mean(np.concatenate([part["switch"] for part in parts]))
    return figures


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0
