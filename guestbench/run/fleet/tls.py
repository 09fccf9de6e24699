"""TLS between the scheduler, the workers and the coordinator is Dask's own (its configuration, read by each
process); guestbench only checks, before connecting, that a tls:// address has the settings it needs, so a
missing one is a line saying which, not Dask's error from deep inside a connection attempt."""

from __future__ import annotations

from guestbench.util.errors import UserError

DOC = "docs/fleet.md, 'Security'"


def check(address: str, role: str, source: str, key: str) -> None:
    """`role` is Dask's name for this end: "client" (the coordinator) or "worker"."""
    if not address.startswith("tls://"):
        return
    from distributed.security import Security

    sec = Security()
    needed = {"distributed.comm.tls.ca-file": sec.tls_ca_file,
              f"distributed.comm.tls.{role}.cert": getattr(sec, f"tls_{role}_cert")}
    missing = [name for name, value in needed.items() if not value]
    if missing:
        raise UserError(f"a tls:// scheduler needs Dask's TLS settings and {' and '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not set (Dask's configuration file or DASK_ "
                        f"environment variables; see {DOC})", source=source, key=key)
