"""Rollouts collected in a second process, so that they overlap with the trainer's update.

With ``async_rollouts: true`` the trainer hands the next iteration's tasks to a :class:`RolloutWorker`
before it trains on the current batch: iteration ``k + 1``'s rollouts are played with the weights
from before update ``k`` (one update of policy lag, as in verl's one-step-off-policy recipe) while
update ``k`` runs. PPO's ratio is taken against the behaviour policy's log-probabilities recorded at
rollout time, so the clip still bounds the step from the policy that acted.

Why a process and not a thread: on a CPU the rollout loop is Python (environments, prompts) between
small matrix products, and a second torch thread in one process adds ~20-25 % where a second process
doubles the work done (``../shared/notes``, measured on the 2-core machine). Each process runs half
of the torch threads.

The worker builds its own copy of the policy from the run's config, and each request carries the
weights to play with, the tasks and a seed for the sampling generators, so a request's result
depends on nothing else: the same request gives the same batch (what resuming relies on).
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from ptgpo_algos.data import Batch
from ptgpo_algos.rollout import RolloutStats, Task

__all__ = ["RolloutRequest", "RolloutWorker", "restore_weights", "snapshot_weights", "split_threads"]


@dataclass
class RolloutRequest:
    """One iteration's rollouts: the trainable weights to act with, the tasks, the sampling seed, and
    how many updates those weights had had (to log the policy lag)."""

    weights: dict[str, torch.Tensor]
    tasks: list[Task]
    seed: int
    updates: int = 0


def split_threads(total: int) -> tuple[int, int]:
    """Torch threads for (trainer, rollout worker) out of ``total``: the worker gets the smaller half."""
    worker = max(1, total // 2)
    return max(1, total - worker), worker


def _serve(connection, config: dict[str, Any], device: str, threads: int) -> None:
    """The worker process: build the policy once, then answer requests until told to stop."""
    # Ctrl-C reaches the whole process group: the trainer handles it and stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    import numpy as np
    import transformers

    transformers.utils.logging.disable_progress_bar()

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.trainer import build_policy, collect_iteration

    try:
        run = TrainConfig.from_dict(config)
        policy = build_policy(run, device)
    except Exception:  # noqa: BLE001 - reported to the trainer, which raises it
        connection.send(("error", traceback.format_exc()))
        return
    connection.send(("ready", None))
    while True:
        request = connection.recv()
        if request is None:
            return
        try:
            restore_weights(policy, request.weights)
            batch, stats = collect_iteration(
                run, policy, request.tasks,
                rng=np.random.default_rng(request.seed), generator=torch.Generator().manual_seed(request.seed),
            )
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
        # The child builds its policy while the trainer goes on (its first evaluation, say): the
        # "ready" message is read before the first result.
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
        if self._pending:
            raise RuntimeError("the rollout worker holds one request at a time: call result() first")
        if not self._ready:
            self._receive("ready")
            self._ready = True
        self._connection.send(request)
        self._pending = True

    def result(self) -> tuple[Batch, RolloutStats]:
        if not self._pending:
            raise RuntimeError("no rollout request in flight: call submit() first")
        self._pending = False
        return self._receive("batch")

    def close(self) -> None:
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
