"""Slots of a text environment on Ray actors: the vector interface of :mod:`ptgpo_envs.vector`, on a cluster.

:class:`RayVectorTextEnv` spreads ``num_envs`` slots round-robin over ``num_workers`` Ray actors, each
reserving ``num_cpus`` of the cluster, so the environments of a rollout step on as many cores (or
machines) as the cluster has. Every call sends one request to each actor that holds some of the named
slots, and all actors work at once. Snapshots come back by value (pickled through Ray), so a branch of
a tree can be restored in any slot, on any actor.

A dead actor (its process killed, its node lost) is replaced: a new actor makes its slots again and
each slot is brought back to where it was by restoring its last snapshot (or repeating its last seeded
reset) and replaying the actions stepped since; then the call that failed is sent again. Environments
are deterministic under a seed (the contract), so the replayed slots are in the very state they were
in, and the caller sees every result once: nothing lost, nothing doubled. ``call`` is taken as a
query (``expert_action``, ``achieved_tasks``) and is not replayed. A reset without a seed cannot be
replayed exactly, and ``max_replacements`` bounds the replacements (an actor that dies every time, on
a bad environment, is an error, not a loop).

``ray`` is an optional dependency (``pip install ptgpo[ray]``); it is imported when this class is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptgpo_envs.vector import WorkerError, EnvSlots, WorkerVector

__all__ = ["RayVectorTextEnv", "require_ray"]


def require_ray():
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError("the ray backend needs Ray: pip install 'ptgpo[ray]' (or pip install ray)") from error
    return ray


#: Seconds a cluster's address has to accept a connection (Ray itself retries a dead address for minutes).
CONNECT_TIMEOUT_S = 10.0


def connect_ray(address: str | None = None, num_cpus: int | None = None):
    """Connect to the cluster at ``address`` (``auto``: the one ``ray start`` runs on this machine), or
    start a local one with ``num_cpus`` when ``address`` is None; nothing when already connected. An
    address where no cluster answers within :data:`CONNECT_TIMEOUT_S` is a ``ConnectionError`` naming it."""
    ray = require_ray()
    if not ray.is_initialized():
        options: dict[str, Any] = {"address": address, "log_to_driver": False}
        if address is None:
            options.update(num_cpus=num_cpus, include_dashboard=False)
        else:
            _check_answers(address)
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as error:
            if address is None:
                raise
            raise ConnectionError(f"no Ray cluster at {address!r} ({' '.join(str(error).split())[:300]}); start one "
                                  "with `ray start --head`, or give the address it printed") from None
    return ray


def _check_answers(address: str) -> None:
    """Refuse, after at most :data:`CONNECT_TIMEOUT_S`, a ``host:port`` (or ``ray://host:port``) where
    nothing accepts a connection (``auto`` is found by Ray on this machine, at once or not at all)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise ConnectionError(f"no Ray cluster answers at {address!r} ({error.strerror or error}); start one with "
                              "`ray start --head`, or give the address it printed") from None


class _SlotsActorBody(EnvSlots):
    """What an actor holds: some slots' environments, and its process id (for tests and logs)."""

    def pid(self) -> int:
        import os

        return os.getpid()


@dataclass
class _Replay:
    """How to bring a slot back: its last seeded reset (Gymnasium's wrappers also refuse a step before
    a reset, so it is repeated before a restore), its last snapshot since (None: none), and the actions
    stepped after them."""

    reset: tuple[Any, Any] | None = None  # (seed, options)
    snapshot: Any = None
    actions: list[str] = field(default_factory=list)


class RayVectorTextEnv(WorkerVector):
    """``num_envs`` text environments of ``env_id`` on ``num_workers`` Ray actors (see the module docstring).

    ``address`` is used only when this process is not connected to Ray yet (``auto``, ``ray://host:port``,
    or None for a local cluster).
    """

    def __init__(self, env_id: str, num_envs: int, *, num_workers: int | None = None,
                 env_kwargs: dict[str, Any] | None = None, num_cpus: float = 1.0, address: str | None = None,
                 max_replacements: int = 8):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        num_workers = num_envs if num_workers is None else num_workers
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in [1, num_envs={num_envs}], got {num_workers}")
        if num_cpus <= 0:
            raise ValueError(f"num_cpus must be > 0, got {num_cpus}")
        self._ray = connect_ray(address)
        self.env_id, self.num_envs, self.num_workers = env_id, num_envs, num_workers
        self.num_cpus, self.max_replacements = num_cpus, max_replacements
        self.replacements = 0
        self._env_kwargs = dict(env_kwargs or {})
        self._worker_of = [slot % num_workers for slot in range(num_envs)]
        self._replays = [_Replay() for _ in range(num_envs)]
        self._actor_class = self._ray.remote(_SlotsActorBody).options(num_cpus=num_cpus, max_restarts=0)
        self._actors: list[Any] = []
        self._closed = False
        try:
            self._actors = [self._new_actor(worker) for worker in range(num_workers)]
            for worker in range(num_workers):
                self._wait_started(worker)
        except (self._ray.exceptions.RayError, WorkerError) as error:
            self.close()
            raise WorkerError(f"could not create {env_id} on Ray actors:\n{error}") from None

    # ----------------------------------------------------------------- API
    def actor_pids(self) -> list[int]:
        """The process id of each actor (where it runs: ``ray.util.state`` has the node)."""
        return self._ray.get([actor.pid.remote() for actor in self._actors])

    def kill_worker(self, worker: int) -> None:
        """Kill one actor as a crash would (for tests of the recovery); the next call replaces it."""
        self._ray.kill(self._actors[worker], no_restart=True)

    def close(self) -> None:
        """Kill every actor (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001  (already dead, or Ray is shut down)
                pass
        self._actors = []

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    # ----------------------------------------------------------------- plumbing
    def _wait_started(self, worker: int) -> None:
        """Wait until ``worker``'s actor has made its environments; one that died meanwhile (killed, its
        node lost) is replaced like a dead actor later on, within ``max_replacements``."""
        while True:
            try:
                self._ray.get(self._actors[worker].pid.remote())
                return
            except self._ray.exceptions.RayActorError as error:
                if self.replacements >= self.max_replacements:
                    raise WorkerError(f"worker {worker} died while making its environments, and "
                                      f"{self.replacements} actors were already replaced: {error}") from None
                self.replacements += 1
                self._actors[worker] = self._new_actor(worker)

    def _new_actor(self, worker: int):
        slots = [slot for slot in range(self.num_envs) if self._worker_of[slot] == worker]
        return self._actor_class.remote(self.env_id, self._env_kwargs, slots)

    def _exchange(self, command: str, items: dict[int, list[Any]]) -> dict[int, list[Any]]:
        """Send each actor its items at once, then collect; replace a dead actor and send again."""
        ray = self._ray
        pending = {worker: self._actors[worker].run.remote(command, batch) for worker, batch in items.items()}
        out: dict[int, list[Any]] = {}
        errors = []
        while pending:
            worker, ref = pending.popitem()
            try:
                out[worker] = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                self._replace(worker, error)
                pending[worker] = self._actors[worker].run.remote(command, items[worker])
            except ray.exceptions.RayTaskError as error:
                errors.append(f"worker {worker}:\n{error}")
        if errors:
            raise WorkerError(f"{command} failed in {len(errors)} worker(s):\n" + "\n".join(errors))
        return out

    def _replace(self, worker: int, error: Exception) -> None:
        """A new actor for ``worker``'s slots, each brought back to its last state (module docstring)."""
        if self.replacements >= self.max_replacements:
            raise WorkerError(f"worker {worker} died and {self.replacements} actors were already replaced "
                              f"(max_replacements={self.max_replacements}): {error}") from error
        self.replacements += 1
        actor = self._actors[worker] = self._new_actor(worker)
        try:
            self._bring_back(actor, [slot for slot in range(self.num_envs) if self._worker_of[slot] == worker])
        except self._ray.exceptions.RayActorError as again:  # the new actor died too
            self._replace(worker, again)

    def _bring_back(self, actor: Any, slots: list[int]) -> None:
        ray, replays = self._ray, self._replays
        resets = [(slot, *replays[slot].reset) for slot in slots if replays[slot].reset is not None]
        if resets:
            ray.get(actor.run.remote("reset", resets))
        restores = [(slot, replays[slot].snapshot) for slot in slots if replays[slot].snapshot is not None]
        if restores:
            ray.get(actor.run.remote("restore", restores))
        # Lock-step replay: step k of every slot that has one, one call each.
        longest = max((len(replays[slot].actions) for slot in slots), default=0)
        for k in range(longest):
            items = [(slot, replays[slot].actions[k]) for slot in slots if len(replays[slot].actions) > k]
            ray.get(actor.run.remote("step", items))

    def _ran(self, command: str, indices: list[int], payloads: list[tuple] | None, results: list[Any]) -> None:
        """Keep what a replacement needs to bring each slot back (see :class:`_Replay`)."""
        for position, slot in enumerate(indices):
            replay = self._replays[slot]
            if command == "reset":
                replay.reset, replay.snapshot, replay.actions = payloads[position], None, []
            elif command in ("restore", "snapshot"):
                replay.actions = []
                replay.snapshot = payloads[position][0] if command == "restore" else results[position]
            elif command == "step":
                replay.actions.append(payloads[position][0])
