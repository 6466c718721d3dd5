"""Vector environments: ``num_envs`` *slots* of one registered text environment behind one interface.

Every call names the slots it acts on and returns one result per slot, in the order given::

    vec = ProcessVectorTextEnv("ptgpo/ALFWorld-v0", num_envs=8, num_workers=4, env_kwargs={...})
    first = vec.reset([0, 1, 2], seeds=[10, 10, 11])           # [(observation, info), ...]
    out = vec.step([0, 2], ["go to desk 1", "look"])            # [(obs, reward, terminated, truncated, info), ...]
    snaps = vec.snapshot([0])                                  # [Snapshot]: picklable, any slot can restore it
    vec.restore([1], snaps)                                    # [(observation, info)]
    vec.call("expert_action", [1])                             # any method of the unwrapped environment
    vec.unwrapped(1)                                           # the slot's unwrapped environment (or a proxy)
    vec.close()

Implementations, interchangeable: :class:`InProcessVectorTextEnv` (the default: fast environments
step in the caller's process), :class:`ProcessVectorTextEnv` (slots spread round-robin over
``num_workers`` worker processes, for engines whose steps cost tens of milliseconds; the slots of
different workers run in parallel) and, across a cluster, :class:`~ptgpo_envs.ray_vector.RayVectorTextEnv`
(Ray actors). Both make each slot with ``gymnasium.make`` and keep its wrappers
for ``reset`` and ``step`` (a reward wrapper applies), while ``snapshot``, ``restore`` and ``call`` go to
the unwrapped environment, whose ``TextEnv`` counts the horizon. Their results are identical. An
exception in a worker is raised here as :class:`WorkerError` with the worker's traceback; the worker
keeps serving later calls.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections import defaultdict
from typing import Any, Protocol, Sequence

__all__ = ["EnvSlots", "InProcessVectorTextEnv", "ProcessVectorTextEnv", "VectorTextEnv", "WorkerError", "WorkerVector"]


class WorkerError(RuntimeError):
    """A command failed inside a worker process; the message carries the worker's traceback."""


class VectorTextEnv(Protocol):
    """What the episode engine needs of a vector environment (see the module docstring)."""

    num_envs: int

    def reset(self, indices: Sequence[int], seeds: Sequence[int | None] | None = None,
              options: Sequence[dict[str, Any] | None] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Reset these slots (with these seeds and options); one ``(observation, info)`` per slot."""
        ...

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[tuple[str, float, bool, bool, dict]]:
        """Step each slot with its action; one ``(observation, reward, terminated, truncated, info)`` per slot."""
        ...

    def snapshot(self, indices: Sequence[int]) -> list[Any]:
        """A picklable snapshot of each slot's episode, which any slot can restore."""
        ...

    def restore(self, indices: Sequence[int], snapshots: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
        """Restore each slot to its snapshot; one ``(observation, info)`` per slot."""
        ...

    def call(self, name: str, indices: Sequence[int], *args: Any) -> list[Any]:
        """Call the unwrapped environment's method ``name`` on each slot; one result per slot."""
        ...

    def unwrapped(self, slot: int) -> Any:
        """The slot's unwrapped environment, or a proxy to it in its worker process."""
        ...

    def close(self) -> None:
        """Close every slot (and stop the worker processes)."""
        ...


class EnvSlots:
    """The environments of some slots and the commands on them: what a worker process (or the caller,
    in process) runs."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], slots: Sequence[int]):
        import gymnasium as gym

        import ptgpo_envs  # noqa: F401  (registers the environments)

        self.envs: dict[int, Any] = {}
        try:
            for slot in slots:
                self.envs[slot] = gym.make(env_id, **env_kwargs)
        except BaseException:
            self.close()
            raise

    def run(self, command: str, items: list[Any]) -> list[Any]:
        """Run ``command`` (reset, step, snapshot, restore or call) on each item's slot; one result per item."""
        envs = self.envs
        if command == "reset":
            return [envs[slot].reset(seed=seed, options=options) for slot, seed, options in items]
        if command == "step":
            return [envs[slot].step(action) for slot, action in items]
        if command == "snapshot":
            return [envs[slot].unwrapped.snapshot() for slot in items]
        if command == "restore":
            return [envs[slot].unwrapped.restore(snapshot) for slot, snapshot in items]
        if command == "call":
            return [getattr(envs[slot].unwrapped, name)(*args) for slot, name, args in items]
        raise ValueError(f"unknown vector command {command!r}")

    def close(self) -> None:
        """Close these slots' environments."""
        for env in self.envs.values():
            env.close()


def _worker(conn, env_id: str, env_kwargs: dict[str, Any], slots: list[int]) -> None:
    try:
        envs = EnvSlots(env_id, env_kwargs, slots)
        conn.send(("ok", None))
    except Exception:  # noqa: BLE001  (reported to the parent, which raises it)
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            command, items = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            envs.close()
            return
        if command == "close":
            envs.close()
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", envs.run(command, items)))
        except Exception:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


class _VectorCalls:
    """The vector interface over ``_run(command, indices, payloads)``, shared by both implementations."""

    num_envs: int

    def reset(
        self,
        indices: Sequence[int],
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        indices = list(indices)
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

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_lengths(self, indices: Sequence[int], **columns: Sequence[Any]) -> None:
        for name, column in columns.items():
            if len(column) != len(indices):
                raise ValueError(f"{len(indices)} slots but {len(column)} {name}")

    def _check_slots(self, indices: list[int]) -> None:
        for slot in indices:
            if not isinstance(slot, int) or not 0 <= slot < self.num_envs:
                raise ValueError(f"slot {slot!r} out of range: this vector has slots 0..{self.num_envs - 1}")
        if len(set(indices)) != len(indices):
            raise ValueError(f"slots must be distinct in one call, got {indices}")


class InProcessVectorTextEnv(_VectorCalls):
    """``num_envs`` environments of ``env_id`` in this process (see the module docstring)."""

    def __init__(self, env_id: str, num_envs: int, *, env_kwargs: dict[str, Any] | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.env_id = env_id
        self.num_envs = num_envs
        self._slots = EnvSlots(env_id, dict(env_kwargs or {}), range(num_envs))
        self._closed = False

    def unwrapped(self, slot: int) -> Any:
        """The slot's unwrapped environment."""
        return self._slots.envs[slot].unwrapped

    def close(self) -> None:
        """Close every slot's environment (once)."""
        if not self._closed:
            self._closed = True
            self._slots.close()

    def _run(self, command: str, indices: Sequence[int], payloads: list[tuple] | None) -> list[Any]:
        if self._closed:
            raise RuntimeError("this InProcessVectorTextEnv is closed")
        indices = list(indices)
        self._check_slots(indices)
        items = indices if payloads is None else [(slot, *payload) for slot, payload in zip(indices, payloads)]
        return self._slots.run(command, items)


class _SlotProxy:
    """A worker's unwrapped environment, seen from here: its methods run there."""

    def __init__(self, vector: WorkerVector, slot: int):
        self._vector, self._slot = vector, slot

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self._vector.call(name, [self._slot], *args)[0]


class WorkerVector(_VectorCalls):
    """Slots spread over workers (``_worker_of[slot]``): a call split by worker, sent to all of them at
    once (``_exchange``), the results put back in the order of the slots given."""

    _worker_of: list[int]
    _closed: bool

    def unwrapped(self, slot: int) -> Any:
        """A proxy to the slot's unwrapped environment in its worker: its methods run there."""
        self._check_slots([slot])
        return _SlotProxy(self, slot)

    def _run(self, command: str, indices: Sequence[int], payloads: list[tuple] | None) -> list[Any]:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        indices = list(indices)
        self._check_slots(indices)
        by_worker: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        for position, slot in enumerate(indices):
            item = slot if payloads is None else (slot, *payloads[position])
            by_worker[self._worker_of[slot]].append((position, item))
        results: list[Any] = [None] * len(indices)
        answers = self._exchange(command, {worker: [item for _, item in entries] for worker, entries in by_worker.items()})
        for worker, values in answers.items():
            for (position, _), value in zip(by_worker[worker], values):
                results[position] = value
        self._ran(command, indices, payloads, results)
        return results

    def _exchange(self, command: str, items: dict[int, list[Any]]) -> dict[int, list[Any]]:
        """Each worker's results for its ``items``; raises :class:`WorkerError` naming the workers
        whose command failed."""
        raise NotImplementedError

    def _ran(self, command: str, indices: list[int], payloads: list[tuple] | None, results: list[Any]) -> None:
        """Called after every successful call (a backend that replays slots keeps what it needs)."""


class ProcessVectorTextEnv(WorkerVector):
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
    def close(self) -> None:
        """Close the slots and stop the worker processes (once)."""
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

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    # ----------------------------------------------------------------- plumbing
    def _exchange(self, command: str, items: dict[int, list[Any]]) -> dict[int, list[Any]]:
        for worker, batch in items.items():
            self._conns[worker].send((command, batch))
        out, errors = {}, []
        for worker in items:
            status, payload = self._conns[worker].recv()
            if status == "ok":
                out[worker] = payload
            else:
                errors.append(f"worker {worker}:\n{payload}")
        if errors:
            raise WorkerError(f"{command} failed in {len(errors)} worker(s):\n" + "\n".join(errors))
        return out
