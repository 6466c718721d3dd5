"""leaderboard.stats against direct NumPy computations and against rliable itself (the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from leaderboard.stats import (
    generator,
    improvement_probability,
    iqm,
    iqm_estimate,
    performance_profile,
    resampling_weights,
    weighted_iqm,
)

rliable_metrics = pytest.importorskip("rliable.metrics")


def columns(matrix: np.ndarray) -> list[np.ndarray]:
    """rliable's (runs x tasks) matrix as our strata, one per task."""
    return [matrix[:, t] for t in range(matrix.shape[1])]


def numpy_iqm(values) -> float:
    """The 25 % trimmed mean written out: sort, cut floor(n/4) from each end, average."""
    values = np.sort(np.ravel(values))
    cut = len(values) // 4
    return values[cut : len(values) - cut].mean()


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (2, 1), (3, 4), (5, 10), (7, 3)])
def test_iqm_equals_numpy_and_rliable(shape):
    scores = np.random.default_rng(sum(shape)).integers(0, 101, shape).astype(float)
    assert iqm(scores) == pytest.approx(numpy_iqm(scores))
    assert iqm(scores) == pytest.approx(rliable_metrics.aggregate_iqm(scores))


def test_weighted_formulas_equal_the_expanded_resample():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 101, 12).astype(float)
    weights = rng.integers(0, 4, (50, 12)).astype(float)
    weights[:, 0] += 1  # something drawn
    for w, iqm_value in zip(weights, weighted_iqm(values, weights), strict=True):
        assert iqm_value == pytest.approx(numpy_iqm(np.repeat(values, w.astype(int))))


def test_stratified_intervals_match_rliable():
    library = pytest.importorskip("rliable.library")
    scores = np.random.default_rng(7).uniform(0, 100, (5, 6))
    np.random.seed(0)  # rliable draws from NumPy's global generator, whatever random_state says
    # rliable loops in Python over its resamples: 2,000 keep this test to seconds.
    points, intervals = library.get_interval_estimates(
        {"m": scores},
        lambda x: np.array([rliable_metrics.aggregate_iqm(x)]),
        reps=2_000,
    )
    ours = iqm_estimate(columns(scores), key=("iqm",), reps=20_000)
    assert ours.over == "seeds" and ours.point == pytest.approx(points["m"][0])
    # Monte-Carlo error of rliable's 2.5 % / 97.5 % percentiles at 2,000 resamples: ~0.25 point.
    assert ours.low == pytest.approx(intervals["m"][0, 0], abs=1.0)
    assert ours.high == pytest.approx(intervals["m"][1, 0], abs=1.0)


def test_probability_of_improvement_matches_rliable_and_a_dominating_method_is_one():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 5, (4, 6)).astype(float), rng.integers(0, 5, (4, 6)).astype(float)
    forward = improvement_probability(columns(x), columns(y), key=("p",))
    assert forward.point == pytest.approx(rliable_metrics.probability_of_improvement(x, y))
    backward = improvement_probability(columns(y), columns(x), key=("p",))
    assert forward.point + backward.point == pytest.approx(1.0)

    dominating = improvement_probability(columns(x + 10), columns(x), key=("d",))
    assert (dominating.point, dominating.low, dominating.high, dominating.over) == (1.0, 1.0, 1.0, "seeds")
    tied = improvement_probability(columns(x), columns(x), key=("t",))
    assert tied.point == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same tasks"):
        improvement_probability(columns(x), columns(y)[:2], key=("bad",))


def test_probability_of_improvement_interval_matches_rliable():
    library = pytest.importorskip("rliable.library")
    rng = np.random.default_rng(11)
    x, y = rng.uniform(20, 80, (5, 3)), rng.uniform(10, 70, (4, 3))
    np.random.seed(1)
    # One SciPy Mann-Whitney test per task and resample: 1,000 resamples take seconds already.
    _, intervals = library.get_interval_estimates(
        {"xy": [x, y]}, lambda a, b: np.array([rliable_metrics.probability_of_improvement(a, b)]), reps=1_000
    )
    ours = improvement_probability(columns(x), columns(y), key=("xy",), reps=20_000)
    # rliable's Monte-Carlo error here is ~0.01, and P moves in steps of 1 / (5 * 4 * 3).
    assert ours.low == pytest.approx(intervals["xy"][0, 0], abs=0.035)
    assert ours.high == pytest.approx(intervals["xy"][1, 0], abs=0.035)


def test_a_single_seed_resamples_tasks_where_there_are_tasks_and_otherwise_has_no_interval():
    tasks = [[10.0], [40.0], [50.0], [90.0]]
    estimate = iqm_estimate(tasks, key=("one-seed",), reps=20_000)
    assert estimate.over == "tasks"
    rng = np.random.default_rng(5)
    values = np.array([10.0, 40.0, 50.0, 90.0])
    resampled = np.sort(values[rng.integers(0, 4, (20_000, 4))], axis=1)
    direct = np.percentile(resampled[:, 1:3].mean(axis=1), [2.5, 97.5])  # 4 values: cut one each end
    assert (estimate.low, estimate.high) == pytest.approx(tuple(direct), abs=1.0)

    assert not iqm_estimate([[42.0]], key=("x",)).has_interval
    # One task with a single seed among tasks with more: the tasks are resampled.
    assert iqm_estimate([[10.0, 20.0], [30.0]], key=("x",)).over == "tasks"
    improvement = improvement_probability([[1.0], [5.0]], [[2.0], [2.0]], key=("x",))
    assert improvement.point == 0.5 and improvement.over == "tasks"
    assert not improvement_probability([[1.0]], [[2.0]], key=("x",)).has_interval


def test_bootstraps_are_reproducible_and_independent_of_other_estimates():
    strata = [[10.0, 50.0, 70.0], [20.0, 25.0, 90.0]]
    first = iqm_estimate(strata, key=("method", "a"))
    iqm_estimate([[1.0, 2.0, 3.0]], key=("method", "b"))  # another estimate in between
    assert iqm_estimate(strata, key=("method", "a")) == first
    assert generator("a", 1).integers(0, 2**62) != generator("a", 2).integers(0, 2**62)
    weights, over = resampling_weights([3, 2], 1000, generator("w"))
    assert over == "seeds" and weights.shape == (1000, 5)
    assert (weights[:, :3].sum(axis=1) == 3).all() and (weights[:, 3:].sum(axis=1) == 2).all()


def test_performance_profile_is_the_fraction_of_scores_above_each_level():
    scores = np.random.default_rng(9).uniform(0, 100, (5, 4))
    thresholds = np.array([0.0, 25.0, 50.0, 75.0, 100.0])
    point, low, high = performance_profile(columns(scores), thresholds, key=("profile",))
    assert point == pytest.approx([(scores > t).mean() for t in thresholds])
    library = pytest.importorskip("rliable.library")
    assert point == pytest.approx(library.score_distributions(scores, thresholds))
    assert (low <= point + 1e-12).all() and (point <= high + 1e-12).all()
    assert performance_profile([[50.0]], thresholds, key=("one",))[1] is None
