"""The training loop shared by every algorithm: the estimator is a name in the config, nothing else.

:class:`Trainer` runs a :class:`~ptgpo_algos.config.TrainConfig`. Each iteration is five stages, each
a method a subclass can replace::

    batch, stats = self.collect()                 # group rollouts of this iteration's tasks
    advantages, diagnostics = self.estimate(batch)   # the configured estimator, by name
    update = self.update(batch, advantages)       # pi_old and the reference scored without gradients,
                                                  # then PPO epochs (ptgpo_algos.updater.Updater);
                                                  # components after it
    update |= self.sync(samples)                  # a separate rollout engine gets the new weights
    self.end_iteration(row)                       # log, evaluate, checkpoint

Collection runs here or, with ``rollouts.asynchronous``, in a second process
(:mod:`ptgpo_algos.collectors`) while the update runs: those rollouts play the weights from
before the previous update (``policy_lag`` 1 in the metrics, 0 otherwise), and the checkpoint keeps
the request in flight so that a resumed run replays it. Everything else joins through callbacks
(:mod:`ptgpo_algos.callbacks`): the logs, the progress bar, TensorBoard. Auxiliary signals are objectives
(:mod:`ptgpo_algos.objectives`): hindsight relabelling is one.

What changes during a run and must survive a resume is in plain sight: :class:`TrainState` (counters,
random generators, the last evaluation, the rollout strategy's memory), the policy's weights, the
optimiser, and the callbacks' and collector's own state, all in ``checkpoint.pt``
(:mod:`ptgpo_algos.checkpoint`).

Outputs in the run folder: ``config.json`` (with the processor and kernel settings of the process
that last started or resumed the run, :func:`~ptgpo_algos.device.kernel_record`); ``metrics.jsonl``
(one row per iteration); ``curve.jsonl`` (one row per evaluation, iteration 0 being the untrained
policy); ``checkpoint.pt`` (every ``run.checkpoint_every`` iterations and at the end); and
``final_model/`` (``save_pretrained``). A resumed CPU run reproduces an uninterrupted one (all but
wall times; a run stopped by ``time_limit_s`` is, by nature, not reproducible). The run stops at
``run.iterations``, at ``run.total_decisions`` (a matched budget across algorithms) or at
``run.time_limit_s``, whichever comes first.

Across processes (``ptgpo train --nproc N``, or under ``torchrun``) the same stages run on every rank
with the model sharded by FSDP2: :class:`ptgpo_algos.distributed.trainer.ShardedTrainer` replaces
the stages that touch the batch, the model or the run folder.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

import ptgpo_envs
from ptgpo_algos.advantages import compute_advantages_with_diagnostics, estimator_defaults, summarize_diagnostics
from ptgpo_algos.callbacks import (
    Callback,
    JsonlLogger,
    ProgressBar,
    RolloutRecorder,
    RunView,
    TensorBoardLogger,
    WandbLogger,
)
from ptgpo_algos.checkpoint import COUNTERS, CheckpointError, load_checkpoint, save_checkpoint
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.cost import Cost, standard_error
from ptgpo_algos.data import Batch, Task
from ptgpo_algos.device import check_reproducible_kernels, kernel_record, resolve_device
from ptgpo_algos.evaluation import EvalResult, evaluate, overlap
from ptgpo_algos.files import FileFormatError, atomic_folder, atomic_write_text, folder_lock, read_jsonl
from ptgpo_algos.objectives import ObjectiveInputs, Objectives, objective_needs
from ptgpo_algos.policy.agent import PolicyAgent
from ptgpo_algos.policy.backends import (
    SYNC_TOKENS,
    build_policy,
    build_rollout_policy,
    exported_config,
    push_weights,
    sync_prompts,
    sync_tolerance,
    sync_weights,
)
from ptgpo_algos.collectors import AsyncCollector, SyncCollector, restore_weights, snapshot_weights
from ptgpo_algos.preflight import check_machine
from ptgpo_algos.rollout import RolloutStats, Spend
from ptgpo_algos.run_folder import SHARDED_CHECKPOINT, load_run_config, prepare_run_folder
from ptgpo_algos.strategies import ROLLOUT_STRATEGIES, new_memory
from ptgpo_envs import check_env_kwargs, held_out, make_env
from ptgpo_algos.policy.precision import float32_rollouts, precision_for
from ptgpo_algos.update import flatten_batch
from ptgpo_algos.updater import Updater, old_logprobs_mode

__all__ = ["TrainState", "TrainSummary", "Trainer", "check_environment", "evaluate_policy", "evaluation_agent",
           "evaluation_result", "evaluation_seeds", "load_trained_policy", "run_needs", "run_training", "trim_logs"]


@dataclass
class TrainSummary:
    """What a training run returns: the final evaluation, the best held-out success, the decisions and
    tokens spent, wall time and the run folder's files."""

    final_eval: dict[str, Any]
    best_success: float
    decisions: int
    tokens: int
    tokens_saved: int
    decisions_saved: int
    wall_time_s: float
    metrics_path: Path
    curve_path: Path
    checkpoint_dir: Path
    iterations: int = 0
    recipe: str | None = None
    #: The run's :class:`~ptgpo_algos.cost.Cost` counters at the end (``cost.jsonl``'s last row).
    cost: dict[str, Any] = field(default_factory=dict)
    #: How far the spend went past ``run.budget``'s amount, in its unit (None: no such budget).
    budget_overshoot: float | None = None
    #: CPU seconds this process spent building the models (the tiny model's pretraining included when
    #: it was not cached): counted in no cost.
    setup_cpu_s: float = 0.0

    @property
    def protocol(self) -> dict[str, Any]:
        """What the final numbers were measured under: the recipe (None: PTGPO's own prompt and
        protocol) and what the evaluation environment reported of its texts and scoring."""
        return {"recipe": self.recipe, **self.final_eval.get("environment", {})}


#: Training seeds drawn in a row into held-out layouts before a run gives up (a share near 1).
_REDRAWS = 1000


@dataclass
class TrainState(Spend):
    """What changes during a run besides the weights and the optimiser: counters, the random
    generators every draw comes from (task seeds, branching, mini-batch order: ``rng``; token and
    action sampling: ``sampler``), and the last evaluation."""

    rng: np.random.Generator
    sampler: torch.Generator
    iteration: int = 0
    wall_time_s: float = 0.0
    best_success: float = 0.0
    last_eval_iteration: int = -1
    last_eval: dict[str, Any] = field(default_factory=dict)
    #: The ``info["layout"]`` of every training episode's start, to measure how held out the
    #: evaluation is; None when unknown (a run resumed from a checkpoint that did not keep them).
    train_layouts: set[str] | None = field(default_factory=set)
    #: What the rollout strategy keeps across iterations (3SPO's state statistics); None for one that keeps nothing.
    rollout_memory: Any = None
    #: The run's cost beyond decisions and generated tokens (:mod:`ptgpo_algos.cost`).
    cost: Cost = field(default_factory=Cost)

    @classmethod
    def seeded(cls, seed: int) -> TrainState:
        """A fresh state with every random generator seeded from ``seed``."""
        random.seed(seed)
        torch.manual_seed(seed)
        return cls(np.random.default_rng(seed), torch.Generator().manual_seed(seed))

    def counters(self) -> dict[str, Any]:
        """The counters, for the checkpoint."""
        return {name: getattr(self, name) for name in COUNTERS}

    def rng_state(self) -> dict[str, Any]:
        """The state of every random generator, for the checkpoint."""
        return {"python": random.getstate(), "numpy": self.rng.bit_generator.state,
                "torch": torch.random.get_rng_state(), "sampler": self.sampler.get_state()}

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Take back counters, last evaluation and random generators from a checkpoint."""
        for name in COUNTERS:
            setattr(self, name, checkpoint["counters"][name])
        self.last_eval = checkpoint.get("last_eval", {})
        layouts = checkpoint.get("train_layouts")
        self.train_layouts = None if layouts is None else set(layouts)
        rng = checkpoint["rng"]
        random.setstate(rng["python"])
        self.rng.bit_generator.state = rng["numpy"]
        torch.random.set_rng_state(rng["torch"])
        self.sampler.set_state(rng["sampler"])
        if self.rollout_memory is not None:
            self.rollout_memory.load_state_dict(checkpoint["rollout_memory"])
        self.cost.load_state_dict(checkpoint.get("cost"))

    def add(self, stats: RolloutStats, batch: Batch) -> None:
        """Add an iteration's rollout counts and the layouts its episodes started in."""
        self.add_spend(stats)
        if self.train_layouts is not None:
            self.train_layouts.update(t.meta["layout"] for group in batch for t in group if t.meta.get("layout"))


class Trainer:
    """Train as a :class:`TrainConfig` says (see the module docstring); :meth:`train` runs it."""

    def __init__(self, config: TrainConfig, *, progress: bool = True, callbacks: Sequence[Callback] = ()):
        self.config = config
        self.progress = progress
        self.extra_callbacks = list(callbacks)

    # ================================================================== the run
    def train(self) -> TrainSummary:
        """Check everything that can be checked before a model is built or a file written (the device,
        what the run needs of this machine (:mod:`ptgpo_algos.preflight`), the environment, the run
        folder: one writer at a time, a resume only of the same run; the checkpoint to resume), then run
        until the budget is spent."""
        config = self.config
        self.device = resolve_device(config.policy.device, where=label("policy.device"))
        if config.run.reproducible:
            if self.device != "cpu":
                raise ValueError(f"run.reproducible (--reproducible): pins CPU kernels, but the run is on "
                                 f"{self.device}; pass --device cpu, or leave it off")
            check_reproducible_kernels("run.reproducible (--reproducible)")
        budget = config.run.budget
        if budget is not None and budget.unit == "gpu_s" and not self.device.startswith("cuda"):
            raise ValueError(f"{label('run.budget')}: a budget in gpu_s needs a GPU, but the run is on {self.device}; "
                             "use train_cpu_s on a CPU")
        check_machine(config)
        check_environment(config)
        if self.device.startswith("cuda"):
            self.check_memory()
        self.check_disk()
        with folder_lock(config.run_dir, "training run"):
            resumed = prepare_run_folder(config)
            if resumed and not (config.run_dir / "checkpoint.pt").is_file():
                raise ValueError(f"{str(config.run_dir)!r} holds a checkpoint written across ranks "
                                 f"({SHARDED_CHECKPOINT}/): resume it with --nproc N (any number of processes, 1 "
                                 "included)")
            checkpoint = load_checkpoint(config.run_dir / "checkpoint.pt", self.device) if resumed else None
            self.setup(checkpoint)
            return self.run_loop(fresh=checkpoint is None)

    def run_loop(self, fresh: bool) -> TrainSummary:
        """Evaluate the untrained policy (a ``fresh`` run), run iterations until the budget is spent, finish."""
        try:
            for callback in self.callbacks:
                callback.on_train_start(self.view)
            if fresh:
                self.evaluate()
                self.log_cost()
            self.collector.start()
            while not self.budget_spent():
                self.run_iteration()
        finally:
            self.collector.close()
            if self.layout_probe is not None:
                self.layout_probe.close()
        return self.finish()

    def setup(self, checkpoint: dict[str, Any] | None) -> None:
        """Build the policies, the optimiser, the state, the collector and the callbacks; restore a checkpoint."""
        config, out_dir = self.config, self.config.run_dir
        self.state = TrainState.seeded(config.run.seed)
        self.state.rollout_memory = new_memory(config.rollouts.strategy, config.rollouts)
        self.view = RunView(config, self.state)
        cpu_start = time.process_time()
        self.build_models()
        self.setup_cpu_s = time.process_time() - cpu_start
        self.updater = self.build_updater()
        self.logger = JsonlLogger(out_dir)
        self.callbacks: list[Callback] = self.build_callbacks()
        self.objectives = Objectives.from_config(config.algorithm.objectives)
        self.collector = AsyncCollector(self) if config.rollouts.asynchronous else SyncCollector(self)
        self.sync_prompts: list[list[int]] = []
        #: The sync check's noise floor, measured before this process's first update (None until then).
        self.sync_floor: float | None = None
        #: Seconds and bytes of the last ``checkpoint.pt`` written.
        self.last_checkpoint: dict[str, float] = {}
        self.layout_probe = None  # an environment to read training seeds' layouts from (env.held_out)
        if checkpoint is not None:
            self._restore(checkpoint)
        if self.device.startswith("cuda") and self.state.cost.gpu_s is None:
            self.state.cost.gpu_s = 0.0
        self.write_run_files(fresh=checkpoint is None)
        self.started = time.perf_counter() - self.state.wall_time_s
        #: The run's progress when the current iteration started (evaluation.every_fraction).
        self.progress_before = self.progress_fraction()

    def build_models(self) -> None:
        """The trainable policy, the one that plays (itself, or a separate engine), the KL reference and
        the optimiser."""
        config = self.config
        self.policy = build_policy(config, self.device)
        self.rollout_policy = build_rollout_policy(config, self.policy, self.device)
        self.reference = self.policy.reference_policy() if config.optim.kl_coef > 0 else None
        self.optimizer = torch.optim.AdamW(list(self.policy.parameters()), lr=config.optim.lr,
                                           weight_decay=config.optim.weight_decay)

    def build_callbacks(self) -> list[Callback]:
        """The logs (JSONL, TensorBoard, wandb), the rollout recorder, the progress bar and the callbacks the
        trainer was given."""
        callbacks: list[Callback] = [self.logger]
        if self.config.run.tensorboard:
            callbacks.append(TensorBoardLogger(self.config.run_dir))
        if self.config.run.wandb is not None:
            callbacks.append(WandbLogger(self.config.run_dir))
        if self.config.run.record_rollouts is not None:
            callbacks.append(RolloutRecorder(self.config.run_dir, self.config.run.record_rollouts))
        if self.progress:
            callbacks.append(ProgressBar())
        return callbacks + self.extra_callbacks

    def write_run_files(self, fresh: bool) -> None:
        """``config.json`` (with this process's machine), after emptying the logs of a ``fresh`` run."""
        if fresh:
            for path in (self.logger.metrics_path, self.logger.curve_path, self.logger.cost_path):
                path.unlink(missing_ok=True)
        atomic_write_text(self.config.run_dir / "config.json",
                          json.dumps({**self.config.to_dict(), "machine": kernel_record()}, indent=1))

    def build_updater(self) -> Updater:
        """The update, with pi_old decided once (``optim.old_logprobs``, :func:`old_logprobs_mode`): the
        rollouts come from elsewhere when a separate engine or a lagged collector plays them, and the
        trainer's own scores are float32 when neither its precision nor the rollouts'
        (``policy.rollout_dtype``) has autocast."""
        config = self.config
        elsewhere = self.rollout_policy is not self.policy or config.rollouts.asynchronous
        float32_scores = float32_rollouts(precision_for(self.device, config.policy.dtype), config.policy.rollout_dtype)
        mode = old_logprobs_mode(config.optim.old_logprobs, elsewhere=elsewhere, float32_scores=float32_scores)
        return Updater(self.policy, self.optimizer, config.optim, config.algorithm, rng=self.state.rng,
                       reference=self.reference, old_logprobs=mode, report_drift=elsewhere)

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        path = self.config.run_dir / "checkpoint.pt"
        _restore_checkpoint_weights(self.policy, checkpoint, path)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.state.restore(checkpoint)
        try:
            for callback in self.callbacks:
                if callback.state_key is not None:
                    callback.load_state_dict(checkpoint.get(callback.state_key))
            self.objectives.load_state_dict(_objective_state(checkpoint))
            self.collector.load_state_dict(checkpoint.get("pending_rollout"))
        except (TypeError, KeyError, ValueError) as error:
            raise CheckpointError(f"{path}: a component's saved state does not fit this run ({type(error).__name__}: "
                                  f"{str(error)[:200]}); it belongs to another run") from None
        if self.rollout_policy is not self.policy:
            push_weights(self.rollout_policy, self.policy)
        trim_logs(self.logger, self.state.iteration)

    @property
    def world_size(self) -> int:
        """The processes the run is spread over (1: this one)."""
        return 1

    def run_cpu(self, seconds: float) -> float:
        """The run's CPU seconds, given this process's: the same here; summed over the ranks of a sharded run."""
        return seconds

    def elapsed(self) -> float:
        """Wall-clock seconds the run has spent, time before a resume included (``run.time_limit_s``'s
        clock)."""
        return time.perf_counter() - self.started

    def budget_spent(self) -> bool:
        """Whether ``run.iterations``, ``run.total_decisions``, ``run.budget`` or ``run.time_limit_s`` is
        reached."""
        run, state = self.config.run, self.state
        return (state.iteration >= run.iterations
                or (run.total_decisions is not None and state.decisions >= run.total_decisions)
                or (run.budget is not None and run.budget.spent(self.spend(run.budget.unit)))
                or (run.time_limit_s is not None and self.elapsed() >= run.time_limit_s))

    def spend(self, unit: str) -> float:
        """What the run has spent so far in ``unit`` (:data:`~ptgpo_algos.cost.COST_UNITS`)."""
        if unit in ("decisions", "tokens"):
            return getattr(self.state, unit)
        return getattr(self.state.cost, unit) or 0.0

    def next_tasks(self) -> list[Task]:
        """This iteration's tasks: training seeds drawn from the run's generator (each redrawn while
        its layout is held out, with ``env.held_out``)."""
        env = self.config.env
        low, high = env.train_seeds
        seeds = [int(s) for s in self.state.rng.integers(low, high, size=self.config.rollouts.tasks_per_iteration)]
        if env.held_out is not None:
            seeds = [self.training_seed(seed) for seed in seeds]
        return [Task(env.id, s, dict(env.kwargs), env.max_steps) for s in seeds]

    def training_seed(self, seed: int) -> int:
        """``seed``, or the first redraw from the run's generator whose start layout is outside the
        ``env.held_out`` share of layouts that evaluation keeps for itself."""
        env = self.config.env
        if self.layout_probe is None:
            self.layout_probe = make_env(env.id, env.kwargs, env.max_steps)
        for _ in range(_REDRAWS):
            if not held_out(self.layout_probe.reset(seed=seed)[1]["layout"], env.held_out):
                return seed
            seed = int(self.state.rng.integers(*env.train_seeds))
        raise ValueError(f"{label('env.held_out')}: {_REDRAWS} training seeds in a row started in a held-out layout; "
                         f"lower the share {env.held_out} or widen env.train_seeds {env.train_seeds}")

    # ================================================================== one iteration
    def run_iteration(self) -> None:
        """One iteration: collect, estimate, update, sync, then :meth:`end_iteration` with its metrics row."""
        state = self.state
        iteration = state.iteration + 1
        self.progress_before = self.progress_fraction()
        iteration_start, cpu_start = time.perf_counter(), time.process_time()
        batch, stats, lag = self.collect()
        rollout_wait = time.perf_counter() - iteration_start
        self.calibrate_sync(batch)
        advantages, diagnostics = self.estimate(batch)
        for callback in self.callbacks:
            callback.on_rollouts(self.view, iteration, batch, advantages)
        train_start = time.perf_counter()
        samples, update = self.update(batch, advantages)
        train_time = time.perf_counter() - train_start
        update.update(self.sync(samples))
        self.record(stats, batch)
        self.count_cost(stats, update, cpu_s=time.process_time() - cpu_start,
                        wall_s=time.perf_counter() - iteration_start)
        state.iteration = iteration
        row = {
            "iteration": iteration,
            **{f"total_{k}": getattr(state, k) for k in ("decisions", "tokens", "decisions_saved", "tokens_saved")},
            **stats.as_dict(),
            **self.batch_figures(samples, advantages, diagnostics),
            **update,
            "rollout_wait_s": rollout_wait,
            "policy_lag": lag,
            "train_time_s": train_time,
            "train_tokens_per_s": update["train_tokens"] / train_time if train_time > 0 else 0.0,
            "iteration_time_s": time.perf_counter() - iteration_start,
            "wall_time_s": self.elapsed(),
        }
        self.end_iteration(row)

    def record(self, stats: RolloutStats, batch: Batch) -> None:
        """Count the iteration's rollouts into the state (:meth:`TrainState.add`)."""
        self.state.add(stats, batch)

    def count_cost(self, stats: RolloutStats, update: dict[str, Any], cpu_s: float, wall_s: float) -> None:
        """Add the iteration's cost (:class:`~ptgpo_algos.cost.Cost`): its episodes, the update's tokens
        and optimiser steps, ``cpu_s`` and ``wall_s``, this process's CPU and wall seconds of its rollouts
        and update, and the CPU seconds of an asynchronous worker that played its rollouts."""
        cost = self.state.cost
        cost.episodes += int(stats.episodes)
        cost.trained_tokens += int(update.get("train_tokens", 0))
        cost.unique_tokens += int(update.get("computed_tokens", 0))
        cost.optimizer_updates += int(update.get("updates", 0))
        cost.train_cpu_s += self.run_cpu(cpu_s) + stats.worker_cpu_s
        if cost.gpu_s is not None:
            cost.gpu_s += wall_s * self.world_size

    def batch_figures(self, samples: list, advantages, diagnostics) -> dict[str, float]:
        """The metrics row's figures of the trained batch: its steps, its advantages and the estimator's
        diagnostics."""
        flat = np.array([a for g in advantages for t in g for a in t], dtype=float)
        return {
            "trained_steps": len(samples),
            "adv_mean": float(flat.mean()) if flat.size else 0.0,
            "adv_std": float(flat.std()) if flat.size else 0.0,
            "adv_abs_mean": float(np.abs(flat).mean()) if flat.size else 0.0,
            **{f"adv_{k}": v for k, v in summarize_diagnostics(diagnostics).items()},
        }

    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """This iteration's rollouts and their policy lag (updates between the acting weights and now)."""
        return self.collector.collect()

    def estimate(self, batch: Batch):
        """Advantages of every step by the configured estimator, with per-group diagnostics."""
        algorithm = self.config.algorithm
        config = dict(algorithm.config)
        if "progress" in estimator_defaults(algorithm.name):
            config.setdefault("progress", self.progress_fraction())
        advantages, diagnostics = compute_advantages_with_diagnostics(algorithm.name, batch, **config)
        if algorithm.placebo:
            advantages = permuted(advantages, self.state.rng)
        return advantages, diagnostics

    def progress_fraction(self) -> float:
        """How far the run is, in [0, 1], by the budget that will end it (for schedules over training)."""
        run, state = self.config.run, self.state
        fractions = [state.iteration / run.iterations]
        if run.total_decisions is not None:
            fractions.append(state.decisions / run.total_decisions)
        if run.budget is not None:
            fractions.append(run.budget.fraction(self.spend(run.budget.unit)))
        if run.time_limit_s is not None:
            fractions.append(self.elapsed() / run.time_limit_s)
        return float(min(1.0, max(fractions)))

    def update(self, batch: Batch, advantages) -> tuple[list, dict[str, Any]]:
        """The update on the batch's distinct steps (:class:`~ptgpo_algos.updater.Updater`), then the
        objectives' and each callback's ``after_update``; before it, the auxiliary objectives route the
        advantages and prepare their items (:mod:`ptgpo_algos.objectives`)."""
        auxiliary, stats = None, {}
        if self.objectives:
            advantages, auxiliary, stats = self.objectives.prepare(
                batch, advantages, self.policy, self.state.rng, self.config.optim.micro_batch_size)
        samples = flatten_batch(batch, advantages, self.config.algorithm.loss_agg, self.config.policy.mode)
        prepared = self.updater.prepare(samples)
        stats = {**self.updater.run(samples, auxiliary), **prepared, **stats}
        if self.objectives:
            inputs = ObjectiveInputs(batch, advantages, self.policy, self.state.rng)
            stats.update(self.objectives.after_update(inputs, self.updater.train_step))
        for callback in self.callbacks:
            stats.update(callback.after_update(self.view, batch))
        return samples, stats

    def calibrate_sync(self, batch) -> None:
        """Measure the sync check's noise floor once per process, before its first update, when the
        engine and the trainer hold the same weights: the engine's sampled tokens scored by both on
        this batch's prompts (what later syncs are held to, :func:`sync_tolerance`)."""
        if self.rollout_policy is self.policy or self.sync_floor is not None:
            return
        prompts = sync_prompts(batch)
        if prompts:
            self.sync_prompts = prompts
            self.sync_floor = self.rollout_policy.verify_sync(self.policy, prompts, SYNC_TOKENS).mean_logprob_diff

    def sync(self, samples: list) -> dict[str, Any]:
        """Hand the updated weights to a separate rollout engine and verify it acts like the trained model
        on the prompts its noise floor was measured on."""
        if self.rollout_policy is self.policy or self.sync_floor is None:
            return {}
        floor = self.sync_floor
        return sync_weights(self.rollout_policy, self.policy, self.sync_prompts, floor, sync_tolerance(self.config, floor))

    def check_memory(self) -> None:
        """Predict the run's peak GPU memory from the model's config before loading it
        (:mod:`ptgpo_algos.memory`); print the plan, and refuse one that cannot fit unless
        ``run.memory_check`` is off."""
        from ptgpo_algos.memory import GpuDoesNotFit, plan_for_config, total_device_memory

        plan = plan_for_config(self.config, self.device, total_device_memory(self.device), self.world_size)
        if self.progress:
            print(plan.table(), flush=True)
        if not plan.fits and self.config.run.memory_check:
            raise GpuDoesNotFit(plan.refusal())

    def check_disk(self) -> None:
        """Refuse a run whose checkpoints and final model cannot fit the free disk of its folder (unless
        ``run.memory_check`` is off): found before the model is built, not hours later at a checkpoint."""
        from ptgpo_algos.memory import DiskDoesNotFit, disk_plan_for_config

        plan = disk_plan_for_config(self.config, self.device)
        folder = self.config.run_dir
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        held = (folder / "checkpoint.pt").stat().st_size if (folder / "checkpoint.pt").exists() else 0
        free = shutil.disk_usage(existing).free + held
        if free < plan.peak_bytes and self.config.run.memory_check:
            raise DiskDoesNotFit(plan.refusal(str(folder), free))

    def end_iteration(self, row: dict[str, Any]) -> None:
        """Hand the row to the callbacks, then evaluate and checkpoint when due (and at the end)."""
        for callback in self.callbacks:
            callback.on_iteration_end(self.view, row)
        finished = self.budget_spent()
        if self.evaluation_due(row["iteration"]) or finished:
            self.evaluate(final=finished)
        self.log_cost()
        if row["iteration"] % self.config.run.checkpoint_every == 0 or finished:
            self.checkpoint()

    def evaluation_due(self, iteration: int) -> bool:
        """Every ``evaluation.every`` iterations; with ``evaluation.every_fraction``, instead at the first
        iteration that reaches each multiple of it of the run's budget (:meth:`progress_fraction`)."""
        fraction = self.config.evaluation.every_fraction
        if fraction is None:
            return iteration % self.config.evaluation.every == 0
        return _marks_passed(self.progress_fraction(), fraction) > _marks_passed(self.progress_before, fraction)

    def log_cost(self) -> None:
        """Append the run's cost so far to ``cost.jsonl``, with the evaluation of this iteration if it had one."""
        state = self.state
        row = {"iteration": state.iteration, "decisions": state.decisions, "tokens": state.tokens,
               **state.cost.state_dict()}
        if state.last_eval_iteration == state.iteration and state.last_eval:
            episodes = int(state.last_eval["episodes"])
            success = float(state.last_eval["success"])
            row.update(success=success, eval_episodes=episodes, success_se=standard_error(success, episodes))
        self.logger.log_cost(row)

    # ================================================================== evaluation, checkpoints
    def evaluate(self, final: bool = False) -> dict[str, Any]:
        """The run's held-out evaluation of the current weights, logged to the curve (on the first
        ``evaluation.curve_episodes`` seeds unless it is the ``final`` one)."""
        state = self.state
        cpu_start = time.process_time()
        summary = self.evaluation_summary(curve=not final)
        state.cost.eval_cpu_s += self.run_cpu(time.process_time() - cpu_start)
        if final:
            summary["overlap"] = overlap(summary["layouts"], state.train_layouts)
        state.last_eval_iteration = state.iteration
        state.best_success = max(state.best_success, summary["success"])
        state.last_eval = summary
        row = {
            "iteration": state.iteration, "decisions": state.decisions, "tokens": state.tokens,
            "success": summary["success"], "return": summary["return"], "length": summary["length"],
            "invalid_rate": summary["invalid_rate"], "success_by_type": summary["success_by_type"],
            "wall_time_s": self.elapsed(),
        }
        for callback in self.callbacks:
            callback.on_evaluation(self.view, row)
        return summary

    def evaluation_summary(self, curve: bool) -> dict[str, Any]:
        """The held-out evaluation of the acting policy (:func:`evaluate_policy`)."""
        return evaluate_policy(self.rollout_policy, self.config, curve=curve)

    def checkpoint(self) -> None:
        """Write ``checkpoint.pt``: weights, optimiser, and :meth:`run_state`."""
        payload = {"weights": snapshot_weights(self.policy), "optimizer": self.optimizer.state_dict(),
                   **self.run_state()}
        start = time.perf_counter()
        path = self.config.run_dir / "checkpoint.pt"
        save_checkpoint(path, payload)
        self.last_checkpoint = {"seconds": time.perf_counter() - start, "bytes": path.stat().st_size}

    def run_state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides the weights and the optimiser: the state, the config, and
        what the collector, the objectives and the callbacks hold (plain data)."""
        state = self.state
        state.wall_time_s = self.elapsed()
        payload = {
            "rng": state.rng_state(),
            "counters": state.counters(),
            "last_eval": state.last_eval,
            "train_layouts": None if state.train_layouts is None else sorted(state.train_layouts),
            "config": self.config.to_dict(),
            "pending_rollout": self.collector.state_dict(),
            "rollout_memory": None if state.rollout_memory is None else state.rollout_memory.state_dict(),
            "objectives": self.objectives.state_dict(),
            "cost": state.cost.state_dict(),
        }
        for callback in self.callbacks:
            if callback.state_key is not None:
                payload[callback.state_key] = callback.state_dict()
        return payload

    def finish(self) -> TrainSummary:
        """Evaluate and checkpoint if the last iteration did not, tell the callbacks, save ``final_model/``
        and return the run's :class:`TrainSummary`."""
        state = self.state
        if state.last_eval_iteration != state.iteration:
            self.evaluate(final=True)
            self.log_cost()
            self.checkpoint()
        for callback in self.callbacks:
            callback.on_train_end(self.view)
        if self.config.run.keep_final_model:
            self.save_final_model()
        if not self.config.run.keep_checkpoint:
            self.drop_checkpoint()
        state.wall_time_s = self.elapsed()
        return TrainSummary(
            final_eval=state.last_eval, best_success=state.best_success, decisions=state.decisions,
            tokens=state.tokens, tokens_saved=state.tokens_saved, decisions_saved=state.decisions_saved,
            wall_time_s=state.wall_time_s, metrics_path=self.logger.metrics_path,
            curve_path=self.logger.curve_path, checkpoint_dir=self.config.run_dir, iterations=state.iteration,
            recipe=self.config.policy.recipe, cost=state.cost.state_dict(), budget_overshoot=self.budget_overshoot(),
            setup_cpu_s=self.setup_cpu_s,
        )

    def budget_overshoot(self) -> float | None:
        """How far the spend went past ``run.budget``'s amount (None: no such budget, or the run stopped
        before reaching it)."""
        budget = self.config.run.budget
        spend = None if budget is None else self.spend(budget.unit)
        return budget.overshoot(spend) if spend is not None and budget.spent(spend) else None

    def save_final_model(self) -> None:
        """``final_model/``: the trained policy, ``save_pretrained``."""
        with atomic_folder(self.config.run_dir / "final_model") as folder:
            self.policy.save_pretrained(folder)

    def drop_checkpoint(self) -> None:
        """Delete the checkpoint (``run.keep_checkpoint`` off)."""
        (self.config.run_dir / "checkpoint.pt").unlink(missing_ok=True)


def run_training(config: TrainConfig, progress: bool = True) -> TrainSummary:
    """Train as ``config`` says: ``Trainer(config, progress=progress).train()``."""
    return Trainer(config, progress=progress).train()


# ---------------------------------------------------------------------------------------- helpers
def check_environment(config: TrainConfig) -> None:
    """What the run needs of its environment, checked before any model or file: the keywords, then
    the environment built once against what its components need (:func:`run_needs`,
    :func:`ptgpo_envs.check_environment`)."""
    env = config.env
    check_env_kwargs(env.id, env.kwargs, label("env.kwargs"))
    if env.eval_kwargs:
        check_env_kwargs(env.id, env.evaluation_kwargs, label("env.eval_kwargs"))
    made = make_env(env.id, env.kwargs, env.max_steps)
    try:
        ptgpo_envs.check_environment(made, run_needs(config), seed=env.train_seeds[0], name=env.id)
    finally:
        made.close()


def run_needs(config: TrainConfig) -> dict[str, str]:
    """What the configured components need of the run (feature -> who): the rollout strategy's and
    the objectives' (:data:`ptgpo_envs.FEATURES`)."""
    needs = dict(ROLLOUT_STRATEGIES.get(config.rollouts.strategy).needs(config.rollouts))
    for need, name in objective_needs(config.algorithm.objectives).items():
        needs.setdefault(need, f"{label('algorithm.objectives')}: {name}")
    return needs


def _objective_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The objectives' saved state; a checkpoint of an older run kept hindsight's buffer on its own."""
    state = dict(checkpoint.get("objectives") or {})
    if "hindsight_buffer" in checkpoint:
        state.setdefault("hindsight", checkpoint["hindsight_buffer"])
    return state


def _marks_passed(progress: float, fraction: float) -> int:
    """How many multiples of ``fraction`` the run's ``progress`` has reached."""
    # The guard keeps 0.3 of a budget on its mark when 0.3 / 0.1 is 2.9999999999999996.
    return math.floor(progress / fraction + 1e-9)


def permuted(advantages: list, rng: np.random.Generator) -> list:
    """The placebo: the same advantages, randomly permuted over all steps of the batch (every
    trajectory keeps its length; the values lose their link to the steps that earned them)."""
    flat = [a for group in advantages for trajectory in group for a in trajectory]
    shuffled = iter(np.asarray(flat, dtype=float)[rng.permutation(len(flat))].tolist())
    return [[[next(shuffled) for _ in trajectory] for trajectory in group] for group in advantages]


def evaluation_agent(policy, config: TrainConfig, name: str = "policy") -> PolicyAgent:
    """The run's evaluation protocol (greedy, or sampled at ``evaluation.temperature``).

    A fresh generator seeded by the run seed each time: every evaluation of the same weights plays the
    same episodes.
    """
    return PolicyAgent.at_temperature(policy, config.evaluation.temperature, name=name, seed=config.run.seed)


def evaluate_policy(policy, config: TrainConfig, curve: bool = False) -> dict[str, Any]:
    """The run's evaluation of ``policy``: its held-out seeds (the curve's first ones with ``curve``),
    protocol and seed; the summary dict."""
    return evaluation_result(policy, config, evaluation_seeds(config, curve)).summary()


def evaluation_seeds(config: TrainConfig, curve: bool) -> list[int]:
    """The held-out seeds an evaluation plays: all, or the curve's first ``evaluation.curve_episodes``."""
    seeds = list(config.evaluation.seeds)
    if curve and config.evaluation.curve_episodes is not None:
        seeds = seeds[: config.evaluation.curve_episodes]
    return seeds


def evaluation_result(policy, config: TrainConfig, seeds: Sequence[int]) -> EvalResult:
    """``policy`` played on ``seeds`` under the run's evaluation protocol."""
    return evaluate(
        evaluation_agent(policy, config), config.env.id, seeds, config.env.evaluation_kwargs,
        max_steps=config.env.max_steps, batch_size=config.evaluation.batch_size,
        env_backend=config.env_workers.backend, env_workers=config.env_workers.num_workers,
        env_options=config.env_workers.options,
    )


def load_trained_policy(run_dir: str | Path, device: str = "cpu") -> tuple[Any, TrainConfig, str]:
    """The policy a training run left in ``run_dir``, its config, and which weights were loaded.

    ``final_model/`` when the run finished; otherwise the weights of its last ``checkpoint.pt`` (a
    killed or still running run) on the run's own base model. The acting settings (mode, history
    length, prompt budget...) come from the run's ``config.json``, so the policy sees the prompts it
    was trained on.
    """
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    final = run_dir / "final_model"
    if final.is_dir():
        return build_policy(exported_config(config, str(final)), device), config, str(final)
    path = run_dir / "checkpoint.pt"
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} holds no final_model/ and no checkpoint.pt: the run has not reached its "
                         "first checkpoint, or it finished with run.keep_final_model and run.keep_checkpoint off")
    checkpoint = load_checkpoint(path, device)
    policy = build_policy(config, device)
    _restore_checkpoint_weights(policy, checkpoint, path)
    return policy, config, f"{path} (iteration {checkpoint['counters']['iteration']})"


def _restore_checkpoint_weights(policy, checkpoint: dict[str, Any], path: Path) -> None:
    try:
        restore_weights(policy, checkpoint["weights"])
    except (KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: its weights do not fit the run's model ({type(error).__name__}: "
                              f"{str(error)[:200]}); it belongs to another run") from None


def trim_logs(logger: JsonlLogger, last_iteration: int) -> None:
    """Cut both logs back to the checkpoint's iteration: a resumed run writes the later rows again."""
    _trim_jsonl(logger.metrics_path, last_iteration)
    _trim_jsonl(logger.curve_path, last_iteration)
    _trim_jsonl(logger.cost_path, last_iteration)


def _trim_jsonl(path: Path, last_iteration: int) -> None:
    """Keep the rows up to the checkpoint's iteration: a resumed run writes the later ones again."""
    if not path.exists():
        return
    rows = read_jsonl(path)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get("iteration"), int):
            raise FileFormatError(f"{path}: row {number} has no iteration number; the file was damaged: "
                                  "restore it or delete the row")
    kept = [row for row in rows if row["iteration"] <= last_iteration]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))
