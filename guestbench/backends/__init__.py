"""Registry of backends, in the order they are listed and measured."""

from __future__ import annotations

from guestbench.backends.base import Availability, Backend, HandleConfig
from guestbench.backends.direct import Kvm, Tcg
from guestbench.backends.libvirt import LibvirtKvm, LibvirtTcg
from guestbench.backends.uml import Uml

BACKENDS: dict[str, Backend] = {b.name: b for b in (Tcg(), Kvm(), LibvirtTcg(), LibvirtKvm(), Uml())}

__all__ = ["BACKENDS", "Availability", "Backend", "HandleConfig", "get"]


def get(name: str) -> Backend:
    return BACKENDS[name]
