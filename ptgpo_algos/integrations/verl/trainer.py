"""A trainer mode of verl's v1 trainer that credits decision rows with our estimators: ``ptgpo``.

verl 0.9's v1 trainer (``trainer.use_v1=True``, ``verl.trainer.ppo.v1``) picks its class by
``trainer.v1.trainer_mode`` from its registry (``register_trainer``); its rows live in TransferQueue
(the ``transferqueue`` package), one per agent-loop output. :class:`PTGPOTrainer`, registered as
``ptgpo``, is verl's synchronous trainer (``sync``) with its advantage step replaced: it reads each
row's ``uid``, ``response_mask`` and ``extra_fields`` from TransferQueue and gives every row the
advantage :func:`~ptgpo_algos.integrations.verl.steps.decision_advantages` gives its decision (the
``ptgpo_env_steps`` loop's steps and the ``ptgpo_tree`` loop's tree nodes), on the row's response
tokens, as ``advantages`` and ``returns``. The rewards are the decisions' own: verl's v1 worker
copies the last output's ``reward_score`` onto every output of a sample, so ``rm_scores`` would
give every decision the last one's reward.

The estimator is ``algorithm.adv_estimator`` (our name, or the name :func:`register_estimators
<ptgpo_algos.integrations.verl.register_estimators>` gave it in verl's registry, where verl's config
check looks it up), its keys ``algorithm.ptgpo_config`` (``+algorithm.ptgpo_config.omega=1.0``).
What verl's own advantage step adds and this one does not is refused when the trainer starts: the
KL penalty in the reward (``algorithm.use_kl_in_reward``; use the actor's KL loss) and rollout
correction's importance weights outside bypass mode.

verl looks the trainer mode and the agent loops up in the processes that run them, its TaskRunner
and agent-loop workers, which are Ray actors: importing this module registers the mode and our agent
loops (:func:`register`) in the importing process, and a run makes every Ray worker do so with Ray's
setup hook: ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=``
``ptgpo_algos.integrations.verl.trainer.register``.
The module needs ``transfer_queue`` (``pip install transferqueue``), which verl imports only in its
v1 trainer and lists only in its heavy ``verl-core`` extra; verl's ``neo`` line removes both, and
importing this module there fails naming the default-trainer route
(:mod:`ptgpo_algos.integrations.verl.leaves`) that replaces it.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from tensordict import TensorDict
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop

try:
    import transfer_queue as tq
    from verl.trainer.ppo.v1.trainer_base import register_trainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
except ImportError as error:
    raise ImportError(
        "the ptgpo trainer mode needs verl's v1 trainer and TransferQueue (pip install transferqueue), which verl's "
        "neo line removes: train with verl's default trainer instead (trainer.use_v1=false, the ptgpo_tree_leaf agent "
        "loop, worker_process_setup_hook=ptgpo_algos.integrations.verl.leaves.register; docs/integrations/verl.md)"
    ) from error

from ptgpo_algos.advantages import ESTIMATORS, compute_advantages
from ptgpo_algos.integrations.verl import PREFIX
from ptgpo_algos.integrations.verl.agent_loop import AGENT_NAME, STEPS_AGENT_NAME, EnvAgentLoop, EnvStepsAgentLoop
from ptgpo_algos.integrations.verl.steps import DECISION_KEY, decision_advantages
from ptgpo_algos.integrations.verl.tree import TREE_AGENT_NAME, TreeAgentLoop

__all__ = ["PTGPOTrainer", "TRAINER_MODE", "decision_token_advantages", "register", "trainer_estimator"]

#: The trainer mode's name in verl's registry (``trainer.v1.trainer_mode=ptgpo``).
TRAINER_MODE = "ptgpo"


def trainer_estimator(algorithm: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Our estimator and its config from verl's ``algorithm`` section; what this mode cannot honour
    raises ``ValueError`` saying which key to change."""
    name = str(algorithm.get("adv_estimator"))
    ours = name if name in ESTIMATORS.names() else name.removeprefix(PREFIX)
    if ours not in ESTIMATORS.names():
        raise ValueError(f"algorithm.adv_estimator: {name!r} is not one of our estimators "
                         f"({', '.join(ESTIMATORS.names())}); the ptgpo trainer mode credits with ours")
    if algorithm.get("use_kl_in_reward"):
        raise ValueError("algorithm.use_kl_in_reward: the ptgpo trainer mode credits the environment's rewards; "
                         "set it to false and use the actor's KL loss (actor_rollout_ref.actor.use_kl_loss)")
    correction = algorithm.get("rollout_correction") or {}
    if (correction.get("rollout_is") or correction.get("rollout_rs")) and not correction.get("bypass_mode"):
        raise ValueError("algorithm.rollout_correction: the ptgpo trainer mode does not add verl's importance "
                         "weights to the batch; use bypass_mode=true or leave rollout_is and rollout_rs null")
    config = dict(algorithm.get("ptgpo_config") or {})
    compute_advantages(ours, [], **config)  # a bad key fails when the trainer starts, not at its first step
    return ours, config


def decision_token_advantages(fields: TensorDict, name: str, **config: Any) -> torch.Tensor:
    """Each row's decision advantage on its ``response_mask`` tokens, for rows as verl's v1 trainer
    reads them from TransferQueue (``uid``, ``response_mask`` nested or padded, ``extra_fields``);
    nested when the mask is."""
    mask = fields["response_mask"]
    rows = list(mask.unbind()) if mask.is_nested else list(mask)
    extras = list(fields["extra_fields"])
    missing = [row for row, extra in enumerate(extras) if not isinstance(extra, Mapping) or DECISION_KEY not in extra]
    if missing:
        raise ValueError(f"extra_fields of rows {missing[:5]} hold no {DECISION_KEY!r}: the ptgpo trainer mode "
                         "credits the outputs of the ptgpo_env_steps and ptgpo_tree agent loops")
    values = decision_advantages(list(fields["uid"]), [extra[DECISION_KEY] for extra in extras], name,
                                 [int(row.sum()) for row in rows], **config)
    scores = [value * row.to(torch.float32) for value, row in zip(values, rows)]
    return torch.nested.as_nested_tensor(scores, layout=torch.jagged) if mask.is_nested else torch.stack(scores)


class PTGPOTrainer(PPOTrainerSync):
    """verl's synchronous v1 trainer whose advantage step runs our estimators on decision rows."""

    def __init__(self, config: Any):
        trainer_estimator(config.algorithm)
        super().__init__(config)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """Our advantages (and equal returns) for the rows of ``batch`` (verl's ``KVBatchMeta``),
        written back to TransferQueue as verl's own step writes them."""
        name, config = trainer_estimator(self.config.algorithm)
        fields = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                 select_fields=["uid", "response_mask", "extra_fields"])
        scores = decision_token_advantages(fields, name, **config)
        output = TensorDict({"advantages": scores, "returns": scores.clone()}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


def register() -> None:
    """Register the ``ptgpo`` trainer mode and our agent loops (``ptgpo_env``, ``ptgpo_env_steps``,
    ``ptgpo_tree``) in verl's registries of this process; registering again changes nothing."""
    register_trainer(TRAINER_MODE)(PTGPOTrainer)
    loops = {AGENT_NAME: EnvAgentLoop, STEPS_AGENT_NAME: EnvStepsAgentLoop, TREE_AGENT_NAME: TreeAgentLoop}
    for name, loop in loops.items():
        register_agent_loop(name)(loop)


register()
