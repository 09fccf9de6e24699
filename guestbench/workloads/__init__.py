"""Workload tools run inside a libguestfs appliance: command builders and parsers of their machine output.

Everything here is pure (strings in, numbers out) except ``tartree``, which writes its archive into a
host cache. The commands are shell lines for ``g.debug("sh", [cmd])``: the appliance has a Debian
userland without ``which`` and without a ``root`` user name, so commands name tools by their plain name
and users by number.
"""

from __future__ import annotations

from dataclasses import dataclass

# What bonnie++ prints instead of a number when a test finished too quickly to give a meaningful rate.
# Parsers return this string (never a number) for such fields, so it can't be averaged by accident.
TOO_FAST = "+++++"


@dataclass(frozen=True)
class Metric:
    """One value a workload reports: its key in the parsed dict, its unit, and which direction is better.

    Units are precise: "MB/s" is 10^6 bytes/s; "KiB/s" is 1024 bytes/s (bonnie++'s native K/sec).
    """

    key: str
    unit: str
    higher_better: bool
    label: str


__all__ = ["Metric", "TOO_FAST"]
