"""A fleet run's document seen host by host: each host's share as the document a one-machine run would have
written, so that every table, warning and exit status built for one machine applies to each host unchanged."""

from __future__ import annotations

from typing import Any

HOST_KEYS = ("host", "backends", "placements", "order", "started_utc", "finished_utc", "guestbench")


def is_fleet(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get("hosts"), dict) and bool(doc["hosts"])


def names(doc: dict[str, Any]) -> list[str]:
    """The fleet's hosts, those that ran cells first, each in name order."""
    hosts = doc.get("hosts") if isinstance(doc.get("hosts"), dict) else {}
    ran = {c.get("host") for c in doc.get("cells") or [] if isinstance(c, dict)}
    return sorted(hosts, key=lambda n: (n not in ran, n))


def view(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """Host `name`'s share of a fleet document, as a one-machine document (its fingerprint as `host`)."""
    info = doc["hosts"].get(name) or {}
    out = {k: v for k, v in doc.items() if k not in ("hosts", "cells", *HOST_KEYS)}
    out.update({k: info[k] for k in HOST_KEYS if k in info})
    out.setdefault("backends", {})
    out["cells"] = [c for c in doc.get("cells") or [] if isinstance(c, dict) and c.get("host") == name]
    status = info.get("status")
    if status in ("lost", "failed", "interrupted") or (status is None and info.get("error")):
        out["status"] = "interrupted" if status in ("lost", "interrupted") else "failed"
    out["fleet_host"] = {"name": name, "status": status, "error": info.get("error"), "address": info.get("address")}
    return out


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


def differences(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what, {host: value}) for every fingerprint key whose value differs between hosts that ran cells."""
    ran = {c.get("host") for c in doc.get("cells") or [] if isinstance(c, dict)}
    prints = {n: (doc["hosts"][n] or {}).get("host") for n in names(doc) if n in ran}
    prints = {n: fp for n, fp in prints.items() if isinstance(fp, dict)}
    out = []
    for key, what in MOVERS:
        values = {n: _get(fp, key) for n, fp in prints.items()}
        if len({repr(v) for v in values.values() if v is not None}) > 1:
            out.append((what, values))
    return out
