"""Capture one real verbose launch's event stream as test data for boot phases (tests/data/phases).

Usage: python tools/capture_launch_log.py BACKEND OUT.log

The launch is configured as guestbench's worker configures a launch that records phases (the backend's
handle configuration, verbose, guestfs_boot_analysis=1); each event is written as it arrives: seconds
since launch() was called, L (libguestfs) or A (appliance console), and the repr of the chunk. The first
line is TOTAL and the start-up (launch plus one ping), as the worker times it. tests/test_phases.py
replays such files chunk by chunk.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import guestfs

from guestbench.instruments import markers
from guestbench.backends import get as get_backend
from guestbench.host.paths import cache_dir


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    backend, out = get_backend(argv[0]), Path(argv[1])
    why = backend.preconditions()
    if not why.usable:
        sys.stderr.write(f"{backend.name} is not usable here: {why.reason}\n")
        return 1
    cfg = backend.handle_config(cache_dir())
    events: list[tuple[float, str, bytes | str]] = []
    sources = {guestfs.EVENT_APPLIANCE: "A", guestfs.EVENT_LIBRARY: "L"}

    def on_event(ev: int, eh: int, buf: bytes | str, array: object) -> None:
        events.append((time.perf_counter(), sources.get(ev, "?"), buf))

    with tempfile.TemporaryDirectory(prefix="capture-") as tmp:
        g = guestfs.GuestFS(python_return_dict=True)
        g.set_event_callback(on_event, guestfs.EVENT_APPLIANCE | guestfs.EVENT_LIBRARY)
        os.environ.update(cfg.env)  # LIBGUESTFS_PATH and the like: libguestfs reads this process's environment
        g.set_backend(cfg.libguestfs_backend)
        g.set_backend_settings(cfg.settings)
        if cfg.hv:
            g.set_hv(cfg.hv)
        g.set_verbose(True)
        g.set_append(markers.APPEND)
        g.set_tmpdir(tmp)
        g.add_drive_scratch(64 * 2**20)
        t0 = time.perf_counter()
        g.launch()
        g.ping_daemon()
        total = time.perf_counter() - t0
        g.shutdown()
        g.close()
    lines = [f"{t - t0:9.3f} {src} {buf!r}" for t, src, buf in events]
    out.write_text(f"TOTAL {total!r}\n" + "\n".join(lines) + "\n")
    print(f"{backend.name}: start-up {total:.2f} s, {len(events)} events -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
