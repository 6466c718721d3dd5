"""Golden runs: seeded CPU training runs must give the metrics and curves recorded in ``fixtures/golden``.

They guard refactors of the wiring layer (trainer, config, rollouts, checkpoints): a change that
keeps behaviour reproduces every row, timing fields aside. A change that is *meant* to alter the
numbers regenerates the fixtures, and says why in its commit::

    python tests/test_golden.py          # rewrites tests/fixtures/golden/*.jsonl

Four runs: GiGPO with linear rollouts on FrozenLake, PTGPO with prefix-tree rollouts on Household
easy, GRPO with hindsight relabelling on Household easy (the buffer and its extra updates), and the
GiGPO run with ``rollouts.seeding: shared`` (every task's draws from the run's generators in one
pass, as one process played before ``per_task``), which keeps the rows recorded before then.

Each run plays in a process of its own with the CPU kernels pinned to
:data:`ptgpo_algos.device.REPRODUCIBLE_ENV` (the fixtures were recorded so), because PyTorch, MKL and
oneDNN otherwise pick kernels by processor, and an AVX-512 machine's rows differ from an AVX2
machine's in the fifth digit. The pinned kernels give the same bits on AMD EPYC machines (where the
``shared`` run's rows were recorded), but not on an Intel Xeon with AMX (Sapphire Rapids, where the
other three runs' rows were recorded when one process began to seed each task): there MKL's compatible path
(``MKL_CBWR=COMPATIBLE``, the same bits as ``SSE2``) moved the floats by up to 1.8e-5 relative, or
1.2e-8 absolute near zero (``MKL_CBWR=AUTO`` moves them by 3.2e-5). So the floats are held to the
spread across kernel paths measured by ``scripts/kernel_spread.py`` on every machine, pinned or not;
the pinned kernels keep the runs apart from the vectorised ones, which CI runs a second time by
setting the variables in the environment (a variable already set wins). Integers and strings always
exactly.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptgpo_algos.metrics import TIMED

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "golden"

#: (relative, absolute) on other kernels. On PyTorch's AVX2 and AVX-512 kernels, MKL's and oneDNN's
#: AVX2 paths and two threads, the golden rows' floats moved from the fixtures by at most 1.2e-5
#: relative, or 1.2e-7 absolute on values near zero (scripts/kernel_spread.py); the bounds keep a
#: margin of about 8 over that. A one-line change to an estimator moves them by more
#: (test_a_changed_estimator_fails_them).
SPREAD = (1e-4, 1e-6)

#: Fields that measure time, which no two runs share: the curve's, and the metrics rows' (the fixtures'
#: flat names read as these, :func:`ptgpo_algos.metrics.current_name`).
TIMING = {"wall_time_s", *TIMED}

_TINY = {"hidden_size": 32, "pretrain_steps": 0}
RUNS = {
    "frozenlake-gigpo": dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=8, algo="gigpo", group_size=6,
        tasks_per_iteration=4, iterations=4, eval_every=2, eval_seeds=6, ppo_epochs=2, minibatch_size=48,
        learning_rate=5e-3, tiny=_TINY, seed=3,
    ),
    "household-ptgpo-tree": dict(
        env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "easy"}, max_steps=10, algo="ptgpo",
        group_size=4, tasks_per_iteration=2, iterations=3, eval_every=3, eval_seeds=4, ppo_epochs=1,
        minibatch_size=32, history_length=1, branch="entropy", tiny=_TINY, seed=1,
    ),
    "household-grpo-hindsight": dict(
        env_id="ptgpo/Household-v0", env_kwargs={"difficulty": "easy"}, max_steps=10, algo="grpo",
        group_size=4, tasks_per_iteration=2, iterations=3, eval_every=3, eval_seeds=4, ppo_epochs=1,
        minibatch_size=32, history_length=1, hindsight={"batch_size": 8, "window": 2, "types": "any"},
        tiny=_TINY, seed=2,
    ),
}
#: The GiGPO run as one process played before each task had generators of its own: one batched pass
#: drawing every task's tokens from the run's generators (the fixtures recorded before then).
RUNS["frozenlake-gigpo-shared"] = {**RUNS["frozenlake-gigpo"], "rollouts": {"seeding": "shared"}}


def _run(name: str, out_dir: Path) -> tuple[list[dict], list[dict]]:
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training

    summary = run_training(TrainConfig.from_dict({**RUNS[name], "out_dir": str(out_dir)}), progress=False)
    return _read(summary.metrics_path), _read(summary.curve_path)


def _read(path: Path) -> list[dict]:
    """The file's rows without their timings; a metrics file's under today's names (the fixtures were
    recorded before the metrics rows had sections)."""
    from ptgpo_algos.metrics import current_row

    rows = [json.loads(line) for line in open(path)]
    if path.name.endswith("metrics.jsonl"):
        rows = [current_row(row) for row in rows]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def _same(actual, expected, where: str, tolerance: tuple[float, float]) -> None:
    """Equal structure; integers and strings exactly, floats to ``(relative, absolute)`` ``tolerance``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), (
            f"{where}: keys differ: {sorted(set(actual) ^ set(expected))}")
        for key in expected:
            _same(actual[key], expected[key], f"{where}.{key}", tolerance)
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: lengths differ"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{where}[{i}]", tolerance)
    elif isinstance(expected, float) and not isinstance(actual, bool):
        assert isinstance(actual, (int, float)) and math.isclose(actual, expected, rel_tol=tolerance[0], abs_tol=tolerance[1]), (
            f"{where}: {actual!r} != {expected!r}")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _run_pinned(name: str, tmp_path: Path) -> tuple[list[dict], list[dict], tuple[float, float]]:
    """The run in a fresh process whose kernels are pinned, unless the environment says otherwise; its
    rows and the tolerance they are held to."""
    from ptgpo_algos.device import REPRODUCIBLE_ENV

    env = {**REPRODUCIBLE_ENV, **os.environ, "PTGPO_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, "--run", name, str(tmp_path / "run")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "run" / "rows.json").read_text())
    return rows["metrics"], rows["curve"], SPREAD


def _check(name: str, metrics: list[dict], curve: list[dict], tolerance: tuple[float, float]) -> None:
    _same(metrics, _read(FIXTURES / f"{name}.metrics.jsonl"), f"{name} metrics", tolerance)
    _same(curve, _read(FIXTURES / f"{name}.curve.jsonl"), f"{name} curve", tolerance)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_seeded_run_reproduces_its_golden_rows(name, tmp_path):
    _check(name, *_run_pinned(name, tmp_path))


def test_a_changed_estimator_fails_them(tmp_path, monkeypatch):
    # The guard of the standard deviation in GiGPO's normalisation, 1e-6 -> 1e-4: a one-line change
    # that moves the metrics by 2e-4 to 4e-4 relative. Run here, on this process's own kernels, and
    # held to the looser tolerance: the spread of kernel paths does not hide it.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("ptgpo_algos.advantages.ops.STD_EPSILON", 1e-4)
    with pytest.raises(AssertionError, match="frozenlake-gigpo"):
        _check("frozenlake-gigpo", *_run("frozenlake-gigpo", tmp_path / "run"), SPREAD)


def _record() -> None:
    import tempfile

    from ptgpo_algos.device import REPRODUCIBLE_ENV

    os.environ.update(REPRODUCIBLE_ENV)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(RUNS):
            metrics, curve, _ = _run_pinned(name, Path(tmp) / name)
            for kind, rows in (("metrics", metrics), ("curve", curve)):
                path = FIXTURES / f"{name}.{kind}.jsonl"
                path.write_text("".join(json.dumps(row) + "\n" for row in rows))
                print(f"wrote {path} ({len(rows)} rows)", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:  # one run, in the process _run_pinned started
        _, _, run_name, out = sys.argv
        metrics, curve = _run(run_name, Path(out))
        (Path(out) / "rows.json").write_text(json.dumps({"metrics": metrics, "curve": curve}))
    else:
        _record()
