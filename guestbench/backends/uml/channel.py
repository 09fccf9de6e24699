"""Names the UML backend and its hypervisor program share.

Kept apart from hv.py so that the package never imports the program it runs with `python -m`: runpy warns
(into the console log users read) when the module it is about to run is already in sys.modules.
"""

from __future__ import annotations

CHANNEL_ENV = "GUESTBENCH_UML_CHANNEL"  # "virtio" (default) or "serial"
PORT_NAME = "org.libguestfs.channel.0"
REFUSALS_FILE = "hypervisor-refusals.txt"  # in the work dir: why the hypervisor program refused a launch
