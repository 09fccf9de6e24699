"""Known-value checks of the statistics every guestbench figure rests on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from guestbench.analysis.stats import Summary, overlaps, spread_warnings, summarize


def summary(median: float, ci_low: float, ci_high: float, *, n: int = 5, cv: float = 0.01,
            outliers: int = 0) -> Summary:
    """A Summary with just the fields a test cares about."""
    return Summary(n=n, median=median, mean=median, stdev=0.1, min=ci_low, max=ci_high,
                   ci_low=ci_low, ci_high=ci_high, cv=cv, outliers=outliers)


def test_known_values_with_one_outlier() -> None:
    s = summarize([1, 2, 3, 4, 100])
    assert s.n == 5
    assert s.median == 3
    assert s.mean == 22
    assert s.min == 1 and s.max == 100
    assert s.stdev == pytest.approx(float(np.std([1, 2, 3, 4, 100], ddof=1)))
    assert s.outliers == 1
    assert s.cv == pytest.approx(s.stdev / 22)


def test_no_outliers_in_tight_data() -> None:
    assert summarize([10.0, 10.1, 9.9, 10.05, 9.95]).outliers == 0


def test_outliers_on_both_sides() -> None:
    assert summarize([-50, 10, 10.1, 9.9, 10.05, 9.95, 60]).outliers == 2


def test_outliers_not_counted_below_four_samples() -> None:
    assert summarize([1, 2, 1000]).outliers == 0


def test_single_sample_has_no_spread() -> None:
    s = summarize([7.5])
    assert (s.n, s.median, s.mean, s.min, s.max, s.outliers) == (1, 7.5, 7.5, 7.5, 7.5, 0)
    for field in (s.stdev, s.ci_low, s.ci_high, s.cv):
        assert math.isnan(field)
    assert not s.has_ci


def test_ci_matches_scipy_t_interval_and_contains_mean() -> None:
    values = [11.2, 11.9, 12.4, 11.6, 12.0, 11.8]
    s = summarize(values)
    low, high = scipy_stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                                       scale=scipy_stats.sem(values))
    assert s.ci_low == pytest.approx(low)
    assert s.ci_high == pytest.approx(high)
    assert s.ci_low < s.mean < s.ci_high


def test_identical_samples_have_zero_width_ci() -> None:
    s = summarize([3.0, 3.0, 3.0])
    assert s.stdev == 0 and s.ci_low == s.ci_high == 3.0 and s.cv == 0


def test_empty_input_is_rejected() -> None:
    with pytest.raises(ValueError):
        summarize([])


def test_non_finite_input_is_rejected() -> None:
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


def test_overlaps() -> None:
    a = summary(10, 9, 11)
    assert overlaps(a, summary(11.5, 10.5, 12.5))
    assert overlaps(summary(11.5, 10.5, 12.5), a)
    assert not overlaps(a, summary(20, 19, 21))
    assert not overlaps(a, summarize([10.0]))


def test_spread_warnings_wide_cv() -> None:
    out = spread_warnings("startup", {"tcg": summary(10, 5, 15, cv=0.23)})
    assert out == ["startup: tcg spread is wide (cv 23%, n=5): figures are unstable"]


def test_spread_warnings_narrow_cv_is_silent() -> None:
    assert spread_warnings("startup", {"tcg": summary(10, 9.9, 10.1, cv=0.05)}) == []


def test_spread_warnings_outliers_and_single_sample() -> None:
    out = spread_warnings("startup", {"tcg": summary(10, 9.9, 10.1, n=10, outliers=2),
                                      "kvm": summarize([1.0])})
    assert "startup: tcg has 2 outlier(s) of n=10" in out
    assert "startup: kvm has n=1: no spread, cannot rank" in out


def test_spread_warnings_ranking_against_fastest_only() -> None:
    out = spread_warnings("startup", {
        "libvirt-tcg": summary(10.5, 9.5, 11.5),
        "tcg": summary(10, 9, 11),
        "kvm-slow": summary(30, 29, 31),
        "other": summary(11, 10.8, 11.2),
    })
    assert out == [
        "startup: cannot rank tcg vs libvirt-tcg: their 95% CIs overlap",
        "startup: cannot rank tcg vs other: their 95% CIs overlap",
    ]


def test_ranking_ignores_a_faster_backend_without_ci() -> None:
    out = spread_warnings("startup", {
        "kvm": summarize([1.0]),
        "tcg": summary(10, 9, 11),
        "libvirt-tcg": summary(10.5, 9.5, 11.5),
    })
    assert out == [
        "startup: kvm has n=1: no spread, cannot rank",
        "startup: cannot rank tcg vs libvirt-tcg: their 95% CIs overlap",
    ]


def test_bootstrap_and_permutation_in_chunks_give_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunking the resample matrices (bounded memory) must not change a figure: numpy's stream is the same."""
    from guestbench.analysis import stats

    g = np.random.default_rng(3)
    base, other = list(g.gamma(3, 1, 40)), list(g.gamma(3, 1.2, 37))
    whole = stats.ratio_ci(base, other), stats.permutation_p(base, other)
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 1001)  # rows of 77 values: many chunks, odd sizes
    assert (stats.ratio_ci(base, other), stats.permutation_p(base, other)) == whole


def test_large_n_bootstrap_draws_medians_from_their_exact_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the resampling budget the medians come from order statistics: the same law, so the same CI within
    bootstrap noise, for odd and even n."""
    from guestbench.analysis import stats

    g = np.random.default_rng(4)
    for n in (301, 300):
        base, other = list(g.lognormal(0, 0.3, n)), list(g.lognormal(0.05, 0.3, n))
        resampled = stats.ratio_ci(base, other)
        monkeypatch.setattr(stats, "RESAMPLE_BUDGET", 1000)
        exact = stats.ratio_ci(base, other)
        monkeypatch.undo()
        assert exact != resampled and exact == pytest.approx(resampled, rel=0.01)


def test_large_n_permutation_takes_fewer_relabellings(monkeypatch: pytest.MonkeyPatch) -> None:
    from guestbench.analysis import stats

    monkeypatch.setattr(stats, "RESAMPLE_BUDGET", 1000)
    base, other = [1.0 + i / 100 for i in range(50)], [2.0 + i / 100 for i in range(50)]
    assert stats.permutation_p(base, other) == pytest.approx(1 / (stats.MIN_PERMUTATIONS + 1))
