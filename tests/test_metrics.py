"""The metrics row (:mod:`ptgpo_algos.metrics`): sections, the refusal of a name given twice, and the
reading of rows written before the sections under today's names; and the advantages array
(:class:`~ptgpo_algos.advantages.StepAdvantages`) that carries the estimator's values to the samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ptgpo_algos.advantages import StepAdvantages, compute_advantages, estimate_batch
from ptgpo_algos.records import Step, Trajectory
from ptgpo_algos.metrics import (LEGACY_NAMES, SECTIONS, DuplicateMetricError, MetricsRow, current_name, current_row,
                                 read_metrics)
from ptgpo_algos.updates.samples import flatten_batch

ROOT = Path(__file__).resolve().parents[1]
#: A committed bench cell, run before the metrics rows had sections.
COMMITTED = ROOT / "docs" / "results" / "evidence-cpu"
CELL = "doorkey__ptgpo-nocov__seed6"


# ----------------------------------------------------------------------------------------- the row
def test_a_name_given_twice_is_refused_with_both_sources():
    row = MetricsRow()
    row.add("update", {"loss": 0.5, "kl": 0.1}, "the updater")
    row.add("objective/seed", {"loss": 0.2}, "objective 'seed'")  # its own section: no clash
    with pytest.raises(DuplicateMetricError, match=r"'update/loss' is reported by both the updater and the critic"):
        row.add("update", {"loss": 0.7}, "the critic")
    assert row.as_dict() == {"update/loss": 0.5, "update/kl": 0.1, "objective/seed/loss": 0.2}
    other = MetricsRow()
    other.add("update", {"kl": 0.3}, "a callback")
    with pytest.raises(DuplicateMetricError, match=r"'update/kl' is reported by both the updater and a callback"):
        row.merge(other)


def test_only_the_index_goes_without_a_section():
    row = MetricsRow()
    row.add("", {"iteration": 3}, "the trainer")
    with pytest.raises(ValueError, match="'loss' from a plugin has no section"):
        row.add("", {"loss": 1.0}, "a plugin")
    row.add_named({"objective/hindsight/loss": 0.25}, "hindsight")
    assert row.section("objective/hindsight") == {"loss": 0.25} and row.as_dict()["iteration"] == 3


def test_a_training_run_refuses_two_sources_of_one_figure(tmp_path, monkeypatch):
    # The updater's scoring pass reporting an "updates" beside the update's own count: merged into one
    # dict, one of the two figures was silently lost.
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.training.trainer import run_training
    from ptgpo_algos.updates.updater import Updater

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    real = Updater.prepare
    monkeypatch.setattr(Updater, "prepare", lambda self, samples: {**real(self, samples), "updates": -1})
    config = TrainConfig.from_dict(dict(
        env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=6, algo="grpo",
        group_size=4, tasks_per_iteration=2, iterations=1, eval_every=1, eval_seeds=2, ppo_epochs=1,
        out_dir=str(tmp_path / "run"), tiny={"hidden_size": 32, "pretrain_steps": 0}, seed=3))
    with pytest.raises(DuplicateMetricError,
                       match=r"'update/updates' is reported by both the updater's scoring and the updater"):
        run_training(config, progress=False)


# ----------------------------------------------------------------------------------------- old names
def test_the_committed_rows_read_under_today_s_names():
    path = COMMITTED / "runs" / CELL / "metrics.jsonl"
    old = [json.loads(line) for line in open(path)]
    rows = read_metrics(path)
    assert len(rows) == len(old) == 16
    assert all(name == "iteration" or name.split("/")[0] in SECTIONS for row in rows for name in row)
    first = rows[0]
    assert (first["rollout/decisions"], first["run/total_decisions"], first["update/trained_steps"]) == (896, 896, 896)
    assert (first["advantages/branching_nodes"], first["advantages/backoff_steps"]) == (28, 1170)
    assert (first["rollout/reset_episodes"], first["rollout/success"], first["rollout/wait_s"]) == (
        16, 0.0, old[0]["rollout_wait_s"])
    assert (first["update/train_tokens"], first["update/distinct_prompts"]) == (0, 163)
    assert [row["iteration"] for row in rows] == list(range(1, 17))


def test_the_bench_counts_a_committed_run_as_its_record_says():
    from ptgpo_harness.bench.records import _training_counts

    record = json.loads((COMMITTED / f"{CELL}.json").read_text())
    counts = _training_counts(COMMITTED / "runs" / CELL / "metrics.jsonl")
    assert counts == {"episodes": record["episodes"], "trained_tokens": record["trained_tokens"]} == {
        "episodes": 480, "trained_tokens": 1448746}


def test_old_and_new_names_map_one_to_one():
    assert len(set(LEGACY_NAMES.values())) == len(LEGACY_NAMES)
    assert current_name("rollout_success") == "rollout/success" and current_name("rollout/success") == "rollout/success"
    assert current_name("adv_nonzero_fraction") == "advantages/nonzero_fraction"
    assert current_name("hindsight_loss") == "objective/hindsight/loss"
    assert current_name("sync_mean_logprob_diff") == "sync/mean_logprob_diff"
    assert current_name("value_explained_var_high") == "critic/value_explained_var_high"
    assert current_name("value_loss_high") == "update/value_loss_high"
    assert current_name("patr_expansions") == "rollout/patr_expansions"
    assert current_name("pg_loss") == "update/pg_loss" and current_name("iteration") == "iteration"
    with pytest.raises(ValueError, match="'rollout_success' and another name both read as 'rollout/success'"):
        current_row({"rollout/success": 1.0, "rollout_success": 1.0})


# ----------------------------------------------------------------------------------------- advantages
def _trajectory(*actions: str, shared: list[Step] | None = None) -> Trajectory:
    steps = list(shared or []) + [Step(f"s{i}", a, 1.0 if a == "win" else 0.0) for i, a in enumerate(actions)]
    return Trajectory(steps)


def test_the_step_index_of_a_hand_built_batch():
    # Group 0: trajectories of 2, 0 and 3 steps; group 1: one of 1 step.
    nested = [[[0.5, -0.5], [], [1.0, 0.0, -1.0]], [[2.0]]]
    advantages = StepAdvantages.from_nested(nested)
    assert advantages.values.tolist() == [0.5, -0.5, 1.0, 0.0, -1.0, 2.0] and advantages.n_steps == 6
    assert advantages.trajectory_length.tolist() == [2, 0, 3, 1] and advantages.group_size.tolist() == [3, 1]
    assert advantages.trajectory_start.tolist() == [0, 2, 2, 5]
    assert advantages.group_start.tolist() == [0, 3]
    assert advantages.step_group.tolist() == [0, 0, 0, 0, 0, 1]
    assert advantages.nonzero_per_group().tolist() == [4, 1]
    assert advantages.zeroed_groups([True, False]).values.tolist() == [0.0] * 5 + [2.0]
    assert advantages.nested() == nested
    assert StepAdvantages.from_nested([]).n_steps == 0 and StepAdvantages.from_nested([]).nested() == []


def test_an_index_that_does_not_describe_the_values_or_the_batch_is_refused():
    with pytest.raises(ValueError, match="5 values for trajectories of 6 steps"):
        StepAdvantages(np.zeros(5), np.array([2, 4]), np.array([2]))
    batch = [[_trajectory("a", "win"), _trajectory("b")]]
    # Zipped with the batch, a list one value short trained one step less, silently.
    for wrong in ([[[0.5, 0.5], [0.5, 0.5]]], [[[0.5]]]):
        with pytest.raises(ValueError, match=r"the batch has \[2\] / 3 steps"):
            flatten_batch(batch, wrong)
    with pytest.raises(ValueError, match="2 group marks for 1 groups"):
        StepAdvantages.from_nested([[[0.5, 0.5], [0.5]]]).zeroed_groups([True, False])


def test_the_estimate_as_an_array_is_the_nested_estimate_and_trains_the_same_samples():
    # A prefix tree: the first step is one object shared by three trajectories.
    root = Step("start", "right", 0.0)
    batch = [[_trajectory("right", "win", shared=[root]), _trajectory("left", shared=[root]),
              _trajectory("down", "down", shared=[root])],
             [_trajectory("win"), _trajectory("left", "left")]]
    nested = compute_advantages("ptgpo", batch)
    advantages, diagnostics = estimate_batch("ptgpo", batch)
    assert advantages.nested() == nested and len(diagnostics) == 2
    assert advantages.values.tolist() == [a for g in nested for t in g for a in t]
    for loss_agg in ("token-mean", "trajectory-mean"):
        from_array = flatten_batch(batch, advantages, loss_agg)
        from_lists = flatten_batch(batch, nested, loss_agg)
        assert [(s.advantage, s.weight) for s in from_array] == [(s.advantage, s.weight) for s in from_lists]
    shared = flatten_batch(batch, advantages)[0]
    assert shared.weight == 3 and shared.advantage == sum(advantages.values[[0, 3, 5]].tolist()) / 3
