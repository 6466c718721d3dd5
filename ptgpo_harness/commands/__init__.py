"""Subcommands of the ``ptgpo`` console script, one module each.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``, and
keeps its top-level imports light: heavy libraries (torch, the ALFWorld engine) are imported in ``run``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def run_folder_command(command: str, run: str, out: str | None, default_out: str,
                       write: Callable[[Path, Path], int]) -> int:
    """A command that reads a training run folder and writes into an output folder (``ptgpo show``,
    ``ptgpo export``): the run folder checked, the output folder (default ``RUN/<default_out>``)
    checked writable, then ``write(run_dir, out_dir)``; a ``ValueError`` is the command's one-line
    message, exit status 2."""
    from ptgpo_algos.files import check_writable

    run_dir = Path(run)
    out_dir = Path(out) if out else run_dir / default_out
    try:
        if not run_dir.is_dir():
            raise ValueError(f"{run!r} is not a folder: pass a training run folder")
        check_writable(out_dir, "--out", folder=True)
        return write(run_dir, out_dir)
    except ValueError as error:
        print(f"ptgpo {command}: {error}", file=sys.stderr)
        return 2
