"""`guestbench worker` (join a fleet) and `guestbench fleet local` (a scheduler and workers on this machine)."""

from __future__ import annotations

import argparse

from guestbench.backends import BACKENDS
from guestbench.cli.common import check_probe_timeout
from guestbench.execute import probe
from guestbench.util.errors import UserError, inert
from guestbench.util.lazy import on_first_use
from guestbench.util.reasons import short_reason

rich_console = on_first_use("rich.console")


def cmd_worker(args: argparse.Namespace) -> int:
    from guestbench.run.fleet import keeper

    from guestbench.run.fleet import address, tls

    check_probe_timeout(args)
    where = f"guestbench worker {args.address}"
    err = rich_console.Console(stderr=True)
    address.refuse_plain(args.address, args.insecure, "command line", where,
                  lambda line: err.print(line, style="yellow", highlight=False, markup=False))
    tls.require(args.address, "worker", "command line", where)
    listen = address.listen_host(args.address, "command line", where)
    import socket

    worker_name = args.name or socket.gethostname().split(".")[0]
    roles_problem(args.address, worker_name, where)
    names = list(BACKENDS)
    if args.backend:
        from guestbench.scenario import Checker

        names = list(Checker("command line").backends("--backend", args.backend))
    with err.status("") as status:
        checked = probe.verdicts(names, refresh=args.refresh, timeout=args.probe_timeout, verbose=args.verbose,
                                  on_checking=lambda name: status.update(f"checking {name}"))
    for name, av in checked.items():
        err.print("[green]✓[/] " if av.usable else "[yellow]–[/] ", inert(f"{name}: {short_reason(av.reason or '')}"),
                  sep="", highlight=False)
    return keeper.serve(args.address, listen, [n for n, av in checked.items() if av.usable], worker_name,
                        lambda line: err.print(inert(line), highlight=False))


def roles_problem(address: str, name: str, where: str) -> None:
    """One line and exit 2 before a worker starts whose Dask release the roles were not made for, or, on a tls://
    scheduler, that the scheduler's roles would refuse."""
    from guestbench.run.fleet import roles, tls

    try:
        roles.check_dask()
    except RuntimeError as e:
        raise UserError(str(e), source="installation", key="distributed") from None
    if not address.startswith("tls://"):
        return
    why = roles.worker_problem(tls.configured("worker_cert"), name)
    if why is not None:
        raise UserError(why, source="command line", key=where)


def cmd_fleet(args: argparse.Namespace) -> int:
    from guestbench.run.fleet.local import LocalCluster

    if args.workers < 0:
        raise UserError("is negative; allowed: a number of workers >= 0", source="command line",
                        key=f"fleet local {args.workers}")
    if args.backend:
        from guestbench.scenario import Checker

        Checker("command line").backends("--backend", args.backend)
    err = rich_console.Console(stderr=True)
    cluster = LocalCluster(args.workers, args.backend, lambda line: err.print(inert(line), highlight=False))
    try:
        print(cluster.address, flush=True)
        err.print(f"fleet local: scheduler {cluster.address}, {args.workers} worker(s) starting; Ctrl-C stops them",
                  highlight=False, soft_wrap=True)
        err.print(f"fleet local: mutual TLS; for `guestbench scenario --cluster {cluster.address}` (as root): "
                  f"{cluster.exports()}", highlight=False, markup=False, soft_wrap=True)
        cluster.wait()
    finally:
        cluster.close()
    return 0
