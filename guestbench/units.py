"""Sizes and durations as users write them: decimal (MB = 10^6 bytes) and binary (MiB = 2^20) units."""

from __future__ import annotations

import re

_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
SIZE_HELP = "an integer byte count or a number with a unit: B, kB, MB, GB (10^3), KiB, MiB, GiB (2^10), e.g. 500MiB"


def parse_size(value: object) -> int:
    """Parse `500MiB`, `1GiB`, `500MB`, `4096` into bytes; raise ValueError with the allowed forms."""
    if isinstance(value, bool):
        raise ValueError(f"bad size {value!r}; expected {SIZE_HELP}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"bad size {value!r}; must be positive")
        return value
    if not isinstance(value, str):
        raise ValueError(f"bad size {value!r}; expected {SIZE_HELP}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"bad size {value!r}; expected {SIZE_HELP}")
    number = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if number < 1 or number != int(number):
        raise ValueError(f"bad size {value!r}; must be a positive whole number of bytes")
    return int(number)


def format_size(nbytes: int) -> str:
    """Render bytes the way a user would write them back (exact binary unit when possible)."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def mb_per_s(nbytes: int, seconds: float) -> float:
    """Throughput in MB/s, MB = 10^6 bytes (the unit every guestbench output uses)."""
    return nbytes / seconds / 1e6
