"""How the trainer gets each iteration's rollouts: collected here, or in a second process meanwhile.

:class:`SyncCollector` collects an iteration's rollouts when the trainer asks. :class:`AsyncCollector`
(``rollouts.asynchronous``) hands the next iteration's tasks to a :class:`RolloutWorker` before the
trainer trains on the current batch: iteration ``k + 1``'s rollouts are played with the weights from
before update ``k`` (one update of policy lag, as in verl's one-step-off-policy recipe) while update
``k`` runs. PPO's ratio is taken against the behaviour policy's log-probabilities recorded at rollout
time, so the clip still bounds the step from the policy that acted.

Why a process and not a thread: on a CPU the rollout loop is Python (environments, prompts) between
small matrix products, and a second torch thread in one process adds ~20-25 % where a second process
doubles the work done (measured on the 2-core machine). Each process runs half of the torch threads.

The worker builds its own copy of the policy from the run's config, and each request carries the
weights to play with, the tasks and a seed for the sampling generators, so a request's result
depends on nothing else: the same request gives the same batch (what resuming relies on).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Batch, Task
from ptgpo_algos.distributed.work_split import share_budget
from ptgpo_algos.objectives import needs_expert
from ptgpo_algos.rollouts.collection import RolloutStats
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, collect_with
from ptgpo_envs import make_env

__all__ = ["AsyncCollector", "CollectingRun", "RolloutRequest", "RolloutWorker", "SyncCollector", "TaskDraws",
           "added_stats", "collect_iteration", "draw_per_task", "env_horizon", "most_decisions", "play_per_task",
           "restore_weights", "snapshot_weights", "split_threads"]


def collect_iteration(config: TrainConfig, policy, tasks: list[Task], *, rng, generator,
                      max_decisions: int | None = None, memory: Any = None) -> tuple[Batch, RolloutStats]:
    """One iteration's rollouts of ``tasks`` by the configured strategy (:mod:`ptgpo_algos.rollouts.registry`),
    spending at most ``max_decisions`` (what is left of a matched budget); ``memory`` is the strategy's
    state across iterations, where it keeps one."""
    workers = config.env_workers
    return collect_with(config.rollouts.strategy, policy, tasks, config.rollouts, rng=rng, generator=generator,
                        env_backend=workers.backend, env_workers=workers.num_workers, env_options=workers.options,
                        max_decisions=max_decisions, expert=needs_expert(config.algorithm.objectives), memory=memory)


class CollectingRun(Protocol):
    """What a collector reads of the run it collects for (the trainer is one): the config, the device,
    the state (its generators and counters), the trainable and acting policies, the next tasks and
    whether the budget is spent."""

    config: TrainConfig
    device: str
    state: Any
    policy: Any
    rollout_policy: Any

    def next_tasks(self) -> list[Task]:
        """This iteration's tasks."""

    def budget_spent(self) -> bool:
        """Whether the run's budget is spent."""


def remaining_budget(config: TrainConfig, spent: int) -> int | None:
    """Decisions left of the run's matched budget (None: no decision budget)."""
    total = config.run.total_decisions
    return None if total is None else max(0, total - spent)


def most_decisions(config: TrainConfig, task: Task, horizon: int) -> int:
    """The most decisions ``task``'s group can spend, as its rollout strategy declares it
    (:attr:`~ptgpo_algos.rollouts.registry.RolloutStrategy.most_decisions`), with episodes of the task's
    step limit, else ``horizon``."""
    rollouts = config.rollouts
    return ROLLOUT_STRATEGIES.get(rollouts.strategy).group_decisions(rollouts, task.max_steps or horizon)


def env_horizon(config: TrainConfig) -> int:
    """The episodes' step limit: ``env.max_steps``, else the environment's own."""
    if config.env.max_steps is not None:
        return config.env.max_steps
    made = make_env(config.env.id, config.env.kwargs, None)
    try:
        return int(made.unwrapped.max_steps)
    finally:
        made.close()


@dataclass(frozen=True)
class TaskDraws:
    """An iteration's tasks, each with its own seed (for its generators) and its cap of the decision
    budget (None: no budget): what a task's group depends on besides the weights."""

    tasks: list[Task]
    seeds: list[int]
    caps: tuple[int | None, ...]


def draw_per_task(run: CollectingRun, horizon: int) -> TaskDraws:
    """The iteration's tasks, a seed per task from the run's generator, and the budget left shared out
    per task in proportion to the most each can spend (:func:`~ptgpo_algos.distributed.work_split.share_budget`):
    the same on every rank and in one process."""
    config, state = run.config, run.state
    tasks = run.next_tasks()
    seeds = [int(s) for s in state.rng.integers(2**62, size=len(tasks))]
    planned = [most_decisions(config, task, horizon) for task in tasks]
    caps = share_budget(planned, len(tasks), remaining_budget(config, state.decisions)).caps
    return TaskDraws(tasks, seeds, caps)


def play_per_task(config: TrainConfig, policy, draws: TaskDraws, indices: Sequence[int],
                  memory: Any = None) -> tuple[Batch, RolloutStats | None]:
    """The tasks ``indices`` of ``draws`` played one after another, each with generators seeded by its
    own seed and within its own cap; their groups and counts added up (None: no task)."""
    batch: Batch = []
    stats: RolloutStats | None = None
    for index in indices:
        seed = draws.seeds[index]
        groups, more = collect_iteration(config, policy, [draws.tasks[index]], rng=np.random.default_rng(seed),
                                         generator=torch.Generator().manual_seed(seed),
                                         max_decisions=draws.caps[index], memory=memory)
        batch += groups
        stats = added_stats(stats, more)
    return batch, stats


def added_stats(total: RolloutStats | None, more: RolloutStats) -> RolloutStats:
    """Two collections' counts together, in the strategy's own class (PATR's and BPO's count more; every
    count is a sum, and the wall times add up: the tasks are played one after another)."""
    if total is None:
        return more
    return type(more)(**{k: getattr(total, k) + getattr(more, k) for k in vars(more)})


class SyncCollector:
    """Rollouts collected in the trainer's process, with the current weights (no policy lag): task by
    task with generators of their own (``rollouts.seeding: per_task``, as the ranks play them), or all
    tasks in one batched pass drawing from the run's generators (``shared``)."""

    def __init__(self, trainer: CollectingRun):
        self.trainer = trainer
        per_task = trainer.config.rollouts.seeding == "per_task"
        self.horizon = env_horizon(trainer.config) if per_task else None

    def start(self) -> None:
        """Nothing to start: collection happens in :meth:`collect`."""

    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """Play this iteration's tasks now; the batch, its statistics and a policy lag of 0."""
        trainer = self.trainer
        config, state = trainer.config, trainer.state
        if self.horizon is not None:
            draws = draw_per_task(trainer, self.horizon)
            batch, stats = play_per_task(config, trainer.rollout_policy, draws, range(len(draws.tasks)),
                                         memory=state.rollout_memory)
            return batch, stats if stats is not None else RolloutStats(), 0
        batch, stats = collect_iteration(config, trainer.rollout_policy, trainer.next_tasks(),
                                         rng=state.rng, generator=state.sampler,
                                         max_decisions=remaining_budget(config, state.decisions),
                                         memory=state.rollout_memory)
        return batch, stats, 0

    def state_dict(self) -> None:
        """None: nothing is in flight between iterations."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Nothing to restore."""

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class RolloutRequest:
    """One iteration's rollouts: the trainable weights to act with, the tasks, the sampling seed, how
    many updates those weights had had (to log the policy lag), and the decisions it may spend."""

    weights: dict[str, torch.Tensor]
    tasks: list[Task]
    seed: int
    updates: int = 0
    max_decisions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (tensors, numbers, strings): what a checkpoint stores."""
        return {**dataclasses.asdict(self), "tasks": [dataclasses.asdict(t) for t in self.tasks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRequest:
        """The request from its checkpointed form."""
        return cls(**{**data, "tasks": [Task(**t) for t in data["tasks"]]})


class AsyncCollector:
    """Rollouts of the next iteration collected in a :class:`RolloutWorker` during this one's update."""

    def __init__(self, trainer: CollectingRun):
        self.trainer = trainer
        self.threads = torch.get_num_threads()
        trainer_threads, worker_threads = split_threads(self.threads)
        # The worker builds its policy while the trainer goes on (its first evaluation, say).
        self.worker = RolloutWorker(trainer.config.to_dict(), trainer.device, worker_threads)
        torch.set_num_threads(trainer_threads)
        self.pending: RolloutRequest | None = None

    def _request(self, spent: int) -> RolloutRequest:
        # The weights as they are now, before this iteration's update: one update of lag.
        trainer = self.trainer
        return RolloutRequest(snapshot_weights(trainer.policy), trainer.next_tasks(),
                              int(trainer.state.rng.integers(2**62)), updates=trainer.state.iteration,
                              max_decisions=remaining_budget(trainer.config, spent))

    def start(self) -> None:
        """Submit the first request (or the one a checkpoint kept in flight)."""
        if self.trainer.budget_spent():
            return
        if self.pending is None:
            self.pending = self._request(self.trainer.state.decisions)
        self.worker.submit(self.pending)

    def collect(self) -> tuple[Batch, RolloutStats, int]:
        """The batch the worker played, its statistics and its policy lag; the next request is submitted
        at once, to be played while the trainer updates."""
        trainer = self.trainer
        state, run = trainer.state, trainer.config.run
        batch, stats = self.worker.result()
        lag = state.iteration - self.pending.updates
        more = state.iteration + 1 < run.iterations and (
            run.total_decisions is None or state.decisions + stats.decisions < run.total_decisions)
        self.pending = self._request(state.decisions + stats.decisions) if more else None
        if self.pending is not None:
            self.worker.submit(self.pending)
        return batch, stats, lag

    def state_dict(self) -> dict[str, Any] | None:
        """The request in flight, to replay it on resume."""
        return self.pending.to_dict() if self.pending is not None else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Take back the request in flight at the checkpoint, to replay it."""
        self.pending = RolloutRequest.from_dict(state) if state else None

    def close(self) -> None:
        """Stop the worker and give the trainer its threads back."""
        self.worker.close()
        torch.set_num_threads(self.threads)


def split_threads(total: int) -> tuple[int, int]:
    """Torch threads for (trainer, rollout worker) out of ``total``: the worker gets the smaller half."""
    worker = max(1, total // 2)
    return max(1, total - worker), worker


def _serve(connection, config: dict[str, Any], device: str, threads: int) -> None:
    """The worker process: build the policy once, then answer requests until told to stop."""
    # Ctrl-C reaches the whole process group: the trainer handles it and stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()

    from ptgpo_algos.policy.backends import build_policy

    try:
        run = TrainConfig.from_dict(config)
        policy = build_policy(run, device)
    except Exception:  # noqa: BLE001 - reported to the trainer, which raises it
        connection.send(("error", traceback.format_exc()))
        return
    connection.send(("ready", None))
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):  # the trainer is gone
            return
        if request is None:
            return
        try:
            restore_weights(policy, request.weights)
            cpu_start = time.process_time()
            batch, stats = collect_iteration(
                run, policy, request.tasks,
                rng=np.random.default_rng(request.seed), generator=torch.Generator().manual_seed(request.seed),
                max_decisions=request.max_decisions,
            )
            stats.worker_cpu_s = time.process_time() - cpu_start
            connection.send(("batch", (batch, stats)))
        except Exception:  # noqa: BLE001
            connection.send(("error", traceback.format_exc()))


class RolloutWorker:
    """A child process that collects rollouts for the trainer, one request in flight at a time.

    ``submit(request)`` returns at once; ``result()`` blocks until that request's ``(batch, stats)``
    is back and raises ``RuntimeError`` with the worker's traceback if it failed. ``close()`` stops
    the process (a request still in flight is dropped). Usable as a context manager.
    """

    def __init__(self, config: dict[str, Any], device: str, threads: int = 1):
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, config, device, threads), daemon=True,
                                        name="ptgpo-rollouts")
        self._process.start()
        child.close()
        self._pending = False
        # The "ready" message is read before the first request is sent.
        self._ready = False

    def _receive(self, expected: str) -> Any:
        try:
            kind, payload = self._connection.recv()
        except (EOFError, OSError):
            self._process.join(timeout=5)
            raise RuntimeError(f"the rollout worker process exited (exit code {self._process.exitcode}) "
                               "before answering; see its output above") from None
        if kind == "error":
            raise RuntimeError(f"the rollout worker failed:\n{payload}")
        assert kind == expected, (kind, expected)
        return payload

    def submit(self, request: RolloutRequest) -> None:
        """Send a request to the worker process (one at a time)."""
        if self._pending:
            raise RuntimeError("the rollout worker holds one request at a time: call result() first")
        if not self._ready:
            self._receive("ready")
            self._ready = True
        self._connection.send(request)
        self._pending = True

    def result(self) -> tuple[Batch, RolloutStats]:
        """Wait for the submitted request's batch and statistics."""
        if not self._pending:
            raise RuntimeError("no rollout request in flight: call submit() first")
        self._pending = False
        return self._receive("batch")

    def close(self) -> None:
        """Stop the worker process."""
        if self._process.is_alive():
            if not self._pending:
                try:
                    self._connection.send(None)
                except (BrokenPipeError, OSError):
                    pass
                self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout=5)
        self._connection.close()
        self._pending = False

    def __enter__(self) -> RolloutWorker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def snapshot_weights(policy) -> dict[str, torch.Tensor]:
    """A detached CPU copy of ``policy``'s trainable weights (LoRA adapters, or the whole model): what
    a request carries and a checkpoint keeps."""
    return {name: p.detach().to("cpu", copy=True) for name, p in policy.named_trainable().items()}


def restore_weights(policy, weights: dict[str, torch.Tensor]) -> None:
    """Copy weights taken by :func:`snapshot_weights` (from a request or a checkpoint) into ``policy``."""
    trainable = policy.named_trainable()
    with torch.no_grad():
        for name, tensor in weights.items():
            trainable[name].copy_(tensor)
