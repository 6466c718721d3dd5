"""Which torch device a run uses (``auto``, ``cpu``, ``cuda`` or ``cuda:N``, checked before any work),
and which CPU kernels compute it.

PyTorch, its BLAS (MKL) and oneDNN each pick vectorised kernels for the processor they start on
(AVX-512, AVX2, ...), and the kernels of two widths round differently; a parallel reduction also
splits its sum by the thread count. So a seeded run reproduces bit for bit on the same machine with
the same settings, but another processor moves its floats in the last digits, and over a long run
those digits decide a sampled action. :data:`REPRODUCIBLE_ENV` pins every one of those choices to
the path each x86-64 processor has; it must be in the environment before torch is imported
(``ptgpo train --reproducible`` sets it), and :func:`kernel_record` says what a process runs with.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Iterator, Mapping

__all__ = ["DEVICE_CHOICES", "REPRODUCIBLE_ENV", "check_reproducible_kernels", "kernel_record",
           "pin_reproducible_kernels", "resolve_device", "temporary_environment"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")

#: The environment that makes CPU results the same on every x86-64 processor: PyTorch's scalar
#: (non-AVX) kernels, MKL's Intel/AMD-compatible code path, oneDNN's SSE4.1 kernels (the baseline
#: every x86-64 server has), one thread. Pinning the AVX2 paths instead is not enough: MKL's AVX2
#: branch gave other products on an Intel Xeon than on an AMD EPYC.
REPRODUCIBLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41",
                    "OMP_NUM_THREADS": "1"}

#: The environment variables that choose CPU kernels or their thread count, recorded with each run.
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def temporary_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment for the duration (so that the processes started
    meanwhile inherit them), each variable restored after, or removed where it was unset."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def resolve_device(device: str, *, where: str = "device") -> str:
    """The concrete device for ``device``: ``auto`` is ``cuda`` when a GPU is visible, else ``cpu``.

    Raises ``ValueError`` naming ``where`` (the flag or field) when the value is malformed or asks for
    a GPU this machine does not have, so that the mistake surfaces before a model is loaded.
    """
    import torch

    if not isinstance(device, str):
        raise ValueError(f"{where}: expected one of {', '.join(DEVICE_CHOICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    kind, _, index = device.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"{where}: expected one of {', '.join(DEVICE_CHOICES)}, got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"{where}: {device!r} asks for a GPU, but torch sees none (torch {torch.__version__}, "
                         "CUDA build: " + ("yes" if torch.version.cuda else "no") + "); use cpu or auto")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"{where}: {device!r} does not exist; this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def pin_reproducible_kernels() -> None:
    """Put :data:`REPRODUCIBLE_ENV` into this process's environment; effective only before torch is
    imported (the kernels are chosen when it starts)."""
    os.environ.update(REPRODUCIBLE_ENV)


def check_reproducible_kernels(where: str) -> None:
    """Make the running process compute with the reproducible kernels, or raise ``ValueError`` naming
    ``where`` (the flag or field that asked for them) when torch started with other ones."""
    import torch

    # The thread count is set here; the kernels cannot be, once torch has started.
    wrong = [f"{name}={os.environ.get(name)!r}" for name, value in REPRODUCIBLE_ENV.items()
             if name != "OMP_NUM_THREADS" and os.environ.get(name) != value]
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        wrong.append(f"torch's kernels are {torch.backends.cpu.get_cpu_capability()}")
    if wrong:
        settings = " ".join(f"{name}={value}" for name, value in REPRODUCIBLE_ENV.items())
        raise ValueError(f"{where}: this process started torch with other CPU kernels ({', '.join(wrong)}); run "
                         f"`ptgpo train --reproducible`, or set {settings} before torch is imported")
    torch.set_num_threads(1)


def kernel_record() -> dict:
    """What this process computes with: the processor, torch's version and kernel width, the threads,
    the kernel-choosing environment variables (unset ones left out); a run folder's ``config.json``
    keeps it under ``machine``."""
    import torch

    return {
        "processor": _processor_name(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "environment": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ},
    }


def _processor_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
