"""The trainer across ranks (``ptgpo train --nproc N``, or one rank of those ``torchrun`` started):
:class:`~ptgpo_algos.trainer.Trainer` with the stages that touch the batch, the model or the run
folder replaced.

Every rank holds the same :class:`~ptgpo_algos.trainer.TrainState` (counters, the run's generators)
and computes the same decisions from it; what differs between ranks is only which tasks they play
and which samples they train on:

* **Rollouts.** Every rank draws the iteration's tasks and one seed per task from the run's
  generator, and plays its block of the tasks (:func:`~ptgpo_algos.distributed.work_split.split_evenly`:
  a task's group, a prefix tree included, stays on one rank) with a full transformers copy of the
  weights (:mod:`ptgpo_algos.distributed.policy`) or, with ``rollouts.backend: vllm``, its own vLLM
  engine on its own GPU (:mod:`ptgpo_algos.distributed.engine`), one task at a time, each with
  generators seeded by its own seed. A group therefore depends on its task's seed and the weights
  alone, not on the number of ranks: the run is the same on any world size, up to the order of
  float sums in the gradients, and resumes on any world size. The decision budget (``run.total_decisions``) is
  shared out per task (:func:`~ptgpo_algos.distributed.work_split.share_budget`), so the ranks
  together spend it exactly.
* **Advantages** are estimated where the groups are; the metrics row's figures are gathered.
* **The update** is :class:`~ptgpo_algos.distributed.updater.ShardedUpdater` on the FSDP2-sharded
  model; the rollout copies (or engines, streamed in bounded messages) then get the new weights,
  gathered from the shards, and the weight-sync check verifies each against the sharded model on
  the first rank's prompts.
* **Evaluation** splits the held-out seeds in blocks and gathers the episodes in order.
* **Files.** Rank 0 alone holds the run folder's lock and writes ``config.json``, the logs and
  ``final_model/`` (the weights gathered from the shards); checkpoints go to ``checkpoint/`` shard
  by shard (:mod:`ptgpo_algos.distributed.sharded_checkpoint`), every rank writing its own.

Not across ranks (refused before anything is built, the setting named): asynchronous rollouts,
rollout strategies that remember states across iterations, and auxiliary objectives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ptgpo_algos.callbacks import Callback
from ptgpo_algos.collectors import collect_iteration, remaining_budget
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.data import Batch, Task
from ptgpo_algos.device import resolve_device
from ptgpo_algos.distributed.collectives import Metric, all_reduce, gather_in_order, gather_objects, reduce_metrics
from ptgpo_algos.distributed.launch import RankFailed, launch
from ptgpo_algos.distributed.engine import build_rank_engine, push_gathered
from ptgpo_algos.distributed.policy import copy_weights, gathered_state, rollout_copy, shard_policy
from ptgpo_algos.distributed.process_group import RankInfo
from ptgpo_algos.distributed.sharded_checkpoint import load_sharded, save_sharded
from ptgpo_algos.distributed.updater import ShardedUpdater
from ptgpo_algos.distributed.work_split import share_budget, split_evenly
from ptgpo_algos.evaluation import EvalResult
from ptgpo_algos.files import atomic_folder, folder_lock
from ptgpo_algos.policy.backends import SYNC_TOKENS, build_policy, sync_prompts, sync_tolerance, sync_weights
from ptgpo_algos.policy.precision import precision_for
from ptgpo_algos.preflight import check_machine
from ptgpo_algos.rollout import RolloutStats
from ptgpo_algos.run_folder import RANKS_LOG, SHARDED_CHECKPOINT, prepare_run_folder
from ptgpo_algos.strategies import ROLLOUT_STRATEGIES
from ptgpo_algos.trainer import (Trainer, TrainSummary, check_environment, evaluation_result, evaluation_seeds,
                                 trim_logs)
from ptgpo_algos.updater import old_logprobs_mode
from ptgpo_envs import make_env

__all__ = ["SHARDED_BACKENDS", "ShardedTrainer", "check_sharded_config", "most_decisions", "run_sharded",
           "train_on_rank"]

#: How each rollout count combines across ranks (the rest add up).
_STATS_KINDS = {"wall_time_s": "max"}

#: The rollout backends a run across ranks plays with: a transformers copy of the weights on each
#: rank, or each rank's own vLLM engine (:mod:`ptgpo_algos.distributed.engine`).
SHARDED_BACKENDS = ("transformers", "vllm")


def check_sharded_config(config: TrainConfig) -> None:
    """Refuse what a run across ranks does not do, naming the setting."""
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
        raise ValueError(f"{label('algorithm.objectives')}: {names} do not run across ranks; leave them out with "
                         "--nproc, or train in one process")
    if config.run.record_rollouts is not None:
        raise ValueError(f"{label('run.record_rollouts')}: each rank holds only its own groups, and the run folder "
                         "is the first rank's; leave it out with --nproc, or train in one process")


def most_decisions(config: TrainConfig, task: Task, horizon: int) -> int:
    """The most decisions ``task``'s group can spend: its leaves times the episode horizon."""
    rollouts = config.rollouts
    leaves = rollouts.patr.max_leaves if rollouts.strategy == "patr" else rollouts.group_size
    return leaves * (task.max_steps or horizon)


class ShardedTrainer(Trainer):
    """One rank of a training run across ranks (see the module docstring); ``info``: this rank."""

    def __init__(self, config: TrainConfig, info: RankInfo, *, progress: bool = True,
                 callbacks: Sequence[Callback] = ()):
        super().__init__(config, progress=progress and info.is_main, callbacks=callbacks if info.is_main else ())
        self.info = info
        self.rollout_policy: Any = None

    # ================================================================== the run
    def train(self) -> TrainSummary:
        """Check the config and the environment, claim the run folder (rank 0), build, restore
        ``checkpoint/`` when resuming, and run until the budget is spent."""
        config = self.config
        self.device = self.info.device
        check_sharded_config(config)
        check_machine(config)
        check_environment(config)
        self.horizon = _env_horizon(config)
        with contextlib.ExitStack() as stack:
            resumed = self.claim_folder(stack)
            stack.callback(self.close_engine)
            self.setup(config.run_dir / SHARDED_CHECKPOINT if resumed else None)
            return self.run_loop(fresh=not resumed)

    def claim_folder(self, stack: contextlib.ExitStack) -> bool:
        """Rank 0 checks the memory plan (GPUs) and the disk, takes the folder's lock (held in ``stack``)
        and checks the folder; every rank learns whether the run resumes, or raises rank 0's refusal."""
        refusal: Exception | None = None
        resumed = False
        if self.info.is_main:
            try:
                if self.device.startswith("cuda"):
                    self.check_memory()
                self.check_disk()
                stack.enter_context(folder_lock(self.config.run_dir, "training run"))
                resumed = prepare_run_folder(self.config)
                if resumed and not (self.config.run_dir / SHARDED_CHECKPOINT).is_dir():
                    raise ValueError(f"{str(self.config.run_dir)!r} holds checkpoint.pt, a single process's "
                                     "checkpoint: resume it without --nproc")
            except Exception as error:  # noqa: BLE001 - every rank must hear of it, or they wait forever
                refusal = error
        message, resumed = gather_objects((None if refusal is None else str(refusal), resumed))[0]
        if refusal is not None:
            raise refusal
        if message is not None:
            raise ValueError(message)
        return resumed

    def close_engine(self) -> None:
        """Stop this rank's vLLM engine, once built: a rank is a process that ``multiprocessing`` may
        have started, which waits for its children (the engine's) before it exits."""
        if self.separate_engine and self.rollout_policy is not None:
            self.rollout_policy.close()

    @property
    def separate_engine(self) -> bool:
        """Whether each rank plays with its own rollout engine (vLLM) rather than a transformers copy."""
        return self.config.rollouts.backend != "transformers"

    def build_models(self) -> None:
        """The policy built on every rank alike, its KL reference, what plays (a full transformers copy,
        or the rank's own vLLM engine), then the policy (and a full reference) sharded; the optimiser
        on the shards."""
        config = self.config
        for turn in (True, False):  # rank 0 first: building the tiny model may write its cache
            if self.info.is_main == turn:
                self.policy = build_policy(config, self.device)
            all_reduce([0])
        self.reference = self.policy.reference_policy() if config.optim.kl_coef > 0 else None
        if self.separate_engine:
            self.rollout_policy = build_rank_engine(config, self.policy, self.info)
        else:
            self.rollout_policy = rollout_copy(self.policy)
        self.root = shard_policy(self.policy, config.optim.fsdp, self.device)
        if self.reference is not None:
            if self.reference.model is self.policy.model:  # LoRA: the same model, adapters off
                self.reference.root = self.root
            else:
                shard_policy(self.reference, config.optim.fsdp, self.device)
        self.optimizer = torch.optim.AdamW(list(self.policy.parameters()), lr=config.optim.lr,
                                           weight_decay=config.optim.weight_decay)

    def build_updater(self) -> ShardedUpdater:
        """The update across ranks; pi_old is the rollouts' own when a transformers copy plays and
        computes as the masters (float32, no autocast: CPUs), else recomputed (``optim.old_logprobs``
        decides, as in one process: a vLLM engine plays elsewhere)."""
        config = self.config
        float32_scores = precision_for(self.device, config.policy.dtype).autocast is None
        elsewhere = self.separate_engine
        mode = old_logprobs_mode(config.optim.old_logprobs, elsewhere=elsewhere, float32_scores=float32_scores)
        return ShardedUpdater(self.policy, self.optimizer, config.optim, config.algorithm, rng=self.state.rng,
                              reference=self.reference, old_logprobs=mode,
                              report_drift=elsewhere or not float32_scores, rank=self.info.rank)

    def build_callbacks(self) -> list[Callback]:
        """The logs and the progress bar on rank 0; the other ranks write nothing."""
        return super().build_callbacks() if self.info.is_main else []

    def write_run_files(self, fresh: bool) -> None:
        """``config.json`` and the emptied logs, by rank 0."""
        if self.info.is_main:
            super().write_run_files(fresh)

    @property
    def world_size(self) -> int:
        """The ranks of the run (the memory plan is one rank's)."""
        return self.info.world_size

    def budget_spent(self) -> bool:
        """Whether the budget is spent, agreed by all ranks (their clocks differ under ``run.time_limit_s``)."""
        spent = super().budget_spent()
        if self.config.run.time_limit_s is None:
            return spent
        return bool(all_reduce([float(spent)], op="max")[0])

    def run_cpu(self, seconds: float) -> float:
        """The CPU seconds of all ranks' processes, the same sum on every rank (a budget in them stops
        every rank at the same iteration)."""
        return float(all_reduce([seconds], op="sum")[0])

    def log_cost(self) -> None:
        """``cost.jsonl``, by rank 0."""
        if self.info.is_main:
            super().log_cost()

    # ================================================================== one iteration
    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """This rank's groups of the iteration's tasks, one task at a time with its own seed and its
        share of the decision budget; the rollout counts of all ranks."""
        config, state = self.config, self.state
        tasks = self.next_tasks()
        seeds = [int(s) for s in state.rng.integers(2**62, size=len(tasks))]
        planned = [most_decisions(config, task, self.horizon) for task in tasks]
        caps = share_budget(planned, len(tasks), remaining_budget(config, state.decisions)).caps
        batch: Batch = []
        local = RolloutStats()
        for index in split_evenly(len(tasks), self.info.world_size)[self.info.rank]:
            groups, stats = collect_iteration(config, self.rollout_policy, [tasks[index]],
                                              rng=np.random.default_rng(seeds[index]),
                                              generator=torch.Generator().manual_seed(seeds[index]),
                                              max_decisions=caps[index])
            batch += groups
            local = _added(local, stats)
        return batch, _combined(local), 0

    def record(self, stats: RolloutStats, batch: Batch) -> None:
        """All ranks' counts (``stats`` are combined already) and the layouts all ranks' episodes started in."""
        layouts = gather_in_order([t.meta["layout"] for group in batch for t in group if t.meta.get("layout")])
        self.state.add(stats, [])
        if self.state.train_layouts is not None:
            self.state.train_layouts.update(layouts)

    def batch_figures(self, samples: list, advantages, diagnostics) -> dict[str, float]:
        """The row's batch figures over all ranks' samples, advantages (in task order) and diagnostics."""
        # The counts' read-only mapping does not pickle: each group's travels as a plain dict.
        plain = [dataclasses.replace(d, counts=dict(d.counts)) for d in diagnostics]
        parts = gather_objects((len(samples), [a for g in advantages for t in g for a in t], plain))
        count = sum(part[0] for part in parts)
        flat = [a for part in parts for a in part[1]]
        # One trajectory holding every advantage: the figures read only the values and the count.
        return super().batch_figures([None] * count, [[flat]], [d for part in parts for d in part[2]])

    def calibrate_sync(self, batch: Batch) -> None:
        """The sync check's noise floor, once, on the first rank's prompts that has any (the sharded
        model scores them in lockstep on every rank)."""
        if self.sync_floor is not None:
            return
        self.sync_prompts = next((p for p in gather_objects(sync_prompts(batch)) if p), [])
        if self.sync_prompts:
            report = self.rollout_policy.verify_sync(self.policy, self.sync_prompts, SYNC_TOKENS)
            self.sync_floor = report.mean_logprob_diff

    def push_weights(self) -> dict[str, Any]:
        """The sharded model's weights, gathered, into what plays on this rank (every rank calls it):
        copied into the transformers copy, or streamed into the rank's engine
        (:func:`~ptgpo_algos.distributed.engine.push_gathered`). What was sent (bytes, messages)."""
        if self.separate_engine:
            return push_gathered(self.rollout_policy, self.policy, self.root, self.device)
        return copy_weights(self.rollout_policy.model, self.root)

    def sync(self, samples: list) -> dict[str, Any]:
        """The updated weights gathered into every rank's rollout copy or engine, then verified against
        the sharded model (:func:`sync_weights`)."""
        if self.sync_floor is None:
            return {f"sync_{k}": v for k, v in self.push_weights().items()}
        floor = self.sync_floor
        return sync_weights(self.rollout_policy, self.policy, self.sync_prompts, floor,
                            sync_tolerance(self.config, floor), push=self.push_weights)

    # ================================================================== evaluation, checkpoints
    def evaluation_summary(self, curve: bool) -> dict[str, Any]:
        """Each rank plays its block of the held-out seeds; the episodes gathered in seed order."""
        seeds = evaluation_seeds(self.config, curve)
        mine = [seeds[i] for i in split_evenly(len(seeds), self.info.world_size)[self.info.rank]]
        result = evaluation_result(self.rollout_policy, self.config, mine) if mine else EvalResult()
        environment: dict[str, Any] = {}
        for part in gather_objects(result.environment):
            environment.update(part)
        return EvalResult(gather_in_order(result.episodes), environment).summary()

    def checkpoint(self) -> None:
        """``checkpoint/``: each rank's shards of the weights and AdamW's moments, and rank 0's
        :meth:`~ptgpo_algos.trainer.Trainer.run_state` (the same on every rank)."""
        start = time.perf_counter()
        folder = self.config.run_dir / SHARDED_CHECKPOINT
        save_sharded(folder, self.root, self.optimizer, self.run_state())
        size = sum(path.stat().st_size for path in folder.iterdir()) if self.info.is_main else 0
        self.last_checkpoint = {"seconds": time.perf_counter() - start, "bytes": size}

    def _restore(self, folder) -> None:
        """Resume from ``checkpoint/`` (written on any number of ranks): weights and moments resharded,
        the state, the callbacks' state; the rollout copy gets the weights; the logs are cut back."""
        extra = load_sharded(folder, self.root, self.optimizer)
        self.state.restore(extra)
        for callback in self.callbacks:
            if callback.state_key is not None:
                callback.load_state_dict(extra.get(callback.state_key))
        self.push_weights()
        if self.info.is_main:
            trim_logs(self.logger, self.state.iteration)

    def save_final_model(self) -> None:
        """``final_model/`` by rank 0: the last update's weights gathered from the shards onto its CPU
        (a LoRA policy's adapters alone), saved as one process saves them (at the compute dtype)."""
        state = gathered_state(self.policy, self.root, keep=self.info.is_main)
        if self.info.is_main:
            with atomic_folder(self.config.run_dir / "final_model") as folder:
                self.policy.save_pretrained(folder, state_dict=state)

    def drop_checkpoint(self) -> None:
        """Delete ``checkpoint/`` (rank 0; ``run.keep_checkpoint`` off)."""
        if self.info.is_main:
            shutil.rmtree(self.config.run_dir / SHARDED_CHECKPOINT, ignore_errors=True)


def _env_horizon(config: TrainConfig) -> int:
    """The episodes' step limit: ``env.max_steps``, else the environment's own."""
    if config.env.max_steps is not None:
        return config.env.max_steps
    made = make_env(config.env.id, config.env.kwargs, None)
    try:
        return int(made.unwrapped.max_steps)
    finally:
        made.close()


def _added(total: RolloutStats, more: RolloutStats) -> RolloutStats:
    """Two collections' counts together (the wall times add up: the tasks are played one after another)."""
    return RolloutStats(**{k: getattr(total, k) + getattr(more, k) for k in vars(total)})


def _combined(local: RolloutStats) -> RolloutStats:
    """Every rank's counts summed (wall time: the slowest rank's), the same on every rank."""
    values = vars(local)
    combined = reduce_metrics({k: Metric(float(v), kind=_STATS_KINDS.get(k, "sum")) for k, v in values.items()})
    return RolloutStats(**{k: type(values[k])(combined[k]) for k in values})


def train_on_rank(info: RankInfo, config: dict[str, Any], progress: bool) -> TrainSummary | None:
    """What each rank runs: its :class:`ShardedTrainer` on ``config`` (plain data); rank 0's summary."""
    summary = ShardedTrainer(TrainConfig.from_dict(config), info, progress=progress).train()
    return summary if info.is_main else None


def run_sharded(config: TrainConfig, nproc: int, progress: bool = True) -> TrainSummary | None:
    """Train on ``nproc`` local processes (or as one rank of those ``torchrun`` started); the run's
    summary (None on a rank other than 0 under torchrun). The config is checked here first, so that a
    refusal comes before any process starts."""
    check_sharded_config(config)
    device = resolve_device(config.policy.device, where=label("policy.device"))
    kind = "cuda" if device.startswith("cuda") else "cpu"
    try:
        return launch(train_on_rank, nproc, config.to_dict(), progress, device=kind)[0]
    except RankFailed as failure:
        error = failure.error
        if error is not None and set(error.lineage) & set(_REFUSALS):
            raise ValueError(f"rank {failure.rank} failed: {error.message}") from None
        if error is None or error.errno is not None:  # killed, or an error of the system: the message says it all
            raise
        raise _with_traceback_saved(failure, config.run_dir / RANKS_LOG) from None


#: The errors a rank refuses a run with (its folder, its config, its checkpoint: CheckpointError is a
#: ValueError): their message says what to change, and their traceback would add nothing.
_REFUSALS = ("ValueError", "FolderBusyError")


def _with_traceback_saved(failure: RankFailed, log: Path) -> RankFailed:
    """``failure`` with its rank's traceback appended to ``log`` (the run folder's ``ranks.log``), or as it
    is where that cannot be written."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)  # a rank may fail before rank 0 made the folder
        with open(log, "a", encoding="utf-8") as handle:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            handle.write(f"{stamp} rank {failure.rank} failed:\n{failure.error.traceback}\n")
    except OSError:
        return failure
    return failure.saved_to(str(log))
