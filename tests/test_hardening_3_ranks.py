"""Training across ranks (``ptgpo train --nproc N``) when something goes wrong: the ranks never outlive
their launcher, ``--nproc`` is bounded by the machine before anything starts, and a rank's failure is
one line naming the rank and the cause, exit code 2. Each test states the guarantee it checks.

The runs are the tiny model on FrozenLake 3x3 (tests/distributed_scenarios.py's config) on 2 gloo ranks.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

import distributed_scenarios as scenarios
from ptgpo_harness.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _config(tmp_path: Path, **change) -> Path:
    data = scenarios.training_config("unused", "gigpo", **change)
    del data["out_dir"]
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie, done), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def _ranks_of(parent: int) -> list[int]:
    """The pids of the ranks ``parent`` started, in the order it started them (rank 0 first)."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(") ", 1)[1].split()[1]) == parent and b"spawn_main" in command:
            ranks.append(int(entry.name))
    return sorted(ranks)


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


# ================================================================= ranks die with their launcher
def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(config: Path, out: Path, console: Path, *extra: str) -> subprocess.Popen:
    """The launcher as a shell starts a background job (``ptgpo train ... &``): with Ctrl-C ignored, which
    its ranks inherit; its output (and its ranks') to ``console``, a file: a pipe would stay open while a
    rank lives."""
    with open(console, "w") as output:
        return subprocess.Popen([sys.executable, "-m", "ptgpo_harness.cli", "train", "--config", str(config), "--nproc",
                                 "2", "--no-progress", "--out", str(out), *extra], cwd=ROOT, stdout=output,
                                stderr=subprocess.STDOUT, preexec_fn=_ignore_ctrl_c,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})


def _last_iteration(out: Path) -> int:
    return json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["iteration"]


@pytest.mark.distributed
def test_no_rank_outlives_a_killed_or_terminated_launcher_and_the_run_then_resumes(tmp_path):
    # Before: the ranks trained on with parent 1 and held the folder's lock, so --resume was refused
    # (they were to die on SIGINT when the launcher died, which a background job ignores).
    config = _config(tmp_path, iterations=1000, checkpoint_every=1, eval_every=1000, time_limit_s=600)
    out = tmp_path / "run"
    for number, stop in enumerate((signal.SIGKILL, signal.SIGTERM)):
        console = tmp_path / f"console-{stop.name}.txt"
        launcher = _start(config, out, console, *(["--resume"] if number else []))
        try:
            manifest = out / "checkpoint" / "manifest.json"
            start = manifest.stat().st_mtime_ns if manifest.exists() else 0
            _wait_for(lambda: manifest.exists() and manifest.stat().st_mtime_ns != start, 300, "a checkpoint")
            ranks = _ranks_of(launcher.pid)
            assert len(ranks) == 2 and all(_alive(pid) for pid in ranks)
            launcher.send_signal(stop)
            launcher.wait(60)
        finally:
            launcher.kill()
        try:
            _wait_for(lambda: not any(_alive(pid) for pid in ranks), 10, f"the ranks to die after {stop.name}")
        finally:
            for pid in ranks:  # what the old launcher left behind
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        err = console.read_text()
        assert launcher.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 128 + signal.SIGTERM), err
        assert "Traceback" not in err
    # The lock was released with the ranks: the run resumes from its last checkpoint.
    finish = _last_iteration(out) + 1
    done = subprocess.run([sys.executable, "-m", "ptgpo_harness.cli", "train", "--config", str(config), "--nproc", "2",
                           "--no-progress", "--out", str(out), "--resume", "--set", f"iterations={finish}"],
                          cwd=ROOT, text=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout[done.stdout.index("{"):])["iterations"] == finish


# ================================================================= --nproc bounded by the machine
def test_more_ranks_than_the_machine_can_run_are_refused_before_anything_starts(tmp_path, capsys):
    from ptgpo_algos.child_processes import usable_cores
    from ptgpo_algos.distributed.launch import MAX_RANKS_PER_CORE

    cores = usable_cores()
    too_many = MAX_RANKS_PER_CORE * cores + 1
    out = tmp_path / "run"
    code, err = _cli("train", "--config", _config(tmp_path), "--nproc", too_many, "--out", out, capsys=capsys)
    assert code == 2 and err.count("\n") == 1
    assert (f"ptgpo train: --nproc {too_many}: at most {MAX_RANKS_PER_CORE * cores} CPU ranks on the {cores} cores"
            in err and f"give --nproc {cores}" in err)
    assert not out.exists()


def test_more_ranks_than_cores_are_warned_of_and_gpu_ranks_bounded_by_the_gpus(monkeypatch):
    import torch

    from ptgpo_algos.child_processes import OversubscribedWarning
    from ptgpo_algos.distributed import launch

    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    launch.check_process_count(2, "cpu")  # one a core: not a word
    with pytest.warns(OversubscribedWarning, match="--nproc 3 starts more ranks than the 2 cores"):
        launch.check_process_count(3, "cpu")
    with pytest.raises(ValueError, match="--nproc 5: at most 4 CPU ranks on the 2 cores"):
        launch.check_process_count(5, "cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    launch.check_process_count(2, "cuda")
    with pytest.raises(ValueError, match="--nproc 3: each rank takes a GPU of its own and this process sees 2"):
        launch.check_process_count(3, "cuda")


def test_a_process_count_warning_is_one_line_on_the_console(monkeypatch):
    import warnings

    from ptgpo_algos.child_processes import OversubscribedWarning
    from ptgpo_harness.cli import _one_line_plugin_warnings

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    _one_line_plugin_warnings()
    shown = warnings.formatwarning("--nproc 3 starts more ranks than the 2 cores", OversubscribedWarning, "x.py", 1)
    assert shown == "ptgpo: warning: --nproc 3 starts more ranks than the 2 cores\n"


# ================================================================= a rank's failure: one line, exit 2
@pytest.mark.distributed
def test_a_killed_rank_is_one_line_naming_it_and_the_others_are_stopped(tmp_path, capsys):
    out = tmp_path / "run"
    killed: list[int] = []
    ranks: list[int] = []

    def kill_rank_1() -> None:
        deadline = time.monotonic() + 300
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks.extend(_ranks_of(os.getpid()))
        if len(ranks) == 2:
            os.kill(ranks[1], signal.SIGKILL)
            killed.append(ranks[1])

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    code, err = _cli("train", "--config", _config(tmp_path, iterations=1000, time_limit_s=600), "--nproc", 2, "--no-progress",
                     "--out", out, capsys=capsys)
    killer.join()
    assert killed, "the ranks were not found"
    assert code == 2 and err.count("\n") == 1, err
    assert err == ("ptgpo train: rank 1 failed: its process was killed by signal 9 (SIGKILL; the kernel's "
                   "out-of-memory killer sends it too); the other ranks were stopped\n")
    assert not any(_alive(pid) for pid in ranks)


#: Loaded first by every Python process on the path given: in a rank of a launch (a spawned process),
#: flushing a file to disk fails as on a full disk.
FULL_DISK = textwrap.dedent("""
    import errno, os, sys

    if "--multiprocessing-fork" in sys.argv:
        def fsync(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        os.fsync = fsync
""")


@pytest.mark.distributed
def test_a_full_disk_on_a_rank_is_one_line_naming_the_rank_and_the_file(tmp_path, capsys, monkeypatch):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FULL_DISK)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), str(ROOT)]))
    out = tmp_path / "run"
    code, err = _cli("train", "--config", _config(tmp_path), "--nproc", 2, "--no-progress", "--out", out,
                     capsys=capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err == (f"ptgpo train: rank 0 failed: {out / 'config.json'}: {os.strerror(errno.ENOSPC)} (free some "
                   "space, then run the same command again: finished work is kept); the other ranks were stopped\n")


def test_a_rank_s_unexpected_error_is_one_line_and_its_traceback_goes_to_the_run_folder(tmp_path, capsys,
                                                                                      monkeypatch):
    from ptgpo_algos.distributed import launch as launching
    from ptgpo_algos.distributed import run

    def failing(fn, nproc, *args, device):
        try:
            raise RuntimeError("the weights went\nastray")
        except RuntimeError as error:
            raise launching.RankFailed(1, launching.RankError.of(error)) from None

    monkeypatch.setattr(run, "launch", failing)
    out = tmp_path / "run"
    code, err = _cli("train", "--config", _config(tmp_path), "--nproc", 2, "--out", out, capsys=capsys)
    assert code == 2 and err == (f"ptgpo train: rank 1 failed: RuntimeError: the weights went ... astray (its traceback "
                                 f"is in {out / 'ranks.log'}); the other ranks were stopped\n")
    log = (out / "ranks.log").read_text()
    assert "rank 1 failed:\nTraceback (most recent call last)" in log and "RuntimeError: the weights went" in log
    # The log alone does not make the folder a run: the same command starts it without --resume.
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.run_folder import prepare_run_folder

    assert prepare_run_folder(TrainConfig.from_yaml(_config(tmp_path), {"out_dir": str(out)})) is False


# ================================================================= which failure is reported, how a group stops
def _error(kind: str, at: float, message: str = "boom") -> "RankError":
    from ptgpo_algos.distributed.launch import RankError

    lineage = {"ValueError": ("ValueError", "Exception"), "RuntimeError": ("RuntimeError", "Exception")}[kind]
    return RankError(kind, lineage, message, f"Traceback ...\n{kind}: {message}\n", at)


LOST = "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:10642"


@pytest.mark.parametrize("exited, results, errors, expected", [
    # A killed rank explains its peer's lost connection, whichever was seen first.
    ({1: -9}, {}, {0: _error("RuntimeError", 1.0, LOST)}, (1, None, -9)),
    # An error a rank raised explains the others' lost connections and their exits.
    ({0: 1, 1: 1}, {}, {0: _error("RuntimeError", 0.5, LOST), 1: _error("ValueError", 1.0)}, (1, "ValueError", 1)),
    # Of two errors raised, the earlier.
    ({}, {}, {0: _error("ValueError", 2.0), 1: _error("RuntimeError", 1.0)}, (1, "RuntimeError", None)),
    # A lost connection alone is reported when nothing else explains it.
    ({}, {}, {1: _error("RuntimeError", 1.0, LOST)}, (1, "RuntimeError", None)),
    # A rank that delivered its result and then died leaving the group: the work is done.
    ({0: -6}, {0: "result"}, {}, None),
    ({}, {}, {}, None),
])
def test_the_failure_reported_is_the_one_that_explains_the_others(exited, results, errors, expected):
    from ptgpo_algos.distributed.launch import _first_failure

    failure = _first_failure(exited, results, errors)
    if expected is None:
        assert failure is None
    else:
        rank, kind, exitcode = expected
        assert (failure.rank, failure.error and failure.error.kind) == (rank, kind)
        if kind is None:
            assert failure.exitcode == exitcode


def test_a_rank_error_keeps_a_long_message_s_first_and_last_lines():
    from ptgpo_algos.distributed.launch import RankError

    try:
        raise RuntimeError("worker 3 failed:\nTraceback (most recent call last):\n  File x\nKeyError: 'door'\n")
    except RuntimeError as error:
        caught = RankError.of(error)
    assert caught.message == "worker 3 failed: ... KeyError: 'door'"
    assert caught.lineage[:2] == ("RuntimeError", "Exception") and "Traceback" in caught.traceback
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/run/x/config.json")
    except OSError as error:
        caught = RankError.of(error)
    assert (caught.errno, caught.message, caught.filename) == (errno.ENOSPC, os.strerror(errno.ENOSPC),
                                                               "/run/x/config.json")


def _deaf_to_sigterm(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(120)


def test_a_process_deaf_to_sigterm_is_killed_after_the_grace(tmp_path):
    import multiprocessing

    from ptgpo_algos.child_processes import stop_processes

    context = multiprocessing.get_context("fork")
    ready = context.Event()
    process = context.Process(target=_deaf_to_sigterm, args=(ready,))
    process.start()
    assert ready.wait(60)
    stop_processes([process], grace_s=0.5)
    assert process.exitcode == -signal.SIGKILL
