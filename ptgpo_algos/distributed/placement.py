"""One rank of a training run across processes (``ptgpo train --nproc N``, or one of the ranks
``torchrun`` started): the :class:`~ptgpo_algos.training.placement.Placement` operations across ranks.

Every rank holds the same :class:`~ptgpo_algos.training.state.TrainState` (counters, the run's generators)
and computes the same decisions from it; what differs between ranks is only which tasks they play
and which samples they train on:

* **Rollouts** (:class:`RankCollector`). Every rank draws the iteration's tasks and one seed per task
  from the run's generator, and plays its block of the tasks
  (:func:`~ptgpo_algos.distributed.work_split.split_evenly`: a task's group, a prefix tree included,
  stays on one rank) with a full transformers copy of the weights (:mod:`ptgpo_algos.distributed.policy`)
  or, with ``rollouts.backend: vllm``, its own vLLM engine on its own GPU
  (:mod:`ptgpo_algos.distributed.engine`), one task at a time, each with generators seeded by its own
  seed (:func:`~ptgpo_algos.training.collectors.draw_per_task`, :func:`~ptgpo_algos.training.collectors.play_per_task`).
  A group therefore depends on its task's seed and the weights alone, not on the number of ranks:
  the run is the same on any world size, and in one process (which plays its tasks so by default,
  ``rollouts.seeding: per_task``), up to the order of float sums in the gradients, and resumes on
  any world size. The decision budget (``run.total_decisions``) is shared out per task
  (:func:`~ptgpo_algos.distributed.work_split.share_budget`), so the ranks together spend it exactly.
* **Advantages** are estimated where the groups are; the metrics row's figures are gathered.
* **A learned critic** (``algorithm.name: ppo``, ``hiper``): its value head is small and replicated, the
  same on every rank (it starts at zero), read on the sharded trunk; each rank scores the values of its
  own groups (GAE needs a trajectory's alone; HiPER's credit too, whitened over every rank's), its value
  loss is divided by the whole mini-batch's weights and the head's gradients are summed across ranks,
  so every rank takes the same step as one process.
  Its weights and optimiser state go into ``checkpoint/`` beside the model's (``value_head.*``). A
  critic model of its own (``shared_trunk: false``) is refused.
* **The update** is :class:`~ptgpo_algos.distributed.updater.ShardedUpdater` on the FSDP2-sharded
  model; the rollout copies (or engines, streamed in bounded messages) then get the new weights,
  gathered from the shards.
* **Evaluation** splits the held-out seeds in blocks and gathers the episodes in order.
* **Files.** Rank 0 alone holds the run folder's lock and writes ``config.json``, the logs and
  ``final_model/`` (the weights gathered from the shards); checkpoints go to ``checkpoint/`` shard
  by shard (:mod:`ptgpo_algos.distributed.sharded_checkpoint`), every rank writing its own.

Not across ranks (refused before anything is built, the setting and the operation named, by
:func:`check_sharded_config`): asynchronous rollouts, rollout strategies that remember states across
iterations, auxiliary objectives, rollout records, ``rollouts.seeding: shared``, rollout backends
other than transformers and vLLM, and a critic model of its own (``algorithm.critic.shared_trunk: false``).
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any, Callable

import torch

from ptgpo_algos.training.collectors import draw_per_task, env_horizon, play_per_task
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.critic.files import save_critic
from ptgpo_algos.critic.settings import uses_critic
from ptgpo_algos.records import Batch
from ptgpo_algos.distributed.collectives import Metric, all_reduce, combine_metrics, gather_in_order, gather_objects
from ptgpo_algos.distributed.engine import build_rank_engine, push_gathered
from ptgpo_algos.distributed.policy import copy_weights, gathered_state, rollout_copy, shard_policy
from ptgpo_algos.distributed.process_group import RankInfo
from ptgpo_algos.distributed.sharded_checkpoint import load_sharded, save_sharded
from ptgpo_algos.distributed.updater import ShardedUpdater
from ptgpo_algos.distributed.work_split import split_evenly
from ptgpo_algos.rollouts.evaluation import EvalResult
from ptgpo_algos.files import atomic_folder
from ptgpo_algos.training.placement import CHECKPOINT_FILE, Placement, claim_folder
from ptgpo_algos.rollouts.collection import RolloutStats
from ptgpo_algos.training.run_folder import SHARDED_CHECKPOINT
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES

__all__ = ["SHARDED_BACKENDS", "RankCollector", "Ranks", "check_sharded_config"]

#: How each rollout count combines across ranks (the rest add up).
_STATS_KINDS = {"wall_time_s": "max"}

#: The rollout backends a run across ranks plays with: a transformers copy of the weights on each
#: rank, or each rank's own vLLM engine (:mod:`ptgpo_algos.distributed.engine`).
SHARDED_BACKENDS = ("transformers", "vllm")


def check_sharded_config(config: TrainConfig) -> None:
    """Refuse what a run across ranks does not do, naming the setting and the operation that cannot
    be split across ranks."""
    if config.rollouts.asynchronous:
        raise ValueError(f"{label('rollouts.asynchronous')}: not with --nproc: each rank plays its tasks between "
                         "updates with the last update's weights; set it to false")
    if config.rollouts.backend not in SHARDED_BACKENDS:
        raise ValueError(f"{label('rollouts.backend')}: {config.rollouts.backend!r} is not supported with --nproc "
                         "(each rank plays with a transformers copy of the weights, or its own vLLM engine); use "
                         "transformers or vllm")
    if ROLLOUT_STRATEGIES.get(config.rollouts.strategy).memory is not None:
        raise ValueError(f"{label('rollouts.strategy')}: {config.rollouts.strategy} keeps what it learnt of the states "
                         "across iterations in one place, which ranks playing their own tasks do not share; train it "
                         "in one process")
    if config.algorithm.objectives:
        names = ", ".join(str(o.get("name")) for o in config.algorithm.objectives)
        raise ValueError(f"{label('algorithm.objectives')}: {names} do not run across ranks (their items are drawn "
                         "from the whole batch, which no rank holds); leave them out with --nproc, or train in one "
                         "process")
    if uses_critic(config.algorithm.name) and not config.algorithm.critic.shared_trunk:
        raise ValueError("algorithm.critic.shared_trunk: false gives the critic a model of its own, which is not "
                         "sharded across ranks; set it to true with --nproc, or train in one process")
    if config.rollouts.seeding != "per_task":
        raise ValueError(f"{label('rollouts.seeding')}: {config.rollouts.seeding} draws every task's rollouts from one "
                         "generator in one pass, which ranks playing their own tasks do not share; set it to per_task")
    if config.run.record_rollouts is not None:
        raise ValueError(f"{label('run.record_rollouts')}: each rank holds only its own groups, and the run folder "
                         "is the first rank's; leave it out with --nproc, or train in one process")


class Ranks(Placement):
    """This process as rank ``info.rank`` of ``info.world_size`` (module docstring)."""

    checkpoint_name = SHARDED_CHECKPOINT

    def __init__(self, info: RankInfo):
        self.info = info
        self.world_size, self.rank = info.world_size, info.rank
        self.root: torch.nn.Module | None = None
        #: Whether each rank plays with its own vLLM engine rather than a transformers copy.
        self.separate_engine = False

    def device(self, config: TrainConfig) -> str:
        """This rank's device (its GPU, or the CPU)."""
        return self.info.device

    def check(self, config: TrainConfig) -> None:
        """:func:`check_sharded_config`."""
        check_sharded_config(config)

    def claim(self, trainer: Any, stack: contextlib.ExitStack) -> bool:
        """Rank 0 claims the folder as one process does and refuses a single process's checkpoint;
        every rank learns whether the run resumes, or raises rank 0's refusal."""
        refusal: Exception | None = None
        resumed = False
        if self.is_main:
            try:
                resumed = claim_folder(trainer, stack)
            except Exception as error:  # noqa: BLE001 - every rank must hear of it, or they wait forever
                refusal = error
            if refusal is None and resumed and not (trainer.config.run_dir / SHARDED_CHECKPOINT).is_dir():
                refusal = ValueError(f"{str(trainer.config.run_dir)!r} holds {CHECKPOINT_FILE}, a single "
                                     "process's checkpoint: resume it without --nproc")
        message, resumed = gather_objects((None if refusal is None else str(refusal), resumed))[0]
        if refusal is not None:
            raise refusal
        if message is not None:
            raise ValueError(message)
        return resumed

    def build_policy(self, config: TrainConfig, device: str) -> Any:
        """The policy built on every rank alike, rank 0 first: building the tiny model may write its cache."""
        policy = None
        for turn in (True, False):
            if self.is_main == turn:
                policy = super().build_policy(config, device)
            all_reduce([0])
        return policy

    def rollout_policy(self, trainer: Any) -> Any:
        """A full transformers copy of the weights, or the rank's own vLLM engine."""
        self.separate_engine = trainer.config.rollouts.backend != "transformers"
        if self.separate_engine:
            return build_rank_engine(trainer.config, trainer.policy, self.info)
        return rollout_copy(trainer.policy)

    def plays_elsewhere(self, trainer: Any) -> bool:
        """Only a rank's own vLLM engine: a transformers copy computes as the masters."""
        return self.separate_engine

    def wrap(self, trainer: Any) -> None:
        """The policy sharded by FSDP2, and a reference that is not the same model (LoRA) sharded too."""
        fsdp = trainer.config.optim.fsdp
        self.root = shard_policy(trainer.policy, fsdp, trainer.device)
        reference = trainer.reference
        if reference is not None:
            if reference.model is trainer.policy.model:  # LoRA: the same model, adapters off
                reference.root = self.root
            else:
                shard_policy(reference, fsdp, trainer.device)

    def updater(self, trainer: Any, **keywords: Any) -> ShardedUpdater:
        """The update on the shards (:class:`~ptgpo_algos.distributed.updater.ShardedUpdater`)."""
        config = trainer.config
        return ShardedUpdater(trainer.policy, trainer.optimizer, config.optim, config.algorithm, rank=self.rank,
                              **keywords)

    def collector(self, trainer: Any) -> RankCollector:
        """This rank's block of each iteration's tasks (:class:`RankCollector`)."""
        return RankCollector(trainer, self)

    def push_weights(self, trainer: Any) -> dict[str, Any]:
        """The sharded model's weights, gathered, into what plays on this rank (every rank calls it):
        copied into the transformers copy, or streamed into the rank's engine."""
        if self.separate_engine:
            return push_gathered(trainer.rollout_policy, trainer.policy, self.root, trainer.device)
        return copy_weights(trainer.rollout_policy.model, self.root)

    def evaluation(self, seeds: list[int], play: Callable[[list[int]], EvalResult]) -> dict[str, Any]:
        """Each rank plays its block of ``seeds``; the episodes gathered in seed order."""
        mine = [seeds[i] for i in split_evenly(len(seeds), self.world_size)[self.rank]]
        result = play(mine) if mine else EvalResult()
        environment: dict[str, Any] = {}
        for part in gather_objects(result.environment):
            environment.update(part)
        return EvalResult(gather_in_order(result.episodes), environment).summary()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order."""
        return gather_objects(value)

    def total(self, value: float) -> float:
        """``value`` summed over the ranks, the same sum on every rank."""
        return float(all_reduce([value], op="sum")[0])

    def agree(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on one (their clocks differ)."""
        return bool(all_reduce([float(flag)], op="max")[0])

    def save_checkpoint(self, trainer: Any, run_state: dict[str, Any]) -> int:
        """``checkpoint/``: each rank's shards of the weights and the optimiser's state, and rank 0's run state
        (the same on every rank); its size on rank 0."""
        folder = trainer.config.run_dir / SHARDED_CHECKPOINT
        save_sharded(folder, self.checkpointed(trainer), trainer.optimizer, run_state)
        return sum(path.stat().st_size for path in folder.iterdir()) if self.is_main else 0

    def load_checkpoint(self, trainer: Any) -> dict[str, Any]:
        """``checkpoint/`` (written on any number of ranks): weights and moments resharded; its run state."""
        return load_sharded(trainer.config.run_dir / SHARDED_CHECKPOINT, self.checkpointed(trainer), trainer.optimizer)

    def checkpointed(self, trainer: Any) -> torch.nn.Module:
        """What the optimiser trains, as one module: the sharded root, and with a critic the root and
        its value head side by side (the optimiser's state is saved by the parameters' names in it)."""
        if trainer.critic is None:
            return self.root
        return WithValueHead(self.root, trainer.critic.head)

    def save_final_model(self, trainer: Any) -> None:
        """``final_model/`` by rank 0: the weights gathered from the shards onto its CPU (a LoRA policy's
        adapters alone), saved as one process saves them (at the compute dtype), with a learned
        critic's value head (replicated: rank 0's) beside them."""
        state = gathered_state(trainer.policy, self.root, keep=self.is_main)
        if self.is_main:
            with atomic_folder(trainer.config.run_dir / "final_model") as folder:
                trainer.policy.save_pretrained(folder, state_dict=state)
                if trainer.critic is not None:
                    save_critic(trainer.critic, folder)

    def drop_checkpoint(self, trainer: Any) -> None:
        """Delete ``checkpoint/`` (rank 0)."""
        if self.is_main:
            shutil.rmtree(trainer.config.run_dir / SHARDED_CHECKPOINT, ignore_errors=True)

    def close(self, trainer: Any) -> None:
        """Stop this rank's vLLM engine, once built: a rank is a process that ``multiprocessing`` may
        have started, which waits for its children (the engine's) before it exits."""
        if self.separate_engine and getattr(trainer, "rollout_policy", None) is not None:
            trainer.rollout_policy.close()


class WithValueHead(torch.nn.Module):
    """The sharded root and the replicated value head under one module, for the sharded checkpoint."""

    def __init__(self, root: torch.nn.Module, head: torch.nn.Module):
        super().__init__()
        self.policy, self.value_head = root, head


class RankCollector:
    """This rank's groups of each iteration's tasks, one task at a time with its own seed and its share
    of the decision budget; the rollout counts of all ranks. Nothing is in flight between iterations."""

    def __init__(self, trainer: Any, ranks: Ranks):
        self.trainer, self.ranks = trainer, ranks
        self.horizon = env_horizon(trainer.config)

    def start(self) -> None:
        """Nothing to start: collection happens in :meth:`collect`."""

    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """Play this rank's block of the iteration's tasks; the batch, all ranks' counts and a lag of 0."""
        trainer = self.trainer
        draws = draw_per_task(trainer, self.horizon)
        mine = split_evenly(len(draws.tasks), self.ranks.world_size)[self.ranks.rank]
        batch, local = play_per_task(trainer.config, trainer.rollout_policy, draws, mine)
        return batch, _combined(local), 0

    def state_dict(self) -> None:
        """None: nothing is in flight between iterations."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Nothing to restore."""

    def close(self) -> None:
        """Nothing to close."""


def _combined(local: RolloutStats | None) -> RolloutStats:
    """Every rank's counts summed (wall time: the slowest rank's), the same on every rank, in the
    strategy's own class (``local`` None: this rank played no task)."""
    parts = [p for p in gather_objects(None if local is None else (type(local), vars(local))) if p is not None]
    kind = max((p[0] for p in parts), key=lambda k: len(vars(k())), default=RolloutStats)
    combined = combine_metrics([{k: Metric(float(v), kind=_STATS_KINDS.get(k, "sum")) for k, v in values.items()}
                                for _, values in parts])
    return kind(**{k: type(v)(combined.get(k, v)) for k, v in vars(kind()).items()})

