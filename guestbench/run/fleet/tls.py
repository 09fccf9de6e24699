"""TLS between the scheduler, the workers and the coordinator is Dask's own (its configuration, read by each
process); guestbench only checks, before connecting, that a tls:// address has the settings it needs, so a
missing one is a line saying which, not Dask's error from deep inside a connection attempt."""

from __future__ import annotations

from guestbench.util.errors import UserError

DOC = "docs/fleet.md, 'Security'"


def configured(name: str) -> str | None:
    """The file Dask's TLS configuration names for `name` ("ca_file", "client_cert", "worker_cert", ...): Dask sets
    these attributes of its Security from its configuration as it is made, so no type names them."""
    from distributed.security import Security

    value = getattr(Security(), f"tls_{name}", None)
    return value if isinstance(value, str) else None


def require(address: str, role: str, source: str, key: str) -> None:
    """`role` is Dask's name for this end: "client" (the coordinator) or "worker"."""
    if not address.startswith("tls://"):
        return
    needed = {"distributed.comm.tls.ca-file": configured("ca_file"),
              f"distributed.comm.tls.{role}.cert": configured(f"{role}_cert")}
    missing = [name for name, value in needed.items() if not value]
    if missing:
        raise UserError(f"a tls:// scheduler needs Dask's TLS settings and {' and '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not set (Dask's configuration file or DASK_ "
                        f"environment variables; see {DOC})", source=source, key=key)
