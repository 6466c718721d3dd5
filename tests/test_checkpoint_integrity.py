"""Checkpoints prove their integrity before anything in them is used.

Every case here once passed silently or ended in a traceback: 64 flipped bytes in a shard or in
``checkpoint.pt`` loaded as if nothing happened (damaged weights, NaN at worst); a ``checkpoint/``
without its ``manifest.json``, or emptied, made ``--resume`` start the run over at iteration 1,
discarding finished work; a ``checkpoint`` that is a file ended in a traceback; a truncated or
missing shard was reported with fragments of DCP's traceback. Now a SHA-256 recorded at save
(``checkpoint.pt``: in its zip archive's comment; a sharded checkpoint: in ``manifest.json``, per
file) is checked before a byte of the checkpoint is unpickled, and a damaged, incomplete or missing
checkpoint of a run that finished iterations is refused with one line naming the file.
"""

from __future__ import annotations

import json
import shutil
import struct
import warnings
from pathlib import Path

import pytest
import torch

from ptgpo_algos.training.checkpoint import COUNTERS, CheckpointError, load_checkpoint, save_checkpoint
from ptgpo_harness.cli import main
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.training.run_folder import prepare_run_folder

import distributed_scenarios as scenarios
from resume_scenarios import small_lake_config


def _flip(path: Path, start: int, count: int = 64) -> None:
    """Flip the lowest bit of ``count`` bytes from ``start``: float data stays finite, so only a checksum sees it."""
    data = bytearray(path.read_bytes())
    for i in range(start, start + count):
        data[i] ^= 0x01
    path.write_bytes(bytes(data))


# =========================================================================== checkpoint.pt
def _state() -> dict:
    return {"weights": {"w": torch.zeros(65536)}, "optimizer": {"state": {}, "param_groups": []},
            "rng": {"python": (3, tuple(range(5)), None), "numpy": {"state": 1}, "torch": torch.zeros(3),
                    "sampler": torch.zeros(3)},
            "counters": {**dict.fromkeys(COUNTERS, 0), "iteration": 3}, "config": {"algo": "grpo"}}


def test_a_checkpoint_carries_its_checksum_and_loads_without_a_warning(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _state())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_checkpoint(path)
    assert not [w for w in caught if "unverified" in str(w.message)]
    assert loaded["counters"]["iteration"] == 3 and torch.equal(loaded["weights"]["w"], torch.zeros(65536))
    assert torch.load(path, weights_only=True)["counters"]["iteration"] == 3  # still a plain torch file


def test_flipped_bytes_in_a_checkpoint_are_refused_naming_it(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _state())
    _flip(path, path.stat().st_size // 2)  # in the weights' data
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: damaged: its SHA-256 .* differs") as error:
        load_checkpoint(path)
    assert "\n" not in str(error.value) and "new out_dir" in str(error.value)


def test_a_checkpoint_of_an_older_ptgpo_without_a_checksum_loads_with_a_warning(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({**_state(), "format": "ptgpo-checkpoint", "version": 1}, path)
    with pytest.warns(UserWarning, match=r"checkpoint\.pt: no checksum .* unverified"):
        assert load_checkpoint(path)["counters"]["iteration"] == 3


def test_a_checkpoint_whose_checksum_was_cut_off_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _state())
    data = path.read_bytes()
    end = data.rindex(b"PK\x05\x06")  # the archive's last record; its last 2 bytes: the comment's length
    assert struct.unpack("<H", data[end + 20:end + 22])[0] > 0
    path.write_bytes(data[:end + 20] + b"\0\0")  # the archive torch wrote, without the comment
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: damaged: it was written with a checksum"):
        load_checkpoint(path)


# =========================================================================== checkpoint/ (sharded)
@pytest.fixture
def saved(tmp_path):
    """A single-process sharded checkpoint of the tiny model, and a model and optimiser to load it into."""
    return scenarios.save_tiny_checkpoint(tmp_path / "checkpoint")


def _load(saved):
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    folder, scorer, optimizer = saved
    return load_sharded(folder, scorer, optimizer)


def _largest_chunk(folder: Path) -> dict:
    return max(json.loads((folder / "manifest.json").read_text())["storage"], key=lambda entry: entry["length"])


def test_a_sharded_checkpoint_records_each_file_s_checksum_and_loads_without_a_warning(saved):
    manifest = json.loads((saved[0] / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["__0_0.distcp", "state.pt"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _load(saved) == {"iteration": 4, "world_size": 1}
    assert not [w for w in caught if "unverified" in str(w.message)]


def test_flipped_bytes_in_a_shard_are_refused_naming_it(saved):
    folder = saved[0]
    chunk = _largest_chunk(folder)
    _flip(folder / chunk["path"], chunk["start"] + chunk["length"] // 2)
    with pytest.raises(CheckpointError, match=r"checkpoint/__0_0\.distcp: damaged: its SHA-256 .* differs") as error:
        _load(saved)
    assert "\n" not in str(error.value)


def test_flipped_bytes_in_the_state_file_are_refused_naming_it(saved):
    folder = saved[0]
    _flip(folder / "state.pt", (folder / "state.pt").stat().st_size // 2)
    with pytest.raises(CheckpointError, match=r"checkpoint/state\.pt: damaged: its SHA-256 .* differs"):
        _load(saved)


def test_a_truncated_shard_is_refused_naming_it(saved):
    path = saved[0] / "__0_0.distcp"
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    with pytest.raises(CheckpointError, match=rf"__0_0\.distcp: truncated: {size // 2} bytes of the {size} written"):
        _load(saved)


def test_a_manifest_naming_a_missing_shard_is_refused_naming_it(saved):
    (saved[0] / "__0_0.distcp").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint/__0_0\.distcp: missing: manifest\.json names it") as error:
        _load(saved)
    assert "\n" not in str(error.value) and "Traceback" not in str(error.value)


@pytest.mark.parametrize("damage", ["digit", "json"])
def test_a_damaged_manifest_is_refused(saved, damage):
    path = saved[0] / "manifest.json"
    text = path.read_text()
    if damage == "digit":  # one chunk's offset in its file, one digit off: still a valid manifest
        chunk = _largest_chunk(saved[0])
        text = text.replace(f'"start": {chunk["start"]}', f'"start": {chunk["start"] + 1}', 1)
    else:
        text = text[: len(text) // 2]
    path.write_text(text)
    with pytest.raises(CheckpointError, match=r"manifest\.json: (damaged: its SHA-256|refused: .*damaged)"):
        _load(saved)


def test_a_sharded_checkpoint_of_an_older_ptgpo_without_checksums_loads_with_a_warning(saved):
    path = saved[0] / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["files"], manifest["sha256"]
    path.write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=r"checkpoint: no checksums .* unverified"):
        assert _load(saved)["iteration"] == 4


# =========================================================================== what --resume resumes
def _run_folder(tmp_path: Path, finished: int, **change) -> TrainConfig:
    """A run folder as a run leaves it after ``finished`` iterations, without its checkpoint."""
    config = small_lake_config(tmp_path / "run", resume=True, **change)
    config.run_dir.mkdir()
    (config.run_dir / "config.json").write_text(json.dumps(config.to_dict()))
    (config.run_dir / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n"
                                                          for i in range(1, finished + 1)))
    return config


@pytest.mark.parametrize("checkpoint, message", [
    (None, r"metrics\.jsonl records 2 finished iterations, but there is no checkpoint"),
    ("empty", r"checkpoint: no manifest\.json: the checkpoint is incomplete"),
    ("no manifest", r"checkpoint: no manifest\.json: the checkpoint is incomplete"),
    ("file", r"checkpoint is a file, not the folder of a checkpoint"),
    ("pt folder", r"checkpoint\.pt is a folder, not a checkpoint file"),
])
def test_resume_refuses_a_run_whose_checkpoint_is_gone_or_incomplete(tmp_path, checkpoint, message):
    config = _run_folder(tmp_path, finished=2)
    folder = config.run_dir / "checkpoint"
    if checkpoint == "empty":
        folder.mkdir()
    elif checkpoint == "no manifest":
        folder.mkdir()
        (folder / "__0_0.distcp").write_bytes(b"shard")
        (folder / "state.pt").write_bytes(b"state")
    elif checkpoint == "file":
        folder.write_bytes(b"x")
    elif checkpoint == "pt folder":
        (config.run_dir / "checkpoint.pt").mkdir()
    with pytest.raises(ValueError, match=message) as error:
        prepare_run_folder(config)
    assert "\n" not in str(error.value)


def test_resume_names_the_checkpoint_left_beside_when_a_replacement_was_cut_short(tmp_path):
    config = _run_folder(tmp_path, finished=2)
    (config.run_dir / "checkpoint.old").mkdir()
    (config.run_dir / "checkpoint.old" / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match=r"checkpoint\.old holds one .*rename it to checkpoint, then resume"):
        prepare_run_folder(config)


def test_resume_starts_over_with_a_warning_a_run_that_kept_no_checkpoint_by_design(tmp_path):
    # run.keep_checkpoint off (a benchmark's cells): the finished run deleted it; nothing was lost.
    config = _run_folder(tmp_path, finished=2, keep_checkpoint=False)
    with pytest.warns(UserWarning, match=r"2 finished iterations, but the run kept no checkpoint"):
        assert prepare_run_folder(config) is False


def test_resume_starts_over_when_no_checkpoint_was_due(tmp_path):
    # Killed after iteration 2 of a run that checkpoints every 5: nothing was kept that a resume could use.
    config = _run_folder(tmp_path, finished=2, checkpoint_every=5)
    assert prepare_run_folder(config) is False


# =========================================================================== through the command line
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One short single-process run, finished (checkpoint.pt kept)."""
    from ptgpo_algos.training.trainer import run_training

    root = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTGPO_CACHE", str(root / "cache"))
        run_training(small_lake_config(root / "run"), progress=False)
    return root / "run"


def _resume(tmp_path, run: Path, capsys, *flags) -> tuple[int, str]:
    import yaml

    data = small_lake_config(run, iterations=3).to_dict()
    del data["run"]["resume"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    capsys.readouterr()
    code = main(["train", "--config", str(tmp_path / "config.yaml"), "--resume", "--no-progress", *flags])
    return code, capsys.readouterr().err


def _copy(run: Path, target: Path) -> Path:
    shutil.copytree(run, target)
    (target / ".ptgpo.lock").unlink(missing_ok=True)
    return target


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_resume_refuses_a_damaged_or_deleted_checkpoint_and_keeps_the_run(finished_run, tmp_path, monkeypatch, capsys,
                                                                           damage):
    monkeypatch.setenv("PTGPO_CACHE", str(finished_run.parent / "cache"))
    run = _copy(finished_run, tmp_path / "run")
    checkpoint = run / "checkpoint.pt"
    if damage == "flip":
        _flip(checkpoint, checkpoint.stat().st_size // 2)
    else:
        checkpoint.unlink()
    metrics = (run / "metrics.jsonl").read_text()
    code, err = _resume(tmp_path, run, capsys)
    expected = "checkpoint.pt: damaged" if damage == "flip" else "2 finished iterations, but there is no checkpoint"
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert (run / "metrics.jsonl").read_text() == metrics  # nothing started over


@pytest.mark.distributed
def test_a_rank_refuses_a_flipped_shard_at_resume(tmp_path, monkeypatch, capsys):
    from ptgpo_algos.distributed.run import run_sharded

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    run_sharded(small_lake_config(run), 1, progress=False)
    chunk = _largest_chunk(run / "checkpoint")
    _flip(run / "checkpoint" / chunk["path"], chunk["start"] + chunk["length"] // 2)
    metrics = (run / "metrics.jsonl").read_text()
    code, err = _resume(tmp_path, run, capsys, "--nproc", "1")
    assert code == 2 and "checkpoint/__0_0.distcp: damaged" in err and "Traceback" not in err, err
    assert (run / "metrics.jsonl").read_text() == metrics
