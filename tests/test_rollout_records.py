"""Recorded rollouts (``run.record_rollouts``) and ``ptgpo export``: what the trainer held, read back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ptgpo_algos.training.callbacks import Callback, RolloutRecorder, RunView
from ptgpo_harness.cli import main
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Context, Step, Trajectory
from ptgpo_algos.export import export_run
from ptgpo_algos.rollouts.recordings import (
    group_rows,
    groups_from_rows,
    read_recordings,
    recording_paths,
    write_iteration,
)
from ptgpo_algos.training.trainer import run_training

LAKE = {"desc": ["SFF", "FHF", "FFG"]}


def _config(out_dir, record=None, **change):
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=6, algo="ptgpo", group_size=4,
                tasks_per_iteration=2, iterations=3, eval_every=3, eval_seeds=2, checkpoint_every=3,
                ppo_epochs=1, minibatch_size=16, out_dir=str(out_dir), tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return TrainConfig.from_dict({**data, "run.record_rollouts": record})


class _Keep(Callback):
    """Keeps the groups and advantages the trainer hands the callbacks."""

    def __init__(self):
        self.seen = {}

    def on_rollouts(self, run, iteration, batch, advantages):
        self.seen[iteration] = (batch, advantages)


def _shape(batch, advantages):
    """A batch as plain data: every step's fields, and which trajectories share each step object."""
    out = []
    for group, group_adv in zip(batch, advantages):
        ids = {}
        out.append([
            (trajectory.meta, [(ids.setdefault(id(step), len(ids)), step.sent, step.reward, step.valid, step.state_key,
                                step.context.task, step.context.observation, list(step.context.admissible_actions),
                                [tuple(pair) for pair in step.context.history], advantage)
                               for step, advantage in zip(trajectory.steps, trajectory_adv)])
            for trajectory, trajectory_adv in zip(group, group_adv)])
    return out


def test_recorded_groups_read_back_as_the_trainer_held_them(tmp_path):
    from ptgpo_algos.training.trainer import Trainer

    keep = _Keep()
    Trainer(_config(tmp_path / "run", record=2), progress=False, callbacks=[keep]).train()
    paths = recording_paths(tmp_path / "run" / "rollouts")
    assert [p.name for p in paths] == ["iteration-000002.jsonl"]
    rows = read_recordings(tmp_path / "run" / "rollouts")
    batch, advantages = groups_from_rows(rows)
    held_batch, held_advantages = keep.seen[2]
    assert _shape(batch, advantages) == _shape(held_batch, held_advantages.nested())
    # a prefix tree: some decision is shared by several trajectories, and is one row
    assert any(len(row["trajectories"]) > 1 for row in rows)
    assert len(rows) == len({(r["group"], r["node"]) for r in rows})


def test_export_writes_the_rows_as_jsonl_and_a_datasets_folder(tmp_path):
    run_training(_config(tmp_path / "run", record=1, iterations=2, eval_every=2, checkpoint_every=2),
                 progress=False)
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    exported = [json.loads(line) for line in open(tmp_path / "out" / "rollouts.jsonl")]
    assert exported == read_recordings(tmp_path / "run" / "rollouts")
    assert {row["iteration"] for row in exported} == {1, 2}
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_from_disk(str(tmp_path / "out" / "dataset"))
    assert len(loaded) == len(exported)
    assert json.loads(loaded[0]["outcomes"]) == exported[0]["outcomes"]
    assert loaded[0]["advantage"] == pytest.approx(exported[0]["advantage"])


def test_a_run_without_recordings_is_refused_by_export(tmp_path, capsys):
    run_training(_config(tmp_path / "run", iterations=1, eval_every=1, checkpoint_every=1), progress=False)
    assert not (tmp_path / "run" / "rollouts").exists()
    assert main(["export", str(tmp_path / "run")]) == 2
    assert "run.record_rollouts" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--record-rollouts"):
        export_run(tmp_path / "run", tmp_path / "out")


def test_a_resumed_run_drops_the_recordings_it_will_play_again(tmp_path):
    folder = tmp_path / "run" / "rollouts"
    for iteration in range(1, 5):
        write_iteration(folder, iteration, "ptgpo/FrozenLake-v0", [], [])
    config = _config(tmp_path / "run", record=1)
    RolloutRecorder(tmp_path / "run", 1).on_train_start(RunView(config, SimpleNamespace(iteration=2)))
    assert [p.name for p in recording_paths(folder)] == ["iteration-000001.jsonl", "iteration-000002.jsonl"]


def test_shared_steps_are_one_row_with_their_parent_and_trajectories():
    context = Context("reach the goal", "start", ["left", "right"])
    root = Step("s0", "left", 0.0, context=context)
    a = Step("s1", "left", 1.0, context=Context("reach the goal", "a", ["left"], [("start", "left")]))
    b = Step("s1", "right", 0.0, valid=False, context=Context("reach the goal", "b", ["left"], [("start", "left")]))
    group = [Trajectory([root, a], {"leaf": 0, "won": True}), Trajectory([root, b], {"leaf": 1, "won": False})]
    rows = group_rows(5, 0, "ptgpo/FrozenLake-v0", group, [[0.5, 1.0], [-0.5, -1.0]])
    assert [(r["node"], r["parent"], r["step"], r["trajectories"], r["ends"]) for r in rows] == [
        (0, None, 0, [0, 1], []), (1, 0, 1, [0], [0]), (2, 0, 1, [1], [1])]
    assert rows[0]["advantages"] == [0.5, -0.5] and rows[0]["advantage"] == 0.0
    assert rows[2]["outcomes"] == [{"leaf": 1, "won": False}] and rows[2]["valid"] is False
    assert rows[1]["history"] == [["start", "left"]]
    (back,), _ = groups_from_rows(json.loads(json.dumps(rows)))
    assert back[0].steps[0] is back[1].steps[0]
    assert back[1].steps[1].context.history == [("start", "left")]


def test_record_rollouts_is_a_positive_count():
    with pytest.raises(ValueError, match=r"run.record_rollouts: expected an integer >= 1"):
        TrainConfig.from_dict({"run": {"record_rollouts": 0}})


def test_a_sharded_run_refuses_to_record_a_part_of_its_groups():
    from ptgpo_algos.distributed.placement import check_sharded_config

    with pytest.raises(ValueError, match=r"run.record_rollouts: each rank holds only its own groups"):
        check_sharded_config(_config("unused", record=1))
