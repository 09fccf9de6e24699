"""Where a figure's history changed: steps in a series of runs, their size with a CI, and slow drift.

Samples within one run are not independent of each other (the same boot of the host, the same load, the same
build), so the runs are the units here, as asv's and Conbench's are: each run is its median, and the noise a
step is judged against is how much run medians move from run to run.
- σ, the run-to-run noise relative to the series' median: 1.4826·MAD of successive differences / √2 (robust to
  a step, one large difference), never below what the runs' own sampling gives a median (1.2533·s/√n within a
  run) nor below a third of the noise floor;
- candidates: a piecewise-constant fit of the relative run medians by ruptures' PELT search (l2 cost, penalty
  2·σ²·ln n: BIC's price of one more mean), each segment at least two runs; and the newest run alone against
  the runs of its segment before it, fitted without it (a CI gate must see one bad run);
- each candidate's size is the ratio of the levels (the median of the run medians) after and before it, with a
  99% t interval of that ratio from σ (standard error 1.2533·σ·√(1/n₁ + 1/n₂), the medians' efficiency, with the
  runs less the segments as degrees of freedom): a change when the interval excludes 1 and the size passes the
  noise floor; a change the wrong way is a regression;
- drift: the first segment against the last (the first and last third of the runs when the fit finds no step),
  judged the same way, so that steps each under the floor still add up to an alarm;
- the newest run regressed when the latest change — the newest run's own, else the last step's, else the drift —
  is a regression: a step back to where the series was clears it, and so does a baseline that accepts it.
The noise floor is, unless given, the larger of DEFAULT_FLOOR_PCT and 3σ.
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_FLOOR_PCT = 5.0
CONFIDENCE = 0.99
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # a median's standard error over a mean's, normal data
MIN_RUNS = 2  # a series shorter than this has no step to find
REGRESSION, IMPROVEMENT = "regression", "improvement"

METHOD = ("runs are the units (each its median; samples within a run are not independent); steps: PELT (ruptures, "
          "l2 cost, penalty 2·σ²·ln n, segments of two runs or more) over the run medians, and the newest run against "
          "its segment (fitted without it); σ the run-to-run noise (1.4826·MAD of successive differences / √2, "
          "at least the runs' own "
          "sampling error of a median); each step's size is the ratio of the levels (median of run medians) with a "
          f"{CONFIDENCE:.0%} t interval (standard error 1.2533·σ·√(1/n₁+1/n₂)); a change needs the interval to "
          f"exclude 1 and the size to pass the noise floor (by default the larger of {DEFAULT_FLOOR_PCT:g}% and 3σ); "
          "drift: the first segment against the last (the first and last third of the runs without a step), judged "
          "the same way; the newest run regressed when the latest change (its own, a step's, the drift) is a "
          "regression")


@dataclass(frozen=True)
class Shift:
    """The change between two groups of runs: the ratio after/before of their levels, the difference, and CIs."""

    before: float  # level: the median of the runs' medians
    after: float
    ratio: float
    ratio_ci: tuple[float, float]
    diff: float
    diff_ci: tuple[float, float]

    def beyond(self, floor_pct: float) -> bool:
        """A change: its CI excludes no change (1) and its size passes the noise floor."""
        low, high = self.ratio_ci
        if math.isnan(low) or math.isnan(self.ratio):
            return False
        return (low > 1 or high < 1) and abs(self.ratio - 1) * 100 > floor_pct


@dataclass(frozen=True)
class Step:
    at: int  # the index of the first run after the step
    shift: Shift
    change: str | None  # REGRESSION, IMPROVEMENT, or None: within the noise
    newest: bool = False  # found as the newest run against its segment


@dataclass(frozen=True)
class Verdict:
    """A series' steps, its drift, and whether its newest run regressed."""

    floor_pct: float
    sigma_pct: float | None  # the run-to-run noise, percent of the series' median (None below three runs)
    steps: list[Step]  # the changes found (candidates within the noise are left out)
    candidates: int  # the fit's steps before judging
    drift: Step | None  # an accumulated change no single step explains
    newest: str | None  # REGRESSION when the latest change (the newest run's, a step's, the drift) is a regression
    note: str | None = None  # why the series was not judged


def medians(runs: Sequence[Sequence[float]]) -> np.ndarray:
    """Each run's median (statistics': the same value as numpy's, without its per-call cost, which weighs in a store
    of many short series)."""
    return np.array([float(statistics.median(r)) for r in runs])


def noise(runs: Sequence[Sequence[float]]) -> float | None:
    """Run-to-run noise relative to the series' median (None below three runs), at least each run's own
    sampling error of its median."""
    levels = medians(runs)
    if levels.size < 3:
        return None
    d = np.diff(levels / float(np.median(levels)))
    between = float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))
    return max(between, _within(runs))


def pooled(levels: np.ndarray, bounds: list[int]) -> float:
    """The run medians' spread about their segments' means (pooled standard deviation), relative."""
    rel = levels / float(np.median(levels))
    resid = np.concatenate([rel[a:b] - rel[a:b].mean() for a, b in zip(bounds, bounds[1:])])
    return float(math.sqrt(np.sum(resid ** 2) / max(1, rel.size - len(bounds) + 1)))


def _within(runs: Sequence[Sequence[float]]) -> float:
    centre = float(np.median(medians(runs)))
    errors = [MEDIAN_EFFICIENCY * float(np.std(r, ddof=1)) / math.sqrt(len(r)) / centre for r in runs if len(r) > 1]
    return float(np.median(errors)) if errors else 0.0


def candidates(levels: np.ndarray, sigma: float) -> list[int]:
    """The indices where a new segment starts, by PELT (segments of two runs or more). ruptures' KernelCPD with the
    linear kernel is PELT with the l2 cost (the same optimum as its Pelt(model="l2")), in C with O(n) memory: its
    Pelt evaluates each cost in Python and took 27.6 s for 1,000 runs, 99.7 s for 2,000 (issue 46). Centred first,
    so that the kernel sums lose nothing to cancellation."""
    import ruptures  # here: only history needs it

    if levels.size < 4:
        return []
    rel = levels / float(np.median(levels))
    centred = (rel - rel.mean()).reshape(-1, 1)
    pen = 2 * sigma ** 2 * math.log(levels.size)
    ends = ruptures.KernelCPD(kernel="linear", min_size=2).fit(centred).predict(
        pen=pen if pen > 0 else sys.float_info.min)  # σ² may underflow: KernelCPD asserts a positive penalty
    return [int(e) for e in ends if e < levels.size]  # KernelCPD gives numpy integers


def shift(before: Sequence[Sequence[float]], after: Sequence[Sequence[float]], sigma: float, df: int) -> Shift:
    """The level after against the level before, with a t interval of the ratio from the run-to-run noise."""
    lb, la = float(np.median(medians(before))), float(np.median(medians(after)))
    if lb <= 0:
        return Shift(lb, la, math.nan, (math.nan, math.nan), la - lb, (math.nan, math.nan))
    half = _t(max(1, df)) * MEDIAN_EFFICIENCY * sigma * \
        math.sqrt(1 / len(before) + 1 / len(after))
    ratio = la / lb
    return Shift(lb, la, ratio, (ratio - half, ratio + half), la - lb, (la - lb - half * lb, la - lb + half * lb))


@functools.lru_cache(maxsize=1024)
def _t(df: int) -> float:
    """The two-sided CONFIDENCE quantile of Student's t with `df` degrees of freedom."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def _fit(runs: Sequence[Sequence[float]], floor_pct: float | None) -> tuple[list[int], float | None, float]:
    """PELT's cuts, σ (about the fitted levels once there are cuts: successive differences across a step overstate
    it) and the noise floor of `runs`."""
    levels = medians(runs)
    sigma = noise(runs)
    floor = floor_pct if floor_pct is not None else max(DEFAULT_FLOOR_PCT, 300 * sigma if sigma else 0.0)
    cuts = candidates(levels, max(sigma or 0.0, floor / 300))
    if cuts:
        sigma = max(pooled(levels, [0, *cuts, levels.size]), _within(runs))
        floor = floor_pct if floor_pct is not None else max(DEFAULT_FLOOR_PCT, 300 * sigma)
    return cuts, sigma, floor


def judge(runs: Sequence[Sequence[float]], higher_better: bool, floor_pct: float | None = None) -> Verdict:
    """Steps, drift and the newest run's verdict of one figure's series (`runs`: each run's samples, oldest first)."""
    n = len(runs)
    if n < MIN_RUNS or np.any(medians(runs) <= 0):  # a ratio needs positive levels
        return Verdict(floor_pct if floor_pct is not None else DEFAULT_FLOOR_PCT, None, [], 0, None, None,
                       None if n < MIN_RUNS else "not judged: a run's median is 0 or less, and steps are ratios")
    cuts, sigma, floor = _fit(runs, floor_pct)
    newest = _newest(runs, higher_better, floor_pct)  # the runs before the newest fitted without it
    if newest is not None:
        cuts, sigma, floor = newest[1], newest[2], newest[3]
    bounds = [0, *cuts, n - (newest is not None)]
    df = max(1, n - len(bounds))
    s_eff = max(sigma or 0.0, floor / 300)
    found = [Step(at, sh, c) for i, at in enumerate(cuts)
             for sh in [shift(runs[bounds[i]:at], runs[at:bounds[i + 2]], s_eff, df)]
             if (c := _change(sh, floor, higher_better))]
    first, end = (runs[:bounds[1]], runs[bounds[-2]:bounds[-1]]) if cuts else _thirds(runs[:bounds[-1]])
    total = shift(first, end, s_eff, df)
    total_change = _change(total, floor, higher_better)
    drift = Step(bounds[-2] if cuts else bounds[-1] - len(end), total, total_change) \
        if total_change and not any(s.change == total_change for s in found) else None
    latest = newest[0] if newest is not None else (found[-1] if found else drift)
    return Verdict(floor, None if sigma is None else 100 * sigma, found + ([newest[0]] if newest else []),
                   len(cuts), drift, REGRESSION if latest is not None and latest.change == REGRESSION else None)


def _newest(runs: Sequence[Sequence[float]], higher_better: bool,
            floor_pct: float | None) -> tuple[Step, list[int], float | None, float] | None:
    """The newest run alone against the runs of its segment before it (two or more), the rest fitted without it:
    a CI gate must see one bad run, which PELT's two-run segments would pair with a good one."""
    if len(runs) < 3:
        return None
    cuts, sigma, floor = _fit(runs[:-1], floor_pct)
    start = cuts[-1] if cuts else 0
    if len(runs) - 1 - start < 2:
        return None
    sh = shift(runs[start:-1], runs[-1:], max(sigma or 0.0, floor / 300), max(1, len(runs) - 2 - len(cuts)))
    change = _change(sh, floor, higher_better)
    return (Step(len(runs) - 1, sh, change, newest=True), cuts, sigma, floor) if change else None


def _thirds(runs: Sequence[Sequence[float]]) -> tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]:
    k = max(1, len(runs) // 3)
    return runs[:k], runs[-k:]


def _change(s: Shift, floor_pct: float, higher_better: bool) -> str | None:
    if not s.beyond(floor_pct):
        return None
    worse = s.ratio < 1 if higher_better else s.ratio > 1
    return REGRESSION if worse else IMPROVEMENT
