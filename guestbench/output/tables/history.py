"""The tables of `guestbench history`: per machine its runs with the software each had (changes marked), one
line per series (cell and figure) with its steps, drift and verdict, and each series run by run."""

from __future__ import annotations

import math

from guestbench.analysis import steps
from guestbench.analysis.history import MAX_RUNS, SOFTWARE, Machine, Series
from guestbench.analysis.history_gate import HistoryFindings
from guestbench.output.document import Table
from guestbench.util.units import NONE, fmt_seconds

SERIES_COLUMNS = ["cell", "figure", "runs", "newest median", "noise σ", "floor", "steps", "drift", "newest run"]


def value(s: Series, x: float) -> str:
    """A figure as every table prints it: seconds as the timing tables do, others with their unit."""
    if math.isnan(x):
        return NONE
    return fmt_seconds(x) if s.figure == "seconds" else f"{x:.4g}"


def unit(s: Series) -> str:
    return "s" if s.figure == "seconds" else s.unit


def _signed(x: float, fmt: str) -> str:
    return ("+" if x >= 0 else "−") + fmt.format(abs(x))


def shift_text(s: Series, sh: steps.Shift) -> str:
    """A change's size with its CI, in the figure's unit and as a percentage."""
    lo, hi = sh.diff_ci
    u = unit(s)
    return (f"{_signed(sh.diff, '{:.3g}')} {u} ({_signed(100 * (sh.ratio - 1), '{:.1f}')}%; "
            f"{steps.CONFIDENCE:.0%} CI {_signed(lo, '{:.3g}')} to {_signed(hi, '{:.3g}')} {u})")


def step_text(f: HistoryFindings, s: Series, st: steps.Step) -> str:
    r = s.points[st.at].run
    what = f"{st.change} at run {r + 1}" + (" (the newest run against its segment)" if st.newest else "")
    changed = f.changes[s.machine][r]
    return f"{what}: {shift_text(s, st.shift)}" + (f"; software: {', '.join(changed)}" if changed else "")


def series_row(f: HistoryFindings, s: Series) -> list[str]:
    v = s.verdict
    newest = s.points[-1]
    found = "; ".join(step_text(f, s, st) for st in v.steps) or ("none" if len(s.points) >= steps.MIN_RUNS else NONE)
    drift = step_text(f, s, v.drift) if v.drift else NONE
    sigma = NONE if v.sigma_pct is None else f"{v.sigma_pct:.1f}%"
    verdict = "REGRESSION" if v.newest == steps.REGRESSION else ("—" if len(s.points) < steps.MIN_RUNS else "ok")
    return [s.cell, s.figure if s.figure == "seconds" else f"{s.figure} ({s.unit}, "
            f"{'higher' if s.higher_better else 'lower'} is better)",
            f"{len(s.points)}" + (f" newest of {len(s.points) + s.older:,}" if s.older else ""),
            f"{value(s, newest.median)} {unit(s)}", sigma, f"{v.floor_pct:.1f}%", found, drift, verdict]


def series_table(f: HistoryFindings, machine: int) -> Table:
    rows, styles = [], {}
    for i, s in enumerate(x for x in f.history.series if x.machine == machine):
        rows.append(series_row(f, s))
        if s.verdict.newest == steps.REGRESSION:
            styles.update({(i, j): "regression" for j in range(len(SERIES_COLUMNS))})
        elif s.verdict.steps or s.verdict.drift:
            styles[(i, 6)] = "warn"
    return Table("history", "Series", SERIES_COLUMNS, rows, caption=steps.METHOD, numeric_from=2, styles=styles,
                 empty="No cell with samples.")


def software_table(m: Machine) -> Table:
    """The runs in time order with the software each had; a changed version is marked. The newest MAX_RUNS only,
    as a series shows them."""
    rows, styles = [], {}
    older = max(0, len(m.runs) - MAX_RUNS)
    for i, r in enumerate(m.runs[older:], start=older):
        rows.append([str(i + 1), r.started or NONE, r.path + (f" (host {r.member})" if r.member else ""),
                     *[r.software[k] or NONE for k, _ in SOFTWARE]])
        if i:
            styles.update({(i - older, 3 + j): "warn" for j, (k, _) in enumerate(SOFTWARE)
                           if r.software[k] != m.runs[i - 1].software[k]})
    return Table("history-runs", "Runs", ["run", "started (UTC)", "file", *[w for _, w in SOFTWARE]], rows,
                 caption="Each run's software as its fingerprint recorded it; a version that changed from the run "
                         "before is marked." + (f" The newest {MAX_RUNS:,}: {older:,} older run(s) not shown."
                                                if older else ""), styles=styles)


def points_table(f: HistoryFindings, s: Series) -> Table:
    """One series run by run: median, CI, n, host load, and where a step starts or the software changed."""
    m = f.history.machines[s.machine]
    starts = {st.at: st for st in [*s.verdict.steps, *([s.verdict.drift] if s.verdict.drift else [])]}
    rows, styles = [], {}
    for i, p in enumerate(s.points):
        lo, hi = p.ci
        note = [f"{starts[i].change} starts here" if i in starts else "", ", ".join(f.changes[s.machine][p.run])]
        rows.append([str(p.run + 1), m.runs[p.run].started or NONE, f"{value(s, p.median)}",
                     NONE if math.isnan(lo) else f"{value(s, lo)}–{value(s, hi)}", str(len(p.values)),
                     f"busy in {p.busy}" if p.busy else "quiet or not judged", "; ".join(n for n in note if n)])
        if i in starts:
            styles[(i, 6)] = "regression" if starts[i].change == steps.REGRESSION else "good"
    return Table("history-points", f"{s.cell}: {s.figure}", ["run", "started (UTC)", f"median {unit(s)}",
                                                            f"95% CI of the mean {unit(s)}", "n", "host", "note"],
                 rows, label=s.key, numeric_from=2, styles=styles,
                 caption=f"Run by run on {m.label}: each run's median and the 95% CI of its mean (Student t) over "
                         f"its samples, n, and whether the host was busy during them.")
