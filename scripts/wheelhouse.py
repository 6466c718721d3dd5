"""Collect the wheels that install this project on an air-gapped machine (``scripts/make_wheelhouse.sh``).

    python scripts/wheelhouse.py DIR [--python-version 3.12] [--have FILE] [--limit-mib 60]

DIR receives the project's own wheel and the wheels of every dependency that the target machine does
not already hold, for CPython ``--python-version`` on manylinux x86_64, and ``MANIFEST.txt`` (name,
version, size of each). ``--have`` lists what the machine holds (one distribution a line, ``name`` or
pip freeze's ``name==version``; ``#`` comments); the default, ``scripts/gpu_node_packages.txt``, is
the GPU nodes' image, so torch, transformers, peft and their own dependencies are never collected.
On the machine::

    pip install --no-index --find-links DIR ptgpo            # or, in a checkout of the same commit:
    pip install --no-index --find-links DIR --no-build-isolation -e .

The wheelhouse must travel in at most ``--limit-mib`` MiB (the GPU nodes take about 60): the script
fails, naming the largest wheels, when it does not.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HAVE = ROOT / "scripts" / "gpu_node_packages.txt"
#: Linux x86_64 platform tags a CPython 3.10-3.13 wheel may carry, newest first (pip matches them exactly).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
MIB = 2**20


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``PyYAML`` and ``pyyaml``, ``a_b`` and ``a-b``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution named by a PEP 508 requirement (``"torch>=2.3"`` -> ``torch``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def read_have(path: Path) -> set[str]:
    """The distributions listed in ``path`` (names, or pip freeze lines), canonical."""
    names = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-e "):
            continue
        if " @ " in line:
            line = line.split(" @ ", 1)[0]
        try:
            names.add(requirement_name(line))
        except ValueError:
            raise SystemExit(f"{path}:{number}: expected a distribution name or 'name==version', got {line!r}") from None
    return names


def project_requirements() -> list[str]:
    """``pyproject.toml``'s ``[project] dependencies``."""
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def missing(requirements: list[str], have: set[str]) -> list[str]:
    """The requirements whose distribution is not in ``have``."""
    return [r for r in requirements if requirement_name(r) not in have]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def _target_flags(python_version: str) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in (*PLATFORMS, "any"):
        flags += ["--platform", platform]
    return flags


def resolve(requirements: list[str], python_version: str, have: set[str]) -> dict[str, str]:
    """``{name: version}`` of what ``requirements`` pull in on the target, as pip resolves them, without
    descending into distributions in ``have`` (the target's torch brings its own CUDA libraries)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        _pip("install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report),
             "--target", str(Path(scratch) / "target"), *_target_flags(python_version), *requirements)
        installs = json.loads(report.read_text())["install"]
    metadata = {canonical(item["metadata"]["name"]): item["metadata"] for item in installs}
    return {name: metadata[name]["version"] for name in closure(requirements, metadata, have, python_version)}


def closure(requirements: list[str], metadata: dict[str, dict], have: set[str], python_version: str) -> list[str]:
    """The names reachable from ``requirements`` through ``metadata``'s ``requires_dist`` on the target
    (markers evaluated for CPython ``python_version`` on Linux, extras not taken), stopping at ``have``."""
    from packaging.requirements import Requirement

    environment = {"python_version": python_version, "python_full_version": f"{python_version}.0",
                   "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython",
                   "os_name": "posix", "extra": ""}
    seen: list[str] = []
    queue = [requirement_name(r) for r in requirements]
    while queue:
        name = queue.pop(0)
        if name in have or name in seen or name not in metadata:
            continue
        seen.append(name)
        for text in metadata[name].get("requires_dist") or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                queue.append(canonical(requirement.name))
    return seen


def collect(out: Path, python_version: str, have: set[str], limit_mib: float) -> list[tuple[str, str, int]]:
    """Fill ``out`` (see the module's docstring); return its (file, version, bytes) rows."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.whl"):
        stale.unlink()
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT))
    needed = missing(project_requirements(), have)
    pins = resolve(needed, python_version, have)
    if pins:
        _pip("download", "--quiet", "--no-deps", "--dest", str(out), *_target_flags(python_version),
             *(f"{name}=={version}" for name, version in sorted(pins.items())))
    rows = []
    for wheel in sorted(out.glob("*.whl")):
        name = canonical(wheel.name.split("-")[0])
        rows.append((wheel.name, pins.get(name, wheel.name.split("-")[1]), wheel.stat().st_size))
    manifest = "".join(f"{name}\t{version}\t{size}\n" for name, version, size in rows)
    (out / "MANIFEST.txt").write_text(manifest)
    total = sum(size for _, _, size in rows)
    if total > limit_mib * MIB:
        largest = ", ".join(f"{name} ({size / MIB:.1f} MiB)" for name, _, size in sorted(rows, key=lambda r: -r[2])[:3])
        raise SystemExit(f"{out}: the wheelhouse holds {total / MIB:.1f} MiB, above --limit-mib {limit_mib:g}; "
                         f"largest: {largest}. Add what the machine already has to --have.")
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder that receives the wheels")
    parser.add_argument("--python-version", default="3.12", help="the target's CPython, e.g. 3.12 [3.12]")
    parser.add_argument("--have", type=Path, default=DEFAULT_HAVE,
                        help="what the target already holds (names or pip freeze lines) [scripts/gpu_node_packages.txt]")
    parser.add_argument("--limit-mib", type=float, default=60.0, help="the most the wheelhouse may weigh [60]")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        parser.error(f"--python-version: expected a CPython version such as 3.12, got {args.python_version!r}")
    if not args.have.is_file():
        parser.error(f"--have: {args.have} is not a file (list one distribution a line, or pass pip freeze's output)")
    if args.limit_mib <= 0:
        parser.error(f"--limit-mib: expected a number > 0, got {args.limit_mib:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = collect(args.out, args.python_version, read_have(args.have), args.limit_mib)
    for name, version, size in rows:
        print(f"{size / MIB:7.2f} MiB  {name}")
    print(f"{sum(size for _, _, size in rows) / MIB:7.2f} MiB in {len(rows)} wheels -> {args.out} (MANIFEST.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
