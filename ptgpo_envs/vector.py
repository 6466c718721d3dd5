"""A process-pool vector of text environments, for engines whose steps cost tens of milliseconds.

:class:`ProcessVectorTextEnv` holds ``num_envs`` *slots*, each one environment of a registered id,
spread round-robin over ``num_workers`` worker processes. Every call names the slots it acts on and
returns one result per slot, in the order given; the slots of different workers run in parallel::

    vec = ProcessVectorTextEnv("ptgpo/ALFWorld-v0", num_envs=8, num_workers=4, env_kwargs={...})
    first = vec.reset([0, 1, 2], seeds=[10, 10, 11])           # [(observation, info), ...]
    out = vec.step([0, 2], ["go to desk 1", "look"])            # [(obs, reward, terminated, truncated, info), ...]
    snaps = vec.snapshot([0])                                  # [Snapshot]: picklable, any slot can restore it
    vec.restore([1], snaps)                                    # [(observation, info)]
    vec.call("expert_action", [1])                             # any method of the unwrapped environment
    vec.close()

The results are exactly those of the same calls on in-process environments (``env.unwrapped``, whose
``TextEnv`` counts the horizon). An exception in a worker is raised here as :class:`WorkerError` with
the worker's traceback; the worker keeps serving later calls. A rollout engine plays each decision step as one
``step(live_slots, actions)`` call and forks episodes with ``snapshot``/``restore`` across slots.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections import defaultdict
from typing import Any, Sequence

__all__ = ["ProcessVectorTextEnv", "WorkerError"]


class WorkerError(RuntimeError):
    """A command failed inside a worker process; the message carries the worker's traceback."""


def _worker(conn, env_id: str, env_kwargs: dict[str, Any], slots: list[int]) -> None:
    import gymnasium as gym

    import ptgpo_envs  # noqa: F401  (registers the environments)

    envs = {}
    try:
        for slot in slots:
            envs[slot] = gym.make(env_id, **env_kwargs).unwrapped
        conn.send(("ok", None))
    except Exception:  # noqa: BLE001  (reported to the parent, which raises it)
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        command, items = conn.recv()
        if command == "close":
            for env in envs.values():
                env.close()
            conn.send(("ok", None))
            return
        try:
            if command == "reset":
                result = [envs[slot].reset(seed=seed, options=options) for slot, seed, options in items]
            elif command == "step":
                result = [envs[slot].step(action) for slot, action in items]
            elif command == "snapshot":
                result = [envs[slot].snapshot() for slot in items]
            elif command == "restore":
                result = [envs[slot].restore(snapshot) for slot, snapshot in items]
            elif command == "call":
                result = [getattr(envs[slot], name)(*args) for slot, name, args in items]
            else:
                raise ValueError(f"unknown worker command {command!r}")
            conn.send(("ok", result))
        except Exception:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


class ProcessVectorTextEnv:
    """``num_envs`` text environments of ``env_id`` in ``num_workers`` processes (see module docstring)."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        num_workers: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        start_method: str = "spawn",
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        num_workers = num_envs if num_workers is None else num_workers
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in [1, num_envs={num_envs}], got {num_workers}")
        self.env_id = env_id
        self.num_envs = num_envs
        self.num_workers = num_workers
        self._worker_of = [slot % num_workers for slot in range(num_envs)]
        context = mp.get_context(start_method)
        self._conns = []
        self._processes = []
        for worker in range(num_workers):
            parent, child = context.Pipe()
            slots = [slot for slot in range(num_envs) if self._worker_of[slot] == worker]
            process = context.Process(
                target=_worker, args=(child, env_id, dict(env_kwargs or {}), slots), daemon=True
            )
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        self._closed = False
        for worker, conn in enumerate(self._conns):
            status, payload = conn.recv()
            if status != "ok":
                self.close()
                raise WorkerError(f"worker {worker} could not create {env_id}:\n{payload}")

    # ----------------------------------------------------------------- API
    def reset(
        self,
        indices: Sequence[int],
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        seeds = [None] * len(indices) if seeds is None else list(seeds)
        options = [None] * len(indices) if options is None else list(options)
        self._check_lengths(indices, seeds=seeds, options=options)
        return self._run("reset", indices, [(s, o) for s, o in zip(seeds, options)])

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[tuple[str, float, bool, bool, dict]]:
        self._check_lengths(indices, actions=actions)
        return self._run("step", indices, [(a,) for a in actions])

    def snapshot(self, indices: Sequence[int]) -> list[Any]:
        return self._run("snapshot", indices, None)

    def restore(self, indices: Sequence[int], snapshots: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
        self._check_lengths(indices, snapshots=snapshots)
        return self._run("restore", indices, [(s,) for s in snapshots])

    def call(self, name: str, indices: Sequence[int], *args: Any) -> list[Any]:
        """``getattr(env.unwrapped, name)(*args)`` in each slot (e.g. ``"expert_action"``)."""
        return self._run("call", indices, [(name, args)] * len(indices))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("close", None))
                conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()

    def __enter__(self) -> ProcessVectorTextEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    # ----------------------------------------------------------------- plumbing
    def _check_lengths(self, indices: Sequence[int], **columns: Sequence[Any]) -> None:
        for name, column in columns.items():
            if len(column) != len(indices):
                raise ValueError(f"{len(indices)} slots but {len(column)} {name}")

    def _run(self, command: str, indices: Sequence[int], payloads: list[tuple] | None) -> list[Any]:
        if self._closed:
            raise RuntimeError("this ProcessVectorTextEnv is closed")
        indices = list(indices)
        for slot in indices:
            if not isinstance(slot, int) or not 0 <= slot < self.num_envs:
                raise ValueError(f"slot {slot!r} out of range: this vector has slots 0..{self.num_envs - 1}")
        if len(set(indices)) != len(indices):
            raise ValueError(f"slots must be distinct in one call, got {indices}")
        by_worker: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        for position, slot in enumerate(indices):
            item = slot if payloads is None else (slot, *payloads[position])
            by_worker[self._worker_of[slot]].append((position, item))
        for worker, entries in by_worker.items():
            self._conns[worker].send((command, [item for _, item in entries]))
        results: list[Any] = [None] * len(indices)
        errors = []
        for worker, entries in by_worker.items():
            status, payload = self._conns[worker].recv()
            if status != "ok":
                errors.append(f"worker {worker}:\n{payload}")
                continue
            for (position, _), value in zip(entries, payload):
                results[position] = value
        if errors:
            raise WorkerError(f"{command} failed in {len(errors)} worker(s):\n" + "\n".join(errors))
        return results
