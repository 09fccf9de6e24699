"""The cost table: what a sample costs per backend and measurement, in core-seconds and GiB-seconds, and in money
at the scenario's prices (guestbench.analysis.cost computes it)."""

from __future__ import annotations

import math

from guestbench.analysis.cost import CostRow, Prices, Spread


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _spread(s: Spread | None) -> str:
    if s is None:
        return "–"
    return _fmt(s.median) if math.isclose(s.low, s.high) else f"{_fmt(s.median)} ({_fmt(s.low)}–{_fmt(s.high)})"


def header(prices: Prices | None) -> list[str]:
    cur = prices.currency if prices else ""
    money = [f"{cur} per 1,000", f"{cur} per GB"] if prices else []
    return ["backend", "placement", "measurement", "n", "core-s per sample", "GiB-s per sample", "peak MiB",
            *money]


def cells(r: CostRow, prices: Prices | None) -> list[str]:
    money = [_spread(r.per_1000), _spread(r.per_gb)] if prices else []
    return [r.backend, r.placement, r.label, str(r.n), _spread(r.core_s), _spread(r.gib_s), _spread(r.peak_mib),
            *money]


def caption(rs: list[CostRow], prices: Prices | None) -> str:
    busy = sum(r.busy for r in rs)
    parts = ["Per timed step (a start-up cell's step is one launch): core-s = CPU seconds of the cell's processes "
             "(hypervisor, helpers, libguestfs's library; guestbench.instruments.usage); GiB-s = peak memory (PSS) "
             "× wall time; median (min–max) over n samples."]
    if prices:
        parts.append(f"Prices: {prices.describe()}. Per 1,000: 1,000 samples (launches for start-up); per GB: "
                     "per 10^9 bytes the step moved.")
    else:
        parts.append("No prices given (scenario key cost:): core-s and GiB-s are what a price list multiplies.")
    parts.append(f"{busy} of the samples were taken while the host was busy." if busy else
                 "No sample was taken on a busy host.")
    return " ".join(parts)
