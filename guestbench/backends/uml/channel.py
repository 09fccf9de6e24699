"""Names the UML backend and its hypervisor program share.

Kept apart from hv.py so that the package never imports the program it runs with `python -m`: runpy warns
(into the console log users read) when the module it is about to run is already in sys.modules.
"""

from __future__ import annotations

from pathlib import Path

CHANNEL_ENV = "GUESTBENCH_UML_CHANNEL"  # "virtio" (default) or "serial"
PORT_NAME = "org.libguestfs.channel.0"
REFUSALS_FILE = "hypervisor-refusals.txt"  # in the work dir: why the hypervisor program refused a launch


def refusals(workdir: Path) -> list[str]:
    """Why the hypervisor program refused launches in `workdir`: libguestfs shows a hypervisor's stderr only in
    verbose mode, so `guestbench exec` and the `command` measurement read it from here."""
    try:
        return (workdir / REFUSALS_FILE).read_text().splitlines()
    except OSError:
        return []
