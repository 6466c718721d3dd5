"""``ptgpo bench --ray``: cells as Ray tasks with their resources, records written by the driver, the
same records as the local pool, skipped when done, retried when their task dies.

Runs on a local two-CPU cluster (the ``ray_cluster`` fixture: ``ray.init(num_cpus=2)``).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time

import pytest

from leaderboard.records import read_record, record_path
from ptgpo_harness.bench import BenchConfig, BenchError, plan_cells, run_bench

CONFIG = {
    "name": "ray",
    "budget": 24,
    "seeds": [0],
    "resources": {"cpus": 1},
    "policy": {"model": "tiny", "tiny": {"pretrain_steps": 0}, "mode": "choose", "group_size": 2,
               "tasks_per_iteration": 2, "eval_every": 1},
    "environments": [
        {"label": "easy", "id": "ptgpo/Household-v0", "kwargs": {"difficulty": "easy"}, "max_steps": 6,
         "train_seeds": {"start": 0, "count": 1000}, "eval_seeds": {"start": 1000000, "count": 3}},
    ],
    "methods": [{"name": "grpo", "algo": "grpo", "rollout": "linear"}],
    "baselines": ["random", {"name": "expert", "resources": {"cpus": 0.5}}],
}
#: Fields that say when and how long, not what: they differ between any two runs.
_TIMING = ("wall_time_s", "cpu_time_s", "train_cpu_s", "eval_cpu_s", "setup_cpu_s", "created_at")


def _records(folder):
    out = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        # Where a run wrote its files is part of its resolved config, not of what it did.
        (record["provenance"]["config"].get("run") or {}).pop("out_dir", None)
        record["provenance"]["config"].pop("out_dir", None)
        out[path.name] = {k: v for k, v in record.items() if k not in _TIMING}
    return out


def _rows(path):
    return [{k: v for k, v in json.loads(line).items() if k not in _TIMING}
            for line in path.read_text().splitlines()]


def test_resources_are_read_per_cell_and_checked():
    cells = {c.method: c for c in plan_cells(BenchConfig.from_dict(CONFIG))}
    assert cells["grpo"].resources == {"cpus": 1.0, "gpus": 0.0}
    assert cells["expert"].resources == {"cpus": 0.5, "gpus": 0.0}
    with pytest.raises(BenchError, match=r"baselines\[0\]\.resources\.gpus: expected a number >= 0"):
        BenchConfig.from_dict({**CONFIG, "baselines": [{"name": "random", "resources": {"gpus": -1}}]})
    with pytest.raises(BenchError, match=r"resources: unknown key\(s\) 'memory'"):
        BenchConfig.from_dict({**CONFIG, "resources": {"memory": 4}})


def test_a_ray_run_writes_the_same_records_as_the_local_pool(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    config = BenchConfig.from_dict(CONFIG)
    local = run_bench(config, tmp_path / "local", workers=2, progress=False)
    on_ray = run_bench(config, tmp_path / "ray", workers=2, progress=False, ray=True)
    assert local.failed == on_ray.failed == [] and sorted(on_ray.ran) == sorted(local.ran)
    assert _records(tmp_path / "ray") == _records(tmp_path / "local")
    run = tmp_path / "ray" / "runs" / "easy__grpo__seed0"
    # The driver wrote what the task returned: curves, metrics, log; not the model or checkpoints.
    assert _rows(run / "curve.jsonl") == _rows(tmp_path / "local" / "runs" / "easy__grpo__seed0" / "curve.jsonl")
    assert (run / "cell.log").is_file() and (run / "cpu_seconds.txt").is_file()
    assert not (run / "final_model").exists() and not list(run.glob("*.pt"))
    assert "Ray cluster" in (tmp_path / "ray" / "bench.log").read_text()
    assert on_ray.leaderboard_files
    again = run_bench(config, tmp_path / "ray", workers=2, progress=False, ray=True, build_leaderboard=False)
    assert again.ran == [] and len(again.skipped) == 3


def _kill_attempts(names: dict[str, int], stop: threading.Event) -> None:
    """Kill the Ray worker running task ``name`` (its process title is ``ray::<name>``) ``names[name]``
    times, as a crash or a lost node would."""
    while not stop.is_set() and any(names.values()):
        for path in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                title = open(path, "rb").read().split(b"\0")[0].decode().strip()
            except OSError:
                continue
            name = title.removeprefix("ray::")
            if title.startswith("ray::") and names.get(name, 0) > 0:
                names[name] -= 1
                os.kill(int(path.split("/")[2]), signal.SIGKILL)
        time.sleep(0.05)


def test_a_task_that_dies_is_retried_up_to_the_limit_then_recorded_failed(ray_cluster, tmp_path):
    # Its own environment label: the tasks' names (what the killer looks for) are this test's alone.
    environment = {**CONFIG["environments"][0], "label": "killed"}
    config = BenchConfig.from_dict({**CONFIG, "methods": [], "environments": [environment]})
    # The random cell dies once and is retried; the expert's task dies at every attempt (how many Ray
    # makes of a task whose worker was lost can exceed max_retries + 1 on a loaded machine, where a
    # worker may be lost before its task starts), so it ends failed.
    always = 10**6
    kills = {"killed__random__seed0": 1, "killed__expert__seed0": always}
    stop = threading.Event()
    killer = threading.Thread(target=_kill_attempts, args=(kills, stop), daemon=True)
    killer.start()
    try:
        report = run_bench(config, tmp_path, workers=2, progress=False, ray=True, max_retries=1,
                           build_leaderboard=False)
    finally:
        stop.set()
        killer.join()
    assert kills["killed__random__seed0"] == 0 and always - kills["killed__expert__seed0"] >= 2
    assert report.failed == ["killed__expert__seed0"]
    assert read_record(record_path(tmp_path, "killed__random__seed0")).status == "ok"
    failed = read_record(record_path(tmp_path, "killed__expert__seed0"))
    assert failed.error.startswith("the cell's Ray task failed (1 retries)"), failed.error


def test_the_cli_says_how_to_install_ray_when_it_is_missing(tmp_path, capsys, monkeypatch):
    import sys

    import yaml

    from ptgpo_harness.cli import main

    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "methods": []}))
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    assert main(["bench", str(path), "--out", str(tmp_path / "out"), "--ray"]) == 2
    assert "pip install 'ptgpo[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
