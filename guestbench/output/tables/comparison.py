"""The comparison table of one OTHER file against the baseline: a row per cell matched in both, its method and
notes (`guestbench compare`, `guestbench ab`)."""

from __future__ import annotations
import math
from guestbench.analysis.stats import PAIRED_METHOD, PERMUTATION_METHOD, TEST_METHOD
from guestbench.util.units import NONE, fmt_seconds
from collections.abc import Iterable

from guestbench.analysis.compare import ALPHA, CI_METHOD, Comparison, ComparisonRow, regressed


COLUMNS = ("backend", "placement", "measurement", "n base", "n other", "median base", "median other",
           "ratio", "95% CI of ratio", "p (test)", "p (perm.)", "verdict")


def _fmt_ratio(x: float) -> str:
    return NONE if math.isnan(x) else f"{x:.2f}×"


def _fmt_ci(r: ComparisonRow) -> str:
    return NONE if math.isnan(r.ci_low) else f"{r.ci_low:.2f}–{r.ci_high:.2f}"


def _fmt_p(r: ComparisonRow) -> str:
    return NONE if math.isnan(r.p_value) else f"{r.p_value:.2g} ({r.test})"


def table_cells(r: ComparisonRow) -> list[str]:
    return [r.backend, r.placement or NONE, r.measurement, str(r.n_base), str(r.n_other),
            fmt_value(r, r.median_base), fmt_value(r, r.median_other), _fmt_ratio(r.ratio), _fmt_ci(r),
            _fmt_p(r), NONE if math.isnan(r.p_perm) else f"{r.p_perm:.2g}", r.verdict_text()]


def method_text(c: Comparison, fail_above_pct: float | None) -> str:
    noise = (f"Changes within ±{c.noise_pct:g}% (--noise) are no change whatever p says. " if c.noise_pct
             else "No noise threshold (--noise): any significant change is reported. ")
    return (f"Baseline {c.base_path}; other {c.other_path}. Ratio = median other / median baseline (> 1 is "
            f"slower for seconds; workload figures say which way is better, e.g. MB/s and IOPS higher, latency "
            f"lower). p (test): {_test_text(c)}. p (perm.): {PERMUTATION_METHOD}. Verdict slower/faster "
            f"(higher/lower) when {'p (perm.)' if c.by == 'permutation' and not _paired(c) else 'p (test)'} < "
            f"{ALPHA:g}. "
            f"{noise}95% CI of ratio: {CI_METHOD}. "
            f"{fmt_threshold(fail_above_pct)}{_ungated_text(c, fail_above_pct)}. "
            "n counts measured samples (warm-ups excluded).")


def _paired(c: Comparison) -> bool:
    return any(r.test == "paired" for r in c.rows)


def _test_text(c: Comparison) -> str:
    """Which test decided: in one run whose sides took turns (ab), the paired test of its rounds."""
    if not _paired(c):
        return TEST_METHOD
    return (f"where the two sides took turns round by round (marked paired), the {PAIRED_METHOD}, which decides "
            f"those rows' verdicts; else the {TEST_METHOD}")


def _ungated_text(c: Comparison, fail_above_pct: float | None) -> str:
    ungated = sorted({r.figure for r in c.rows if not r.gated})
    if fail_above_pct is None or not ungated:
        return ""
    return f"; {' and '.join(ungated)} are compared but not gated (--gate-resources gates them too)"


def notes(c: Comparison) -> list[str]:
    """Everything that is not a row but changes how to read the rows."""
    out = [f"host differs from the baseline (--force): {d}" for d in c.host_differences]
    out += [f"software changed since the baseline: {d}" for d in c.software_changes]
    out += c.busy
    out += [f"only in baseline: {x}" for x in c.only_in_base]
    out += [f"only in other: {x}" for x in c.only_in_other]
    out += [f"{r.cell}: the two cells differ, the ratio may compare different work: {'; '.join(r.differences)}"
            for r in c.rows if r.differences]
    return out


def no_regression_text(fail_above_pct: float | None) -> str:
    if fail_above_pct is None:
        return "None flagged: no --fail-above threshold given."
    return f"None: no ratio above {1 + fail_above_pct / 100:.4g}."


def regression_lines(comparisons: Iterable[Comparison], fail_above_pct: float | None) -> list[str]:
    """One line per regressed row, for the closing list and for the CI log."""
    return [f"{r.cell}: median {r.ratio:.2f}× baseline ({fmt_value(r, r.median_base)}"
            f"{' s' if r.figure == 'seconds' else ''} → {fmt_value(r, r.median_other)}"
            f"{' s' if r.figure == 'seconds' else ''}) in {c.other_path}"
            for c, r in regressed(comparisons, fail_above_pct)]


def fmt_threshold(fail_above_pct: float | None) -> str:
    if fail_above_pct is None:
        return "no --fail-above threshold: nothing is flagged as a regression"
    return (f"regression: ratio > {1 + fail_above_pct / 100:.4g} for seconds and lower-is-better figures, "
            f"ratio < 1/{1 + fail_above_pct / 100:.4g} for higher-is-better ones (--fail-above {fail_above_pct:g}%), "
            "whatever p says")


def fmt_value(r: ComparisonRow, x: float) -> str:
    """Seconds as every table prints them; another figure with its unit."""
    return fmt_seconds(x) if r.figure == "seconds" else f"{x:.4g} {r.unit}".strip()
