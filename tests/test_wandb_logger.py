"""``run.wandb``: the run's config, metrics rows and curve in Weights & Biases, offline only here.

Every test runs wandb with ``WANDB_MODE=offline`` and its files under the test's temporary folder:
nothing is sent anywhere.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types

import pytest

from ptgpo_algos.config import TrainConfig, check_spellings
from ptgpo_algos.training.settings import WandbSettings
from ptgpo_algos.training.preflight import check_machine
from ptgpo_algos.training.trainer import run_training

LAKE = {"desc": ["SFF", "FHF", "FFG"]}


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """wandb offline, its own files in tmp_path, no key, no network."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb-dir"), "WANDB_SILENT": "true",
                        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                        "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def _config(out_dir, **change):
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=6, algo="grpo", group_size=2,
                tasks_per_iteration=2, iterations=2, eval_every=1, eval_seeds=2, checkpoint_every=2,
                ppo_epochs=1, minibatch_size=16, out_dir=str(out_dir), tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict(data)


def test_wandb_settings_are_checked_where_given():
    assert TrainConfig.from_dict({"run.wandb": {}}).run.wandb == WandbSettings()
    config = TrainConfig.from_dict({"run": {"wandb": {"project": "lake", "mode": "offline"}}})
    assert config.run.wandb == WandbSettings(project="lake", mode="offline")
    assert TrainConfig.from_dict(config.to_dict()).run.wandb == config.run.wandb
    with pytest.raises(ValueError, match=r"run.wandb.mode: 'offlin' is not valid; choose one of online, offline"):
        TrainConfig.from_dict({"run.wandb.mode": "offlin"})
    with pytest.raises(ValueError, match=r"run.wandb: unknown key\(s\) 'projct' \(did you mean 'project'\?\)"):
        TrainConfig.from_dict({"run.wandb": {"projct": "x"}})
    with pytest.raises(ValueError, match=r"run.wandb"):
        check_spellings([("run", {"wandb": {"project": "a"}}, None), ("run.wandb.project", "b", None)])


def test_a_missing_wandb_package_is_refused_before_the_run_with_the_pip_line(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    message = r"run.wandb: the wandb package is not installed; pip install 'ptgpo\[wandb\]'"
    with pytest.raises(ValueError, match=message):
        check_machine(_config(tmp_path / "run", **{"run.wandb": {}}))


class _FakeRun:
    def __init__(self, calls, run_id):
        self.calls, self.id = calls, run_id

    def log(self, numbers, step):
        self.calls.append(("log", step, numbers))

    def finish(self):
        self.calls.append(("finish",))

    def log_artifact(self, artifact):
        self.calls.append(("artifact", artifact))


class _FakeArtifact:
    def __init__(self, name, type, description=""):
        self.name, self.type, self.description, self.folders = name, type, description, []

    def add_dir(self, path):
        self.folders.append(path)


def _fake_wandb(monkeypatch, calls):
    """A stand-in ``wandb`` module that records what the logger asks of it."""
    def init(**kwargs):
        calls.append(("init", kwargs))
        return _FakeRun(calls, kwargs["id"] or "run-1")

    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.init = init
    module.Artifact = _FakeArtifact
    monkeypatch.setitem(sys.modules, "wandb", module)


def test_the_logger_sends_the_config_every_metrics_row_and_the_curve(monkeypatch, tmp_path):
    calls = []
    _fake_wandb(monkeypatch, calls)
    out = tmp_path / "run"
    run_training(_config(out, **{"run.wandb": {"project": "lake", "mode": "offline"}}), progress=False)
    init = calls[0][1]
    assert (init["project"], init["name"], init["mode"], init["dir"], init["id"]) == ("lake", "run", "offline",
                                                                                       str(out), None)
    saved = json.loads((out / "config.json").read_text())
    assert json.loads(json.dumps(init["config"])) == {k: v for k, v in saved.items() if k != "machine"}
    assert init["config"]["run"]["wandb"] == {"project": "lake", "name": None, "mode": "offline"}
    logged = [call for call in calls if call[0] == "log"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    curve = [json.loads(line) for line in (out / "curve.jsonl").open()]
    trained = [(step, numbers["rollout/success"]) for _, step, numbers in logged if "rollout/success" in numbers]
    evaluated = [(step, numbers["eval/success"]) for _, step, numbers in logged if "eval/success" in numbers]
    assert trained == [(row["iteration"], row["rollout/success"]) for row in metrics]
    assert evaluated == [(row["iteration"], row["success"]) for row in curve]
    assert all("iteration" not in numbers for _, _, numbers in logged)
    assert calls[-1] == ("finish",)


def test_a_resumed_run_logs_on_to_the_same_wandb_run(monkeypatch, tmp_path):
    calls = []
    _fake_wandb(monkeypatch, calls)
    out = tmp_path / "run"
    run_training(_config(out, iterations=2, checkpoint_every=1, **{"run.wandb": {}}), progress=False)
    run_training(_config(out, iterations=3, checkpoint_every=1, resume=True, **{"run.wandb": {}}), progress=False)
    inits = [call[1] for call in calls if call[0] == "init"]
    assert [(i["id"], i["resume"]) for i in inits] == [(None, None), ("run-1", "allow")]


def test_an_offline_wandb_run_is_written_in_the_run_folder(offline, monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    # Offline sends nothing; an address nothing listens on makes sure of it.
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    out = tmp_path / "run"
    run_training(_config(out, **{"run.wandb": {"project": "ptgpo-test"}, "run.record_rollouts": 2}), progress=False)
    (log,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    data = log.read_bytes()
    for key in (b"rollout/success", b"eval/success", b"ptgpo/FrozenLake-v0", b"ptgpo-test", b"rollout-viewer"):
        assert key in data


def test_a_run_that_records_rollouts_logs_the_viewer_s_pages_as_an_artifact(monkeypatch, tmp_path):
    calls = []
    _fake_wandb(monkeypatch, calls)
    out = tmp_path / "run"
    run_training(_config(out, algo="ptgpo", rollout="tree", **{"run.wandb": {}, "run.record_rollouts": 1}),
                 progress=False)
    [(_, artifact)] = [call for call in calls if call[0] == "artifact"]
    assert (artifact.name, artifact.type, artifact.folders) == ("rollouts-run-1", "rollout-viewer", [str(out / "show")])
    assert sorted(p.name for p in (out / "show").iterdir()) == ["index.html", "iteration-000001.html",
                                                               "iteration-000002.html"]
    assert calls[-1] == ("finish",)
    # Without recordings there is nothing to draw, and no artifact.
    calls.clear()
    run_training(_config(tmp_path / "plain", **{"run.wandb": {}}), progress=False)
    assert not [call for call in calls if call[0] == "artifact"] and not (tmp_path / "plain" / "show").exists()
