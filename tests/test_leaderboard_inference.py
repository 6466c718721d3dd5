"""leaderboard.inference: the t distribution against tables, Welch and Holm on hand-computed numbers,
and, by simulation, the coverage of the intervals and the family-wise error of the corrected tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leaderboard.inference import (
    holm,
    mean_of_means_interval,
    separated_best,
    t_quantile,
    t_two_sided_p,
    ranks_from_tests,
    welch,
)


@pytest.mark.parametrize(
    "df, quantile", [(1, 12.706205), (2, 4.302653), (4, 2.776445), (9, 2.262157), (30, 2.042272)]
)
def test_t_quantiles_equal_the_tables(df, quantile):
    assert t_quantile(0.975, df) == pytest.approx(quantile, rel=1e-6)
    assert t_two_sided_p(quantile, df) == pytest.approx(0.05, rel=1e-5)


def test_t_p_values_equal_the_tables():
    assert t_two_sided_p(2.0, 5) == pytest.approx(0.1019395, rel=1e-6)
    assert t_two_sided_p(0.0, 3) == pytest.approx(1.0)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| > 1) = 1/2
    assert t_two_sided_p(-2.0, 5) == t_two_sided_p(2.0, 5)


def test_welch_on_hand_computed_numbers():
    test = welch([[1.0, 2.0, 3.0]], [[4.0, 5.0, 7.0]])
    # s_x^2 = 1, s_y^2 = 7/3; squared SEs 1/3 and 7/9; df = (10/9)^2 / ((1/3)^2/2 + (7/9)^2/2) = 100/29.
    assert test.difference == pytest.approx(-10 / 3)
    assert test.df == pytest.approx(100 / 29)
    se = math.sqrt(10 / 9)
    assert test.p == pytest.approx(t_two_sided_p((10 / 3) / se, 100 / 29))
    half = t_quantile(0.975, 100 / 29) * se
    assert (test.low, test.high) == pytest.approx((-10 / 3 - half, -10 / 3 + half))


def test_welch_over_strata_pools_the_variances_of_every_stratum():
    x, y = [[60.0, 70.0, 80.0], [10.0, 30.0]], [[50.0, 55.0, 60.0], [0.0, 10.0]]
    test = welch(x, y)
    # Mean of means (70 + 20) / 2 - (55 + 5) / 2 = 15; squared SE (100/3 + 200/2 + 25/3 + 50/2) / 2^2.
    assert test.difference == pytest.approx(15.0)
    components = np.array([100 / 3, 200 / 2, 25 / 3, 50 / 2])
    sizes = np.array([3, 2, 3, 2])
    assert test.df == pytest.approx(components.sum() ** 2 / np.sum(components**2 / (sizes - 1)))
    assert test.p == pytest.approx(t_two_sided_p(15.0 / (math.sqrt(components.sum()) / 2), test.df))
    with pytest.raises(ValueError, match="same strata"):
        welch(x, y[:1])


def test_degenerate_data_gives_exact_answers_or_none():
    assert welch([[0.0, 0.0, 0.0]], [[0.0, 0.0]]).p == 1.0
    assert welch([[19.0, 19.0, 19.0]], [[0.0, 0.0, 0.0]]).p == 0.0
    one_seed = welch([[50.0]], [[10.0, 20.0]])
    assert one_seed.p is None and one_seed.low is None and one_seed.difference == pytest.approx(35.0)
    assert mean_of_means_interval([[42.0]]).low is None
    assert mean_of_means_interval([[10.0, 20.0], [90.0]]).low is None
    flat = mean_of_means_interval([[7.0, 7.0]])
    assert (flat.point, flat.low, flat.high, flat.over) == (7.0, 7.0, 7.0, "t")
    clipped = mean_of_means_interval([[99.0, 100.0, 100.0]], limits=(0.0, 100.0))
    assert clipped.high == 100.0 and clipped.low < 99.0


def test_holm_on_a_hand_computed_family():
    # Sorted 0.01, 0.03, 0.04 (m = 3): 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04).
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    assert holm([]) == []


def _success_rates(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Seeds' success in % on 300 episodes, each seed's true rate drawn from Beta(3, 2): skewed,
    bounded, lumpy like the benchmark's cells. The mean is 60."""
    return 100.0 * rng.binomial(300, rng.beta(3.0, 2.0, shape)) / 300.0


@pytest.mark.parametrize("n", [3, 5, 10])
def test_a_nominal_95_percent_interval_covers_at_least_93_percent(n):
    rng = np.random.default_rng(n)
    reps = 4000
    for draws, truth in ((rng.normal(50.0, 20.0, (reps, n)), 50.0), (_success_rates(rng, (reps, n)), 60.0)):
        covered = [
            estimate.low <= truth <= estimate.high
            for estimate in (mean_of_means_interval([row], limits=(0.0, 100.0)) for row in draws)
        ]
        assert np.mean(covered) >= 0.93
    # Two environments of unequal spread: the Welch-Satterthwaite interval of the mean over them.
    a, b = rng.normal(80.0, 15.0, (reps, n)), _success_rates(rng, (reps, n))
    covered = [
        estimate.low <= 70.0 <= estimate.high
        for estimate in (mean_of_means_interval([x, y], limits=(0.0, 100.0)) for x, y in zip(a, b, strict=True))
    ]
    assert np.mean(covered) >= 0.93


def test_the_percentile_bootstrap_the_t_interval_replaces_covers_far_less_at_three_seeds():
    rng = np.random.default_rng(0)
    draws = rng.normal(50.0, 20.0, (4000, 3))
    resampled = draws[:, rng.integers(0, 3, (500, 3))].mean(axis=2)  # (runs, resamples)
    low, high = np.percentile(resampled, [2.5, 97.5], axis=1)
    assert np.mean((low <= 50.0) & (50.0 <= high)) < 0.85


@pytest.mark.parametrize("n", [3, 5])
def test_holm_corrected_welch_tests_keep_the_family_wise_error_of_identical_methods(n):
    rng = np.random.default_rng(100 + n)
    runs, methods = 1000, 5
    false_separations = 0
    for _ in range(runs):
        scores = _success_rates(rng, (methods, n))
        p = [welch([scores[i]], [scores[j]]).p for i in range(methods) for j in range(i + 1, methods)]
        false_separations += min(holm(p)) < 0.05
    assert false_separations / runs <= 0.06


def test_ranks_follow_the_corrected_tests_and_never_invert_the_means():
    means = [90.0, 85.0, 60.0, 50.0, 10.0]
    # 0 and 1 are above 3 and 4; 2 above 4 only; 3 above 4.
    separated = {(0, 3), (0, 4), (1, 3), (1, 4), (2, 4), (3, 4)}
    assert ranks_from_tests(means, separated) == [1, 1, 1, 3, 5]
    # A wide interval does not earn a better rank: 2 is separated from nothing above it, yet ranks
    # no better than 1, which has the higher mean and is separated from by 0.
    assert ranks_from_tests([90.0, 70.0, 60.0], {(0, 1)}) == [1, 2, 2]
    # Tiers first: the higher tier ranks first whatever the means.
    assert ranks_from_tests([10.0, 90.0, 50.0], set(), tiers=[2, 1, 1]) == [1, 2, 2]
    assert ranks_from_tests([None, 5.0], set()) == [1, 1]


def test_only_a_separated_best_is_marked():
    assert separated_best([80.0, 60.0, 40.0], {(0, 1), (0, 2)}) == 0
    assert separated_best([80.0, 60.0, 40.0], {(0, 2)}) is None
    assert separated_best([80.0], set()) is None
    assert separated_best([50.0, 50.0], set()) is None
