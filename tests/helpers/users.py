"""Another user on the same machine, for real: the unprivileged user nobody, through runuser (the tests that use it
run as root, as CI does). What nobody makes is another user's file, which a test of a shared machine needs."""

from __future__ import annotations

import subprocess
from pathlib import Path

NOBODY = "nobody"


def as_nobody(*argv: str, timeout: float | None = 30, check: bool = True,
              capture: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `argv` as nobody, without input; by default a failure (or a hang past `timeout`) fails the test, and its
    output goes where the test's goes (`capture`: kept in the result instead, e.g. for a refusal a test expects)."""
    return subprocess.run(["runuser", "-u", NOBODY, "--", *argv], check=check, timeout=timeout,
                          stdin=subprocess.DEVNULL, capture_output=capture, text=True)


def planted(drop: Path, name: str, kernel_marker: Path | None = None) -> Path:
    """A directory made by nobody in `drop` (a sticky one), holding a whole 'appliance' whose kernel would leave
    `kernel_marker` if anyone ran it: what guestbench must refuse, never run, where it keeps its own."""
    d = drop / name
    as_nobody("mkdir", "-p", str(d))
    if kernel_marker is not None:
        as_nobody("sh", "-c", f"printf '#!/bin/sh\\ntouch {kernel_marker}\\n' > {d}/kernel && chmod 755 {d}/kernel"
                  f" && for f in initrd root README.fixed uuid data.img inputs.json; do echo x > {d}/$f; done")
    return d
