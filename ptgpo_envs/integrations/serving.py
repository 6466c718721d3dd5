"""What a served environment (``ptgpo serve``) allows its clients, without the server framework.

A served environment is a public surface: anyone who reaches the port is a client. This module holds the
server's limits and the checks on what a client sends, apart from OpenEnv (:mod:`.openenv` uses them), so
they are tested where OpenEnv is not installed:

* :class:`ServerConfig` -- the environment (checked to be one of ours, a :class:`~ptgpo_envs.core.TextEnv`,
  and made once with its kwargs) and the limits: sessions, idle time, request size, snapshots;
* :func:`check_reset_request` -- a client's ``reset`` arguments; options that name files of the server's
  machine (an environment's ``file_options``, ALFWorld's ``game_path``) are refused, so a client names
  nothing on the server's disk;
* :class:`BodySizeLimit` -- ASGI middleware answering 413 to a request body over the limit, before the
  application reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, MutableMapping

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from ptgpo_envs.core import TextEnv
from ptgpo_envs.registry import check_env_kwargs

__all__ = ["BodySizeLimit", "ServerConfig", "check_reset_request", "DEFAULT_IDLE_TIMEOUT_S",
           "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_SESSIONS", "DEFAULT_SNAPSHOT_CAPACITY"]

#: Snapshots a server keeps by default (the oldest are dropped first).
DEFAULT_SNAPSHOT_CAPACITY = 4096
#: Sessions a server holds at once by default, each with its own environment.
DEFAULT_MAX_SESSIONS = 64
#: Seconds without a reset or step after which a session is closed and its slot freed.
DEFAULT_IDLE_TIMEOUT_S = 300.0
#: Largest request body and WebSocket message, in bytes: an action is at most a few KB of text.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r:.80}")


def text_env_class(env_id: str, env_kwargs: dict[str, Any]) -> type[TextEnv]:
    """The class of ``env_id``'s environment; ``ValueError`` when it is not a :class:`TextEnv`."""
    entry_point = gym.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not isinstance(creator, type):  # a factory function: what it makes tells
        env = gym.make(env_id, disable_env_checker=True, **env_kwargs)
        creator = type(env.unwrapped)
        env.close()
    if not issubclass(creator, TextEnv):
        raise ValueError(f"{env_id} is a {creator.__name__}, not a text environment (ptgpo_envs.core.TextEnv): "
                         "serve one of `ptgpo envs`")
    return creator


@dataclass(frozen=True)
class ServerConfig:
    """What one server serves: an environment id, its constructor kwargs and the server's limits."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_sessions: int = DEFAULT_MAX_SESSIONS
    snapshot_capacity: int = DEFAULT_SNAPSHOT_CAPACITY
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    env_class: type[TextEnv] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _positive_int("max_sessions", self.max_sessions)
        _positive_int("snapshot_capacity", self.snapshot_capacity)
        _positive_int("max_body_bytes", self.max_body_bytes)
        if (not isinstance(self.idle_timeout_s, (int, float)) or isinstance(self.idle_timeout_s, bool)
                or not 1 <= self.idle_timeout_s <= 86400 * 365):
            raise ValueError("idle_timeout_s must be a number of seconds from 1 to a year, "
                             f"got {self.idle_timeout_s!r:.80}")
        check_env_kwargs(self.env_id, self.env_kwargs, "env_kwargs")
        object.__setattr__(self, "env_class", text_env_class(self.env_id, self.env_kwargs))


def check_reset_request(config: ServerConfig, seed: Any, options: Any, snapshots: Any) -> None:
    """Refuse a client's ``reset`` arguments that are malformed or that name a file of the server's machine,
    with a ``ValueError`` saying which and why (the server answers it as a client error)."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"reset: seed must be a non-negative integer, got {seed!r:.80}")
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"reset: options must be a JSON object, got {type(options).__name__}")
    if snapshots is not None and not isinstance(snapshots, bool):
        raise ValueError(f"reset: snapshots must be true or false, got {snapshots!r:.80}")
    named_files = sorted(set(options or {}) & config.env_class.file_options)
    if named_files:
        raise ValueError(f"reset: options {named_files} name files on the server's machine, which a served "
                         "environment never opens for a client: choose among the served data (ALFWorld: "
                         "options={'game': index or info['game_id']})")


class BodySizeLimit:
    """ASGI middleware: an HTTP request whose body exceeds ``max_bytes`` gets 413 with a JSON reason,
    before the application sees it (the body is read here, never more than ``max_bytes`` of it)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], max_bytes: int):
        _positive_int("max_bytes", max_bytes)
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # WebSocket messages: the server's own ws_max_size
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        detail = (f"request body over {self.max_bytes} bytes: a served environment takes small JSON requests "
                  "(the server's --max-request-bytes sets the limit)")
        payload = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})
