"""Reasons that fit a terminal line: one short sentence (what failed, why, what to do) for a long one.

A backend's full reason quotes libvirt's and qemu's errors verbatim (a dozen lines in an 80-column table);
that text stays in `--json`, `-v` and the results file. Terminal tables and progress lines lead with the
short form. Known causes get a sentence written for them; any other reason is cut to its first sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LIMIT = 110  # characters: a short reason fits two lines of an 80-column table's reason column


@dataclass(frozen=True)
class Cause:
    """A failure recognised by the text of its reason, and the sentence that replaces it."""

    pattern: re.Pattern[str]
    sentence: str  # may use the pattern's named groups


def _cause(regex: str, sentence: str) -> Cause:
    return Cause(re.compile(regex, re.S), sentence)


NESTED_HINT = "use placement: nested"

# The first cause that matches wins, so a specific one comes before a general one.
CAUSES: tuple[Cause, ...] = (
    _cause(r"MSR 0x10a.*kvm_pvm|kvm_pvm.*MSR 0x10a",
           "qemu aborts: this PVM /dev/kvm rejects MSR 0x10a; " + NESTED_HINT),
    _cause(r"did not finish within (?P<s>[\d.]+) s.*kvm_pvm",
           "probe hung, killed at {s} s: PVM /dev/kvm cannot boot the appliance; " + NESTED_HINT),
    _cause(r"kvm_pvm", "PVM /dev/kvm cannot boot the stock appliance kernel; " + NESTED_HINT),
    _cause(r"MSR 0x10a", "qemu aborts on this /dev/kvm (it rejects MSR 0x10a, IA32_ARCH_CAPABILITIES)"),
    _cause(r"did not finish within (?P<s>[\d.]+) s",
           "probe hung, killed at {s} s; see doctor -v, or allow more with --probe-timeout"),
    _cause(r"libvirtd is not running and guestbench is not root",
           "libvirtd is not running; start it as root (virtlogd -d && libvirtd -d) or run guestbench as root"),
    _cause(r"does not answer: .*Failed to connect socket",
           "libvirtd does not answer on its socket; restart it (systemctl restart libvirtd)"),
    _cause(r"worker crashed", "guestbench's worker crashed during the probe; see `guestbench doctor -v`"),
)


def short_reason(reason: str, limit: int = LIMIT) -> str:
    """One sentence for `reason`: a known cause's own, else its first sentence, cut at `limit` characters."""
    text = " ".join(reason.split())
    for cause in CAUSES:
        if (m := cause.pattern.search(text)) is not None:
            return cause.sentence.format(**m.groupdict())
    return _first_sentence(text, limit)


def _first_sentence(text: str, limit: int) -> str:
    end = re.search(r"[.;](?:\s|$)", text)
    first = text[:end.start()] if end else text
    if len(first) <= limit:
        return first
    cut = first[:limit - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",:;") + "…"
