"""Our advantage estimators inside verl: registered in verl's registry, on verl's batch layout.

verl (volcengine/verl) computes advantages in ``verl.trainer.ppo.ray_trainer.compute_advantage``,
which looks the configured ``algorithm.adv_estimator`` up in
``verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY`` and calls it with the batch's
``token_level_rewards`` and ``response_mask`` (batch x response tokens), the algorithm ``config`` and
``index`` (``non_tensor_batch["uid"]``: one id per prompt, shared by the ``rollout.n`` responses of
a group); it expects ``(advantages, returns)`` of the same shape back. :func:`register_estimators`
registers each of our estimators there, so that ``algorithm.adv_estimator=gigpo`` (or ``hgpo``,
``ptgpo``, ...) trains with our credit rules. Names verl already uses for its own estimators
(``grpo``, ``rloo``) get a ``ptgpo_`` prefix; the call returns the names it registered.

Two row layouts map onto our groups of :class:`~ptgpo_algos.records.Trajectory`:

* **one row per step** (verl-agent's layout, the reference implementation of GiGPO):
  ``non_tensor_batch`` holds ``uid`` (the group), ``traj_uid`` (the trajectory), ``anchor_obs`` (the
  observation the step was taken in: our ``state_key``) and optionally ``is_action_valid``, and the
  rows of a trajectory come in the order of its steps. Each row is one :class:`~ptgpo_algos.records.Step`:
  its reward is the sum of the row's token rewards (verl puts a reward on the last response token),
  its action the row's response tokens (``responses`` under ``response_mask``). verl's
  ``compute_advantage`` does not pass these keys to a registered estimator (only ``uid``), so a
  trainer with this layout calls :func:`compute_advantage` here in its place, one line, as
  verl-agent's trainer calls its own GiGPO;
* **one row per episode** (verl's own single- and multi-turn rollouts, whatever calls the registered
  estimator through verl's ``compute_advantage``): each row is a trajectory of one step, taken in the
  group's prompt (the state all rows of a group share) with an action of its own. Our GRPO and RLOO
  then give verl's GRPO and RLOO numbers, and the step-level estimators compare the group's
  responses at that one state; credit between the turns inside a row needs the first layout.

Our advantages go back onto the row's response tokens (``response_mask``); ``returns`` equal them, as
in verl's GRPO. The estimators' own config (``gamma``, ``omega``, ``K``...) is given to
:func:`register_estimators`, per estimator; verl's ``config`` (its GAE ``gamma``/``lam``) is not read.

verl is an optional dependency (``pip install 'ptgpo[verl]'``); only the registration imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ptgpo_algos.advantages import ESTIMATORS, compute_advantages
from ptgpo_algos.critic.settings import uses_critic
from ptgpo_algos.records import Step, Trajectory

__all__ = ["Placement", "bridged_estimators", "check_bridged", "compute_advantage", "register_estimators",
           "rows_to_batch", "to_token_advantages", "verl_estimator", "verl_name"]

#: Prefix of our estimators whose names verl's registry already holds for its own.
PREFIX = "ptgpo_"


@dataclass(frozen=True)
class Placement:
    """Where each row of a verl batch went: ``steps[row] = (group, trajectory, step)`` in the batch,
    None for an inactive row (``active_masks`` false), which gets no advantage."""

    steps: list[tuple[int, int, int] | None]


def _key(value: Any) -> str:
    """A state or action key from what a verl batch holds (text, token ids, arrays)."""
    if isinstance(value, str):
        return value
    return repr(np.asarray(value).tolist())


def rows_to_batch(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    *,
    traj_index: Sequence[Any] | None = None,
    anchor_obs: Sequence[Any] | None = None,
    responses: torch.Tensor | None = None,
    is_action_valid: Sequence[bool] | None = None,
    active_masks: Sequence[bool] | None = None,
) -> tuple[list[list[Trajectory]], Placement]:
    """verl's rows as our groups of trajectories (see the module docstring for both layouts).

    Groups follow the first appearance of their ``index`` and trajectories that of their
    ``traj_index``; a trajectory's steps are its rows in order. Raises ``ValueError`` naming the key
    for columns of the wrong length, a trajectory in two groups, or ``traj_index`` without ``anchor_obs``.
    """
    rows = int(response_mask.shape[0])
    columns = {"token_level_rewards": token_level_rewards, "index": index, "traj_index": traj_index,
               "anchor_obs": anchor_obs, "responses": responses, "is_action_valid": is_action_valid,
               "active_masks": active_masks}
    for name, column in columns.items():
        if column is not None and len(column) != rows:
            raise ValueError(f"{name}: {len(column)} rows, but response_mask has {rows}")
    if traj_index is not None and anchor_obs is None:
        raise ValueError("anchor_obs: one row per step (traj_index given) needs each step's anchor "
                         "observation, the state its step-level credit groups on")
    mask = response_mask.bool()
    rewards = token_level_rewards.sum(dim=-1).tolist()
    groups: dict[str, dict[str, Trajectory]] = {}
    owner: dict[str, str] = {}
    position: dict[str, tuple[int, int]] = {}
    steps: list[tuple[int, int, int] | None] = []
    for row in range(rows):
        if active_masks is not None and not bool(active_masks[row]):
            steps.append(None)
            continue
        group_id = _key(index[row])
        trajectory_id = _key(traj_index[row]) if traj_index is not None else f"row {row}"
        if owner.setdefault(trajectory_id, group_id) != group_id:
            raise ValueError(f"traj_index: trajectory {trajectory_id} is in groups {owner[trajectory_id]} "
                             f"and {group_id}")
        trajectories = groups.setdefault(group_id, {})
        if trajectory_id not in trajectories:
            trajectories[trajectory_id] = Trajectory()
            position[trajectory_id] = (list(groups).index(group_id), len(trajectories) - 1)
        trajectory = trajectories[trajectory_id]
        steps.append((*position[trajectory_id], len(trajectory)))
        tokens = responses[row][mask[row]].tolist() if responses is not None else None
        trajectory.steps.append(Step(
            state_key=_key(anchor_obs[row]) if anchor_obs is not None else "the group's prompt",
            # Without the response tokens each row's action is its own (sampled responses differ).
            action=_key(tokens) if tokens is not None else f"the response of row {row}",
            reward=float(rewards[row]),
            valid=True if is_action_valid is None else bool(is_action_valid[row]),
            # Only their number is read (by the estimators that weigh turns by their length).
            response_ids=tokens if tokens is not None else [0] * int(mask[row].sum()),
        ))
    return [list(trajectories.values()) for trajectories in groups.values()], Placement(steps)


def to_token_advantages(advantages: Sequence[Sequence[Sequence[float]]], placement: Placement,
                        response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's step advantage on its response tokens (zeros elsewhere and on inactive rows)."""
    per_row = [0.0 if where is None else advantages[where[0]][where[1]][where[2]] for where in placement.steps]
    values = torch.tensor(per_row, dtype=torch.float32, device=response_mask.device)
    return values.unsqueeze(-1) * response_mask.to(torch.float32)


def bridged_estimators() -> list[str]:
    """The estimators that run on verl's rows: all but those that credit what one of our rollout
    strategies records (3SPO's step rewards come from its search, which verl's rollouts do not run)
    and those that read our trainer's critic (ppo: verl runs PPO with its own critic, ``gae``)."""
    return [name for name in ESTIMATORS.names() if ESTIMATORS.get(name).strategy is None and not uses_critic(name)]


def check_bridged(name: str) -> None:
    """Refuse, naming why, an estimator that credits what only one of our rollout strategies records."""
    strategy = ESTIMATORS.get(name).strategy
    if uses_critic(name):
        raise ValueError(f"{name} reads the values of our trainer's critic, which verl's rows do not carry: verl runs "
                         f"PPO with its own critic (algorithm.adv_estimator: gae); on verl: {', '.join(bridged_estimators())}")
    if strategy is not None:
        raise ValueError(f"{name} credits what our {strategy} rollout strategy records, which verl's rollouts do "
                         f"not: train it with ptgpo train; on verl: {', '.join(bridged_estimators())}")


def verl_estimator(name: str, **config: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Estimator ``name`` (with its ``config``) as a function of verl's registry: called with verl's
    keywords (``token_level_rewards``, ``response_mask``, ``index``, ``config``...) and, in the
    one-row-per-step layout, ``traj_index``, ``anchor_obs``, ``responses``, ``is_action_valid``,
    ``active_masks``; returns ``(advantages, returns)``."""
    compute_advantages(name, [], **config)  # checks the name and the config now, not at the first batch
    check_bridged(name)

    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any] | None = None,
                  config: Any = None, **columns: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if index is None:
            raise ValueError(f"{name}: verl passed no index (non_tensor_batch['uid']): group estimators "
                             "need each response's group")
        known = {"traj_index", "anchor_obs", "responses", "is_action_valid", "active_masks"}
        batch, placement = rows_to_batch(token_level_rewards, response_mask, index,
                                         **{k: v for k, v in columns.items() if k in known})
        with torch.no_grad():
            scores = to_token_advantages(compute_advantages(name, batch, **estimator_config), placement,
                                         response_mask)
        return scores, scores

    estimator_config = dict(config)
    estimator.__name__ = f"ptgpo_{name}"
    estimator.__qualname__ = estimator.__name__
    estimator.ptgpo_estimator = name  # type: ignore[attr-defined]
    return estimator


def verl_name(name: str, taken: Sequence[str]) -> str:
    """The name estimator ``name`` has in verl's registry: its own, or ``ptgpo_<name>`` where verl's
    registry (``taken``) already holds that name for another estimator."""
    return PREFIX + name if name in taken else name


def register_estimators(config: Mapping[str, Mapping[str, Any]] | None = None, *,
                        make: Callable[..., Callable[..., tuple[torch.Tensor, torch.Tensor]]] = verl_estimator,
                        ) -> dict[str, str]:
    """Register every estimator of :data:`~ptgpo_algos.advantages.ESTIMATORS` that runs on verl's rows
    (:func:`bridged_estimators`) in verl's registry, each as ``make(name, **its config)`` makes it
    (:func:`verl_estimator`; the default-trainer route's tree-aware estimators:
    :func:`ptgpo_algos.integrations.verl.leaves.tree_estimator`);
    ``config`` maps an estimator's name to its config. Returns ``{our name: verl's name}``. Calling
    it again replaces the entries it made (with the new config)."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as error:
        raise ImportError("the verl integration needs verl: pip install 'ptgpo[verl]'") from error
    config = dict(config or {})
    bridged = bridged_estimators()
    unknown = sorted(set(config) - set(bridged))
    if unknown:
        raise ValueError(f"config: unknown estimator(s) {unknown}; registered: {', '.join(bridged)}")
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    ours = {key for key, fn in registry.items() if hasattr(fn, "ptgpo_estimator")}
    for key in ours:
        del registry[key]  # verl refuses to register a name twice; these are ours, made before
    taken = list(registry)
    names = {}
    for name in bridged:
        names[name] = verl_name(name, taken)
        core_algos.register_adv_est(names[name])(make(name, **config.get(name, {})))
    return names


def compute_advantage(data: Any, name: str, **config: Any) -> Any:
    """verl's ``compute_advantage`` for a batch in the one-row-per-step layout (``DataProto`` with
    ``non_tensor_batch`` ``uid``, ``traj_uid``, ``anchor_obs`` and optionally ``is_action_valid``,
    ``active_masks``): sets ``data.batch["advantages"]`` and ``["returns"]`` and returns ``data``."""
    extras = data.non_tensor_batch
    scores, returns = verl_estimator(name, **config)(
        data.batch["token_level_rewards"], data.batch["response_mask"], extras["uid"],
        traj_index=extras.get("traj_uid"), anchor_obs=extras.get("anchor_obs"),
        responses=data.batch["responses"] if "responses" in data.batch.keys() else None,
        is_action_valid=extras.get("is_action_valid"), active_masks=extras.get("active_masks"),
    )
    data.batch["advantages"], data.batch["returns"] = scores, returns
    return data
