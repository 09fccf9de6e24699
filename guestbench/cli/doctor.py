"""`guestbench doctor`: which backends work here and why not, guestbench's appliances, nested runs, the host."""

from __future__ import annotations

import argparse
import json
from typing import Any

from guestbench.backends import BACKENDS, appliance
from guestbench.cli.common import check_probe_timeout
from guestbench.host import fingerprint as host
from guestbench.run import probe
from guestbench.util.lazy import on_first_use

rich_console = on_first_use("rich.console")


# the appliances doctor reports: the UML backend's, and the workload ones of both flavours
DOCTOR_APPLIANCES = (("uml", "standard"), ("qemu", "workload"), ("uml", "workload"))


def cmd_doctor(args: argparse.Namespace) -> int:
    check_probe_timeout(args)
    names = list(BACKENDS)
    if args.backend:
        from guestbench.scenario import Checker

        names = list(Checker("command line").backends("--backend", args.backend))
    fp = host.fingerprint()
    with rich_console.Console(stderr=True).status("") as status:
        checked = probe.check_all(names, refresh=args.refresh, timeout=args.probe_timeout, verbose=args.verbose,
                                  on_checking=lambda name: status.update(f"checking {name}"))
    verdicts: dict[str, Any] = {name: av.to_dict() for name, av in checked.items()}
    from guestbench.nested import image as nested_image

    nested = nested_image.status(bool(verdicts.get("kvm", {}).get("usable")))
    appliances = {f"{f}-{v}": appliance.state(f, v) for f, v in DOCTOR_APPLIANCES}
    if args.json:
        print(json.dumps({"host": fp, "backends": verdicts, "nested": nested, "appliances": appliances}, indent=2))
    else:
        from guestbench.output.tables import doctor

        doctor.show(fp, verdicts, appliances, nested, args.verbose)
    return 0 if any(v["usable"] for v in verdicts.values()) else 1
