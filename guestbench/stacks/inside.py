"""What a backend is inside a stack, asked inside it: `python -m guestbench.stacks.inside BACKEND [--workload]`, run
in the stack's sandbox on the stack's Python (guestbench.stacks.backend), prints one JSON object: the backend's
preconditions there, its handle configuration (paths inside the stack: its appliance, built by the stack's supermin
from the stack's packages, and its wrappers), its probe key, and the software it runs.

It imports only what a worker does plus the backends: a stack's venv holds guestbench's requirements."""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

from guestbench.backends import BACKENDS
from guestbench.backends.appliance import ApplianceError
from guestbench.host.paths import cache_dir
from guestbench.util.errors import UserError


def answer(name: str, workload: bool) -> dict[str, Any]:
    backend = BACKENDS[name]
    av = backend.preconditions()
    out: dict[str, Any] = {"availability": av.to_dict(), "python": platform.python_version()}
    if not av.usable:
        return out
    try:
        out["handle"] = backend.handle_config(cache_dir(), workload=workload).to_dict()
    except (ApplianceError, UserError) as e:
        out["availability"] = {"usable": False, "reason": f"cannot configure {name} in the stack: {e}",
                               "details": av.details}
        return out
    out["probe_key"] = backend.probe_key()
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BACKENDS:
        print(f"usage: python -m guestbench.stacks.inside {{{','.join(BACKENDS)}}} [--workload]", file=sys.stderr)
        return 2
    print(json.dumps(answer(argv[0], "--workload" in argv[1:]), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
