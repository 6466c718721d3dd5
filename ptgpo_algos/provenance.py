"""Where a result came from: the code's commit, the software's versions and the machine, for the
``provenance`` of a result record (:mod:`leaderboard.records`).

Records written by two commits, two library versions or two processors are not interchangeable: a
cell re-run on another processor diverges in floating point after a few iterations, and a changed
estimator changes what a method means. The leaderboard reads these fields to say when a table mixes
commits.

``dirty`` says whether the suite's code (its four packages and ``pyproject.toml``) differs from the
commit; results folders inside the repository (``docs/results``) do not count, so re-running a
committed cell does not make the next one dirty. Without git or outside a git checkout (an installed
wheel) ``commit`` and ``dirty`` are None.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "code_version", "cpu_model", "gpu_model", "provenance"]

#: The libraries whose versions a record carries, besides Python's.
PACKAGES = ("torch", "transformers", "numpy", "gymnasium", "minigrid")
_ROOT = Path(__file__).resolve().parents[1]
_CODE = ("ptgpo_envs", "ptgpo_algos", "baselines", "leaderboard", "pyproject.toml")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout this code runs from."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no", "--", *_CODE)
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


@functools.lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else what the platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_model(device: str | None) -> str | None:
    """The name of the GPU ``device`` (``cuda`` or ``cuda:N``) is, as torch reports it; None for any
    other device or when torch was not loaded."""
    torch = sys.modules.get("torch")
    if torch is None or not device or not device.startswith("cuda"):
        return None
    return str(torch.cuda.get_device_name(torch.device(device)))


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance(config: dict[str, Any] | None, device: str | None = None) -> dict[str, Any]:
    """A record's ``provenance``: code version, Python's and :data:`PACKAGES`' versions, the processor,
    the cores this process may use and torch's intra-op threads (None when torch was not loaded), the
    platform, ``device``, the torch device the run computed on as resolved (``cpu``, ``cuda:0``; a
    config's ``auto`` says neither), ``gpu``, that GPU's name (None on a CPU), and ``config``, the
    run's full resolved configuration (None for a cell that failed before it had one)."""
    torch = sys.modules.get("torch")
    return {
        **code_version(),
        "python": platform.python_version(),
        "versions": {package: _version(package) for package in PACKAGES},
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads": torch.get_num_threads() if torch is not None else None,
        "platform": platform.platform(),
        "device": device,
        "gpu": gpu_model(device),
        "config": config,
    }
