"""The critic as a trainer component: it scores the batch's states, sets the value targets on the
training samples, and adds the clipped value loss to each micro-batch's loss.

Each iteration, for ``algorithm.name: ppo`` (:class:`Critic`)::

    critic.annotate(batch, policy)        # V(s_t) of every distinct step, no gradients, with the
                                          # weights that are about to be updated (verl's compute_values):
                                          # Step.extras["value"]; a truncated episode's V(s_T) in
                                          # Trajectory.meta["bootstrap_value"]
    advantages = estimator(batch)         # GAE from those values (ptgpo_algos.advantages.ppo)
    stats = critic.set_targets(batch, samples, estimator_config)   # old value and return per sample
    ... each micro-batch: loss += value_coef * critic.loss(policy, part, denominator)

The value is read at the last prompt token of a turn: ``V(s_t)`` of the state the decision is taken in,
before any of its tokens (one value per turn, the unit the environment rewards). The head reads the
policy's own trunk (shared), so the value loss trains the trunk too unless ``detach_trunk``; with
``shared_trunk: false`` it reads a trunk of its own instead, a copy of the policy made when the run
starts (verl's separate critic model), which only the value loss trains.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ptgpo_algos.advantages.ppo import ppo_targets
from ptgpo_algos.advantages.table import StepTable
from ptgpo_algos.training.collectors import restore_weights, snapshot_weights
from ptgpo_algos.critic.head import ValueHead, hidden_size
from ptgpo_algos.critic.loss import clipped_value_loss, explained_variance
from ptgpo_algos.critic.settings import CRITIC_ESTIMATORS, CriticSettings, ValuePasses, uses_critic
from ptgpo_algos.records import Batch, Decision, Step
from ptgpo_algos.rollouts.collection import FINAL_CONTEXT
from ptgpo_algos.updates.samples import TrainingSample, units

__all__ = ["Critic", "build_critic", "unit_shares"]


class Critic:
    """The value head on ``policy``'s trunk (or on a copy of it, ``shared_trunk: false``) with its
    settings (see the module docstring); ``n_values`` outputs per state (PPO reads the first)."""

    def __init__(self, settings: CriticSettings, policy: Any, n_values: int = 1):
        self.settings = settings
        #: The critic's own trunk (a copy of the policy when it starts), or None: it reads the policy's.
        self.trunk = None if settings.shared_trunk else copy.deepcopy(policy)
        self.head = ValueHead(hidden_size(policy.model), n_values).to(policy.device)

    @classmethod
    def from_algorithm(cls, algorithm: Any, policy: Any) -> Critic:
        """The critic of a run whose ``algorithm`` section (the config's) names an estimator that reads
        this class's values; a subclass with settings of its own reads them here."""
        return cls(algorithm.critic, policy)

    @classmethod
    def value_passes(cls, algorithm: Any) -> ValuePasses:
        """What this critic's value loss reads under ``algorithm`` (for the memory planner): one value per
        state, read at the prompt's last token."""
        return ValuePasses(heads=1, response_pass=False)

    @property
    def shares_trunk(self) -> bool:
        """Whether the head reads the policy's own trunk (the gradients are then clipped together)."""
        return self.trunk is None

    def param_group(self, lr: float) -> dict[str, Any]:
        """The critic's optimiser parameter group (the head, and a trunk of its own): ``value_head_lr``
        (else ``lr``, the policy's) and its own weight decay."""
        return {"params": self.parameters(), "lr": self.settings.value_head_lr or lr,
                "weight_decay": self.settings.value_head_weight_decay}

    def parameters(self) -> list[torch.nn.Parameter]:
        """The critic's own trainable parameters: the head's, and its trunk's when it has one."""
        own = [] if self.trunk is None else list(self.trunk.parameters())
        return own + list(self.head.parameters())

    def values(self, policy: Any, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """``(batch, n_values)`` values of the prompts' states, with gradients (into the trunk it reads
        unless ``detach_trunk``)."""
        states = (policy if self.trunk is None else self.trunk).prompt_states(prompts)
        return self.head(states.detach() if self.settings.detach_trunk else states)

    def score(self, policy: Any, prompts: Sequence[Sequence[int]], batch_size: int) -> np.ndarray:
        """``(len(prompts), n_values)`` values of the prompts' states, without gradients, ``batch_size``
        prompts a pass."""
        out: list[np.ndarray] = []
        starts = range(0, len(prompts), batch_size)
        # Sharded, every rank runs as many passes as the rank with the most (each is a round of
        # collectives), the extra ones on one padding token.
        agree = getattr(policy, "agree_passes", None)
        ballast = agree(len(starts)) - len(starts) if agree is not None else 0
        with torch.no_grad():
            for start in starts:
                out.append(self.values(policy, prompts[start:start + batch_size]).float().cpu().numpy())
            for _ in range(ballast):
                self.values(policy, [[policy.pad_id]])
        return np.concatenate(out) if out else np.zeros((0, self.head.n_values))

    def annotate(self, batch: Batch, policy: Any, batch_size: int,
                 gather: Callable[[Any], list[Any]] = lambda local: [local]) -> None:
        """Record ``V(s_t)`` on every distinct step (``Step.extras["value"]``) and, with
        ``bootstrap_truncated``, ``V(s_T)`` of each episode the horizon cut off
        (``Trajectory.meta["bootstrap_value"]``; an episode that terminated has none, 0). Each value is
        a state's own: ``gather`` (every rank's, for a critic whose annotations pool the batch) is not
        needed here; across ranks the trainer whitens PPO's advantages over every rank's."""
        del gather
        steps: dict[int, Step] = {}
        for group in batch:
            for trajectory in group:
                for step in trajectory.steps:
                    steps.setdefault(id(step), step)
        distinct = list(steps.values())
        for step, values in zip(distinct, self.score(policy, [_decision(s).prompt_ids for s in distinct], batch_size)):
            step.extras["value"] = float(values[0])
        if not self.settings.bootstrap_truncated:
            return
        cut = [t for group in batch for t in group if t.steps and FINAL_CONTEXT in t.steps[-1].extras]
        prompts = [policy.prompts.prompt_ids(t.steps[-1].extras[FINAL_CONTEXT]) for t in cut]
        for trajectory, values in zip(cut, self.score(policy, prompts, batch_size)):
            trajectory.meta["bootstrap_value"] = float(values[0])

    def set_targets(self, batch: Batch, samples: Sequence[TrainingSample], estimator: Mapping[str, Any],
                    gather: Callable[[Any], list[Any]] = lambda local: [local]) -> dict[str, float]:
        """Each sample's old value and value target (the mean GAE return over the trajectories through
        its step, as its advantage is the mean), from the estimator's ``gamma``, ``invalid_penalty`` and
        ``gae_lambda``; the batch's value figures: ``value_mean``, ``value_return_mean`` and
        ``value_explained_var`` (of the old values, over the distinct steps; across ranks over every
        rank's, which ``gather`` collects in rank order)."""
        table = StepTable.from_batch(batch)
        _, returns = ppo_targets(table, estimator["gamma"], estimator["invalid_penalty"], estimator["gae_lambda"])
        totals: dict[int, list[float]] = {}
        flat = [step for group in batch for trajectory in group for step in trajectory.steps]
        for step, target in zip(flat, returns.tolist()):
            entry = totals.setdefault(id(_decision(step)), [step.extras["value"], 0.0, 0])
            entry[1] += target
            entry[2] += 1
        old, targets = [], []
        for sample in samples:
            entry = totals.get(id(sample.decision))
            if entry is None:  # an auxiliary objective's item: no value target
                continue
            sample.old_value, sample.value_return = entry[0], entry[1] / entry[2]
            old.append(sample.old_value)
            targets.append(sample.value_return)
        parts = gather((old, targets))
        old, targets = [v for part in parts for v in part[0]], [v for part in parts for v in part[1]]
        return {"value_mean": float(np.mean(old)) if old else 0.0,
                "value_return_mean": float(np.mean(targets)) if targets else 0.0,
                "value_explained_var": explained_variance(np.asarray(old), np.asarray(targets))}

    def loss(self, policy: Any, part: Sequence[TrainingSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        """``value_coef`` x the clipped value loss of ``part``'s samples with a target, each weighted by its
        sample weight and divided by ``denominator`` (the whole mini-batch's summed weights, so that the
        parts add up to it); its figures: ``value_loss`` (unscaled, a part of the mini-batch's),
        ``value_clip_fraction`` and ``value_pred_mean`` (means over the rows' weighted loss units, as the
        update's other figures are: :func:`unit_shares`)."""
        rows = [s for s in part if s.value_return is not None]
        if not rows:
            return torch.zeros((), device=policy.device), {}
        device = policy.device
        predicted = self.values(policy, [s.decision.prompt_ids for s in rows])[:, 0]
        old = torch.tensor([s.old_value for s in rows], dtype=torch.float32, device=device)
        returns = torch.tensor([s.value_return for s in rows], dtype=torch.float32, device=device)
        weight = torch.tensor([s.weight for s in rows], dtype=torch.float32, device=device)
        per_sample, clipped = clipped_value_loss(predicted, old, returns, self.settings.value_clip)
        value_loss = (per_sample * weight).sum() / max(denominator, 1e-8)
        share = unit_shares(rows, policy)
        stats = {"value_loss": float(value_loss.detach()),
                 "value_clip_fraction": float((clipped * share).sum()),
                 "value_pred_mean": float((predicted.detach() * share).sum())}
        return self.settings.value_coef * value_loss, stats

    def idle_loss(self, policy: Any) -> torch.Tensor:
        """A zero through the same reads of the trunk as :meth:`loss` makes on a micro-batch, on one
        padding token: a rank with fewer micro-batches takes part in the sharded trunk's collectives."""
        return self.values(policy, [[policy.pad_id]]).sum() * 0.0

    def state_dict(self) -> dict[str, Any]:
        """The head's weights and its own trunk's trainable ones (their optimiser state is in the run's
        optimiser)."""
        head = {key: value.detach().cpu().clone() for key, value in self.head.state_dict().items()}
        return {"head": head, "trunk": None if self.trunk is None else snapshot_weights(self.trunk)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the weights :meth:`state_dict` took (``KeyError``/``RuntimeError`` when they do not fit)."""
        self.head.load_state_dict(dict(state["head"]))
        if (self.trunk is None) != (state["trunk"] is None):
            raise KeyError("trunk: the checkpoint's critic and this run's differ in shared_trunk")
        if self.trunk is not None:
            restore_weights(self.trunk, state["trunk"])


def unit_shares(rows: Sequence[TrainingSample], policy: Any) -> torch.Tensor:
    """Each row's share of the rows' weighted loss units (its sample weight times its units: the choice,
    or the response's tokens): a figure that is a mean over a part's rows in these shares combines
    over parts and ranks by their units (:func:`~ptgpo_algos.updates.samples.accumulate_gradients`) into the
    same mean as over the whole mini-batch."""
    amounts = torch.tensor([s.weight * units(s.decision, policy.mode) for s in rows], dtype=torch.float32,
                           device=policy.device)
    return amounts / amounts.sum().clamp_min(1e-8)


def build_critic(algorithm: Any, policy: Any) -> Critic | None:
    """The critic the estimator ``algorithm.name`` was registered with (:data:`CRITIC_ESTIMATORS`, its
    class imported now), on ``policy``; None for an estimator that reads no critic."""
    if not uses_critic(algorithm.name):
        return None
    critic = CRITIC_ESTIMATORS.get(algorithm.name)
    if not (isinstance(critic, type) and issubclass(critic, Critic)):
        raise TypeError(f"the critic registered for the estimator {algorithm.name!r} is {critic!r}, not a subclass "
                        "of ptgpo_algos.critic.component.Critic")
    return critic.from_algorithm(algorithm, policy)


def _decision(step: Step) -> Decision:
    if step.decision is None:
        raise ValueError("the critic scores the policy's decisions: every step of a ppo batch needs its "
                         "Step.decision (its prompt's tokens)")
    return step.decision
