"""What each backend of a run ran on (issue 47): its software stack and that stack's versions, one row per system
(`uml`, `uml+seccomp@sid`), and which of them differ between the run's stacks."""

from __future__ import annotations

from dataclasses import dataclass

from guestbench.results.model import Cell

# what a row shows, in order: the stack's suite, the worker's Python, then the software a figure depends on
KEYS = ("suite", "python", "libguestfs", "qemu", "libvirt", "uml", "uml_mode", "supermin", "kernel")


@dataclass(frozen=True)
class Software:
    system: str  # the backend as it ran (results.model.Cell.system)
    stack: str
    versions: dict[str, str]  # KEYS -> version (those recorded)


def per_system(cells: list[Cell]) -> list[Software]:
    """One row per system, from its first cell that recorded its software, in file order; none when every cell ran
    on the machine's own stack in its default mode (the fingerprint says that software already)."""
    if all(c.system == c.backend for c in cells):
        return []
    out: dict[str, Software] = {}
    for c in cells:
        if c.system in out or not c.software or set(c.software) <= {"stack"}:  # planned, never ran
            continue
        out[c.system] = Software(c.system, c.stack_name, {k: str(c.software[k]) for k in KEYS
                                                           if isinstance(c.software.get(k), (str, int, float))})
    return list(out.values())


def differing(rows: list[Software]) -> list[str]:
    """The software whose version is not the same on every stack of the run (the mode aside: it is a choice)."""
    stacks: dict[str, dict[str, str]] = {}
    for r in rows:
        stacks.setdefault(r.stack, {}).update({k: v for k, v in r.versions.items() if k != "uml_mode"})
    keys = [k for k in KEYS if k != "uml_mode"]
    return [k for k in keys if len({s.get(k) for s in stacks.values()}) > 1]
