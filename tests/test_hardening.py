"""What a crash, a kill, a concurrent run, a corrupt file and a hostile input each get.

Every case here once failed: a crafted checkpoint ran code, two writers mixed their rows in one folder,
a resume silently became another run, a restored episode was truncated early, and bad input gave a
traceback. Each test states the guarantee it checks.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import ptgpo_envs  # noqa: F401  (registers the environments)
from ptgpo_algos.training.checkpoint import COUNTERS, CheckpointError, load_checkpoint, save_checkpoint
from ptgpo_harness.cli import main
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.files import (
    FileFormatError,
    FolderBusyError,
    atomic_folder,
    atomic_write_text,
    folder_lock,
    read_jsonl,
)
from ptgpo_algos.training.trainer import run_training
from resume_scenarios import TINY, small_lake_config


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One short finished training run, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("run")
    previous = os.environ.get("PTGPO_CACHE")
    os.environ["PTGPO_CACHE"] = str(root / "cache")
    try:
        run_training(small_lake_config(root / "run"), progress=False)
    finally:
        if previous is None:
            os.environ.pop("PTGPO_CACHE")
        else:
            os.environ["PTGPO_CACHE"] = previous
    return root / "run"


def _copy_run(run: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(run, target)
    (target / ".ptgpo.lock").unlink(missing_ok=True)
    return target


def _cli(*argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


# =========================================================================== 1. no code execution
class _Exploit:
    marker: str = ""

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _crafted_checkpoint(path: Path, marker: Path) -> None:
    exploit = _Exploit()
    exploit.marker = str(marker)
    torch.save({"weights": {}, "optimizer": {}, "rng": {}, "counters": {"iteration": 1}, "config": {},
                "payload": exploit}, path)


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    _crafted_checkpoint(tmp_path / "checkpoint.pt", marker)
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: refused"):
        load_checkpoint(tmp_path / "checkpoint.pt")
    assert not marker.exists()


def test_evaluate_and_resume_refuse_a_crafted_checkpoint(finished_run, tmp_path, cache, capsys):
    run = _copy_run(finished_run, tmp_path / "run")
    import shutil

    shutil.rmtree(run / "final_model")  # evaluate then loads the checkpoint
    marker = tmp_path / "pwned"
    _crafted_checkpoint(run / "checkpoint.pt", marker)
    code, err = _cli("evaluate", run, "--no-progress", capsys=capsys)
    assert code == 2 and "checkpoint.pt: refused" in err and not marker.exists()
    code, err = _cli("train", "--config", _yaml(tmp_path, small_lake_config(run, iterations=3)), "--resume", "--no-progress",
                     capsys=capsys)
    assert code == 2 and "checkpoint.pt: refused" in err and not marker.exists()


def _yaml(tmp_path: Path, config: TrainConfig) -> Path:
    import yaml

    path = tmp_path / "config.yaml"
    data = config.to_dict()
    del data["run"]["resume"]
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("content, message", [
    (b"", "cannot be read as a checkpoint"),
    (os.urandom(4096), "cannot be read as a checkpoint"),
    (None, "cannot be read as a checkpoint"),  # truncated: the first half of a real checkpoint
    ("list", "not a ptgpo training checkpoint"),
    ("missing", "missing 'optimizer'"),
])
def test_damaged_checkpoints_are_named_with_what_to_do(finished_run, tmp_path, content, message):
    path = tmp_path / "checkpoint.pt"
    real = (finished_run / "checkpoint.pt").read_bytes()
    if content is None:
        path.write_bytes(real[: len(real) // 2])
    elif content == "list":
        torch.save([1, 2, 3], path)
    elif content == "missing":
        state = torch.load(finished_run / "checkpoint.pt", weights_only=True)
        del state["optimizer"]
        torch.save(state, path)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_checkpoints_round_trip_the_components_state_as_plain_data(tmp_path):
    # A rollout request in flight and the hindsight buffer hold tasks and decisions: each component
    # stores them as plain data, which weights_only loading accepts, and rebuilds them.
    from ptgpo_algos.training.collectors import RolloutRequest
    from ptgpo_algos.records import Decision, Task
    from ptgpo_algos.objectives.hindsight import Hindsight

    decision = Decision("go", "go", [1, 2], [3], [-0.5], 0.7, [[3], [4]], 0, -0.6)
    request = RolloutRequest({"w": torch.zeros(1)}, [Task("ptgpo/FrozenLake-v0", 5, {"desc": ["SG"]}, 4)], 9, 2, 100)
    hindsight = Hindsight()
    hindsight.buffer.add([decision])
    state = {"weights": {"w": torch.ones(2)}, "optimizer": {"state": {}, "param_groups": []},
             "rng": {"python": (3, tuple(range(5)), None), "numpy": {"state": 1}, "torch": torch.zeros(3),
                     "sampler": torch.zeros(3)},
             "counters": {**dict.fromkeys(COUNTERS, 0), "iteration": 3}, "config": {"algo": "grpo"},
             "pending_rollout": request.to_dict(), "hindsight_buffer": hindsight.state_dict()}
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    loaded = load_checkpoint(tmp_path / "checkpoint.pt")
    again = RolloutRequest.from_dict(loaded["pending_rollout"])
    assert again.tasks == request.tasks and (again.seed, again.updates, again.max_decisions) == (9, 2, 100)
    restored = Hindsight()
    restored.load_state_dict(loaded["hindsight_buffer"])
    assert list(restored.buffer.items) == [decision]
    assert loaded["version"] == 1 and torch.equal(loaded["weights"]["w"], torch.ones(2))


# =========================================================================== 2. one writer per folder
def _hold_lock(folder: Path, purpose: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from ptgpo_algos.files import folder_lock
        with folder_lock({str(folder)!r}, {purpose!r}):
            print("held", flush=True)
            time.sleep(120)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_is_refused_with_the_holders_pid_until_it_dies(tmp_path, cache):
    holder = _hold_lock(tmp_path / "run", "training run")
    try:
        with pytest.raises(FolderBusyError, match=rf"in use by training run \(pid {holder.pid}\)"):
            run_training(small_lake_config(tmp_path / "run"), progress=False)
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".ptgpo.lock"]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # kill -9 released it: the next writer goes ahead.
    run_training(small_lake_config(tmp_path / "run", iterations=1), progress=False)


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with folder_lock(tmp_path, "outer"), folder_lock(tmp_path, "inner"):
        pass
    with folder_lock(tmp_path, "again"):
        pass


def test_two_benchmarks_on_one_folder_the_second_is_refused(tmp_path, capsys):
    holder = _hold_lock(tmp_path / "results", "benchmark")
    config = tmp_path / "bench.yaml"
    config.write_text(textwrap.dedent("""
        name: x
        budget: 10
        seeds: [0]
        environments: [{label: lake, id: ptgpo/FrozenLake-v0, train_seeds: {start: 0, count: 5},
                        eval_seeds: [100]}]
        baselines: [random]
    """))
    try:
        code, err = _cli("bench", config, "--out", tmp_path / "results", capsys=capsys)
        assert code == 2 and f"benchmark (pid {holder.pid})" in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not list((tmp_path / "results").glob("*.json"))


def test_a_cell_dies_with_its_harness(tmp_path):
    # A harness process starts a cell the way the benchmark does, then is killed with SIGKILL: the
    # cell must not go on running (and writing into a run folder a re-run will use).
    code = textwrap.dedent(f"""
        import multiprocessing, os, sys, time
        from ptgpo_algos.child_processes import die_with_parent

        def cell(parent, path):
            die_with_parent(parent)
            open(path, "w").write(str(os.getpid()))
            time.sleep(120)

        if __name__ == "__main__":
            process = multiprocessing.get_context("spawn").Process(target=cell, args=(os.getpid(), {str(tmp_path / 'pid')!r}))
            process.start()
            print("started", flush=True)
            time.sleep(120)
    """)
    script = tmp_path / "harness.py"
    script.write_text(code)
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[1],
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert harness.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    cell = int((tmp_path / "pid").read_text())
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 10
    while _alive(cell) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(cell)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_temporary_names_are_unique_and_files_get_ordinary_permissions(tmp_path):
    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        with atomic_folder(tmp_path / "model") as folder:
            (folder / "x").write_text("1")
        assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755
        save_checkpoint(tmp_path / "checkpoint.pt", {"weights": {}, "optimizer": {}, "rng": {}, "counters": {},
                                                    "config": {}})
        assert stat.S_IMODE((tmp_path / "checkpoint.pt").stat().st_mode) == 0o644
        from leaderboard.records import ResultRecord, write_record

        write_record(tmp_path / "r.json", ResultRecord(method="m", method_kind="rl", env_id="e", env_label="e",
                                                       seed=0, status="ok", final_success=0.5))
        assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    finally:
        os.umask(previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "checkpoint.pt", "model", "r.json"]


def test_run_files_get_ordinary_permissions(finished_run):
    for name in ("config.json", "metrics.jsonl", "curve.jsonl", "checkpoint.pt"):
        assert stat.S_IMODE((finished_run / name).stat().st_mode) & 0o044 == 0o044, name
    assert stat.S_IMODE((finished_run / "final_model").stat().st_mode) & 0o055 == 0o055
    saved = [path for path in (finished_run / "final_model").rglob("*") if path.is_file()]
    assert "model.safetensors" in {path.name for path in saved}
    assert all(stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044 for path in saved), saved


# =========================================================================== 3. a resume is the same run
def test_a_resume_with_other_settings_is_refused_naming_them(finished_run, tmp_path, cache):
    run = _copy_run(finished_run, tmp_path / "run")
    before = (run / "config.json").read_text()
    with pytest.raises(ValueError, match=r"algorithm.name: 'gigpo' in the run, 'rloo' now; run.seed: 0 in the run, 5 now"):
        run_training(small_lake_config(run, algo="rloo", seed=5, resume=True), progress=False)
    assert (run / "config.json").read_text() == before
    # The stopping fields may change: the run goes on to iteration 3.
    summary = run_training(small_lake_config(run, iterations=3, resume=True), progress=False)
    assert summary.iterations == 3


def test_a_run_folder_with_the_flat_config_json_of_before_resumes_and_evaluates(finished_run, tmp_path, cache,
                                                                               capsys):
    # tests/fixtures/config_flat_v1.json: this run's config as the flat TrainConfig of before wrote it.
    import shutil

    run = _copy_run(finished_run, tmp_path / "run")
    shutil.copy(Path(__file__).parent / "fixtures" / "config_flat_v1.json", run / "config.json")
    code, err = _cli("evaluate", run, "--no-progress", capsys=capsys)
    assert code == 0, err
    summary = run_training(small_lake_config(run, iterations=3, resume=True), progress=False)
    assert summary.iterations == 3


def test_config_json_records_the_machine_and_a_resume_on_another_still_loads(finished_run, tmp_path, cache):
    run = _copy_run(finished_run, tmp_path / "run")
    data = json.loads((run / "config.json").read_text())
    assert data["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert data["machine"]["torch"] == torch.__version__ and data["machine"]["processor"]
    data["machine"] = {"processor": "another one", "cpu_capability": "AVX2"}  # not a setting: no refusal
    (run / "config.json").write_text(json.dumps(data))
    summary = run_training(small_lake_config(run, iterations=3, resume=True), progress=False)
    assert summary.iterations == 3
    assert json.loads((run / "config.json").read_text())["machine"]["processor"] != "another one"


def test_reproducible_refuses_a_process_whose_torch_started_with_other_kernels(tmp_path, cache, monkeypatch):
    monkeypatch.delenv("MKL_CBWR", raising=False)  # whatever this process's kernels, one setting is missing
    with pytest.raises(ValueError, match=r"run.reproducible \(--reproducible\): .*MKL_CBWR=None.*ptgpo train "
                                         r"--reproducible"):
        run_training(small_lake_config(tmp_path / "run", reproducible=True), progress=False)
    assert not (tmp_path / "run").exists()


def test_ptgpo_train_reproducible_pins_the_kernels_and_records_them(tmp_path, cache):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for name in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "ptgpo_harness.cli", "train", "--env", "ptgpo/FrozenLake-v0",
                           "--set", "env.kwargs.desc=[SFF, FHF, FFG]", "--set", "tiny.hidden_size=32",
                           "--set", "tiny.pretrain_steps=0", "--iterations", "1", "--group-size", "2",
                           "--set", "tasks_per_iteration=1", "--set", "eval_seeds=2", "--reproducible",
                           "--out", str(tmp_path / "run"), "--no-progress"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((tmp_path / "run" / "config.json").read_text())
    assert data["run"]["reproducible"] is True
    machine = data["machine"]
    assert machine["cpu_capability"] == "DEFAULT" and machine["threads"] == 1
    assert machine["environment"]["MKL_CBWR"] == "COMPATIBLE" and machine["environment"]["ONEDNN_MAX_CPU_ISA"] == "SSE41"


def test_a_resume_into_a_saved_model_folder_is_refused_and_the_model_kept(finished_run, tmp_path, cache, capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(finished_run / "final_model", model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    code, err = _cli("train", "--env", "ptgpo/FrozenLake-v0", "--out", model, "--resume", "--no-progress",
                     capsys=capsys)
    assert code == 2 and "is a saved model folder" in err
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.name != ".ptgpo.lock"} == before


# =========================================================================== 4. forking through gymnasium.make
def test_a_restored_frozenlake_episode_truncates_at_the_horizon():
    env = gym.make("ptgpo/FrozenLake-v0", desc=["SFF", "FFF", "FFG"])
    env.reset(seed=0)
    for _ in range(2):
        env.step("go left")  # against the wall: the agent stays put, the episode goes on
    snapshot = env.unwrapped.snapshot()

    def steps_to_end() -> int:
        for count in range(1, 1000):
            *_, terminated, truncated, _ = env.step("go left")
            if terminated or truncated:
                assert truncated
                return count
        raise AssertionError("never ended")

    assert steps_to_end() == 98
    env.unwrapped.restore(snapshot)
    assert steps_to_end() == 98


# =========================================================================== 5. a message, not a traceback
def _metrics_case(finished_run, tmp_path, lines_edit) -> Path:
    run = _copy_run(finished_run, tmp_path / "run")
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines_edit(lines)))
    return run


def test_a_torn_last_metrics_line_is_dropped_with_a_warning(finished_run, tmp_path, cache):
    # Killed mid-write: the last row has no newline. The resume drops it and reproduces the run.
    run = _metrics_case(finished_run, tmp_path, lambda lines: lines + ['{"iteration": 3, "loss": 0.'])
    with pytest.warns(UserWarning, match=r"metrics.jsonl:3: dropping a torn last line"):
        summary = run_training(small_lake_config(run, iterations=3, resume=True), progress=False)
    assert [row["iteration"] for row in read_jsonl(summary.metrics_path)] == [1, 2, 3]


def test_a_garbage_metrics_line_names_file_and_line(finished_run, tmp_path, cache, capsys):
    run = _metrics_case(finished_run, tmp_path, lambda lines: [lines[0], "garbage\n", *lines[1:]])
    code, err = _cli("train", "--config", _yaml(tmp_path, small_lake_config(run, iterations=3)), "--resume", "--no-progress",
                     capsys=capsys)
    assert code == 2 and "metrics.jsonl:2: not a JSON object" in err


def test_read_jsonl_rejects_non_objects(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"a": 1}\n[1, 2]\n{"a": 2}\n')
    with pytest.raises(FileFormatError, match=r"x.jsonl:2: not a JSON object"):
        read_jsonl(tmp_path / "x.jsonl")


@pytest.mark.parametrize("content, message", [
    ("{not json", "config.json: not a readable training config"),
    ('{"algo": "gigpo", "group_size": "eight"}', "config.json: not a valid training config: rollouts.group_size (group_size)"),
    ("[1, 2]", "config.json: not a training config"),
])
def test_a_bad_config_json_in_a_run_folder_is_named(finished_run, tmp_path, capsys, content, message):
    run = _copy_run(finished_run, tmp_path / "run")
    (run / "config.json").write_text(content)
    code, err = _cli("evaluate", run, "--no-progress", capsys=capsys)
    assert code == 2 and message in err


def test_cli_flags_and_files_fail_with_a_message_and_exit_code_2(finished_run, tmp_path, cache, capsys):
    (tmp_path / "bad.yaml").write_text("algo: gigpo\n  group_size: [8\n")
    (tmp_path / "a_file").write_text("x")
    lake = ["--env", "ptgpo/FrozenLake-v0"]
    cases = [
        (["train", "--config", tmp_path / "bad.yaml"], "bad.yaml: not valid YAML"),
        (["train", *lake, "--seed", 2**40, "--out", tmp_path / "r1"], "(seed): expected an integer in [0, 4294967295]"),
        (["train", *lake, "--set", "device=cuda", "--out", tmp_path / "r2"], "asks for a GPU"),
        (["train", *lake, "--set", "out_dir=5"], "(out_dir): expected a folder path"),
        (["train", *lake, "--out", tmp_path / "a_file"], "is a file, not a folder"),
        (["train", *lake, "--out", tmp_path / "a_file" / "run"], "cannot write in"),
        (["evaluate", finished_run, "--temperature", "nan"], "--temperature must be a number >= 0"),
        (["evaluate", finished_run, "--first-seed", "-1"], "--first-seed must be >= 0"),
        (["evaluate", finished_run, "--device", "cuda"], "--device: 'cuda' asks for a GPU"),
        (["evaluate", finished_run, "--out", tmp_path / "a_file" / "x.json"], "--out: cannot write"),
        (["demo", "--env", "ptgpo/FrozenLake-v0", "--kwargs", '{"sise": 4}'], "--kwargs: ptgpo/FrozenLake-v0"),
        (["demo", "--env", "ptgpo/FrozenLake-v0", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
    ]
    if torch.cuda.is_available():
        cases = [case for case in cases if "GPU" not in case[1]]
    for argv, message in cases:
        code, err = _cli(*argv, "--no-progress" if argv[0] != "demo" else "--seeds=1", capsys=capsys)
        assert code == 2 and message in err, (argv, err)
    assert not any((tmp_path / name).exists() for name in ("r1", "r2"))


def test_bad_env_kwargs_fail_before_anything_is_built_or_written(tmp_path, cache, capsys, monkeypatch):
    import ptgpo_algos.training.placement as placement

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not be built for a config that cannot run")

    with monkeypatch.context() as patch:
        patch.setattr(placement, "build_policy", no_model)
        for bad in ("{sise: 4}", "{desc: [SSS]}"):
            code, err = _cli("train", "--env", "ptgpo/FrozenLake-v0", "--set", f"env_kwargs={bad}",
                             "--out", tmp_path / "run", "--no-progress", capsys=capsys)
            assert code == 2 and "(env_kwargs): ptgpo/FrozenLake-v0" in err
    assert not (tmp_path / "run").exists() and not cache.exists()
    # The corrected command is not refused.
    code, _ = _cli("train", "--config", _yaml(tmp_path, small_lake_config(tmp_path / "run", iterations=1)), "--no-progress",
                   capsys=capsys)
    assert code == 0


def test_a_cached_tiny_model_loads_from_a_read_only_cache_and_an_unwritable_cache_is_named(tmp_path, monkeypatch):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(**TINY)
    built = build_tiny_model(spec, env_ids=["ptgpo/FrozenLake-v0"], cache_dir=tmp_path / "cache")
    listing = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in (tmp_path / "cache").rglob("*"))
    for path in (tmp_path / "cache").rglob("*"):
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        assert build_tiny_model(spec, env_ids=["ptgpo/FrozenLake-v0"], cache_dir=tmp_path / "cache") == built
        assert sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in (tmp_path / "cache").rglob("*")) == listing
    finally:
        for path in (tmp_path / "cache").rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="PTGPO_CACHE .* is not writable"):
        build_tiny_model(spec, env_ids=["ptgpo/FrozenLake-v0"], cache_dir=tmp_path / "a_file" / "cache")


def test_bench_dry_run_validates_like_a_real_run(tmp_path, capsys):
    config = tmp_path / "bench.yaml"
    text = textwrap.dedent("""
        name: x
        budget: 10
        seeds: [0]
        environments: [{label: lake, id: ptgpo/FrozenLake-v0, kwargs: KWARGS, train_seeds: {start: 0, count: 5},
                        eval_seeds: [100]}]
        methods: [{name: gigpo, algo: gigpo, train: {group_size: 1}}]
    """)
    config.write_text(text.replace("KWARGS", "{sise: 3}"))
    code, err = _cli("bench", config, "--out", tmp_path / "out", "--dry-run", capsys=capsys)
    assert code == 2 and "environment 'lake': kwargs: ptgpo/FrozenLake-v0" in err
    config.write_text(text.replace("KWARGS", "{}"))
    code, err = _cli("bench", config, "--out", tmp_path / "out", "--dry-run", capsys=capsys)
    assert code == 2 and "(group_size): expected an integer in [2, 1048576]" in err
    config.write_text(text.replace("KWARGS", "{}").replace("group_size: 1", "group_size: 2"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.yaml").write_text("name: another\n")
    code, err = _cli("bench", config, "--out", tmp_path / "out", "--dry-run", capsys=capsys)
    assert code == 2 and "holds results of a different benchmark config" in err
    (tmp_path / "out" / "config.yaml").unlink()
    code, _ = _cli("bench", config, "--out", tmp_path / "out", "--dry-run", capsys=capsys)
    assert code == 0 and not (tmp_path / "out" / "config.yaml").exists()


def test_seeds_out_of_range_are_refused_by_the_benchmark(tmp_path, capsys):
    config = tmp_path / "bench.yaml"
    config.write_text("name: x\nbudget: 10\nseeds: [4294967296]\nenvironments: [{id: ptgpo/FrozenLake-v0, "
                      "train_seeds: {start: 0, count: 5}, eval_seeds: [100]}]\nbaselines: [random]\n")
    code, err = _cli("bench", config, "--dry-run", capsys=capsys)
    assert code == 2 and "seeds[0]: expected an integer in [0, 4294967295], got 4294967296" in err


# ------------------------------------------------------------------------------- ALFWorld
ALFWORLD_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "alfworld" / "json_2.1.1"


def test_alfworld_without_its_extra_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "alfworld" else real(name, *a))
    with pytest.raises(ValueError, match=r'pip install -e "\.\[alfworld\]"'):
        ptgpo_envs.check_env_kwargs("ptgpo/ALFWorld-v0", {"data_path": str(ALFWORLD_DATA)})


@pytest.mark.skipif(not ALFWORLD_DATA.is_dir(), reason="needs ../shared/alfworld")
@pytest.mark.parametrize("content", ["", "{ broken"])
def test_an_empty_or_broken_alfworld_game_file_is_named(tmp_path, content):
    pytest.importorskip("alfworld")
    import shutil

    source = sorted((ALFWORLD_DATA / "valid_unseen").glob("*/*/game.tw-pddl"))[0].parent
    game = tmp_path / source.parent.name / source.name  # the task folder names the task type
    shutil.copytree(source, game)
    (game / "game.tw-pddl").write_text(content)
    env = gym.make("ptgpo/ALFWorld-v0", split="eval_out_of_distribution", data_path=str(ALFWORLD_DATA))
    with pytest.raises(ValueError, match=rf"{game / 'game.tw-pddl'}: not a loadable ALFWorld game"):
        env.reset(options={"game_path": str(game)})
    env.close()
