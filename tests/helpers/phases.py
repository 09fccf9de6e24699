"""Boot phases as the tests check them: a real launch log (tests/data/phases) replayed chunk by chunk as libguestfs
delivered it, and the phase tables a real run printed."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from guestbench.analysis.findings import analyze
from guestbench.instruments import markers
from guestbench.output.tables import phases as phase_table
from guestbench.results import Run
from guestbench.util.units import fmt_seconds
from helpers.paths import ROOT

LOGS = ROOT / "tests" / "data" / "phases"  # captured launch logs: arrival time, source, repr of the chunk
SOURCES = {"A": "appliance", "L": "libguestfs"}


def replay(name: str, keep: Callable[[str], bool] = lambda text: True) -> tuple[list[markers.Line], float]:
    """Feed a captured log to LineClock as the worker does; returns the lines and the timed start-up."""
    raw = (LOGS / name).read_text().splitlines()
    total = float(raw[0].split()[1])
    clock = markers.LineClock()
    lines: list[markers.Line] = []
    for entry in raw[1:]:
        t, src, chunk = re.fullmatch(r"\s*(-?[0-9.]+) (\S) (.*)", entry).groups()  # type: ignore[union-attr]
        text = ast.literal_eval(chunk)
        if text is None or src not in SOURCES:
            continue
        text = text.decode() if isinstance(text, bytes) else text
        if not keep(text):
            continue
        lines += clock.feed(float(t), SOURCES[src], text if src == "A" else text + "\n")
    return lines + clock.flush(), total


def check_printed_phase_tables(doc: dict[str, Any], out: str) -> None:
    """The printed table (one column per backend, the two sums, the host-side share) of a real run's phases:
    tests/test_phases.py checks UML's with it, tests/test_run_tcg.py qemu's."""
    assert "startup: boot phases" in out and "sum of phase medians" in out and "median start-up" in out
    for pt in phase_table.phase_tables(analyze(Run.from_dict(doc)).phases):
        for bp in pt.summaries:
            assert abs(bp.sum_of_medians - bp.median_total) <= 0.01 * bp.median_total
            assert fmt_seconds(bp.median_total) in out
            # the published claim: start-up is dominated by the appliance, not the hypervisor
            assert bp.host_side_share < 0.5
