"""One served environment as an OpenEnv environment package: the files ``openenv validate`` reads.

OpenEnv's tooling (``openenv validate``, ``build``, ``push``) works on a folder per environment holding
``openenv.yaml`` (the manifest: ``spec_version``, ``name``, ``type``, ``runtime``, ``app``, ``port``),
``pyproject.toml`` (a dependency on ``openenv-core`` and a ``server`` script naming a ``main``) and
``server/app.py`` (the ASGI ``app`` and a ``main()`` called under ``if __name__ == "__main__"``). For a
registered environment these files say one thing: serve this id with these kwargs through
:mod:`ptgpo_envs.integrations.openenv`, so they are written from the id (:func:`package_files`), never
kept by hand. ``uv.lock``, which the validator also asks for, is the resolution of those dependencies by
``uv lock`` against a package index, so it is not written here.

Pure text, no OpenEnv import: the writer (``ptgpo serve ENV_ID --write-openenv-package DIR``) checks the
environment and its kwargs (:class:`~ptgpo_envs.integrations.serving.ServerConfig`) before calling this.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["OPENENV_SPEC_VERSION", "package_files", "package_name"]

#: The manifest format OpenEnv's ``openenv init`` writes (openenv-core 0.3.0).
OPENENV_SPEC_VERSION = 1


def package_name(env_id: str) -> str:
    """The package's name for ``env_id``: a Python identifier (``ptgpo/Household-v0`` ->
    ``ptgpo_household_v0``), the import name of the package and the manifest's ``name``."""
    name = re.sub(r"[^0-9a-z]+", "_", env_id.lower()).strip("_")
    return name if name and not name[0].isdigit() else f"env_{name}"


def _quoted(text: str) -> str:
    """``text`` as a double-quoted string of both YAML and TOML: JSON's quoting, non-ASCII characters kept
    as they are (ASCII escapes of those outside the BMP would be surrogate pairs, which neither reads)."""
    return json.dumps(text, ensure_ascii=False)


def package_files(env_id: str, env_kwargs: dict[str, Any], limits: dict[str, Any], description: str, port: int,
                  ptgpo_version: str, openenv_version: str) -> dict[str, str]:
    """The package's files, by path relative to its folder: ``openenv.yaml``, ``pyproject.toml``,
    ``__init__.py``, ``server/__init__.py``, ``server/app.py`` and ``README.md``. ``env_kwargs`` and
    ``limits`` (:class:`~ptgpo_envs.integrations.serving.ServerConfig`'s keyword arguments) must be JSON:
    they travel as JSON text in ``server/app.py`` and are read back with ``json.loads``."""
    name = package_name(env_id)
    return {
        "openenv.yaml": _manifest(name, description, port),
        "pyproject.toml": _pyproject(env_id, name, ptgpo_version, openenv_version),
        "__init__.py": f'"""{env_id} as an OpenEnv environment package (see server/app.py)."""\n',
        "server/__init__.py": "",
        "server/app.py": _app(env_id, env_kwargs, limits, port),
        "README.md": _readme(env_id, description, port, ptgpo_version, openenv_version),
    }


def _manifest(name: str, description: str, port: int) -> str:
    """``openenv.yaml``: what ``openenv init`` writes."""
    manifest = "\n".join([
        f"spec_version: {OPENENV_SPEC_VERSION}",
        f"name: {name}",
        "type: space",
        "runtime: fastapi",
        "app: server.app:app",
        f"port: {port}",
        f"description: {_quoted(description)}",
        "",
    ])
    return manifest


def _pyproject(env_id: str, name: str, ptgpo_version: str, openenv_version: str) -> str:
    """``pyproject.toml``: the pins and the ``server`` script ``openenv validate`` asks for."""
    pyproject = "\n".join([
        "[build-system]",
        'requires = ["setuptools>=61"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {_quoted(name.replace('_', '-') + '-openenv')}",
        f"version = {_quoted(ptgpo_version)}",
        f"description = {_quoted(f'{env_id} served as an OpenEnv environment by ptgpo')}",
        'requires-python = ">=3.10"',
        "dependencies = [",
        f"    {_quoted(f'ptgpo[openenv]=={ptgpo_version}')},",
        f"    {_quoted(f'openenv-core=={openenv_version}')},",
        "]",
        "",
        "[project.scripts]",
        f'server = "{name}.server.app:main"',
        "",
        "[tool.setuptools]",
        f'packages = ["{name}", "{name}.server"]',
        f'package-dir = {{ "{name}" = ".", "{name}.server" = "server" }}',
        "",
        "[tool.setuptools.package-data]",
        f'{name} = ["openenv.yaml"]',
        "",
    ])
    return pyproject


def _app(env_id: str, env_kwargs: dict[str, Any], limits: dict[str, Any], port: int) -> str:
    """``server/app.py``: the same server as ``ptgpo serve``, its settings as JSON text."""
    kwargs_json = json.dumps(env_kwargs, sort_keys=True)
    limits_json = json.dumps(limits, sort_keys=True)
    app = f'''"""{env_id} as an OpenEnv environment, written by `ptgpo serve {env_id} --write-openenv-package`.

Run `python -m server.app --port {port}` here, `uv run server`, or `uvicorn server.app:app`; clients use
ptgpo_envs.integrations.openenv.TextEnvClient or OpenEnv's GenericEnvClient.
"""

import argparse
import json

from ptgpo_envs.integrations.openenv import ServerConfig, build_app, serve

ENV_ID = {json.dumps(env_id)}
ENV_KWARGS = json.loads({json.dumps(kwargs_json)})
LIMITS = json.loads({json.dumps(limits_json)})
CONFIG = ServerConfig(ENV_ID, ENV_KWARGS, **LIMITS)
app = build_app(CONFIG)


def main(host: str = "127.0.0.1", port: int = {port}) -> None:
    """Serve until interrupted; 127.0.0.1 unless told otherwise (a container passes --host 0.0.0.0)."""
    serve(CONFIG, host=host, port=port, on_ready=lambda: print(f"serving on http://{{host}}:{{port}}", flush=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=f"serve {{ENV_ID}} as an OpenEnv environment")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default={port})
    arguments = parser.parse_args()
    main(host=arguments.host, port=arguments.port)
'''
    return app


def _readme(env_id: str, description: str, port: int, ptgpo_version: str, openenv_version: str) -> str:
    """``README.md``: how to lock, validate and run the package."""
    readme = "\n".join([
        f"# {env_id} as an OpenEnv environment",
        "",
        description,
        "",
        f"Written by `ptgpo serve {env_id} --write-openenv-package DIR` (ptgpo {ptgpo_version}, "
        f"openenv-core {openenv_version}); write it again rather than editing it.",
        "",
        "```bash",
        "uv lock                      # the lock file `openenv validate` asks for (needs the package index)",
        "openenv validate .",
        f"python -m server.app --port {port}",
        f"openenv validate --url http://127.0.0.1:{port}",
        "```",
        "",
    ])
    return readme
