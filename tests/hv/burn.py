"""A command whose use is known: it and one child each burn SECONDS of CPU time (measured by themselves with
process_time), then it touches MIB MiB of memory and holds it for a second. guestbench's usage meter must find
2 x SECONDS of CPU and a peak of at least MIB MiB (tests/test_usage.py). With a third argument, it appends
to that file the CPU seconds it and its child used as the kernel counted them (os.times at its end): the
independent figure each sample is checked against."""

import os
import sys
import time


def burn(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


seconds, mib = float(sys.argv[1]), int(sys.argv[2])
pid = os.fork()
if pid == 0:
    burn(seconds)
    os._exit(0)
burn(seconds)
os.waitpid(pid, 0)
block = bytearray(mib * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(1.0)
if len(sys.argv) > 3:
    t = os.times()
    with open(sys.argv[3], "a") as f:
        f.write(f"{t.user + t.system + t.children_user + t.children_system}\n")
