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

MIB_PER_GIB = 1024.0
KEYS = {"currency": "text shown with every amount (e.g. USD, EUR); default 'money'",
        "vcpu_hour": "price of one vCPU for an hour (a number >= 0)",
        "gib_hour": "price of one GiB of memory for an hour (a number >= 0)",
        "instance_hour": "price of one instance for an hour (with vcpus and memory)",
        "vcpus": "the instance's vCPUs (an integer >= 1)",
        "memory": "the instance's memory (MiB, or a size such as 16GiB)"}
FORMS = "either vcpu_hour and gib_hour, or instance_hour with vcpus and memory"


@dataclass(frozen=True)
class Prices:
    currency: str = "money"
    vcpu_hour: float | None = None
    gib_hour: float | None = None
    instance_hour: float | None = None
    vcpus: int | None = None
    memory_mib: int | None = None

    @property
    def instance(self) -> bool:
        return self.instance_hour is not None

    def per_sample(self, core_s: float, gib_s: float) -> float:
        if self.instance:
            assert self.instance_hour is not None and self.vcpus and self.memory_mib
            share = max(core_s / self.vcpus, gib_s / (self.memory_mib / MIB_PER_GIB))
            return self.instance_hour / 3600 * share
        assert self.vcpu_hour is not None and self.gib_hour is not None
        return core_s * self.vcpu_hour / 3600 + gib_s * self.gib_hour / 3600

    def describe(self) -> str:
        if self.instance:
            return (f"an instance of {self.vcpus} vCPUs and {self.memory_mib / MIB_PER_GIB:g} GiB at "
                    f"{self.instance_hour:g} {self.currency}/hour; an appliance pays for the larger of its CPU share "
                    "(core-s / vCPUs) and its memory share (GiB-s / GiB) of it")
        return (f"{self.vcpu_hour:g} {self.currency} per vCPU-hour and {self.gib_hour:g} {self.currency} per "
                "GiB-hour, applied to core-s and GiB-s")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("currency", self.currency), ("vcpu_hour", self.vcpu_hour),
                                  ("gib_hour", self.gib_hour), ("instance_hour", self.instance_hour),
                                  ("vcpus", self.vcpus), ("memory_mib", self.memory_mib)) if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prices:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def to_file(self) -> dict[str, Any]:
        """The scenario-file form (memory under its file key)."""
        d = self.to_dict()
        if "memory_mib" in d:
            d["memory"] = d.pop("memory_mib")
        return d


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
