"""What a launch, a sample and a gigabyte cost per backend: each sample's CPU seconds and peak memory
(guestbench.instruments.usage) in the units a price list multiplies, and, with the scenario's `cost:` prices, in money.

Per sample:
- core-seconds: the CPU seconds of the cell's processes during the timed step;
- GiB-seconds: the step's peak memory (PSS, else RSS) times its wall time: memory held that long.
Prices come in one of two forms:
- unit prices (`vcpu_hour`, `gib_hour`): cost = core-s × vcpu_hour / 3600 + GiB-s × gib_hour / 3600;
- an instance (`instance_hour`, `vcpus`, `memory`): an appliance occupies the larger of its CPU share and its
  memory share of the instance for the step's wall time (the resource that runs out first decides how many fit):
  cost = instance_hour / 3600 × max(core-s / vcpus, GiB-s / memory GiB).
Figures are the medians over a cell's samples, with their range; cost per 1,000 is per 1,000 samples (for a
start-up cell: launches); cost per GB is for cells that move bytes (uploads: 10^9 bytes).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from guestbench.results import figures as cell_figures
from guestbench.scenario.prices import Prices

MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


@dataclass(frozen=True)
class CostRow:
    backend: str
    placement: str
    label: str
    per: str  # what one sample is: "launch", or "sample"
    n: int
    peak_mib: Spread
    wall_s: Spread
    core_s: Spread
    gib_s: Spread
    per_1000: Spread | None  # money per 1,000 samples
    per_gb: Spread | None  # money per 10^9 bytes moved
    busy: int  # samples taken while the host was busy (guestbench.instruments.load)


def rows(doc: dict[str, Any], prices: Prices | None) -> list[CostRow]:
    """One row per cell whose samples recorded what they used, in file order."""
    out = []
    for cell in doc.get("cells") or []:
        if not isinstance(cell, dict) or cell_figures.is_density(cell):  # its own table has its figures
            continue
        per_sample = []
        busy = 0
        for s in cell.get("samples") or []:
            cpu, peak, wall = cell_figures.cpu_s(s), cell_figures.peak_mib(s), cell_figures.number(s.get("seconds"))
            if cpu is None or peak is None or wall is None:
                continue
            per_sample.append((cpu, peak, wall))
            busy += 1 if ((s.get("load") or {}).get("busy") is True) else 0
        if not per_sample:
            continue
        core = [c for c, _, _ in per_sample]
        gib = [p / MIB_PER_GIB * w for _, p, w in per_sample]
        money = [prices.per_sample(c, g) for c, g in zip(core, gib)] if prices else None
        nbytes = cell.get("bytes") if isinstance(cell.get("bytes"), int) and cell.get("bytes") else None
        per = "launch" if cell.get("measurement") == "startup" else "sample"
        out.append(CostRow(
            backend=str(cell.get("backend") or "?"), placement=str(cell.get("placement") or "host"),
            label=str(cell.get("label") or cell.get("measurement") or "?"), per=per, n=len(per_sample),
            peak_mib=Spread.of([p for _, p, _ in per_sample]),
            wall_s=Spread.of([w for _, _, w in per_sample]), core_s=Spread.of(core), gib_s=Spread.of(gib),
            per_1000=Spread.of([m * 1000 for m in money]) if money else None,
            per_gb=Spread.of([m / (nbytes / 1e9) for m in money]) if money and nbytes else None,
            busy=busy))
    return out


def prices_of(doc: dict[str, Any]) -> Prices | None:
    """The prices the run's scenario gave, if any."""
    given = ((doc.get("scenario") or {}).get("cost")) if isinstance(doc.get("scenario"), dict) else None
    return Prices.from_dict(given) if isinstance(given, dict) and given else None
