"""The second hostile probe's cases: result folders that cannot be turned against their owner, names that
stay inert in every output format, strict and bounded YAML, sizes and addresses checked up front, and
messages instead of the last tracebacks. Each test states the guarantee it checks.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from leaderboard.aggregate import build_leaderboard
from leaderboard.records import read_records, write_record
from leaderboard.render import to_csv, to_latex, to_markdown
from ptgpo_harness.cli import main
from ptgpo_algos.files import folder_lock
from ptgpo_algos.yaml_safe import MAX_DEPTH, load_yaml
from tests.leaderboard_fixtures import record

BENCH = textwrap.dedent("""
    name: NAME
    budget: 10
    seeds: [0]
    environments: [{label: LABEL, id: ptgpo/FrozenLake-v0, train_seeds: {start: 0, count: 5}, eval_seeds: [100]}]
    baselines: [random]
""")


def _cli(*argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _bench_yaml(tmp_path: Path, name: str = "x", label: str = "lake", extra: str = "") -> Path:
    path = tmp_path / "bench.yaml"
    path.write_text(BENCH.replace("NAME", name).replace("LABEL", label) + extra)
    return path


# =========================================================================== 1. symbolic links
@pytest.mark.parametrize("inside", [".ptgpo.lock", "bench.log", "leaderboard", "runs/lake__random__seed0"])
def test_a_results_folder_holding_a_symbolic_link_is_refused_and_the_target_kept(tmp_path, capsys, inside):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "leaderboard.md").write_text("mine\n")
    (victim / "file").write_text("mine\n")
    out = tmp_path / "results"
    (out / "runs").mkdir(parents=True)
    (out / inside).symlink_to(victim if inside in ("leaderboard", "runs/lake__random__seed0") else victim / "file")
    code, err = _cli("bench", _bench_yaml(tmp_path), "--out", out, capsys=capsys)
    assert code == 2 and f"{str(out / inside)!r} is a symbolic link" in err
    assert sorted(p.name for p in victim.iterdir()) == ["file", "leaderboard.md"]
    assert (victim / "file").read_text() == "mine\n" and (victim / "leaderboard.md").read_text() == "mine\n"
    assert not list(out.glob("*.json"))


def test_a_training_run_refuses_a_linked_lock_file_and_leaves_its_target(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "precious").write_text("keep\n")
    (tmp_path / "run" / ".ptgpo.lock").symlink_to(tmp_path / "precious")
    with pytest.raises(ValueError, match=r"\.ptgpo\.lock' is a symbolic link"):
        with folder_lock(tmp_path / "run", "training run"):
            pass
    assert (tmp_path / "precious").read_text() == "keep\n"


def test_a_folder_given_as_a_link_is_written_as_given(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with folder_lock(tmp_path / "link", "training run"):
        pass
    assert (tmp_path / "real" / ".ptgpo.lock").is_file()


def test_a_record_that_links_outside_the_folder_is_not_aggregated(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    write_record(outside, record("grpo", "A", 0, 0.5))
    results = tmp_path / "results"
    results.mkdir()
    write_record(results, record("grpo", "A", 1, 0.7))
    (results / "A__grpo__seed0.json").symlink_to(outside / "A__grpo__seed0.json")
    records, problems = read_records(results)
    assert [r.seed for r in records] == [1]
    assert len(problems) == 1 and "a symbolic link" in problems[0].message


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/escaped", ".hidden", "a/b", ".."])
def test_a_bench_name_cannot_place_results_outside_bench_results(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    code, err = _cli("bench", _bench_yaml(tmp_path, name=json.dumps(name)), "--dry-run", capsys=capsys)
    assert code == 2 and "name: expected a folder name of letters, digits and . _ + -" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.yaml"]


# =========================================================================== 2. inert names
HOSTILE = "lake\n\\input{/etc/hostname}\n<script>alert(1)</script> [x](javascript:alert(1)) =1+2"


def _hostile_board(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for seed, success in enumerate((0.4, 0.6)):
        made = record("+cmd|' /C calc'!A0 <img src=x onerror=alert(2)>", "A", seed, success)
        made.env_label = HOSTILE
        write_record(results, made)
    return build_leaderboard(results, None)


def test_latex_keeps_every_name_on_its_line_and_escaped(tmp_path):
    tex = to_latex(_hostile_board(tmp_path))
    # A name in a comment stays on the comment's line; outside comments its backslash is escaped.
    assert [line for line in tex.splitlines() if "/etc/hostname" in line and not line.startswith("%")]
    for line in tex.splitlines():
        assert line == "" or line.startswith(("%", "\\")) or " & " in line, line
        if not line.startswith("%"):
            assert "\\input" not in line.replace(r"\textbackslash{}input", "")
    assert r"lake \textbackslash{}input\{/etc/hostname\}" in tex


def test_markdown_escapes_raw_html_and_links(tmp_path):
    text = to_markdown(_hostile_board(tmp_path))
    assert "<script>" not in text and "<img" not in text and not re.search(r"(?<!\\)\]\(", text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and r"\[x\](javascript:alert(1))" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len({len(re.split(r"(?<!\\)\|", line)) for line in table[:3]}) == 1  # as many cells in each row


def test_csv_text_cells_cannot_start_a_formula(tmp_path):
    rows = list(csv.DictReader(io.StringIO(to_csv(_hostile_board(tmp_path)))))
    assert rows and all(row["method"].startswith("'+cmd") for row in rows)
    for row in rows:
        for value in row.values():
            assert not value[:1] in ("=", "+", "@", "\t", "\r") and not (value[:1] == "-" and value[1:2].isalpha())
    assert any(row["mean"] for row in rows)


@pytest.mark.parametrize("labels, methods", [
    (["lake 4", "lake/4"], ["random"]),
    (["lake"], ["gigpo v1", "gigpo-v1"]),
    (["a__b"], ["c", "b__c"]),  # the separator itself: a__b__c from (a__b, c) and (a, b__c)
])
def test_names_that_share_a_record_file_are_refused_naming_both(tmp_path, capsys, labels, methods):
    envs = ", ".join(f"{{label: {json.dumps(label)}, id: ptgpo/FrozenLake-v0, train_seeds: {{start: 0, count: 5}}, "
                     "eval_seeds: [100]}" for label in (labels if len(labels) > 1 else labels + ["a"]))
    names = ", ".join(f"{{name: {json.dumps(m)}, algo: gigpo}}" for m in methods if m != "random")
    text = (f"name: x\nbudget: 10\nseeds: [0]\nenvironments: [{envs}]\n"
            + (f"methods: [{names}]\n" if names else "") + "baselines: [random]\n")
    (tmp_path / "bench.yaml").write_text(text)
    code, err = _cli("bench", tmp_path / "bench.yaml", "--dry-run", capsys=capsys)
    assert code == 2 and "would write the same record file" in err
    pair = labels if len(labels) > 1 else methods
    assert all(repr(name) in err for name in pair)


# =========================================================================== 3. YAML
def test_yaml_refuses_duplicate_keys_naming_both_lines():
    with pytest.raises(yaml.YAMLError) as error:
        load_yaml("seed: 0\nlr: 0.1\nseed: 7\n")
    text = str(error.value)
    assert "duplicate key 'seed'" in text and "line 1" in text and "line 3" in text
    # A merge key may be overridden: that is what it is for.
    assert load_yaml("a: &a {x: 1}\nb: {<<: *a, x: 2}\n")["b"] == {"x": 2}


def test_yaml_bounds_aliases_and_depth_quickly():
    import time

    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 10))
    start = time.monotonic()
    with pytest.raises(yaml.YAMLError, match="alias bomb"):
        load_yaml(bomb)
    with pytest.raises(yaml.YAMLError, match=f"nested more than {MAX_DEPTH} levels"):
        load_yaml("[" * 100_000 + "]" * 100_000)
    with pytest.raises(yaml.YAMLError, match="refers to the value that contains it"):
        load_yaml("a: &a [*a]\n")
    assert time.monotonic() - start < 10
    assert load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


@pytest.mark.parametrize("entry", ["train", "bench", "plan", "leaderboard", "set"])
def test_every_yaml_entry_point_refuses_duplicates_and_depth_with_a_message(tmp_path, capsys, entry):
    for text, message in (("seed: 0\nseed: 7\n", "duplicate key 'seed'"),
                          ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than")):
        path = tmp_path / "file.yaml"
        path.write_text(_bench_yaml(tmp_path).read_text() + text if entry == "bench" else text)
        argv = {
            "train": ["train", "--config", path, "--out", tmp_path / "run"],
            "bench": ["bench", path, "--dry-run"],
            "plan": ["plan", path],
            "leaderboard": ["leaderboard", tmp_path, "--reported", path],
            "set": ["train", "--env", "ptgpo/FrozenLake-v0", "--set", f"env_kwargs={text.split(': ', 1)[1]}"
                    if "[" in text else "env_kwargs={seed: 0, seed: 7}", "--out", tmp_path / "run"],
        }[entry]
        code, err = _cli(*argv, capsys=capsys)
        assert code == 2 and message in err and "Traceback" not in err, err
        assert not (tmp_path / "run").exists()


# =========================================================================== 4. sizes and flags
@pytest.mark.parametrize("flag, message", [
    ("--group-size", "rollouts.group_size (group_size): expected an integer in [2, 1048576]"),
    ("--tasks", "rollouts.tasks_per_iteration (tasks_per_iteration): expected an integer in [1, 131072]"),
    ("--eval-episodes", "evaluation.seeds (eval_seeds): expected an integer in [1, 1048576]"),
])
def test_sizes_beyond_any_run_are_refused_before_a_model_is_built(tmp_path, capsys, monkeypatch, flag, message):
    import ptgpo_algos.training.placement as placement

    monkeypatch.setattr(placement, "build_policy", lambda *a, **k: pytest.fail("a model was built"))
    code, err = _cli("train", "--env", "ptgpo/FrozenLake-v0", flag, "1000000000000", "--out", tmp_path / "run",
                     capsys=capsys)
    assert code == 2 and message in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "-1"])
def test_plan_refuses_a_gpu_memory_beyond_any_gpu(capsys, value):
    root = Path(__file__).resolve().parents[1]
    code, err = _cli("plan", root / "configs" / "bench" / "alfworld_qwen2.5-1.5b.yaml", "--device", "cuda",
                     "--set", f"model={root / 'configs' / 'models' / 'qwen2.5-1.5b'}", "--gpu-memory", value,
                     capsys=capsys)
    assert code == 2 and "--gpu-memory must be a number of GiB in (0, 1048576]" in err


def test_plan_names_a_model_folder_this_machine_lacks(capsys):
    # The config builds without asking the machine; the plan reads the model's config.json, so it
    # checks the model's source first and says how to fix it.
    root = Path(__file__).resolve().parents[1]
    code, err = _cli("plan", root / "configs" / "bench" / "alfworld_qwen2.5-1.5b.yaml", "--device", "cuda",
                     "--set", "model=/no/such/model", "--gpu-memory", "80", capsys=capsys)
    assert code == 2 and "(model): no model folder at '/no/such/model'" in err and "configs/models/" in err


# =========================================================================== 5. messages, not tracebacks
def test_ray_addresses_where_no_cluster_answers_are_named_quickly(tmp_path, capsys):
    ray = pytest.importorskip("ray")
    import time

    # A command runs in a fresh process; an earlier test of this worker may have left Ray connected.
    ray.shutdown()

    start = time.monotonic()
    code, err = _cli("bench", _bench_yaml(tmp_path), "--out", tmp_path / "out", "--ray", "127.0.0.1:1",
                     capsys=capsys)
    assert code == 2 and "no Ray cluster answers at '127.0.0.1:1'" in err and "Traceback" not in err
    assert time.monotonic() - start < 60
    assert not list((tmp_path / "out").glob("*.json"))


def test_a_cluster_that_ray_cannot_join_is_named(monkeypatch):
    ray = pytest.importorskip("ray")
    from ptgpo_envs.ray_vector import connect_ray

    def refuse(**options):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConnectionError, match="no Ray cluster at 'auto' .*ray start --head"):
        connect_ray("auto")


def test_ctrl_c_exits_quietly_with_the_resume_command(tmp_path, monkeypatch):
    import signal
    import subprocess
    import sys
    import time

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    argv = ["train", "--env", "ptgpo/FrozenLake-v0", "--set", "env_kwargs={desc: [SFF, FHF, FFG]}",
            "--set", "tiny={hidden_size: 32, pretrain_steps: 0}", "--iterations", "1000",
            "--out", str(tmp_path / "run")]
    # Started as a terminal starts a foreground job, Ctrl-C at its default and not blocked: an ignored or
    # blocked SIGINT is inherited, so a test process whose libraries ignore or block it would make this
    # run deaf to it.
    def foreground() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process = subprocess.Popen([sys.executable, "-m", "ptgpo_harness.cli", *argv, "--no-progress"],
                               stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
                               preexec_fn=foreground)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "run" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "ptgpo train: interrupted" in err and " --resume" in err.splitlines()[-1]
    assert f"--out {tmp_path / 'run'}" in err


def test_an_interrupted_bench_names_the_same_command(monkeypatch, capsys, tmp_path):
    import ptgpo_harness.bench as bench

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", interrupted)
    code, err = _cli("bench", _bench_yaml(tmp_path), "--out", tmp_path / "out", capsys=capsys)
    assert code == 130 and err.strip().endswith(f"resume with: ptgpo bench {tmp_path / 'bench.yaml'} --out "
                                                f"{tmp_path / 'out'}")


def test_a_full_disk_is_a_message_naming_the_file(monkeypatch, capsys, tmp_path):
    import errno

    import ptgpo_harness.commands.leaderboard as command

    results = tmp_path / "results"
    results.mkdir()
    write_record(results, record("grpo", "A", 0, 0.5))

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("leaderboard.render.atomic_write_text", full)
    code, err = _cli("leaderboard", results, "--formats", "md", capsys=capsys)
    assert code == 2 and f"{results / 'leaderboard'}" in err and "No space left on device (free some space" in err
    assert command.HELP and "Traceback" not in err


def test_a_checkpoint_write_that_torch_cannot_finish_names_the_file(monkeypatch, tmp_path):
    import torch

    from ptgpo_algos.training.checkpoint import save_checkpoint

    def cut_short(obj, path):
        Path(path).write_bytes(b"PK")
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed; unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", cut_short)
    with pytest.raises(OSError, match="writing the checkpoint failed .*is the disk full") as error:
        save_checkpoint(tmp_path / "checkpoint.pt", {})
    assert error.value.filename == str(tmp_path / "checkpoint.pt")
    assert list(tmp_path.iterdir()) == []  # neither the checkpoint nor its temporary file


@pytest.mark.parametrize("damage, message", [
    ("counters", "'counters' lacks a number for decisions"),
    ("nan", "weights w hold NaN or infinite values"),
    ("numpy", "numpy objects: a checkpoint of an older ptgpo holds them"),
])
def test_checkpoints_damaged_inside_are_named(tmp_path, damage, message):
    import numpy as np
    import torch

    from ptgpo_algos.training.checkpoint import COUNTERS, CheckpointError, load_checkpoint

    state = {"weights": {"w": torch.ones(3)}, "optimizer": {}, "config": {},
             "rng": {"python": 1, "numpy": {"state": 1}, "torch": torch.zeros(1), "sampler": torch.zeros(1)},
             "counters": dict.fromkeys(COUNTERS, 0)}
    if damage == "counters":
        del state["counters"]["decisions"]
    elif damage == "nan":
        state["weights"]["w"][1] = float("nan")
    else:
        state["rng"]["numpy"] = np.random.get_state()
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(tmp_path / "checkpoint.pt")


def test_scores_beyond_a_float_mean_leave_the_other_records_aggregated(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    write_record(results, record("grpo", "A", 0, 0.5))
    for seed in (1, 2):
        data = record("grpo", "A", seed, 0.5).to_dict()
        (results / f"A__grpo__seed{seed}.json").write_text(json.dumps({**data, "score": 1e308}))
    code, err = _cli("leaderboard", results, "--reported", "none", capsys=capsys)
    assert code == 0 and "Traceback" not in err
    assert err.count("field 'score' must be a number of magnitude at most 1e+12") == 2


@pytest.mark.parametrize("case", ["file", "link"])
def test_leaderboard_out_that_cannot_be_written_is_refused_first(tmp_path, capsys, case):
    results = tmp_path / "results"
    results.mkdir()
    write_record(results, record("grpo", "A", 0, 0.5))
    if case == "file":
        (tmp_path / "out").write_text("mine\n")
        code, err = _cli("leaderboard", results, "--out", tmp_path / "out", capsys=capsys)
        assert code == 2 and "--out: " in err and "is a file; give a folder path" in err
        assert (tmp_path / "out").read_text() == "mine\n"
    else:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "leaderboard.md").write_text("mine\n")
        (results / "leaderboard").symlink_to(tmp_path / "docs")
        code, err = _cli("leaderboard", results, capsys=capsys)
        assert code == 2 and "is a symbolic link" in err
        assert (tmp_path / "docs" / "leaderboard.md").read_text() == "mine\n"


# =========================================================================== 6. leftovers
def test_temporary_files_of_a_killed_writer_are_removed_by_the_next(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".checkpoint.pt.x1y2.tmp").write_bytes(b"half")
    (run / ".final_model.abc.tmp").mkdir()
    (run / "checkpoint.pt").write_bytes(b"whole")
    with folder_lock(run, "training run"):
        assert sorted(p.name for p in run.iterdir()) == [".ptgpo.lock", "checkpoint.pt"]


def test_abandoned_ray_cell_folders_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    from ptgpo_harness.bench.ray_pool import CELL_FOLDER_PREFIX, _remove_abandoned_cell_folders

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, live, young = (tmp_path / f"{CELL_FOLDER_PREFIX}{name}" for name in ("dead", "live", "young"))
    for folder in (dead, live, young):
        (folder / "runs").mkdir(parents=True)
        (folder / ".ptgpo.lock").write_text("{}")
        (folder / "runs" / "checkpoint.pt").write_bytes(b"x" * 1000)
    holder = subprocess.Popen([sys.executable, "-c", f"import time; from ptgpo_algos.files import folder_lock\n"
                               f"with folder_lock({str(live)!r}, 'Ray cell'):\n print('held', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        assert holder.stdout.readline().strip() == "held"
        for folder in (dead, live):
            os.utime(folder, (0, 0))
        _remove_abandoned_cell_folders()
    finally:
        holder.kill()
        holder.wait()
    assert not dead.exists() and live.exists() and young.exists()


def test_saved_folders_get_ordinary_permissions_whatever_their_writer_used(tmp_path):
    import stat

    from ptgpo_algos.files import atomic_folder

    previous = os.umask(0o022)
    try:
        with atomic_folder(tmp_path / "model") as folder:
            os.close(os.open(folder / "model.safetensors", os.O_WRONLY | os.O_CREAT, 0o600))
            (folder / "sub").mkdir(mode=0o700)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "model" / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "model" / "sub").stat().st_mode) == 0o755


ALFWORLD_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "alfworld" / "json_2.1.1"


@pytest.mark.skipif(not ALFWORLD_DATA.is_dir(), reason="needs ../shared/alfworld")
@pytest.mark.parametrize("content, message", [
    ("", "not a readable ALFWorld game (JSONDecodeError"),
    ("(define (problem p) (:domain alfred))", "not a readable ALFWorld game (JSONDecodeError"),
    ('{"solvable": true}', "not an ALFWorld game (a JSON object with its pddl_problem)"),
])
def test_a_data_path_with_a_damaged_game_names_the_file(tmp_path, content, message):
    import shutil

    import gymnasium as gym

    import ptgpo_envs  # noqa: F401  (registers the environments)

    source = sorted((ALFWORLD_DATA / "valid_unseen").glob("*/*/game.tw-pddl"))[0].parent
    game = tmp_path / "valid_unseen" / source.parent.name / source.name
    shutil.copytree(source, game)
    (game / "game.tw-pddl").write_text(content)
    with pytest.raises(ValueError, match=re.escape(f"{game / 'game.tw-pddl'}: {message}")):
        gym.make("ptgpo/ALFWorld-v0", split="eval_out_of_distribution", data_path=str(tmp_path))
