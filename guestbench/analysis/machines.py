"""Whether two runs' timings can be compared, and what changed between them: the machine that ran each side (CPU,
cores, memory, VM, /dev/kvm: a difference makes timings incomparable; `compare` refuses it unless forced) and the
software (kernel, libguestfs, qemu, libvirt, UML, a stack's: what a regression run is about)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from guestbench.host import fingerprint
from guestbench.results import hosts as fleet_hosts
from guestbench.results.model import Cell, Run
from guestbench.util.errors import UserError, clip


def _differences(base: Run, other: Run, key: Any) -> list[str]:
    """What differs between the machines that ran the two sides; for two fleet runs, host by host (for the
    hosts both ran), each line naming its host."""
    def key_of(fp: Any) -> dict[str, Any]:
        return key(fp if isinstance(fp, dict) else {})

    def diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
        return [f"{prefix}{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]

    if fleet_hosts.is_fleet(base) and fleet_hosts.is_fleet(other):
        both = [n for n in fleet_hosts.names(base) if n in fleet_hosts.names(other)]
        return [line for n in both for line in diff(key_of(base.hosts[n].host), key_of(other.hosts[n].host),
                                                     f"host {n}: ")]
    return diff(key_of(base.host), key_of(other.host))


def machine_differences(base: Run, other: Run) -> list[str]:
    """Machine differences (CPU, cores, memory, VM, /dev/kvm), as `key: 'baseline' vs 'other'`: these make
    timings incomparable. Empty when the machine is the same."""
    return _differences(base, other, fingerprint.machine_key)


def software_changes(base: Run, other: Run) -> list[str]:
    """Kernel and libguestfs/qemu/libvirt/UML versions that changed: what a regression run is about; and a
    stack's, where both runs ran cells on it (its cells record its software: results.model.Cell.software)."""
    return _differences(base, other, fingerprint.software_key) + _cells_software(base, other)


def _cells_software(base: Run, other: Run) -> list[str]:
    """A stack's software that changed (its cells record it), and the UML mode a cell's UML chose itself."""
    def of(run: Run) -> dict[tuple[str, str], Cell]:
        found: dict[tuple[str, str], Cell] = {}
        for c in run.cells:
            if c.software and set(c.software) > {"stack"}:  # it ran (a planned cell records its stack only)
                found.setdefault((c.host or "", c.system), c)
        return found
    was, now = of(base), of(other)
    out: list[str] = []
    for key in sorted(was.keys() & now.keys()):
        system = key[1] if not key[0] else f"{key[1]} on host {key[0]}"
        a, b = was[key].software or {}, now[key].software or {}
        for k in sorted(a.keys() & b.keys()):
            if a[k] == b[k] or k == "stack":
                continue
            if k == "uml_mode":
                if was[key].uml_mode is None:  # the mode UML chose itself (one a scenario names never changes)
                    out.append(f"{system}: UML's mode {clip(a[k])} vs {clip(b[k])}")
            elif was[key].stack_name != "host" and (line := f"stack {was[key].stack_name}: {k}: {clip(a[k])} vs "
                                                            f"{clip(b[k])}") not in out:
                out.append(line)
    return out


def gate_machines(base_path: str, base: Run, others: Sequence[tuple[str, Run]], *,
               force: bool) -> list[str]:
    """Refuse (UserError) to compare timings from different hosts unless forced; forced, one warning per file.

    Every file is checked before anything is printed, so a refusal never follows half a report.
    """
    warnings: list[str] = []
    for path, doc in others:
        diffs = machine_differences(base, doc)
        if not diffs:
            continue
        text = f"machine differs from the baseline {base_path}: {'; '.join(diffs)}"
        if not force:
            raise UserError(f"{text}; timings from different machines are not comparable; --force compares anyway",
                            source=path)
        warnings.append(f"{path}: {text}; comparing anyway (--force)")
    return warnings
