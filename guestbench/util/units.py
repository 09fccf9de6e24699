"""Sizes as users write them, decimal (MB = 10^6 bytes) and binary (MiB = 2^20), and the MB/s every output uses."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from guestbench.util.errors import clip


def number(value: object) -> float | None:
    """A finite float, or None: JSON may hold null, and bool is not a number here (one reader for every output)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$", re.ASCII)
MAX_SIZE = 2**63 - 1  # libguestfs sizes are int64
SIZE_HELP = "an integer byte count or a number with a unit: B, kB, MB, GB (10^3), KiB, MiB, GiB (2^10), e.g. 500MiB"


def parse_size(value: object, *, what: str = "size", fractions: bool = True) -> int:
    """Parse `500MiB`, `1GiB`, `500MB`, `4096` into bytes; raise ValueError with the allowed forms.

    `what` names the value in messages ("image size"); `fractions=False` refuses a number with a fraction
    such as 1.5G (host image sizes, which always took whole numbers).
    """
    bad = f"bad {what} {clip(value)}"
    if isinstance(value, bool):
        raise ValueError(f"{bad}; expected {SIZE_HELP}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{bad}; must be positive; expected {SIZE_HELP}")
        if value > MAX_SIZE:
            raise ValueError(f"{bad}; too large (at most {MAX_SIZE} bytes)")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{bad}; expected {SIZE_HELP}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{bad}; expected {SIZE_HELP}")
    if not fractions and "." in m.group(1):
        raise ValueError(f"{bad}; a whole number with a unit is needed here; expected {SIZE_HELP}")
    # exact arithmetic: 16.1kB is 16100 bytes, which binary floating point would miss
    try:
        number = Fraction(m.group(1)) * _UNITS[m.group(2).lower()]
    except ValueError:  # more digits than int() converts
        raise ValueError(f"{bad}; too large (at most {MAX_SIZE} bytes)") from None
    if number > MAX_SIZE:
        raise ValueError(f"{bad}; too large (at most {MAX_SIZE} bytes)")
    if number < 1 or number.denominator != 1:
        raise ValueError(f"{bad}; must be a positive whole number of bytes; expected {SIZE_HELP}")
    return int(number)


def format_size(nbytes: int) -> str:
    """Render bytes the way a user would write them back: the largest unit that divides exactly
    (4GB, not 3906250KiB; 1GiB, not 1073741824B)."""
    units = (("TiB", 2**40), ("TB", 10**12), ("GiB", 2**30), ("GB", 10**9), ("MiB", 2**20), ("MB", 10**6),
             ("KiB", 2**10), ("kB", 10**3))
    for unit, factor in units:  # largest factor first
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def approx_size(nbytes: int) -> str:
    """Bytes to three significant figures in binary units (free space: 1.43GiB, 812KiB), for reading, not
    for writing back."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= factor:
            return f"{nbytes / factor:.3g}{unit}"
    return f"{nbytes}B"


def mb_per_s(nbytes: int, seconds: float) -> float:
    """Throughput in MB/s, MB = 10^6 bytes (the unit every guestbench output uses)."""
    return nbytes / seconds / 1e6


def format_duration(seconds: float) -> str:
    """A duration as a person plans with it: seconds under 90 s, minutes under 90 min, else hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


NONE = "–"  # how every output writes a figure that does not exist


def fmt_seconds(x: float | None) -> str:
    """Three significant figures (11.9, 0.412, 147), whole seconds from 1000 s up, "–" when missing."""
    if x is None or math.isnan(x):
        return NONE
    if abs(x) >= 999.5:
        return f"{x:.0f}"
    text = f"{x:#.3g}"
    if "e" in text:
        return f"{x:.3g}"
    return text.rstrip(".")
