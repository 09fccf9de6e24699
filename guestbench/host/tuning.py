"""The machine's settings that make timings move — CPU governor and boost, transparent huge pages, SMT, the
kernel's mitigations, other guestbench runs now — as the fingerprint records them (absent: the machine does not
say)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guestbench.host.neighbours import other_runs


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _bracketed(text: str | None) -> str | None:
    """sysfs lists choices with the active one in brackets: 'always [madvise] never' → 'madvise'."""
    if text and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def _boost() -> bool | None:
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if boost is not None:
        return boost == "1"
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    return None if no_turbo is None else no_turbo == "0"


def _mitigations() -> dict[str, int] | None:
    """How many of the kernel's CPU vulnerability entries are mitigated, vulnerable or not affected."""
    d = Path("/sys/devices/system/cpu/vulnerabilities")
    if not d.is_dir():
        return None
    counts = {"mitigated": 0, "vulnerable": 0, "not affected": 0}
    for f in d.iterdir():
        text = (_read(str(f)) or "").lower()
        key = "not affected" if text.startswith("not affected") else \
            "vulnerable" if text.startswith("vulnerable") else "mitigated"
        counts[key] += 1
    return counts



def settings() -> dict[str, Any]:
    """What on this machine makes timings move (absent: the machine does not say)."""
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    smt = _read("/sys/devices/system/cpu/smt/active")
    out: dict[str, Any] = {
        "governor": governor,
        "boost": _boost(),
        "transparent_hugepages": _bracketed(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "smt": None if smt is None else smt == "1",
        "mitigations": _mitigations(),
        "other_guestbench_runs": other_runs(),
    }
    return {k: v for k, v in out.items() if v is not None}
