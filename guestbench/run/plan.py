"""A scenario's cells in the order they run: measurement-major, so that the backends of one measurement are
measured close in time; `concurrency: N` makes a group of N cells (one per appliance) that run at once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from guestbench.backends import BACKENDS
from guestbench.measurements import Measurement
from guestbench.measurements import get as get_measurement
from guestbench.scenario import MeasurementSpec, Scenario


@dataclass
class Group:
    """Cells that run at the same time (usually one), and the iterations each of them runs."""

    cells: list[dict[str, Any]]
    iterations: list[str]

    @property
    def backend(self) -> str:
        return str(self.cells[0]["backend"])


def plan(sc: Scenario, usable: list[str]) -> list[Group]:
    """Every group of the host placement, its cells as new results-document cells (not yet recorded)."""
    groups = []
    for spec in sc.measurements:
        m = get_measurement(spec.measurement)
        n = int(spec.params.get("concurrency", 1))
        for b in usable:
            groups.append(Group([new_cell(sc, spec, m, b, k, n) for k in range(1, n + 1)],
                                sc.iterations(m.times_launch)))
    return groups


def new_cell(sc: Scenario, spec: MeasurementSpec, m: Measurement, backend: str, k: int, n: int) -> dict[str, Any]:
    """The cell record of guest k of n for one backend: what is measured, how, and what the clock covers."""
    together = ({"label": f"{spec.label}.guest{k}", "variant": {**spec.variant, "guest": k}, "instance": k,
                 "concurrency": n} if n > 1 else {"label": spec.label, "variant": dict(spec.variant)})
    metrics = m.metrics(spec.params)
    return {
        "backend": backend, "placement": "host", "measurement": spec.measurement, "group": spec.group, **together,
        "params": dict(spec.params), "timed": m.timed, "cache_mode": m.cache_mode(spec.params),
        "bytes": m.nbytes(spec.params), "what": m.describe(spec.params),
        **({"metrics": [dataclasses.asdict(mt) for mt in metrics]} if metrics else {}),
        **({"phases": True, "phase_markers": BACKENDS[backend].phase_markers} if sc.phases and m.times_launch
           else {}),
    }
