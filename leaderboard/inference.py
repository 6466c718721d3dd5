"""Seed-level inference for the leaderboard: Student-t intervals, Welch tests, Holm's correction, and
the ranks and best marks that follow from the corrected tests.

Why not the bootstrap here. With ``n`` seeds a percentile bootstrap of a mean can only return values
between the smallest and the largest seed: with 3 seeds its nominal 95 % interval is the range of
the seeds, which covers the true mean about 75 % of the time. A t interval widens with few seeds as
it must (:func:`t_interval`; ``tests/test_leaderboard_inference.py`` shows by simulation that a
nominal 95 % interval covers at least 93 % at 3, 5 and 10 seeds).

Means over strata. A method's mean success is the mean over environments (strata) of its per-stratum
means. Its standard error is ``sqrt(sum_e s_e^2 / n_e) / E`` and its degrees of freedom those of
Welch and Satterthwaite, ``(sum_e v_e)^2 / sum_e (v_e^2 / (n_e - 1))`` with ``v_e = s_e^2 / n_e``:
one t interval over unequal, unequally sized strata. A difference of two such means is tested the
same way, the two methods' strata pooled into one sum (Welch's unequal-variance t test; with one
stratum it is the textbook Welch test).

Degenerate data. A stratum with one seed has no variance estimate: no interval, no test. When every
seed of both methods scores the same in every stratum (all 0 %, say) the standard error is 0: the
interval is the point, and a test separates the pair exactly when the means differ.

Multiplicity. :func:`holm` adjusts the p-values of one family (the pairs one table compares) by
Holm's step-down rule, which controls the family-wise error at alpha under any dependence between the
tests. A pair is *separated* when its adjusted p-value is below :data:`ALPHA`.

The t distribution is computed here from the regularised incomplete beta function (a continued
fraction), so the leaderboard does not depend on SciPy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leaderboard.stats import CONFIDENCE, Estimate

__all__ = [
    "ALPHA",
    "Welch",
    "holm",
    "mean_of_means_interval",
    "separated_best",
    "t_quantile",
    "t_two_sided_p",
    "ranks_from_tests",
    "welch",
]

ALPHA = 0.05
# Means computed in different orders differ in the last bits: closer than this is equal.
_TIE = 1e-9


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        for numerator in (even, odd):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast only below the mean of the beta distribution; use the symmetry above.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` (real, > 0) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def _t_density(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=1024)
def t_quantile(probability: float, df: float) -> float:
    """The ``probability`` quantile (in (0.5, 1)) of Student's t with ``df`` degrees of freedom:
    Newton's method on :func:`t_two_sided_p`, kept inside a bisection bracket."""
    if not 0.5 < probability < 1.0:
        raise ValueError(f"probability must be in (0.5, 1), got {probability}")
    target = 2.0 * (1.0 - probability)
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > target:
        low, high = high, 2.0 * high
    t = 0.5 * (low + high)
    for _ in range(100):
        excess = t_two_sided_p(t, df) - target  # decreasing in t
        low, high = (t, high) if excess > 0 else (low, t)
        step = t + excess / (2.0 * _t_density(t, df))
        following = step if low < step < high else 0.5 * (low + high)
        if abs(following - t) <= 1e-12 * max(1.0, t):
            return following
        t = following
    return t


def _moments(strata: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-stratum means, squared standard errors ``s^2 / n`` and seed counts."""
    arrays = [np.asarray(s, dtype=float).ravel() for s in strata]
    if not arrays or min(a.size for a in arrays) == 0:
        raise ValueError("every stratum needs at least one value, and there must be one stratum")
    sizes = np.array([a.size for a in arrays])
    means = np.array([a.mean() for a in arrays])
    variances = np.array([a.var(ddof=1) / a.size if a.size > 1 else np.nan for a in arrays])
    return means, variances, sizes


def _satterthwaite(variances: np.ndarray, sizes: np.ndarray) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of independent squared standard errors."""
    return float(variances.sum() ** 2 / np.sum(variances**2 / (sizes - 1)))


def mean_of_means_interval(
    strata: Sequence[Sequence[float]],
    *,
    confidence: float = CONFIDENCE,
    limits: tuple[float, float] | None = None,
) -> Estimate:
    """The mean over strata of the per-stratum means with its t interval (see the module docstring);
    one stratum: the t interval of one mean. ``limits`` clips the interval to the values the mean can
    take (success in % lies in [0, 100]), which only raises its coverage. No interval when a stratum
    has a single value."""
    means, variances, sizes = _moments(strata)
    point = float(means.mean())
    if sizes.min() < 2:
        return Estimate(point)
    total = float(variances.sum())
    if total <= 0.0:
        return Estimate(point, point, point, "t")
    half = t_quantile(0.5 + confidence / 2.0, _satterthwaite(variances, sizes)) * math.sqrt(total) / means.size
    low, high = point - half, point + half
    if limits is not None:
        low, high = max(low, limits[0]), min(high, limits[1])
    return Estimate(point, low, high, "t")


@dataclass(frozen=True)
class Welch:
    """Welch's test of ``x - y`` over shared strata: the difference of the means of means, its t
    interval, the degrees of freedom and the two-sided p-value (None, with the interval and ``df``,
    when a stratum has a single seed: nothing to test with)."""

    difference: float
    low: float | None
    high: float | None
    df: float | None
    p: float | None


def welch(
    x: Sequence[Sequence[float]], y: Sequence[Sequence[float]], *, confidence: float = CONFIDENCE
) -> Welch:
    """Welch's unequal-variance t test of mean-of-means ``x`` against ``y``, stratum ``e`` of ``x``
    paired with stratum ``e`` of ``y`` (see the module docstring)."""
    if len(x) != len(y) or not x:
        raise ValueError(f"need the same strata, at least one, for both methods (got {len(x)} and {len(y)})")
    x_means, x_variances, x_sizes = _moments(x)
    y_means, y_variances, y_sizes = _moments(y)
    difference = float(x_means.mean() - y_means.mean())
    sizes = np.concatenate([x_sizes, y_sizes])
    if sizes.min() < 2:
        return Welch(difference, None, None, None, None)
    variances = np.concatenate([x_variances, y_variances])
    total = float(variances.sum())
    if total <= 0.0:
        return Welch(difference, difference, difference, math.inf, 1.0 if abs(difference) <= _TIE else 0.0)
    df = _satterthwaite(variances[variances > 0], sizes[variances > 0])
    se = math.sqrt(total) / x_means.size
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return Welch(difference, difference - half, difference + half, df, t_two_sided_p(difference / se, df))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values of one family (None stays None and does not count as a
    test): the ``k``-th smallest of ``m`` is multiplied by ``m - k + 1``, made non-decreasing in that
    order and capped at 1."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(tested)
    for k, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - k) * p))
        adjusted[i] = running
    return adjusted


def ranks_from_tests(
    means: Sequence[float | None],
    separated: set[tuple[int, int]],
    tiers: Sequence[int] | None = None,
) -> list[int]:
    """Ranks from corrected tests. ``separated`` holds ``(i, j)`` when ``i`` is separated above ``j``.

    Order the entries by tier (higher first), then mean (None last); an entry's rank is 1 + the number
    of entries of a higher tier, plus those of its tier separated above it, raised where needed so that
    ranks never decrease down that order (a method never outranks one of its tier with a higher mean).
    Entries that no test separates share a rank.
    """
    tiers = [0] * len(means) if tiers is None else list(tiers)

    def order_key(i: int) -> tuple[int, float]:
        return -tiers[i], -(means[i] if means[i] is not None else -math.inf)

    order = sorted(range(len(means)), key=order_key)
    ranks = [0] * len(means)
    previous: tuple[int, int] | None = None  # the tier and rank of the entry before in the order
    for i in order:
        higher_tier = sum(1 for tier in tiers if tier > tiers[i])
        above = sum(1 for j in range(len(means)) if tiers[j] == tiers[i] and (j, i) in separated)
        rank = 1 + higher_tier + above
        if previous is not None and previous[0] == tiers[i]:
            rank = max(rank, previous[1])
        ranks[i], previous = rank, (tiers[i], rank)
    return ranks


def separated_best(means: Sequence[float], separated: set[tuple[int, int]]) -> int | None:
    """The index of the highest mean when it is separated above every other entry, else None: never a
    tie, never one alone."""
    if len(means) < 2:
        return None
    top = max(range(len(means)), key=lambda i: means[i])
    return top if all((top, j) in separated for j in range(len(means)) if j != top) else None
