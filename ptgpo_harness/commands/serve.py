"""``ptgpo serve``: one registered environment as an OpenEnv server, or its OpenEnv package written out."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import sys
from pathlib import Path

from ptgpo_algos.files import atomic_folder, check_writable
from ptgpo_envs.integrations.openenv_package import package_files
from ptgpo_envs.integrations.serving import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SNAPSHOT_CAPACITY,
    ServerConfig,
)
from ptgpo_envs.registry import get_spec

#: Addresses that only this machine reaches.
LOOPBACK = ("127.0.0.1", "localhost", "::1")

HELP = "serve a registered environment as an OpenEnv environment (HTTP and WebSocket; needs openenv-core)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo serve``'s arguments: the environment, where to listen, its kwargs and the server's limits."""
    parser.add_argument("env_id", metavar="ENV_ID", help="a registered environment id (see `ptgpo envs`)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for all)")
    parser.add_argument("--kwargs", default="{}", metavar="JSON",
                        help="the environment's constructor kwargs, e.g. '{\"difficulty\": \"easy\"}'")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent client sessions, each with its own environment "
                             f"(default {DEFAULT_MAX_SESSIONS})")
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                        help="close a session after this long without a reset or step, freeing its slot "
                             f"(default {DEFAULT_IDLE_TIMEOUT_S:g})")
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="BYTES",
                        help="largest HTTP request body or WebSocket message; larger ones get 413 "
                             f"(default {DEFAULT_MAX_BODY_BYTES})")
    parser.add_argument("--snapshot-capacity", type=int, default=DEFAULT_SNAPSHOT_CAPACITY,
                        help="snapshots kept for reset(restore=...), the oldest dropped first "
                             f"(default {DEFAULT_SNAPSHOT_CAPACITY})")
    parser.add_argument("--write-openenv-package", type=Path, metavar="DIR",
                        help="write the environment's OpenEnv package (openenv.yaml, pyproject.toml, "
                             "server/app.py serving ENV_ID with --kwargs, the limits below, on --port) into DIR, "
                             "a new or empty folder, and exit without serving")


def _fail(message: str) -> int:
    print(f"ptgpo serve: {message}", file=sys.stderr)
    return 2


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with ``args``, worded for the flag; None when nothing is."""
    if not 0 < args.port < 65536:
        return f"--port must be between 1 and 65535, got {args.port}"
    if args.max_sessions < 1:
        return f"--max-sessions must be at least 1, got {args.max_sessions}"
    if args.snapshot_capacity < 1:
        return f"--snapshot-capacity must be at least 1, got {args.snapshot_capacity}"
    if not (math.isfinite(args.idle_timeout) and 1 <= args.idle_timeout <= 86400 * 365):
        return f"--idle-timeout must be a number of seconds from 1 to a year, got {args.idle_timeout:g}"
    if args.max_request_bytes < 1024:
        return f"--max-request-bytes must be at least 1024, got {args.max_request_bytes}"
    try:
        args.kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as error:
        return f"--kwargs is not JSON ({error}); give an object such as '{{\"max_steps\": 30}}'"
    except RecursionError:
        return "--kwargs is nested too deeply to read; give a flat object such as '{\"max_steps\": 30}'"
    if not isinstance(args.kwargs, dict):
        return f"--kwargs must be a JSON object of keyword arguments, got {args.kwargs!r:.80}"
    folder = args.write_openenv_package
    if folder is not None:
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            return (f"--write-openenv-package: {str(folder)!r} exists and is not an empty folder; give a new "
                    "folder (the package is written whole, never mixed with other files)")
        try:
            check_writable(folder, "--write-openenv-package", folder=True)
        except ValueError as error:
            return str(error)
    return None


def _write_package(config: ServerConfig, port: int, folder: Path) -> None:
    """Write ``config``'s OpenEnv package into ``folder`` at once (a half-written package is never seen)."""
    limits = {"max_sessions": config.max_sessions, "snapshot_capacity": config.snapshot_capacity,
              "idle_timeout_s": config.idle_timeout_s, "max_body_bytes": config.max_body_bytes}
    files = package_files(config.env_id, config.env_kwargs, limits, get_spec(config.env_id).description, port,
                          importlib.metadata.version("ptgpo"), importlib.metadata.version("openenv-core"))
    with atomic_folder(folder) as staging:
        for relative, text in files.items():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_text(text, encoding="utf-8")
    print(f"ptgpo serve: wrote {config.env_id}'s OpenEnv package to {folder} ({', '.join(files)}); run "
          "`uv lock` there for the lock file `openenv validate` asks for")


def run(args: argparse.Namespace) -> int:
    """Serve the environment until interrupted; the exit status (2 for a bad flag or a missing package)."""
    problem = _check(args)
    if problem:
        return _fail(problem)
    try:
        from ptgpo_envs.integrations.openenv import serve
    except ImportError as error:
        return _fail(f"OpenEnv is not installed ({error}): pip install openenv-core")
    try:
        config = ServerConfig(args.env_id, args.kwargs, max_sessions=args.max_sessions,
                              snapshot_capacity=args.snapshot_capacity, idle_timeout_s=args.idle_timeout,
                              max_body_bytes=args.max_request_bytes)
    except ValueError as error:
        return _fail(str(error).replace("env_kwargs", "--kwargs", 1))
    except RecursionError:
        return _fail("--kwargs is nested too deeply for the environment; give a flat object")
    if args.write_openenv_package is not None:
        _write_package(config, args.port, args.write_openenv_package)
        return 0

    def announce() -> None:
        print(f"ptgpo serve: {args.env_id} on http://{args.host}:{args.port} (OpenEnv; WebSocket sessions at "
              f"ws://{args.host}:{args.port}/ws)", flush=True)
        if args.host not in LOOPBACK:
            print(f"ptgpo serve: {args.host} is reachable from other machines and the server asks no one who "
                  "they are: anyone who reaches the port can play (within the limits above)", flush=True)

    serve(config, host=args.host, port=args.port, on_ready=announce)
    return 0
