"""The training loop shared by every algorithm: the estimator is a name in the config, nothing else.

:class:`Trainer` runs a :class:`~ptgpo_algos.config.TrainConfig`. Each iteration is five stages, each
a method a subclass can replace::

    batch, stats = self.collect()                 # group rollouts of this iteration's tasks
    advantages, diagnostics = self.estimate(batch)   # the configured estimator, by name
    update = self.update(batch, advantages)       # pi_old and the reference scored without gradients,
                                                  # then PPO epochs (ptgpo_algos.updates.updater.Updater);
                                                  # components after it
    update |= self.sync(samples)                  # a separate rollout engine or copy gets the new weights
    self.end_iteration(row)                       # log, evaluate, checkpoint

Collection runs here or, with ``rollouts.asynchronous``, in a second process
(:mod:`ptgpo_algos.training.collectors`) while the update runs: those rollouts play the weights from
before the previous update (``policy_lag`` 1 in the metrics, 0 otherwise), and the checkpoint keeps
the request in flight so that a resumed run replays it. Everything else joins through callbacks
(:mod:`ptgpo_algos.training.callbacks`): the logs, the progress bar, TensorBoard. Auxiliary signals are objectives
(:mod:`ptgpo_algos.objectives`): hindsight relabelling is one.

What must survive a resume is in plain sight: :class:`~ptgpo_algos.training.state.TrainState`, the
weights, the optimiser and its schedule, the callbacks', objectives' and collector's own state.

Outputs in the run folder: ``config.json`` (with the processor and kernel settings of the process
that last started or resumed the run, :func:`~ptgpo_algos.device.kernel_record`); ``metrics.jsonl``
(one row per iteration); ``curve.jsonl`` (one row per evaluation, iteration 0 being the untrained
policy); ``checkpoint.pt`` (every ``run.checkpoint_every`` iterations and at the end); and
``final_model/`` (``save_pretrained``). A resumed CPU run reproduces an uninterrupted one (all but
wall times; a run stopped by ``time_limit_s`` is, by nature, not reproducible). The run stops at
``run.iterations``, at ``run.total_decisions`` (a matched budget across algorithms) or at
``run.time_limit_s``, whichever comes first.

Where the run executes is a component, its :class:`~ptgpo_algos.training.placement.Placement`: this process
(:class:`~ptgpo_algos.training.placement.OneProcess`), or one rank of N (``--nproc N``, ``torchrun``;
:class:`ptgpo_algos.distributed.placement.Ranks`, FSDP2). The trainer asks it the operations that
differ (module :mod:`ptgpo_algos.training.placement`); the stages, set-up and resume are the same code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from ptgpo_algos.advantages import StepAdvantages, estimate_batch, estimator_defaults, summarize_diagnostics
from ptgpo_algos.training.callbacks import (
    Callback,
    JsonlLogger,
    ProgressBar,
    RolloutRecorder,
    RunView,
    TensorBoardLogger,
    WandbLogger,
)
from ptgpo_algos.training.checkpoint import CheckpointError
from ptgpo_algos.config import TrainConfig, label
from ptgpo_algos.cost import standard_error
from ptgpo_algos.critic.component import build_critic
from ptgpo_algos.critic.files import load_saved_critic
from ptgpo_algos.critic.gae import whitened
from ptgpo_algos.records import Batch, Task
from ptgpo_algos.device import check_reproducible_kernels, kernel_record
from ptgpo_algos.rollouts.evaluation import overlap
from ptgpo_algos.metrics import MetricsRow
from ptgpo_algos.files import atomic_write_text
from ptgpo_algos.objectives import ObjectiveInputs, Objectives
from ptgpo_algos.updates.optimizer import build_optimizer, build_schedule
from ptgpo_algos.training.placement import OneProcess, Placement
from ptgpo_algos.policy.backends import SYNC_TOKENS, sync_prompts, sync_tolerance, sync_weights
from ptgpo_algos.policy.precision import float32_rollouts, precision_for
from ptgpo_algos.training.preflight import check_environment, check_machine
from ptgpo_algos.rollouts.collection import RolloutStats
from ptgpo_algos.training.run_folder import trim_logs
from ptgpo_algos.training.run_evaluation import evaluation_result, evaluation_seeds
from ptgpo_algos.rollouts.registry import new_memory
from ptgpo_algos.training.resume import component_state, restore_components
from ptgpo_algos.training.state import TrainState, TrainSummary
from ptgpo_algos.training.tasks import TaskDrawer
from ptgpo_algos.updates.samples import flatten_batch
from ptgpo_algos.updates.updater import Updater, old_logprobs_mode

__all__ = ["Trainer", "run_training"]


class Trainer:
    """Train as a :class:`TrainConfig` says (see the module docstring); :meth:`train` runs it, where
    ``placement`` says (this process alone by default)."""

    def __init__(self, config: TrainConfig, *, placement: Placement | None = None, progress: bool = True,
                 callbacks: Sequence[Callback] = ()):
        self.config = config
        self.placement = placement if placement is not None else OneProcess()
        main = self.placement.is_main
        self.progress = progress and main
        self.extra_callbacks = list(callbacks) if main else []
        #: What the last iteration spent in ``run.budget``'s unit (0 before the first of this process):
        #: the ``nearest`` stop rule's estimate of what the next one would.
        self.budget_step = 0.0

    # ================================================================== the run
    def train(self) -> TrainSummary:
        """Check everything that can be checked before a model is built or a file written (the device,
        the placement's refusals, what the run needs of this machine (:mod:`ptgpo_algos.training.preflight`), the
        environment, the run folder: one writer at a time, a resume only of the same run), then build,
        restore the checkpoint when resuming, and run until the budget is spent."""
        config = self.config
        self.device = self.placement.device(config)
        if config.run.reproducible:
            if self.device != "cpu":
                raise ValueError(f"run.reproducible (--reproducible): pins CPU kernels, but the run is on "
                                 f"{self.device}; pass --device cpu, or leave it off")
            check_reproducible_kernels("run.reproducible (--reproducible)")
        budget = config.run.budget
        if budget is not None and budget.unit == "gpu_s" and not self.device.startswith("cuda"):
            raise ValueError(f"{label('run.budget')}: a budget in gpu_s needs a GPU, but the run is on {self.device}; "
                             "use train_cpu_s on a CPU")
        self.placement.check(config)
        check_machine(config)
        check_environment(config)
        with contextlib.ExitStack() as stack:
            resumed = self.placement.claim(self, stack)
            stack.callback(self.placement.close, self)
            self.setup(resumed)
            return self.run_loop(fresh=not resumed)

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
            self.tasks.close()
        return self.finish()

    def setup(self, resumed: bool) -> None:
        """Build the policies, the optimiser, the state, the collector and the callbacks; restore the
        checkpoint of a ``resumed`` run."""
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
        self.collector = self.placement.collector(self)
        self.sync_prompts: list[list[int]] = []
        #: The sync check's noise floor, measured before this process's first update (None until then).
        self.sync_floor: float | None = None
        #: Seconds and bytes of the last checkpoint written.
        self.last_checkpoint: dict[str, float] = {}
        self.tasks = TaskDrawer(config.env)
        if resumed:
            self.restore()
        if self.device.startswith("cuda") and self.state.cost.gpu_s is None:
            self.state.cost.gpu_s = 0.0
        self.write_run_files(fresh=not resumed)
        self.started = time.perf_counter() - self.state.wall_time_s
        #: The run's progress when the current iteration started (evaluation.every_fraction).
        self.progress_before = self.progress_fraction()

    def build_models(self) -> None:
        """The trainable policy, the KL reference, the one that plays (the placement's: the policy itself,
        a separate engine, a rank's copy), the policy wrapped for the update (sharded across ranks), the
        optimiser and its learning-rate schedule (:mod:`ptgpo_algos.updates.optimizer`), and a learned critic's
        value head for the estimators that read one (:mod:`ptgpo_algos.critic`; its own parameter group)."""
        config = self.config
        self.policy = self.placement.build_policy(config, self.device)
        self.reference = self.policy.reference_policy() if config.optim.kl_coef > 0 else None
        self.rollout_policy = self.placement.rollout_policy(self)
        self.placement.wrap(self)
        self.critic = build_critic(config.algorithm, self.policy)
        if self.critic is not None:  # a run that starts from a saved model takes its critic back
            load_saved_critic(self.critic, config.policy.model)
        groups = [] if self.critic is None else [self.critic.param_group(config.optim.lr)]
        self.optimizer = build_optimizer(self.policy.parameters(), config.optim, groups)
        self.schedule = build_schedule(self.optimizer, config.optim)

    def build_callbacks(self) -> list[Callback]:
        """The logs (JSONL, TensorBoard, wandb), the rollout recorder, the progress bar and the callbacks the
        trainer was given; none on a rank other than the first."""
        if not self.placement.is_main:
            return []
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
        """``config.json`` (with this process's machine), after emptying the logs of a ``fresh`` run (the
        first rank's)."""
        if not self.placement.is_main:
            return
        if fresh:
            for path in (self.logger.metrics_path, self.logger.curve_path, self.logger.cost_path):
                path.unlink(missing_ok=True)
        atomic_write_text(self.config.run_dir / "config.json",
                          json.dumps({**self.config.to_dict(), "machine": kernel_record()}, indent=1))

    def build_updater(self) -> Updater:
        """The placement's update, with pi_old decided once (``optim.old_logprobs``,
        :func:`old_logprobs_mode`): the rollouts come from elsewhere when a separate engine or a lagged
        collector plays them, and the trainer's own scores are float32 when neither its precision nor
        the rollouts' (``policy.rollout_dtype``) has autocast. The drift is reported when the rollouts
        came from elsewhere, or from a rank's copy whose scores are not float32."""
        config = self.config
        elsewhere = self.placement.plays_elsewhere(self)
        float32_scores = float32_rollouts(precision_for(self.device, config.policy.dtype, config.policy.cpu_autocast),
                                          config.policy.rollout_dtype)
        mode = old_logprobs_mode(config.optim.old_logprobs, elsewhere=elsewhere, float32_scores=float32_scores)
        return self.placement.updater(self, rng=self.state.rng, reference=self.reference, old_logprobs=mode,
                                      report_drift=elsewhere or (self.rollout_policy is not self.policy and not float32_scores),
                                      schedule=self.schedule, **({} if self.critic is None else {"critic": self.critic}))

    def restore(self) -> None:
        """Resume from the run's checkpoint (the placement reads the weights and the optimiser): the
        state, the learning-rate schedule, every component's state (callbacks, objectives, collector);
        what plays gets the weights; the logs are cut back to the checkpoint's iteration."""
        checkpoint = self.placement.load_checkpoint(self)
        self.state.restore(checkpoint)
        try:
            restore_components(self, checkpoint)
        except (TypeError, KeyError, ValueError, RuntimeError) as error:
            path = self.config.run_dir / self.placement.checkpoint_name
            raise CheckpointError(f"{path}: a component's saved state does not fit this run ({type(error).__name__}: "
                                  f"{str(error)[:200]}); it belongs to another run") from None
        if self.rollout_policy is not self.policy:
            self.placement.push_weights(self)
        if self.placement.is_main:
            trim_logs([self.logger.metrics_path, self.logger.curve_path, self.logger.cost_path], self.state.iteration)

    def run_cpu(self, seconds: float) -> float:
        """The run's CPU seconds, given this process's: summed over the ranks (the same sum on every rank,
        so that a budget in them stops every rank at the same iteration)."""
        return self.placement.total(seconds)

    def elapsed(self) -> float:
        """Wall-clock seconds the run has spent, time before a resume included (``run.time_limit_s``'s
        clock)."""
        return time.perf_counter() - self.started

    def budget_spent(self) -> bool:
        """Whether ``run.iterations``, ``run.total_decisions``, ``run.budget`` or ``run.time_limit_s`` is
        reached."""
        run, state = self.config.run, self.state
        spent = (state.iteration >= run.iterations
                 or (run.total_decisions is not None and state.decisions >= run.total_decisions)
                 or (run.budget is not None and run.budget.spent(self.spend(run.budget.unit), self.budget_step))
                 or (run.time_limit_s is not None and self.elapsed() >= run.time_limit_s))
        # Ranks' clocks differ: under a time limit they agree to stop when one of them is out of time.
        return self.placement.agree(spent) if run.time_limit_s is not None else spent

    def spend(self, unit: str) -> float:
        """What the run has spent so far in ``unit`` (:data:`~ptgpo_algos.cost.COST_UNITS`)."""
        if unit in ("decisions", "tokens"):
            return getattr(self.state, unit)
        return getattr(self.state.cost, unit) or 0.0

    def next_tasks(self) -> list[Task]:
        """This iteration's tasks: training seeds drawn from the run's generator (each redrawn while
        its layout is held out, with ``env.held_out``)."""
        return self.tasks.draw(self.state.rng, self.config.rollouts.tasks_per_iteration)

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
        samples, update_row = self.update(batch, advantages)
        train_time = time.perf_counter() - train_start
        update_row.add("sync", self.sync(samples), "the weight sync")
        figures = update_row.section("update")
        self.record(stats, batch)
        self.count_cost(stats, figures, cpu_s=time.process_time() - cpu_start,
                        wall_s=time.perf_counter() - iteration_start)
        state.iteration = iteration
        row = MetricsRow()
        row.add("", {"iteration": iteration}, "the trainer")
        row.add("run", {f"total_{k}": getattr(state, k)
                        for k in ("decisions", "tokens", "decisions_saved", "tokens_saved")}, "the trainer's totals")
        row.add("rollout", stats.as_dict(), "the rollout strategy's counts")
        row.add("rollout", {"wait_s": rollout_wait, "policy_lag": lag}, "the trainer's collection")
        trained_steps, advantage_figures = self.batch_figures(samples, advantages, diagnostics)
        row.add("advantages", advantage_figures, "the estimator")
        row.add("update", {"trained_steps": trained_steps}, "the trainer's samples")
        row.merge(update_row)
        row.add("update", {"train_time_s": train_time,
                           "train_tokens_per_s": figures["train_tokens"] / train_time if train_time > 0 else 0.0},
                "the trainer's clock")
        row.add("run", {"iteration_time_s": time.perf_counter() - iteration_start, "wall_time_s": self.elapsed()},
                "the trainer's clock")
        self.end_iteration(row.as_dict())

    def record(self, stats: RolloutStats, batch: Batch) -> None:
        """Count the rollouts (all ranks' counts already) and the layouts all ranks' episodes started in."""
        layouts = [t.meta["layout"] for group in batch for t in group if t.meta.get("layout")]
        self.state.add_spend(stats)
        if self.state.train_layouts is not None:
            for part in self.placement.gather(layouts):
                self.state.train_layouts.update(part)

    def count_cost(self, stats: RolloutStats, update: dict[str, Any], cpu_s: float, wall_s: float) -> None:
        """Add the iteration's cost (:class:`~ptgpo_algos.cost.Cost`): its episodes, the update's tokens
        and optimiser steps, ``cpu_s`` and ``wall_s``, this process's CPU and wall seconds of its rollouts
        and update, and the CPU seconds of an asynchronous worker that played its rollouts."""
        cost, budget = self.state.cost, self.config.run.budget
        before = self.spend(budget.unit) if budget is not None else 0.0
        cost.episodes += int(stats.episodes)
        cost.trained_tokens += int(update.get("train_tokens", 0))
        cost.unique_tokens += int(update.get("computed_tokens", 0))
        cost.optimizer_updates += int(update.get("updates", 0))
        cost.train_cpu_s += self.run_cpu(cpu_s) + stats.worker_cpu_s
        if cost.gpu_s is not None:
            cost.gpu_s += wall_s * self.placement.world_size
        if budget is not None:
            self.budget_step = self.spend(budget.unit) - before

    def batch_figures(self, samples: list, advantages: StepAdvantages, diagnostics) -> tuple[int, dict[str, float]]:
        """The trained batch's steps (all ranks' samples) and the figures of its advantages (all ranks',
        in task order) with the estimator's diagnostics (:func:`~ptgpo_algos.advantages.summarize_diagnostics`)."""
        # The counts' read-only mapping does not pickle: each group's travels as a plain dict.
        plain = [dataclasses.replace(d, counts=dict(d.counts)) for d in diagnostics]
        parts = self.placement.gather((len(samples), advantages.values, plain))
        flat = np.concatenate([part[1] for part in parts])
        diagnostics = [d for part in parts for d in part[2]]
        return sum(part[0] for part in parts), {
            "mean": float(flat.mean()) if flat.size else 0.0,
            "std": float(flat.std()) if flat.size else 0.0,
            "abs_mean": float(np.abs(flat).mean()) if flat.size else 0.0,
            **summarize_diagnostics(diagnostics),
        }

    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """This iteration's rollouts and their policy lag (updates between the acting weights and now)."""
        return self.collector.collect()

    def estimate(self, batch: Batch) -> tuple[StepAdvantages, list]:
        """Advantages of every step by the configured estimator, with per-group diagnostics; with a
        critic, its values of the batch's states are recorded first (the estimator reads them)."""
        algorithm = self.config.algorithm
        config = dict(algorithm.config)
        if "progress" in estimator_defaults(algorithm.name):
            config.setdefault("progress", self.progress_fraction())
        # Across ranks each holds only its groups: a whitening over the whole batch takes every rank's.
        across = (self.critic is not None and self.placement.world_size > 1
                  and {**estimator_defaults(algorithm.name), **config}.get("whiten", False))
        if across:
            config["whiten"] = False
        if self.critic is not None:
            self.critic.annotate(batch, self.policy, self.updater.scoring_batch_size, self.placement.gather)
        advantages, diagnostics = estimate_batch(algorithm.name, batch, **config)
        if across:
            advantages, diagnostics = whitened_over_ranks(advantages, diagnostics, self.placement.gather)
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

    def update(self, batch: Batch, advantages: StepAdvantages) -> tuple[list, MetricsRow]:
        """The update on the batch's distinct steps (:class:`~ptgpo_algos.updates.updater.Updater`), then the
        objectives' and each callback's ``after_update``; before it, the auxiliary objectives route the
        advantages and prepare their items (:mod:`ptgpo_algos.objectives`). Returns the samples and the
        figures of the update, the objectives, the critic and the callbacks, each in its section."""
        auxiliary, row = None, MetricsRow()
        if self.objectives:
            advantages, auxiliary, prepared_objectives = self.objectives.prepare(
                batch, advantages, self.policy, self.state.rng, self.config.optim.micro_batch_size)
            row.merge(prepared_objectives)
        samples = flatten_batch(batch, advantages, self.config.algorithm.loss_agg, self.config.policy.mode)
        if self.critic is not None:
            algorithm = self.config.algorithm
            estimator = {**estimator_defaults(algorithm.name), **algorithm.config}
            row.add("critic", self.critic.set_targets(batch, samples, estimator, gather=self.placement.gather),
                    "the critic's targets")
        row.add("update", self.updater.prepare(samples), "the updater's scoring")
        trained = self.updater.run(samples, auxiliary)
        # The auxiliary objectives' figures of the update's steps come named in their own sections.
        row.add("update", {k: v for k, v in trained.items() if "/" not in k}, "the updater")
        row.add_named({k: v for k, v in trained.items() if "/" in k}, "an objective's loss in the update")
        if self.objectives:
            inputs = ObjectiveInputs(batch, advantages, self.policy, self.state.rng)
            row.merge(self.objectives.after_update(inputs, self.updater.train_step))
        for callback in self.callbacks:
            row.add(f"callback/{type(callback).__name__}", callback.after_update(self.view, batch),
                    f"callback {type(callback).__name__}")
        return samples, row

    def calibrate_sync(self, batch) -> None:
        """Measure the sync check's noise floor once per process, before its first update, when what plays
        and the trainer hold the same weights: the engine's sampled tokens scored by both on this batch's
        prompts (across ranks: the first rank's that has any; the sharded model scores them in lockstep
        on every rank), what later syncs are held to (:func:`sync_tolerance`)."""
        if self.rollout_policy is self.policy or self.sync_floor is not None:
            return
        prompts = next((p for p in self.placement.gather(sync_prompts(batch)) if p), [])
        if prompts:
            self.sync_prompts = prompts
            self.sync_floor = self.rollout_policy.verify_sync(self.policy, prompts, SYNC_TOKENS).mean_logprob_diff

    def sync(self, samples: list) -> dict[str, Any]:
        """Hand the updated weights to what plays (a separate engine, a rank's copy) and verify it acts like
        the trained model on the prompts its noise floor was measured on (without a floor yet: only hand
        them over); the figures of the metrics row's ``sync`` section."""
        if self.rollout_policy is self.policy:
            return {}
        if self.sync_floor is None:
            return self.placement.push_weights(self)
        floor = self.sync_floor
        figures = sync_weights(self.rollout_policy, self.policy, self.sync_prompts, floor,
                               sync_tolerance(self.config, floor), push=lambda: self.placement.push_weights(self))
        # sync_weights names its figures for callers without a row; here the section says it.
        return {k.removeprefix("sync_"): v for k, v in figures.items()}

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
        """Append the run's cost so far to ``cost.jsonl`` (the first rank), with the evaluation of this
        iteration if it had one."""
        if not self.placement.is_main:
            return
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
        """The held-out evaluation of the acting policy (:func:`~ptgpo_algos.training.run_evaluation.evaluate_policy`; across ranks each plays
        its block of the seeds)."""
        return self.placement.evaluation(evaluation_seeds(self.config, curve),
                                         lambda seeds: evaluation_result(self.rollout_policy, self.config, seeds))

    def checkpoint(self) -> None:
        """Write the checkpoint (the placement's: ``checkpoint.pt``, or ``checkpoint/`` shard by shard):
        weights, optimiser, and the rest (:func:`~ptgpo_algos.training.resume.component_state`)."""
        run_state = component_state(self)
        start = time.perf_counter()
        size = self.placement.save_checkpoint(self, run_state)
        self.last_checkpoint = {"seconds": time.perf_counter() - start, "bytes": size}

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
        """How far the spend went past ``run.budget``'s amount, negative when the ``nearest`` rule stopped
        it short (None: no such budget, or something else stopped the run)."""
        budget = self.config.run.budget
        spend = None if budget is None else self.spend(budget.unit)
        return budget.overshoot(spend) if spend is not None and budget.spent(spend, self.budget_step) else None

    def save_final_model(self) -> None:
        """``final_model/``: the trained policy, ``save_pretrained`` (across ranks: gathered to the first)."""
        self.placement.save_final_model(self)

    def drop_checkpoint(self) -> None:
        """Delete the checkpoint (``run.keep_checkpoint`` off)."""
        self.placement.drop_checkpoint(self)


def run_training(config: TrainConfig, progress: bool = True) -> TrainSummary:
    """Train as ``config`` says: ``Trainer(config, progress=progress).train()``."""
    return Trainer(config, progress=progress).train()


# ---------------------------------------------------------------------------------------- helpers
def _marks_passed(progress: float, fraction: float) -> int:
    """How many multiples of ``fraction`` the run's ``progress`` has reached."""
    # The guard keeps 0.3 of a budget on its mark when 0.3 / 0.1 is 2.9999999999999996.
    return math.floor(progress / fraction + 1e-9)


def whitened_over_ranks(advantages: StepAdvantages, diagnostics: list,
                        gather: Callable[[Any], list[Any]]) -> tuple[StepAdvantages, list]:
    """``advantages`` (this rank's groups) whitened as the ``ppo`` estimator's ``whiten`` does the whole
    batch, over every rank's (``gather``: in rank order, which is the batch's), and each group's
    ``nonzero_steps`` counted again."""
    whole = np.concatenate(gather(advantages.values))
    if whole.size <= 1:
        return advantages, diagnostics
    advantages = advantages.with_values(whitened(advantages.values, over=whole))
    diagnostics = [dataclasses.replace(d, nonzero_steps=int(n))
                   for d, n in zip(diagnostics, advantages.nonzero_per_group())]
    return advantages, diagnostics


def permuted(advantages: StepAdvantages, rng: np.random.Generator) -> StepAdvantages:
    """The placebo: the same advantages, randomly permuted over all steps of the batch (every
    trajectory keeps its length; the values lose their link to the steps that earned them)."""
    return advantages.with_values(advantages.values[rng.permutation(advantages.n_steps)])
