"""Summaries of repeated timings, and the warnings that stop readers from over-reading them.

Timings of virtual machines are noisy: a median alone invites rankings the data cannot support, so every
summary carries its spread, a confidence interval and an outlier count, and `spread_warnings` says in words
when the figures are too unstable or too close to compare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CI_METHOD = "95% CI of the mean (Student t)"
PRECISION_METHOD = "half-width of the 95% CI of the mean (Student t) / median"
OUTLIER_METHOD = "Tukey fences, 1.5 IQR"

WIDE_CV = 0.10
"""Coefficient of variation above which a backend's figures are called unstable."""

MIN_N_FOR_OUTLIERS = 4
"""Quartiles of fewer samples are meaningless, so outliers are only counted from this many on."""

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
PERMUTATIONS = 10_000
PERMUTATION_SEED = 0
MIN_PERMUTATIONS = 100

RESAMPLE_BUDGET = 50_000_000
"""Values resampled (a bootstrap side) or shuffled (a permutation test) at most, so that compare's time stays
bounded whatever n a results file holds: up to 5,000 samples a side (or pooled) the figures are those of the
plain method, beyond that see ratio_ci and permutation_p."""

CHUNK_ELEMENTS = 1 << 21
"""Resample matrices are built this many values at a time (16 MB of float64) so memory does not grow with n;
numpy's generator gives the same stream in chunks as in one matrix, so the figures do not change."""

RATIO_CI_METHOD = (f"95% percentile bootstrap of the ratio of medians ({BOOTSTRAP_RESAMPLES:,} resamples of each "
                   f"side independently, numpy default_rng({BOOTSTRAP_SEED}) per row; past "
                   f"{RESAMPLE_BUDGET // BOOTSTRAP_RESAMPLES:,} samples a side the resamples' medians are drawn "
                   "from their exact distribution, as order statistics)")
PERMUTATION_METHOD = (f"two-sided permutation test of the difference of medians ({PERMUTATIONS:,} random "
                      f"relabellings of the pooled samples, numpy default_rng({PERMUTATION_SEED}); past "
                      f"{RESAMPLE_BUDGET // PERMUTATIONS:,} pooled samples fewer, down to {MIN_PERMUTATIONS}, "
                      f"so that at most {RESAMPLE_BUDGET:,} values are shuffled)")

_CONFIDENCE = 0.95
_TUKEY_K = 1.5


@dataclass(frozen=True)
class Summary:
    """Statistics of one cell's samples, in seconds.

    `stdev`, `ci_low`, `ci_high` and `cv` need two samples: they are `math.nan` when n < 2
    (renderers print "–" for them) so that every field stays a float.
    """

    n: int
    median: float
    mean: float
    stdev: float
    min: float
    max: float
    ci_low: float
    ci_high: float
    cv: float
    outliers: int

    @property
    def has_ci(self) -> bool:
        """Whether a confidence interval exists (n >= 2), i.e. whether this summary can be ranked."""
        return not (math.isnan(self.ci_low) or math.isnan(self.ci_high))


def summarize(values: Sequence[float]) -> Summary:
    """Summarize samples; raise ValueError when there are none, since no figure can describe nothing."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise ValueError("cannot summarize an empty list of samples")
    if not np.all(np.isfinite(arr)):
        raise ValueError("samples must be finite numbers")
    n = int(arr.size)
    mean = float(arr.mean())
    stdev, ci_low, ci_high, cv = math.nan, math.nan, math.nan, math.nan
    if n >= 2:
        stdev = float(arr.std(ddof=1))
        half = _ci_half_width(stdev, n)
        ci_low, ci_high = mean - half, mean + half
        cv = stdev / mean if mean != 0 else math.nan
    return Summary(
        n=n,
        median=float(np.median(arr)),
        mean=mean,
        stdev=stdev,
        min=float(arr.min()),
        max=float(arr.max()),
        ci_low=ci_low,
        ci_high=ci_high,
        cv=cv,
        outliers=_count_outliers(arr),
    )


def _ci_half_width(stdev: float, n: int) -> float:
    """Student t rather than normal: guestbench runs few repetitions, where z would overstate confidence."""
    from scipy import stats as scipy_stats  # here, not at import: a second of every guestbench command's start

    t = float(scipy_stats.t.ppf(0.5 + _CONFIDENCE / 2, n - 1))
    return t * stdev / math.sqrt(n)


def relative_precision(values: Sequence[float]) -> float | None:
    """The precision a cell's samples reach: the half-width of the report's CI relative to the median (the
    same CI the tables print, so a reader can recompute it); None below two samples or with a zero median."""
    if len(values) < 2:
        return None
    s = summarize(values)
    if s.median <= 0:
        return None
    return (s.ci_high - s.ci_low) / 2 / s.median


def _count_outliers(arr: np.ndarray) -> int:
    """Count samples outside the Tukey fences; 0 for tiny samples where quartiles mean nothing."""
    if arr.size < MIN_N_FOR_OUTLIERS:
        return 0
    q1, q3 = np.percentile(arr, [25, 75])
    iqr = q3 - q1
    low, high = q1 - _TUKEY_K * iqr, q3 + _TUKEY_K * iqr
    return int(np.count_nonzero((arr < low) | (arr > high)))


def overlaps(a: Summary, b: Summary) -> bool:
    """Whether the two CIs overlap; False when either has no CI, since that is reported separately."""
    if not (a.has_ci and b.has_ci):
        return False
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high


def spread_warnings(label: str, summaries: Mapping[str, Summary]) -> list[str]:
    """Say, per backend, why its figures may mislead, then which rankings against the fastest are unsafe."""
    out: list[str] = []
    for name, s in summaries.items():
        out.extend(_backend_warnings(label, name, s))
    out.extend(_ranking_warnings(label, summaries))
    return out


def _backend_warnings(label: str, name: str, s: Summary) -> list[str]:
    if s.n < 2:
        return [f"{label}: {name} has n={s.n}: no spread, cannot rank"]
    out: list[str] = []
    if not math.isnan(s.cv) and s.cv > WIDE_CV:
        out.append(f"{label}: {name} spread is wide (cv {s.cv:.0%}, n={s.n}): figures are unstable")
    if s.outliers:
        out.append(f"{label}: {name} has {s.outliers} outlier(s) of n={s.n}")
    return out


def _ranking_warnings(label: str, summaries: Mapping[str, Summary]) -> list[str]:
    """Compare against the fastest backend that has a CI: an n=1 "winner" is already flagged as unrankable."""
    rankable = {name: s for name, s in summaries.items() if s.has_ci}
    if len(rankable) < 2:
        return []
    fastest = min(rankable, key=lambda name: rankable[name].median)
    return [
        f"{label}: cannot rank {fastest} vs {name}: their 95% CIs overlap"
        for name, s in rankable.items()
        if name != fastest and overlaps(rankable[fastest], s)
    ]


def ratio_ci(base: Sequence[float], other: Sequence[float]) -> tuple[float, float]:
    """Percentile bootstrap of median(other)/median(base), each side resampled independently.

    A fresh, seeded generator per row makes every row reproducible and independent of the others. With one
    sample on a side there is no spread to resample, so no interval (nan) rather than a zero-width one.
    """
    b, o = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if b.size < 2 or o.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    med_b = _bootstrap_medians(b, rng)
    med_o = _bootstrap_medians(o, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = med_o / med_b
    if not np.all(np.isfinite(ratios)):
        return math.nan, math.nan
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The medians of BOOTSTRAP_RESAMPLES resamples of `x` with replacement, CHUNK_ELEMENTS values at a time;
    past RESAMPLE_BUDGET values, drawn from the medians' exact distribution instead (same law, O(resamples))."""
    n, count = x.size, BOOTSTRAP_RESAMPLES
    if n * count > RESAMPLE_BUDGET:
        return _order_statistic_medians(np.sort(x), count, rng)
    rows = max(1, CHUNK_ELEMENTS // n)
    return np.concatenate([np.median(rng.choice(x, size=(min(rows, count - start), n), replace=True), axis=1)
                           for start in range(0, count, rows)])


def _order_statistic_medians(xs: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `count` resamples of the sorted `xs`, without resampling.

    A resample is Q(U_1), ..., Q(U_n) for uniform U_i and the empirical quantile Q(u) = xs[ceil(u n) - 1], which
    is monotone, so its k-th smallest value is Q(U_(k)) with U_(k) ~ Beta(k, n - k + 1); for an even n the median
    also needs U_(k+1), which given U_(k) = u is u + (1 - u) Beta(1, n - k).
    """
    n = xs.size
    k = (n + 1) // 2
    u = rng.beta(k, n - k + 1, size=count)
    low = xs[_quantile_index(u, n)]
    if n % 2:
        return low
    u_next = u + (1 - u) * rng.beta(1, n - k, size=count)
    return (low + xs[_quantile_index(u_next, n)]) / 2


def _quantile_index(u: np.ndarray, n: int) -> np.ndarray:
    return np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)


def permutation_p(base: Sequence[float], other: Sequence[float], resamples: int = PERMUTATIONS,
                  seed: int = PERMUTATION_SEED) -> float:
    """How often relabelling the pooled samples at random gives a difference of medians at least as large as the
    one observed (two-sided, counting the observed labelling itself); nan without a sample on each side.

    It assumes nothing about the shape of the timings (A/B tools in this field use it for that reason); with
    few samples the attainable p is coarse (3 against 3: no lower than about 0.1). Relabellings are shuffled
    CHUNK_ELEMENTS values at a time; past RESAMPLE_BUDGET values there are fewer of them (MIN_PERMUTATIONS at
    least), which coarsens p, still a valid permutation p, rather than let the time grow with n."""
    b, o = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if b.size == 0 or o.size == 0:
        return math.nan
    observed = abs(float(np.median(o)) - float(np.median(b)))
    pooled = np.concatenate([b, o])
    count = resamples if pooled.size * resamples <= RESAMPLE_BUDGET else \
        min(resamples, max(MIN_PERMUTATIONS, RESAMPLE_BUDGET // pooled.size))
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK_ELEMENTS // pooled.size)
    extreme = 0
    for start in range(0, count, rows):
        shuffled = rng.permuted(np.tile(pooled, (min(rows, count - start), 1)), axis=1)
        diffs = np.abs(np.median(shuffled[:, b.size:], axis=1) - np.median(shuffled[:, :b.size], axis=1))
        extreme += int(np.count_nonzero(diffs >= observed - 1e-12 * max(1.0, observed)))
    return (extreme + 1) / (count + 1)


PAIRED_METHOD = (f"paired sign-flip permutation test over the rounds (A's and B's samples of one round taken in "
                 f"turn: the log ratio B/A per round, {PERMUTATIONS:,} random sign flips of the rounds, numpy "
                 f"default_rng({PERMUTATION_SEED}); its CI: the ratio of medians over {BOOTSTRAP_RESAMPLES:,} "
                 f"resamples of whole rounds)")


def paired_p(base: Sequence[float], other: Sequence[float], resamples: int = PERMUTATIONS,
             seed: int = PERMUTATION_SEED) -> float:
    """Two-sided sign-flip permutation p of the mean log ratio other/base over paired rounds: samples taken in
    turn share the moment's load, so the round is the unit (nan below two pairs or with a non-positive value)."""
    b, o = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if b.size < 2 or b.size != o.size or np.any(b <= 0) or np.any(o <= 0):
        return math.nan
    d = np.log(o / b)
    observed = abs(float(d.mean()))
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK_ELEMENTS // d.size)
    extreme = 0
    for start in range(0, resamples, rows):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(rows, resamples - start), d.size))
        extreme += int(np.count_nonzero(np.abs((signs * d).mean(axis=1)) >= observed - 1e-12 * max(1.0, observed)))
    return (extreme + 1) / (resamples + 1)


def paired_ratio_ci(base: Sequence[float], other: Sequence[float]) -> tuple[float, float]:
    """Percentile bootstrap of median(other)/median(base) resampling whole rounds (nan below two pairs)."""
    b, o = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if b.size < 2 or b.size != o.size:
        return math.nan, math.nan
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows = max(1, CHUNK_ELEMENTS // b.size)
    ratios = []
    for start in range(0, BOOTSTRAP_RESAMPLES, rows):
        pick = rng.integers(0, b.size, size=(min(rows, BOOTSTRAP_RESAMPLES - start), b.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(np.median(o[pick], axis=1) / np.median(b[pick], axis=1))
    got = np.concatenate(ratios)
    if not np.all(np.isfinite(got)):
        return math.nan, math.nan
    low, high = np.percentile(got, [2.5, 97.5])
    return float(low), float(high)


TEST_METHOD = ("two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu; exact when there are no ties, "
               "else normal approximation with continuity correction)")


def mann_whitney(base: Sequence[float], other: Sequence[float]) -> tuple[float, str, bool]:
    """(p, "exact"|"asymptotic", other tends larger). Exact unless ties: scipy's exact p ignores ties."""
    from scipy import stats as scipy_stats  # here, not at import: a second of every guestbench command's start

    combined = list(base) + list(other)
    method = "exact" if len(set(combined)) == len(combined) else "asymptotic"
    result = scipy_stats.mannwhitneyu(other, base, alternative="two-sided", method=method)
    p = float(result.pvalue)
    return p, method, float(result.statistic) > len(base) * len(other) / 2


def min_attainable_p(n_base: int, n_other: int) -> float:
    """Smallest two-sided exact p with these sizes (total separation): 2 / C(n1+n2, n1), capped at 1."""
    return min(1.0, 2 / math.comb(n_base + n_other, n_base))
