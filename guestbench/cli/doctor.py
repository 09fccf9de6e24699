"""`guestbench doctor`: which backends work here and why not, guestbench's appliances, nested runs, the host."""

from __future__ import annotations

import argparse
import json
from typing import Any

from guestbench.backends import BACKENDS, appliance
from guestbench.cli.common import check_probe_timeout
from guestbench.host import fingerprint
from guestbench.results.model import system_name
from guestbench.execute import probe
from guestbench.scenario import Checker
from guestbench.stacks import store
from guestbench.util.errors import UserError
from guestbench.util.lazy import on_first_use

rich_console = on_first_use("rich.console")


# the appliances doctor reports: the UML backend's, and the workload ones of both flavours
DOCTOR_APPLIANCES = (("uml", "standard"), ("qemu", "workload"), ("uml", "workload"))


def cmd_doctor(args: argparse.Namespace) -> int:
    check_probe_timeout(args)
    names = list(BACKENDS)
    checker = Checker("command line")
    if args.backend:
        names = list(checker.backends("--backend", args.backend))
    if args.stack:  # each stack's backends, set up and probed in its sandbox (a stack not built: one line, exit 2)
        stacks = [s for s in checker.stacks("--stack", args.stack) if s != store.HOST]
        for s in stacks:
            if (problem := store.load(s).problem) is not None:
                raise UserError(f"stack {s}: {problem}", source="command line", key="--stack")
        names = [system_name(n, s) for n in names for s in ("host", *stacks)]
    fp = fingerprint.fingerprint()
    with rich_console.Console(stderr=True).status("") as status:
        checked = probe.verdicts(names, refresh=args.refresh, timeout=args.probe_timeout, verbose=args.verbose,
                                  on_checking=lambda name: status.update(f"checking {name}"))
    verdicts: dict[str, Any] = {name: av.to_dict() for name, av in checked.items()}
    from guestbench.nested import image as nested_image

    nested = nested_image.status(bool(verdicts.get("kvm", {}).get("usable")))
    appliances = {f"{f}-{v}": appliance.state(f, v) for f, v in DOCTOR_APPLIANCES}
    built = [s.to_dict() | {"problem": s.problem} for s in store.all_stacks()]
    if args.json:
        print(json.dumps({"host": fp, "backends": verdicts, "nested": nested, "appliances": appliances,
                          "stacks": built}, indent=2))
    else:
        from guestbench.output.tables import doctor

        doctor.show(fp, verdicts, appliances, nested, args.verbose, built)
    return 0 if any(v["usable"] for v in verdicts.values()) else 1
