"""The one reader of processes in /proc (guestbench.host.procs): a process names itself as it likes — spaces,
parentheses, bytes of no encoding — and is still read as alive, with its parent and start time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from guestbench.host import procs

NAMER = ("import sys, time; open('/proc/self/comm', 'wb').write(b'a) (b \\xff\\xfe'); "
         "sys.stdout.write('named\\n'); sys.stdout.flush(); time.sleep(60)")


def test_a_process_with_a_hostile_name_is_read_whole() -> None:
    p = subprocess.Popen([sys.executable, "-c", NAMER], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "named\n"
        st = procs.stat(p.pid)
        assert st is not None and st.state in ("S", "R") and st.ppid == os.getpid()
        assert procs.proc_start(p.pid) == st.start and procs.same_process(p.pid, st.start)
        assert procs.argv(p.pid)[:2] == [sys.executable, "-c"]
        assert p.pid in procs.pids()
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 10
    while procs.stat(p.pid) is not None and time.monotonic() < deadline:  # reaped: gone
        time.sleep(0.05)
    assert procs.stat(p.pid) is None and procs.proc_start(p.pid) is None and procs.argv(p.pid) == []
