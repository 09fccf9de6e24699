"""Runs inside the level-1 guest: `guestbench scenario` as a child, its results file streamed to the host.

Usage (from the guest's job.sh): python -m guestbench.nested.inside LIVE_DEVICE RESULTS_DIR -- ARGS...
where ARGS are `guestbench scenario` arguments. Every time the child rewrites its results file (after each
sample), the file goes to LIVE_DEVICE as a snapshot (guestbench.nested.live), so the host has every
sample taken so far even if the guest is destroyed before it finishes. A heartbeat line on the console
every HEARTBEAT_S tells the host the guest is alive during long, silent launches.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from guestbench.nested import live

POLL_S = 1.0
HEARTBEAT_S = 60.0
HEARTBEAT = "guestbench-l1: alive"


def _newest(results_dir: Path) -> Path | None:
    files = [p for p in results_dir.glob("*.json") if not p.name.startswith(".")]
    return max(files, key=lambda p: p.stat().st_mtime_ns) if files else None


def _copy_lines(stream: IO[bytes] | None) -> None:
    assert stream is not None
    for line in stream:
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        sys.stderr.write("usage: python -m guestbench.nested.inside LIVE_DEVICE RESULTS_DIR -- ARGS...\n")
        return 2
    device, results_dir, args = argv[0], Path(argv[1]), argv[3:]
    results_dir.mkdir(parents=True, exist_ok=True)
    # stderr through a pipe: the child then writes one line per sample instead of a live progress bar that
    # the host would receive as a garbled console line
    child = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", *args, "--results", str(results_dir)],
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    threading.Thread(target=_copy_lines, args=(child.stderr,), daemon=True).start()
    seq, last, beat = 0, None, time.monotonic()
    started = time.monotonic()
    while True:
        done = child.poll() is not None
        newest = _newest(results_dir)
        if newest is not None:
            st = newest.stat()
            stamp = (newest, st.st_mtime_ns, st.st_size)
            if stamp != last:
                seq += 1
                live.write(device, seq, newest.read_bytes())  # results files are replaced atomically: whole
                last = stamp
        if done:
            break
        if time.monotonic() - beat >= HEARTBEAT_S:
            beat = time.monotonic()
            print(f"{HEARTBEAT} after {beat - started:.0f} s", file=sys.stderr, flush=True)  # stdout: the report
        time.sleep(POLL_S)
    return child.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
