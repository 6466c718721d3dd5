"""What reproduces: the same cell on the same machine and thread count gives the same record.

Across processors only the statistics reproduce (floating point diverges after a few iterations;
docs/benchmarking/reproducibility.md); on one machine a benchmark cell is a deterministic function of
its config, so two runs of it must agree in every field but the clocks.
"""

import json
import shutil

import pytest

from ptgpo_harness.bench import BenchConfig, run_bench

# The evidence run's setting in miniature: a sparse BabyAI level with held-out layouts, a linear and a
# tree method, the tiny model untrained so the cell takes seconds.
CONFIG = {
    "name": "repro",
    "budget": 48,
    "seeds": [0],
    "policy": {"model": "tiny", "tiny": {"pretrain_steps": 0}, "mode": "choose", "group_size": 4,
               "tasks_per_iteration": 2, "eval_every": 1, "eval_curve_episodes": 3},
    "environments": [{"label": "doorkey", "id": "ptgpo/BabyAI-v0", "kwargs": {"level": "DoorKey-5x5"},
                      "max_steps": 10, "train_seeds": {"start": 0, "count": 1000},
                      "eval_seeds": {"start": 1000000, "count": 4}, "held_out": 0.25}],
    "methods": [{"name": "grpo", "algo": "grpo", "rollout": "linear"},
                {"name": "ptgpo", "algo": "ptgpo", "rollout": "tree"}],
}
# Clocks (wall and CPU), rates measured by them and the time of writing are the only fields allowed to differ.
CLOCK_SUFFIXES = ("_time_s", "_wait_s", "_per_s", "_cpu_s", "/time_s", "/wait_s")


def _is_clock(key):
    return key == "created_at" or key.endswith(CLOCK_SUFFIXES)


def _without_clocks(value):
    if isinstance(value, dict):
        return {k: _without_clocks(v) for k, v in value.items() if not _is_clock(k)}
    if isinstance(value, list):
        return [_without_clocks(v) for v in value]
    return value


def _run(out):
    run_bench(BenchConfig.from_dict(CONFIG), out, workers=1, progress=False, build_leaderboard=False)
    results = {}
    for path in sorted(out.glob("*.json")):
        record = json.loads(path.read_text())
        assert record["status"] == "ok", record["error"]
        curve = [json.loads(line) for line in (out / record["curve_path"]).read_text().splitlines()]
        metrics = [json.loads(line) for line in (out / record["curve_path"]).with_name("metrics.jsonl")
                   .read_text().splitlines()]
        results[path.name] = _without_clocks({"record": record, "curve": curve, "metrics": metrics})
    return results


@pytest.mark.slow
def test_the_same_cell_twice_on_one_machine_gives_identical_records(tmp_path):
    # The same folder both times: a record holds its run folder's path in its config.
    out = tmp_path / "bench"
    first = _run(out)
    shutil.rmtree(out)
    second = _run(out)
    assert sorted(first) == ["doorkey__grpo__seed0.json", "doorkey__ptgpo__seed0.json"]
    for name in first:
        assert first[name]["record"]["decisions"] >= CONFIG["budget"]
        assert first[name]["record"]["provenance"]["threads"] == 1
        assert first[name] == second[name], name
