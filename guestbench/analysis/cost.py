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

from guestbench.analysis.cells import Row
from guestbench.scenario.prices import Prices as Prices  # what the cost tables say of the prices

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


def per_cell(cell_rows: list[Row], prices: Prices | None) -> list[CostRow]:
    """One row per cell whose samples recorded what they used, in file order (a density level's appliances have
    their figures in the density tables)."""
    out = []
    for r in cell_rows:
        if r.density or not r.uses:
            continue
        core = [u.cpu_s for u in r.uses]
        gib = [u.peak_mib / MIB_PER_GIB * u.seconds for u in r.uses]
        money = [prices.per_sample(c, g) for c, g in zip(core, gib)] if prices else None
        nbytes = r.bytes or None
        out.append(CostRow(
            backend=r.backend, placement=r.placement or "host", label=r.label,
            per="launch" if r.measurement == "startup" else "sample", n=len(r.uses),
            peak_mib=Spread.of([u.peak_mib for u in r.uses]), wall_s=Spread.of([u.seconds for u in r.uses]),
            core_s=Spread.of(core), gib_s=Spread.of(gib),
            per_1000=Spread.of([m * 1000 for m in money]) if money else None,
            per_gb=Spread.of([m / (nbytes / 1e9) for m in money]) if money and nbytes else None,
            busy=sum(1 for u in r.uses if u.busy)))
    return out
