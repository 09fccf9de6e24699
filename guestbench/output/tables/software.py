"""The software table: what each backend of a run ran on (guestbench.analysis.software computes it)."""

from __future__ import annotations

from guestbench.analysis.software import KEYS, Software, differing
from guestbench.util.units import NONE

HEADER = ["backend", "stack", *KEYS]


def rows(found: list[Software]) -> list[list[str]]:
    return [[s.system, s.stack, *(s.versions.get(k, NONE) for k in KEYS)] for s in found]


def caption(found: list[Software]) -> str:
    differ = differing(found)
    parts = ["What each backend ran on: host is the machine's own software (the fingerprint's versions); another "
             "stack is a Debian suite's root file system (guestbench stack list), its versions as its dpkg database "
             "has them, the worker on its own Python; kernel is the appliance's; uml_mode is UML's userspace mode "
             "(seccomp or ptrace)."]
    parts.append(f"Differs between the run's stacks: {', '.join(differ)}." if differ else
                 "The same software on every stack of the run.")
    return " ".join(parts)
