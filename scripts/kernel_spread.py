"""How far the golden runs move between CPU kernel paths: the measurement behind the golden tests' tolerance.

Each golden run of ``tests/test_golden.py`` runs once per setting, each in a fresh process (the kernel
paths are chosen when torch starts), and every number of its metrics and curve rows is compared
with the same run under the first setting. A setting is a set of environment variables:
``ATEN_CPU_CAPABILITY`` (PyTorch's own vectorised kernels), ``MKL_CBWR`` (the BLAS's code path),
``ONEDNN_MAX_CPU_ISA`` (oneDNN's), ``OMP_NUM_THREADS``; ``PTGPO_DETERMINISTIC=1`` also calls
``torch.use_deterministic_algorithms(True)``. A path the processor lacks (``avx512`` on an AVX2
machine) falls back to the best it has, so the settings to compare depend on the machine.

Usage::

    python scripts/kernel_spread.py                          # the default settings below
    python scripts/kernel_spread.py --setting native= --setting avx2=ATEN_CPU_CAPABILITY=avx2

``--probe`` runs, instead, single operations of a transformer's step (matrix products, GELU, layer
and RMS norms, attention, log-softmax, their gradients, an AdamW step, a long sum, random normals)
and prints a hash of each result per setting: it needs torch only, so it runs on any machine, and two
machines' lines compare operation by operation.

Prints one JSON line per (setting, run): ``identical`` (every row bitwise equal to the first
setting's), ``discrete`` (integers and strings that differ), ``max_rel`` and ``max_abs`` (over the
floats), ``seconds`` (wall) and ``cpu_seconds`` (what the run cost on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ptgpo_algos.device import REPRODUCIBLE_ENV  # noqa: E402  (imports nothing but the standard library)

ROOT = Path(__file__).resolve().parent.parent

#: name -> environment; the first is the reference (the golden fixtures' settings).
SETTINGS = {
    "reproducible": REPRODUCIBLE_ENV,
    "native": {},
    "native-2-threads": {"OMP_NUM_THREADS": "2"},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "all-avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
}


def _worker(name: str, out: Path) -> None:
    import torch

    if os.environ.get("PTGPO_DETERMINISTIC") == "1":
        torch.use_deterministic_algorithms(True)
    sys.path.insert(0, str(ROOT / "tests"))
    import test_golden

    os.environ["PTGPO_CACHE"] = str(out.parent / "cache")
    metrics, curve = test_golden._run(name, out.parent / f"run-{name}")
    capability = torch.backends.cpu.get_cpu_capability()
    out.write_text(json.dumps({"metrics": metrics, "curve": curve, "capability": capability}))


def _probe() -> dict:
    """A short hash of each operation's result, on fixed seeded inputs."""
    import hashlib

    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    hashes = {}

    def keep(name, tensor):
        hashes[name] = hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:8]

    x = torch.randn(64, 256, generator=generator)
    w1 = (torch.randn(256, 512, generator=generator) / 16).requires_grad_()
    w2 = (torch.randn(512, 1000, generator=generator) / 22).requires_grad_()
    keep("randn", x)
    a = x @ w1
    keep("matmul", a)
    b = F.layer_norm(F.gelu(a), (512,))
    keep("gelu_layer_norm", b)
    c = F.silu(b) * torch.rsqrt(b.pow(2).mean(-1, keepdim=True) + 1e-6)
    keep("silu_rms_norm", c)
    q = c.view(4, 16, 8, 64).transpose(1, 2)
    attention = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    keep("attention", attention)
    z = c @ w2
    log_probs = torch.log_softmax(z, -1)
    keep("log_softmax", log_probs)
    probs = torch.softmax(z / 3, -1)
    keep("softmax", probs)
    loss = -log_probs[:, 0].mean() + (probs * log_probs).sum(-1).mean() + attention.pow(2).mean()
    keep("loss", loss)
    loss.backward()
    keep("grad_w1", w1.grad)
    keep("grad_w2", w2.grad)
    torch.optim.AdamW([w1, w2], lr=1e-3).step()
    keep("adamw_step", w1)
    keep("exp", torch.exp(torch.linspace(-5, 5, 4097)))
    keep("sum", torch.randn(100003, generator=generator).sum())
    keep("normal", torch.empty(1000).normal_(generator=generator))
    return {"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(), "ops": hashes}


def _probe_all(settings: dict[str, dict[str, str]]) -> None:
    for setting, variables in settings.items():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", **variables}
        done = subprocess.run([sys.executable, __file__, "--probe-worker"], env=env, check=True, capture_output=True,
                              text=True)
        print(json.dumps({"setting": setting, **json.loads(done.stdout.splitlines()[-1])}), flush=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _leaves(value, where=""):
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _leaves(value[key], f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{where}[{i}]")
    else:
        yield where, value


def compare(actual: dict, expected: dict) -> dict:
    """Bitwise equality, the discrete values that differ, and the largest relative and absolute float
    differences between two runs' rows."""
    discrete, max_rel, max_abs = [], 0.0, 0.0
    ours, theirs = list(_leaves(actual)), list(_leaves(expected))
    if [where for where, _ in ours] != [where for where, _ in theirs]:
        return {"identical": False, "discrete": ["the rows have other fields or lengths"], "max_rel": math.nan,
                "max_abs": math.nan}
    for (where, a), (_, e) in zip(ours, theirs):
        if isinstance(e, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
            diff = abs(a - e)
            max_abs = max(max_abs, diff)
            if diff > 0:
                max_rel = max(max_rel, diff / max(abs(a), abs(e)))
        elif a != e:
            discrete.append(f"{where}: {a!r} != {e!r}")
    return {"identical": actual == expected, "discrete": discrete[:5], "max_rel": max_rel, "max_abs": max_abs}


def main(argv: list[str] | None = None) -> None:
    """Run the golden runs under each setting and print one comparison line per (setting, run)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VAR=VALUE,VAR=VALUE",
                        help="a setting to compare (repeatable; the first is the reference) [the SETTINGS above]")
    parser.add_argument("--runs", nargs="*", help="golden runs [all]")
    parser.add_argument("--keep", type=Path, help="also write each run's rows to KEEP/<setting>/<run>.json")
    parser.add_argument("--reference", type=Path, help="compare with the rows kept in this folder (another "
                        "machine's --keep, one setting's subfolder) instead of the first setting's")
    parser.add_argument("--probe", action="store_true", help="hash single operations per setting (torch only)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--probe-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker[0], Path(args.worker[1]))
    if args.probe_worker:
        return print(json.dumps(_probe()))
    settings = SETTINGS
    if args.setting:
        settings = {}
        for item in args.setting:
            name, _, pairs = item.partition("=")
            settings[name] = dict(pair.split("=", 1) for pair in pairs.split(",") if pair)
    if args.probe:
        return _probe_all(settings)
    sys.path.insert(0, str(ROOT / "tests"))
    from test_golden import RUNS

    with tempfile.TemporaryDirectory() as tmp:
        reference = {}
        if args.reference:
            reference = {p.stem: json.loads(p.read_text()) for p in args.reference.glob("*.json")}
            for rows in reference.values():
                rows.pop("capability")
        for setting, variables in settings.items():
            for run in args.runs or sorted(RUNS):
                out = Path(tmp) / setting / f"{run}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", **variables}
                started, cpu = time.perf_counter(), _children_cpu()
                subprocess.run([sys.executable, __file__, "--worker", run, str(out)], env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
                rows = json.loads(out.read_text())
                capability = rows.pop("capability")
                reference.setdefault(run, rows)
                if args.keep:
                    (args.keep / setting).mkdir(parents=True, exist_ok=True)
                    (args.keep / setting / f"{run}.json").write_text(json.dumps({**rows, "capability": capability}))
                print(json.dumps({"setting": setting, "run": run, "capability": capability,
                                  **compare(rows, reference[run]), "seconds": round(seconds, 1),
                                  "cpu_seconds": round(cpu, 1)}), flush=True)


if __name__ == "__main__":
    main()
