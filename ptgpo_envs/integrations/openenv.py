"""Any registered environment as an OpenEnv environment: its server, its typed messages, its client.

OpenEnv (``pip install openenv-core``, imported as ``openenv``) serves an environment over HTTP with
one WebSocket session per client; each session gets an environment of its own. This module maps our
contract (:mod:`ptgpo_envs.core`) onto OpenEnv's typed models:

* :class:`TextAction` -- ``text``: the action, matched against ``admissible_actions`` as our
  environments match it (an inadmissible one uses up a step with ``action_valid`` False, never an error);
* :class:`TextObservation` -- the observation ``text``, ``reward``, ``done`` (terminated or truncated)
  and ``truncated``, every contract key of ``info`` as a typed field (``task``, ``admissible_actions``,
  ``state_key``, ``won``, ``step``, ``layout``, ``action_valid``), the whole ``info`` (with an
  environment's own keys) as JSON, and ``snapshot_id`` when the session asked for snapshots;
* :class:`TextState` -- OpenEnv's ``episode_id`` and ``step_count`` with the environment id, the task,
  the state key, ``won``, ``done`` and the last observation's ``snapshot_id``.

Forking uses OpenEnv's own ``reset`` message, whose extra fields reach the environment:
``reset(seed=..., snapshots=True)`` starts an episode whose every observation carries a
``snapshot_id``; ``reset(restore=ID)`` puts the session back at that observation (its observation is
returned again), so a client replays a branch from any step, as ``snapshot()``/``restore()`` do in
process. Snapshots stay on the server (a client never sends one, so nothing it sends is unpickled or
run); ids are random, shared by the server's sessions (one environment id and kwargs per server, so
any session may restore any id) and kept for the ``snapshot_capacity`` most recent ones.

Multi-step play goes through a WebSocket session (:class:`TextEnvClient`). OpenEnv's stateless HTTP
routes build no episode to continue: ``POST /reset`` plays a reset in an environment of its own (one such
request at a time, in a thread of its own, so it never holds up the sessions) and ``POST /step`` answers
409, since a fresh environment has no episode to step. The server's limits
(:mod:`ptgpo_envs.integrations.serving`): sessions, each closed after ``idle_timeout_s`` without a reset or step; request bodies and WebSocket messages of at
most ``max_body_bytes`` (413 beyond); and reset options that name files of the server's machine refused.
A client's mistake is answered as a client error (4xx, or an error message on the WebSocket) with its
reason, never with a traceback.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import gymnasium as gym
from fastapi import Body, HTTPException, Request
from fastapi.responses import JSONResponse
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    ResetRequest,
    ResetResponse,
    State,
)
from pydantic import Field, ValidationError
from starlette.websockets import WebSocketDisconnect

from ptgpo_envs.core import Snapshot, TextEnv
from ptgpo_envs.integrations.serving import (
    DEFAULT_SNAPSHOT_CAPACITY,
    BodySizeLimit,
    ServerConfig,
    check_reset_request,
)
from ptgpo_envs.registry import get_spec

__all__ = ["ServerConfig", "SnapshotStore", "TextAction", "TextEnvClient", "TextEnvironment", "TextObservation",
           "TextState", "build_app", "serve"]

#: OpenEnv's routes this server answers itself: the stateless ones without building an environment
#: on the event loop, and ``POST /mcp`` with a JSON-RPC error (our environments offer no MCP tools; the
#: WebSocket ``/mcp`` is not served).
_OWN_ROUTES = frozenset({"/reset", "/step", "/state", "/metadata", "/mcp"})


class TextAction(Action):
    """One text action, as an agent would type it."""

    text: str = Field(description="the action; valid when it names one of the observation's admissible_actions")


class TextObservation(Observation):
    """What ``reset`` and ``step`` return: the observation and the whole of our ``info``."""

    text: str = Field(default="", description="the observation")
    task: str = Field(default="", description="the goal in words")
    admissible_actions: list[str] = Field(default_factory=list, description="the actions valid now")
    state_key: str = Field(default="", description="the state as the agent observes it, without history")
    won: bool = False
    step: int = 0
    layout: str = Field(default="", description="hash of how the episode started")
    action_valid: bool | None = Field(default=None, description="whether the last action was admissible")
    truncated: bool = Field(default=False, description="whether the horizon ended the episode")
    info: dict[str, Any] = Field(default_factory=dict, description="the environment's whole info, as JSON")
    snapshot_id: str | None = Field(default=None, description="pass to reset(restore=...) to come back here")


class TextState(State):
    """The session's episode: OpenEnv's ``episode_id`` and ``step_count`` and our keys."""

    env_id: str = ""
    task: str = ""
    state_key: str = ""
    won: bool = False
    done: bool = True
    snapshot_id: str | None = None


def _json_safe(value: Any) -> Any:
    """``value`` as JSON types: numbers, text, lists and mappings; numpy scalars as numbers; else text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _json_safe(item())
        except (TypeError, ValueError):
            pass
    return repr(value)


class SnapshotStore:
    """Snapshots by random id, the ``capacity`` most recent kept; safe to share between sessions' threads."""

    def __init__(self, capacity: int = DEFAULT_SNAPSHOT_CAPACITY):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"snapshot_capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self._items: OrderedDict[str, Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, snapshot: Snapshot) -> str:
        """Keep ``snapshot``; its id (128 random bits, so ids cannot be guessed across sessions)."""
        snapshot_id = secrets.token_hex(16)
        with self._lock:
            self._items[snapshot_id] = snapshot
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return snapshot_id

    def get(self, snapshot_id: Any) -> Snapshot:
        """The snapshot of ``snapshot_id``; an unknown id raises ``ValueError`` saying why it may be unknown."""
        with self._lock:
            snapshot = self._items.get(snapshot_id) if isinstance(snapshot_id, str) else None
            if snapshot is not None:
                self._items.move_to_end(snapshot_id)
        if snapshot is None:
            raise ValueError(
                f"restore: unknown snapshot id {str(snapshot_id)[:80]!r}: ids come from an observation's "
                f"snapshot_id after reset(snapshots=True), on this server, among its {self.capacity} most "
                "recent (start the server with a larger --snapshot-capacity to keep more)")
        return snapshot

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class TextEnvironment(Environment[TextAction, TextObservation, TextState]):
    """One session's environment: a registered environment made with the server's kwargs."""

    # Each session makes its own environment and the snapshot store takes a lock: no state is shared.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, config: ServerConfig, store: SnapshotStore):
        super().__init__()
        self._config = config
        self._store = store
        # Played unwrapped: Gymnasium's order-enforcing wrapper would refuse a step after a restore that
        # followed no reset of this session, and the environment counts its own horizon.
        self._wrapped = gym.make(config.env_id, disable_env_checker=True, **config.env_kwargs)
        env = self._wrapped.unwrapped
        if not isinstance(env, TextEnv):
            raise TypeError(f"{config.env_id} is a {type(env).__name__}, not a ptgpo_envs.core.TextEnv")
        self._env: TextEnv = env
        self._snapshots = False
        self._closed = False
        self._state = TextState(env_id=config.env_id)

    def reset(self, seed: int | None = None, episode_id: str | None = None, *, options: dict | None = None,
              snapshots: bool | None = None, restore: str | None = None, **ignored: Any) -> TextObservation:
        """A new episode (``seed``, ``options``), or the session back at ``restore`` (a ``snapshot_id``).

        ``snapshots=True`` gives every observation from now on a ``snapshot_id``; restoring keeps them on.
        Options naming files of the server's machine are refused
        (:func:`~ptgpo_envs.integrations.serving.check_reset_request`)."""
        self._check_open()
        check_reset_request(self._config, seed, options, snapshots)
        if snapshots is not None:
            self._snapshots = bool(snapshots)
        if restore is not None:
            observation, info = self._env.restore(self._store.get(restore))
            self._snapshots = True
        else:
            observation, info = self._env.reset(seed=seed, options=options)
        self._state = TextState(env_id=self._config.env_id, episode_id=episode_id or str(uuid.uuid4()),
                                step_count=self._env.steps_taken)
        return self._observe(observation, 0.0, False, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None, **ignored: Any) -> TextObservation:
        """Play ``action.text``; an inadmissible text is a valid message that uses up a step."""
        self._check_open()
        if not isinstance(action, TextAction):
            raise TypeError(f"step takes a TextAction, got {type(action).__name__}")
        observation, reward, terminated, truncated, info = self._env.step(action.text)
        return self._observe(observation, reward, terminated, truncated, info)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this session was closed after {self._config.idle_timeout_s:g} s without a reset or "
                               "step: open a new session")

    def _observe(self, text: str, reward: float, terminated: bool, truncated: bool,
                 info: dict[str, Any]) -> TextObservation:
        done = bool(terminated or truncated or self._env.done)
        snapshot_id = self._store.put(self._env.snapshot()) if self._snapshots else None
        self._state = self._state.model_copy(update={
            "step_count": self._env.steps_taken, "task": str(info.get("task", "")),
            "state_key": str(info.get("state_key", "")), "won": bool(info.get("won", False)), "done": done,
            "snapshot_id": snapshot_id})
        return TextObservation(
            text=text, reward=float(reward), done=done, truncated=bool(truncated), task=str(info.get("task", "")),
            admissible_actions=[str(a) for a in info.get("admissible_actions", [])],
            state_key=str(info.get("state_key", "")), won=bool(info.get("won", False)),
            step=int(info.get("step", self._env.steps_taken)), layout=str(info.get("layout", "")),
            action_valid=info.get("action_valid"), info=_json_safe(info), snapshot_id=snapshot_id)

    @property
    def state(self) -> TextState:
        """The session's episode now."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """The environment's id and one-line description, from our registry."""
        spec = get_spec(self._config.env_id)
        return EnvironmentMetadata(name=spec.id, description=spec.description, version="ptgpo")

    def close(self) -> None:
        """Close the wrapped environment (OpenEnv calls this when the session ends or sits idle too long)."""
        self._closed = True
        self._wrapped.close()


def build_app(config: ServerConfig) -> Any:
    """The ASGI application serving ``config``'s environment: OpenEnv's WebSocket sessions (``/ws``),
    ``/schema`` and ``/health``, the stateless ``/reset``, ``/step``, ``/state`` and ``/metadata`` answered
    here, and request bodies over ``config.max_body_bytes`` refused with 413."""
    store = SnapshotStore(config.snapshot_capacity)

    def make_environment() -> TextEnvironment:
        return TextEnvironment(config, store)

    make_environment.__name__ = f"make_{config.env_id.replace('/', '_')}"
    app = create_fastapi_app(make_environment, TextAction, TextObservation, concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=config.max_sessions, session_timeout=config.idle_timeout_s))
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) not in _OWN_ROUTES]
    _add_stateless_routes(app, config, make_environment)
    return BodySizeLimit(_quiet_disconnects(app), config.max_body_bytes)


def _quiet_disconnects(app: Any) -> Any:
    """``app`` without the traceback OpenEnv's session handler leaves when it closes a WebSocket that the
    client (or the message size limit) has already closed: the client is gone, there is nothing to answer."""

    async def application(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise

    return application


def _add_stateless_routes(app: Any, config: ServerConfig, make_environment: Callable[[], TextEnvironment]) -> None:
    # One thread for every stateless reset: building an environment and resetting it (seconds for an
    # ALFWorld game) never runs on the event loop, and a flood of them queues here, bounded.
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptgpo-stateless")
    queued = 0

    def reset_once(arguments: dict[str, Any]) -> TextObservation:
        environment = make_environment()
        try:
            return environment.reset(**arguments)
        finally:
            environment.close()

    @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"],
              summary="An episode's first observation, in an environment of its own (play through /ws)")
    async def reset(request: ResetRequest = Body(default_factory=ResetRequest)) -> ResetResponse:
        nonlocal queued
        if queued >= config.max_sessions:
            raise HTTPException(503, f"{queued} stateless resets are already waiting: retry later, or play "
                                     "through a WebSocket session at /ws")
        arguments = request.model_dump(exclude_unset=True)
        queued += 1
        try:
            observation = await asyncio.get_running_loop().run_in_executor(worker, reset_once, arguments)
        except (ValueError, TypeError) as error:
            raise HTTPException(400, " ".join(str(error).split())) from None
        finally:
            queued -= 1
        return ResetResponse(**serialize_observation(observation))

    @app.post("/step", tags=["Environment Control"], status_code=409,
              summary="Refused: a stateless request has no episode to step (play through /ws)")
    async def step() -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": (
            "POST /step has no episode to step: OpenEnv's HTTP routes give each request a fresh environment; "
            "play an episode through a WebSocket session at /ws (TextEnvClient, or any OpenEnv client)")})

    @app.get("/state", response_model=TextState, tags=["State Management"],
             summary="A fresh environment's state (a session's own comes from its WebSocket)")
    async def state() -> TextState:
        return TextState(env_id=config.env_id)

    @app.get("/metadata", response_model=EnvironmentMetadata, tags=["Environment Info"])
    async def metadata() -> EnvironmentMetadata:
        spec = get_spec(config.env_id)
        return EnvironmentMetadata(name=spec.id, description=spec.description, version="ptgpo")

    @app.post("/mcp", tags=["MCP"], summary="JSON-RPC 2.0; every method is an error: no MCP tools (play through /ws)")
    async def mcp(request: Request) -> dict[str, Any]:
        # Answered without building an environment: OpenEnv's own route makes one per request on the event
        # loop to find out that it has no tools.
        return _mcp_answer(await request.body()).model_dump()


def _mcp_answer(body: bytes) -> JsonRpcResponse:
    """The JSON-RPC 2.0 answer to an MCP request: a parse or request error, else "method not found"."""
    try:
        request = JsonRpcRequest.model_validate_json(body)
    except ValidationError as error:
        if any(item["type"] == "json_invalid" for item in error.errors()):
            return JsonRpcResponse.error_response(JsonRpcErrorCode.PARSE_ERROR)
        return JsonRpcResponse.error_response(
            JsonRpcErrorCode.INVALID_REQUEST, "a JSON-RPC 2.0 request has jsonrpc '2.0', a method and at most "
            "params and id")
    return JsonRpcResponse.error_response(
        JsonRpcErrorCode.METHOD_NOT_FOUND, f"{request.method[:80]!r}: this environment offers no MCP tools; play "
        "it through a WebSocket session at /ws (reset, step, state)", request_id=request.id)


def serve(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "warning", on_ready: Callable[[], None] | None = None) -> None:
    """Serve ``config``'s environment on ``host:port`` until interrupted (uvicorn, one process);
    ``on_ready`` runs once the port accepts connections."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

    # Connections beyond the sessions' and some short requests' are answered 503 by uvicorn itself.
    settings = uvicorn.Config(build_app(config), host=host, port=port, log_level=log_level,
                              ws_max_size=config.max_body_bytes, limit_concurrency=config.max_sessions + 64)
    _Server(settings).run()


class TextEnvClient(EnvClient[TextAction, TextObservation, TextState]):
    """OpenEnv's WebSocket client for a served environment: ``TextEnvClient(base_url=...).sync()``,
    then ``reset(seed=0)``, ``step(TextAction(text=...))``, ``state()``, ``reset(restore=ID)``."""

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return {"text": action.text}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        observation = TextObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                      done=bool(payload.get("done", False)))
        return StepResult(observation=observation, reward=payload.get("reward"), done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> TextState:
        return TextState(**payload)
