"""What a fleet worker advertises to the scheduler, as Dask worker resources.

`bench=1` on every worker and `bench=1` asked by every host task: one measurement run at a time per host.
One resource per usable backend (`uml=1`, `tcg=1`): a host task asks for the backends it will launch, so the
scheduler sends it only to a host that can launch them.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

from guestbench.backends import BACKENDS

BENCH = "bench"


def advertised(usable: list[str]) -> dict[str, float]:
    return {BENCH: 1, **{name: 1 for name in usable}}


def backends_of(resources: Mapping[str, Any] | None) -> list[str]:
    """The backends a worker said it can launch, in registry order."""
    have = set((resources or {}).keys())
    return [name for name in BACKENDS if name in have]


def asked(backends: list[str]) -> dict[str, float]:
    """What a host task needs: the bench to itself, and each backend it launches."""
    return {BENCH: 1, **{name: 1 for name in backends}}


def known(raw: Any) -> dict[str, float]:
    """What a worker advertised, as far as guestbench reads it: `bench` and the backends' names, each with a finite
    number. The rest is a host's own word, kept out of the run's file (a NaN there, which Dask passes on, would be
    written and then refused by every reader of the fleet's results)."""
    if not isinstance(raw, Mapping):
        return {}
    return {k: float(v) for k, v in raw.items() if k in (BENCH, *BACKENDS)
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
