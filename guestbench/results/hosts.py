"""A fleet run seen host by host: each host's share as the run a one-machine run would have recorded, so that every
table, warning and exit status built for one machine applies to each host unchanged."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from guestbench.results.model import Run


@dataclass(frozen=True)
class Member:
    """A host of a fleet run as its share ended: its name, status (None: not started), why it ended early, and
    its Dask worker's address."""

    name: str
    status: str | None
    error: str | None
    address: str | None


def is_fleet(run: Run) -> bool:
    return bool(run.hosts)


def names(run: Run) -> list[str]:
    """The fleet's hosts, those that ran cells first, each in name order."""
    ran = {c.host for c in run.cells}
    return sorted(run.hosts, key=lambda n: (n not in ran, n))


def view(run: Run, name: str) -> tuple[Member, Run]:
    """Host `name` of a fleet run, and its share as a one-machine run (its fingerprint as `host`; what the fleet
    host did not record stays unrecorded, not the coordinator's)."""
    info = run.hosts[name]
    status = info.status
    ended = "interrupted" if status in ("lost", "interrupted") else "failed" \
        if status == "failed" or (status is None and info.error) else None
    share = dataclasses.replace(
        run, hosts={}, cells=[c for c in run.cells if c.host == name], host=info.host, backends=info.backends,
        placements=info.placements, order=info.order, started_utc=info.started_utc, finished_utc=info.finished_utc,
        guestbench=info.guestbench, status=ended or run.status)
    return Member(name, status, info.error, info.address), share


# what makes the same cell's figures move from one host to another, as the fingerprint records it
MOVERS = (("cpu_model", "CPU model"), ("cores", "cores"), ("memory_bytes", "memory"), ("kernel", "kernel"),
          ("virtualization.vm", "virtualization"), ("virtualization.container", "container"),
          ("virtualization.kvm.flavour", "/dev/kvm flavour"), ("versions.qemu", "qemu"),
          ("versions.libguestfs", "libguestfs"), ("versions.libvirt", "libvirt"), ("versions.uml", "UML kernel"),
          ("noise.governor", "CPU frequency governor"), ("noise.boost", "CPU boost"), ("noise.smt", "SMT"),
          ("guestbench.version", "guestbench"))


def _get(fp: dict[str, Any], dotted: str) -> Any:
    value: Any = fp
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def differences(run: Run) -> list[tuple[str, dict[str, Any]]]:
    """(what, {host: value}) for every fingerprint key whose value differs between hosts that ran cells."""
    ran = {c.host for c in run.cells}
    prints = {n: fp for n in names(run) if n in ran and (fp := run.hosts[n].host) is not None}
    out = []
    for key, what in MOVERS:
        values = {n: _get(fp, key) for n, fp in prints.items()}
        if len({repr(v) for v in values.values() if v is not None}) > 1:
            out.append((what, values))
    return out
