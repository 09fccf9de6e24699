"""What `guestbench history` decides, once, before anything is laid out: the software that changed at each run, the
newest runs that regressed (by their history, or by a baseline for the series it pins), the runs judged and the runs
kept apart, hence the CI gate's exit status. Output lays these findings out and decides nothing of its own
(guestbench.output.history_doc), so the table, the JSON, the charts and the exit status cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from guestbench.analysis import baseline as baselines
from guestbench.analysis import history, steps
from guestbench.analysis.baseline import Expected, Judged
from guestbench.analysis.history import SKEW, History, Series
from guestbench.results.store import Stored


NAMED = 10
"""Files a line names at most (the rest are counted)."""


@dataclass(frozen=True)
class Verdict:
    """The gate's word on the newest runs: the lines of those that regressed (the history's, then the
    baseline's misses), the runs it judged, and the runs it never followed."""

    regressions: tuple[str, ...]
    judged: tuple[str, ...]  # per machine, each run that is some series' newest
    judged_line: str  # the runs judged as one line names them (the first NAMED, the rest counted)
    apart_line: str | None  # the runs kept apart, as one line names them

    def status(self, gate: bool) -> int:
        """The exit status: 1 only when gating (--fail-on-regression) and a newest run regressed."""
        return 1 if gate and self.regressions else 0


@dataclass(frozen=True)
class HistoryFindings:
    """A history with everything decided about it: what output lays out, and the verdict the exit status takes."""

    history: History
    changes: tuple[tuple[tuple[str, ...], ...], ...]  # [machine][run]: the software changed since the run before
    # (once per run, though every series of the machine names it at its steps and points)
    verdict: Verdict
    baseline: Judged | None  # what --baseline said of the history

    def pinned(self, s: Series) -> bool:
        """Whether a baseline judges `s`, not its history."""
        return self.baseline is not None and (s.machine, s.key) in self.baseline.pinned


def follow(stored: list[Stored], floors: dict[str, float], default_floor: float | None,
           pinned: list[tuple[dict[str, Any], dict[str, Expected]]] | None = None) -> HistoryFindings:
    """The history of `stored`'s runs (history.build) and all it finds, held against the baseline `pinned` when
    given; refused when there is nothing to follow (history.require_series)."""
    h = history.build(stored, floors, default_floor)
    history.require_series(h, baseline=pinned is not None)
    return find(h, baselines.judge(h, pinned) if pinned is not None else None)


def find(h: History, judged: Judged | None = None) -> HistoryFindings:
    """Everything decided about `h`: a series a baseline pins is judged by it instead of by its history."""
    changes = tuple(tuple(tuple(m.changes(at)) for at in range(len(m.runs))) for m in h.machines)
    found = regressions(h, judged.pinned if judged else set()) + (judged.missed if judged else [])
    runs = newest_judged(h)
    more = len(runs) - NAMED
    line = "; ".join(runs[:NAMED]) + (f"; and {more} more" if more > 0 else "") if runs else "none"
    return HistoryFindings(h, changes, Verdict(tuple(found), tuple(runs), line, apart_line(h)), judged)


def regressions(h: History, pinned: set[tuple[int, str]]) -> list[str]:
    """One line per series whose newest run regressed, for the closing list and the CI gate; the `pinned`
    series (machine, key) are judged by a baseline instead."""
    out = []
    for s in h.series:
        if s.verdict.newest != steps.REGRESSION or (s.machine, s.key) in pinned:
            continue
        m = h.machines[s.machine]
        regressed = [st for st in s.verdict.steps if st.change == steps.REGRESSION]
        anchor = regressed[-1] if regressed else s.verdict.drift
        since = ""
        if anchor is not None:
            r = s.points[anchor.at].run
            since = f" since run {r + 1} ({m.runs[r].path})"
        out.append(f"{m.label}: {s.key}: the newest run ({m.runs[s.points[-1].run].named()}) regressed{since}")
    return out


def newest_judged(h: History) -> list[str]:
    """The newest runs the verdicts are about: per machine, each run that is some series' newest."""
    newest = sorted({(s.machine, s.points[-1].run) for s in h.series if s.points})
    return [f"{h.machines[mi].label}: run {r + 1}, {h.machines[mi].runs[r].named()}" for mi, r in newest]


def apart_line(h: History) -> str | None:
    """One line naming the runs kept apart, or None."""
    if not h.apart:
        return None
    more = len(h.apart) - NAMED
    return (f"{len(h.apart)} run(s) not followed, dated after {h.until} (now plus {_days(SKEW)} of clock "
            f"skew) or not dated, so never the newest: {', '.join(r.named() for r in h.apart[:NAMED])}"
            + (f" and {more} more" if more > 0 else ""))


def _days(d: timedelta) -> str:
    return f"{d.days} day" + ("s" if d.days != 1 else "")
