"""Statistics for comparing methods over few seeds, after Agarwal et al. (2021), "Deep reinforcement
learning at the edge of the statistical precipice" (the ``rliable`` library): the interquartile mean,
stratified bootstrap percentile intervals, the probability of improvement and performance profiles.
Means, their intervals, the tests between methods and the ranks are :mod:`leaderboard.inference`'s: a
percentile bootstrap of a mean over 3 seeds covers far less than it says.

Data. A method's scores come as *strata*: one 1-D array of per-seed values per task. Strata may hold different numbers of seeds (a failed seed, a task type
absent from one evaluation).

Resamples as weights. A bootstrap resample is described by how often it draws each original value, so
every statistic below is a weighted formula evaluated on a ``(reps, N)`` matrix of draw counts at once,
with no Python loop over resamples. Point estimates are the same formulas with every weight 1.

Which bootstrap (:func:`resampling_weights`):

* ``"seeds"`` when every stratum has at least two seeds: each stratum draws as many of its own seeds,
  with replacement, as it has (rliable's ``StratifiedBootstrap`` with ``task_bootstrap=False``);
* ``"tasks"`` when some stratum has a single seed, the strata are tasks and there are at least two:
  the tasks are drawn with replacement, each keeping its seeds;
* no interval otherwise (one seed of one task): nothing measured
  says how far the value could move, and a made-up interval would be worse than none.

Intervals are percentile intervals (95 % by default). Each estimate draws from its own generator,
seeded from :data:`BOOTSTRAP_SEED` and a key naming what it estimates, so a table is reproducible and
adding a method leaves the other methods' intervals as they were.

rliable is the reference the tests compare these functions with, not a run-time dependency: its
bootstrap draws from NumPy's global generator whatever ``random_state`` says, loops in Python over
its resamples (50,000 per method by default), and its import pulls in ``arch``, ``statsmodels``,
``pandas`` and ``seaborn``, seconds of start-up for a table rebuilt after every benchmark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOOTSTRAP_SEED",
    "CONFIDENCE",
    "REPS",
    "Estimate",
    "generator",
    "improvement_probabilities",
    "improvement_probability",
    "iqm",
    "iqm_estimate",
    "performance_profile",
    "resampling_weights",
    "weighted_fraction_above",
    "weighted_iqm",
]

BOOTSTRAP_SEED = 20211
REPS = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval; ``over`` says how it was made: ``"seeds"`` or ``"tasks"``
    (what a bootstrap resampled) or ``"t"`` (a Student-t interval over seeds,
    :mod:`leaderboard.inference`), and is None with ``low``/``high`` when there is no interval."""

    point: float
    low: float | None = None
    high: float | None = None
    over: str | None = None

    @property
    def has_interval(self) -> bool:
        """Whether the estimate has an interval."""
        return self.low is not None

    def bounds(self) -> tuple[float, float]:
        """The interval, or the point twice when there is none."""
        if self.low is None or self.high is None:
            return self.point, self.point
        return self.low, self.high


def generator(*key: object) -> np.random.Generator:
    """A generator seeded from :data:`BOOTSTRAP_SEED` and ``key`` (stable across runs and platforms,
    unlike ``hash``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, key)).encode("utf-8"), digest_size=8).digest()
    return np.random.default_rng([BOOTSTRAP_SEED, int.from_bytes(digest, "little")])


def _flatten(strata: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All values in one array, the stratum of each value, and the size of each stratum."""
    arrays = [np.asarray(s, dtype=float).ravel() for s in strata]
    sizes = np.array([a.size for a in arrays], dtype=int)
    if sizes.size == 0 or sizes.min() == 0:
        raise ValueError("every stratum needs at least one value, and there must be one stratum")
    return np.concatenate(arrays), np.repeat(np.arange(sizes.size), sizes), sizes


def _stratified_counts(rng: np.random.Generator, sizes: Sequence[int], reps: int) -> np.ndarray:
    """``(reps, sum(sizes))``: for strata laid end to end, how often each value is drawn when each
    stratum draws as many of its own values as it has, with replacement."""
    sizes = np.asarray(sizes, dtype=int)
    total = int(sizes.sum())
    stratum = np.repeat(np.arange(sizes.size), sizes)
    start = (np.cumsum(sizes) - sizes)[stratum]
    draws = start + (rng.random((reps, total)) * sizes[stratum]).astype(int)
    # One bincount over row-offset draws for every stratum and resample at once: a multinomial per
    # stratum costs a millisecond a call, seconds over the strata and pairs of a large table.
    draws += total * np.arange(reps)[:, None]
    return np.bincount(draws.ravel(), minlength=reps * total).reshape(reps, total).astype(float)


def _uniform_counts(rng: np.random.Generator, n: int, reps: int) -> np.ndarray:
    """``reps`` rows of how often each of ``n`` items is drawn in ``n`` draws with replacement."""
    return _stratified_counts(rng, [n], reps)


def resampling_weights(
    sizes: Sequence[int], reps: int, rng: np.random.Generator
) -> tuple[np.ndarray | None, str | None]:
    """Draw counts ``(reps, sum(sizes))`` for strata laid end to end, and which bootstrap made them.

    See the module docstring for the choice; the strata are tasks.
    """
    sizes = np.asarray(sizes, dtype=int)
    if sizes.min() >= 2:
        return _stratified_counts(rng, sizes, reps), "seeds"
    if sizes.size >= 2:
        return np.repeat(_uniform_counts(rng, sizes.size, reps), sizes, axis=1), "tasks"
    return None, None


def weighted_iqm(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Interquartile mean of each row's multiset (value ``i`` taken ``weights[r, i]`` times).

    The 25 % trimmed mean of ``scipy.stats.trim_mean`` (rliable's ``aggregate_iqm``): of ``W`` sorted
    values, ``floor(W / 4)`` are cut from each end. A value's copies occupy positions
    ``[cum - w, cum)`` of the sorted multiset; it counts for the part of that range that is kept.
    """
    values = np.asarray(values, dtype=float)
    weights = np.atleast_2d(np.asarray(weights, dtype=float))
    order = np.argsort(values, kind="stable")
    sorted_values, sorted_weights = values[order], weights[:, order]
    upper = np.cumsum(sorted_weights, axis=1)
    lower = upper - sorted_weights
    total = upper[:, -1:]
    cut = np.floor(total / 4)
    kept = np.clip(np.minimum(upper, total - cut) - np.maximum(lower, cut), 0.0, None)
    return (kept @ sorted_values) / (total[:, 0] - 2 * cut[:, 0])


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean of ``values`` (every value once)."""
    values = np.asarray(values, dtype=float).ravel()
    return float(weighted_iqm(values, np.ones((1, values.size)))[0])


def weighted_fraction_above(values: np.ndarray, weights: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``(reps, len(thresholds))``: the weighted fraction of values strictly above each threshold."""
    weights = np.atleast_2d(weights)
    above = (np.asarray(values)[:, None] > np.asarray(thresholds)[None, :]).astype(float)
    return (weights @ above) / weights.sum(axis=1, keepdims=True)


def _percentiles(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


def _estimate(point: float, samples: np.ndarray | None, over: str | None, confidence: float) -> Estimate:
    if samples is None:
        return Estimate(float(point))
    low, high = _percentiles(samples, confidence)
    return Estimate(float(point), float(low), float(high), over)


def iqm_estimate(
    strata: Sequence[Sequence[float]],
    *,
    key: Sequence[object],
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """The interquartile mean of every (seed, task) score, with its interval; strata are tasks."""
    values, _, sizes = _flatten(strata)
    weights, over = resampling_weights(sizes, reps, generator(*key))
    samples = None if weights is None else weighted_iqm(values, weights)
    return _estimate(iqm(values), samples, over, confidence)


def _task_major(counts: np.ndarray, columns: list[np.ndarray], size: int) -> np.ndarray:
    """``(tasks, reps, size)``: the draw counts of each task's columns, task by task."""
    picked = counts[:, np.concatenate(columns)].reshape(counts.shape[0], len(columns), size)
    return np.ascontiguousarray(picked.transpose(1, 0, 2))


def improvement_probabilities(
    scores: Mapping[str, Mapping[Hashable, Sequence[float]]],
    *,
    key: Sequence[object],
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> dict[tuple[str, str], tuple[Estimate, int]]:
    """P(X > Y) and the number of tasks it averages over, for every ordered pair of methods of
    ``scores`` (method -> task -> per-seed scores) that share a task.

    For each shared task, the probability that a seed of X scores above a seed of Y (ties count one
    half: the Mann-Whitney U statistic over ``n_x * n_y``), averaged over the shared tasks. Seed
    bootstrap when every shared task has two seeds or more for both: each method's seeds are drawn
    within each task, independently of the other method (rliable's
    ``StratifiedIndependentBootstrap``); a method's draws are made once, from ``key`` and its name,
    and serve all its pairs. Otherwise the shared tasks are resampled, from ``key`` and the pair's
    names. ``P(Y > X) = 1 - P(X > Y)``, resample by resample.
    """
    tasks = {m: list(by_task) for m, by_task in scores.items()}
    values = {m: [np.asarray(scores[m][t], dtype=float).ravel() for t in tasks[m]] for m in scores}
    if any(v.size == 0 for vs in values.values() for v in vs):
        raise ValueError("every task needs at least one score per method")
    ends = {m: np.cumsum([v.size for v in values[m]]) for m in scores}
    drawn = {
        m: _stratified_counts(generator(*key, m), [v.size for v in values[m]], reps) if values[m] else None
        for m in scores
    }

    def columns(method: str, index: int) -> np.ndarray:
        end = ends[method][index]
        return np.arange(end - values[method][index].size, end)

    results: dict[tuple[str, str], tuple[Estimate, int]] = {}
    names = list(scores)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            shared = [(a, tasks[y].index(t)) for a, t in enumerate(tasks[x]) if t in tasks[y]]
            if not shared:
                continue
            wins = [
                (values[x][a][:, None] > values[y][b][None, :])
                + 0.5 * (values[x][a][:, None] == values[y][b][None, :])
                for a, b in shared
            ]
            per_task = np.array([win.mean() for win in wins])
            samples, over = None, None
            if all(win.shape[0] >= 2 and win.shape[1] >= 2 for win in wins):
                # sum over tasks of c_x W c_y / (n_x n_y) for every resample, as one stacked product
                # per seed-count shape: stacks of small products run single-threaded, while one
                # block-diagonal product would go to threaded BLAS, ten times slower on a busy CPU.
                groups: dict[tuple[int, int], list[int]] = {}
                for k, win in enumerate(wins):
                    groups.setdefault(win.shape, []).append(k)
                total = np.zeros(reps)
                for (n_x, n_y), members in groups.items():
                    counts_x = _task_major(drawn[x], [columns(x, shared[k][0]) for k in members], n_x)
                    counts_y = _task_major(drawn[y], [columns(y, shared[k][1]) for k in members], n_y)
                    stacked = np.stack([wins[k] for k in members]) / (n_x * n_y)
                    total += ((counts_x @ stacked) * counts_y).sum(axis=(0, 2))
                samples, over = total / len(shared), "seeds"
            elif len(shared) >= 2:
                counts = _uniform_counts(generator(*key, *sorted((x, y))), len(shared), reps)
                samples, over = counts @ per_task / len(shared), "tasks"
            forward = _estimate(per_task.mean(), samples, over, confidence)
            backward = _estimate(
                1.0 - forward.point, None if samples is None else 1.0 - samples, over, confidence
            )
            results[x, y], results[y, x] = (forward, len(shared)), (backward, len(shared))
    return results


def improvement_probability(
    x: Sequence[Sequence[float]],
    y: Sequence[Sequence[float]],
    *,
    key: Sequence[object],
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """P(X > Y) over the tasks ``t`` of ``x[t]`` and ``y[t]`` (per-seed scores): one pair of
    :func:`improvement_probabilities`."""
    if len(x) != len(y) or not x:
        raise ValueError(f"need the same tasks, at least one, for both methods (got {len(x)} and {len(y)})")
    scores = {"x": dict(enumerate(x)), "y": dict(enumerate(y))}
    return improvement_probabilities(scores, key=key, reps=reps, confidence=confidence)["x", "y"][0]


def performance_profile(
    strata: Sequence[Sequence[float]],
    thresholds: Sequence[float],
    *,
    key: Sequence[object],
    reps: int = REPS,
    confidence: float = CONFIDENCE,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The score distribution (rliable's performance profile): for each threshold, the fraction of
    (seed, task) scores above it, with pointwise intervals (None where there is no interval)."""
    values, _, sizes = _flatten(strata)
    thresholds = np.asarray(thresholds, dtype=float)
    point = weighted_fraction_above(values, np.ones(values.size), thresholds)[0]
    weights, _ = resampling_weights(sizes, reps, generator(*key))
    if weights is None:
        return point, None, None
    low, high = _percentiles(weighted_fraction_above(values, weights, thresholds), confidence)
    return point, low, high
