"""start-up: how long until a freshly launched appliance's daemon answers."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CACHE, FORMAT, CellContext, Measurement, Param, create_disk, size_param


_LAUNCH = ("wall time of launch() on a fresh libguestfs handle with one scratch disk, plus one daemon round trip "
           "(ping), until the daemon answers")


class Startup(Measurement):
    name = "startup"
    summary = "launch a fresh appliance with one scratch disk until its daemon answers"
    timed = _LAUNCH + ("; the first launch of each backend (appliance cache check/build, cold host caches) is "
                       "reported once as 'cold' and not sampled")
    params: tuple[Param, ...] = (size_param("disk_size", "64MiB", "size of the scratch disk image"), FORMAT, CACHE)
    times_launch = True

    def timed_text(self, cold: bool) -> str:
        return self.timed if cold else _LAUNCH + ("; no cold launch was taken (the scenario's cold: false): the "
                                                  "cell's first sample is its first launch")

    def add_drives(self, g: Any, ctx: CellContext) -> None:
        create_disk(g, ctx, "scratch")
