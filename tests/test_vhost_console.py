"""The vhost-user virtio-console server against the real UML kernel (no image: hostfs root, shell init).

The guest runs with the host's filesystem as its root, so the init script touches nothing outside this
test's tmp_path: proc, sysfs, devtmpfs and a tmpfs are mounted on directories made there beforehand.
Each test boots UML once (~1.5 s); UML and the server are torn down in a finally, whatever happens.

A guest that writes to the port waits for the host's word (BYE) before it powers off: its write(2)s return
once the data is in the ring, and at power-off UML unregisters the device, whose driver takes back every
transmit buffer the server has not taken yet (virtqueue_detach_unused_buf). On a busy machine the server
can be megabytes behind the guest when it powers off (issue 45).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from guestbench.backends.uml.vhost_console import VhostConsole

UML = Path("/usr/bin/linux")
MODULES = sorted(glob.glob("/usr/lib/uml/modules/*/kernel/drivers/char/virtio_console.ko"))
PORT_NAME = "org.libguestfs.channel.0"
BYE = "read bye <&3  # power off only once the host has all it was sent (the module's doc)"

pytestmark = [
    pytest.mark.launch,
    pytest.mark.skipif(not (UML.exists() and MODULES), reason="user-mode-linux is not installed"),
]

# Runs as the guest's PID 1. Everything it mounts or writes is under $T (a directory of tmp_path); the
# body runs in a subshell so that the power-off always happens.
INIT = """#!/bin/sh
T={g}
mount -t proc proc $T/proc && mount -t sysfs sysfs $T/sys && mount -t devtmpfs devtmpfs $T/dev \\
  && mount -t tmpfs -o size=200m tmpfs $T/scratch || echo GB-FAIL mounts
insmod {module} || echo GB-FAIL insmod
PORT=
i=0
while [ -z "$PORT" ] && [ $i -lt 100 ]; do
  for d in $T/sys/class/virtio-ports/vport*; do
    [ -r "$d/name" ] && [ "$(cat "$d/name")" = "{name}" ] && PORT=$T/dev/${{d##*/}}
  done
  [ -n "$PORT" ] || {{ sleep 0.1; i=$((i+1)); }}
done
echo "GB-PORT $PORT"
(
{body}
)
echo GB-END
poweroff -f || halt -f
"""


def _shm_dir(fallback: Path) -> str:
    """UML maps its RAM from a file in TMPDIR, which must allow exec."""
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if parts[1] == "/dev/shm" and "noexec" not in parts[3].split(","):
            return "/dev/shm"
    return str(fallback)


class Guest:
    """A booted UML guest, the server and its thread, and the host end of the channel (`host`, `rf`)."""

    def __init__(self, proc: subprocess.Popen[bytes], server: VhostConsole, thread: threading.Thread,
                 host: socket.socket, console: Path) -> None:
        self.proc, self.server, self.thread, self.host, self.console = proc, server, thread, host, console
        self.rf = host.makefile("rb")

    def line(self) -> bytes:
        got = self.rf.readline()
        assert got.endswith(b"\n"), f"channel closed early; console:\n{self.console_text()}"
        return got.rstrip(b"\n")

    def read(self, n: int) -> bytes:
        got = self.rf.read(n)
        assert len(got) == n, f"{len(got)} of {n} bytes; console:\n{self.console_text()}"
        return got

    def console_text(self) -> str:
        return self.console.read_text(errors="replace")

    def bye(self) -> None:
        """Tell a guest that waits for it (BYE) that everything it wrote has arrived."""
        self.host.sendall(b"bye\n")

    def wait(self, timeout: float = 20.0) -> str:
        """Wait for the guest to power off; the console text."""
        self.proc.wait(timeout=timeout)
        text = self.console_text()
        assert "GB-END" in text, text
        assert "GB-FAIL" not in text, text
        return text


def _pin() -> list[str]:
    """taskset to one CPU: UML's tracer and its traced processes hand over on every guest syscall, and
    on this machine (itself a VM) a hand-over to an idle CPU costs several times the syscall itself."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(max(os.sched_getaffinity(0)))] if taskset else []


@contextmanager
def uml_guest(tmp_path: Path, body: str, io_timeout: float = 30.0, pinned: bool = True) -> Iterator[Guest]:
    g = tmp_path / "g"
    for d in ("proc", "sys", "dev", "scratch"):
        (g / d).mkdir(parents=True)
    init = tmp_path / "init.sh"
    init.write_text(INIT.format(g=g, module=MODULES[-1], name=PORT_NAME, body=body))
    init.chmod(0o755)
    sock = str(tmp_path / "vhost.sock")
    console = tmp_path / "console.txt"
    host, peer = socket.socketpair()
    host.settimeout(io_timeout)
    stop = threading.Event()
    server = thread = proc = None
    try:
        server = VhostConsole(sock, PORT_NAME, peer)
        thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
        thread.start()
        with open(console, "wb") as out:
            argv = [str(UML), "mem=384M", "rootfstype=hostfs", "rootflags=/", "rw", f"init={init}",
                    f"virtio_uml.device={sock}:3", "con0=fd:0,fd:1", "con=null", "devtmpfs.mount=0"]
            proc = subprocess.Popen(
                [*(_pin() if pinned else []), *argv],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "TMPDIR": _shm_dir(tmp_path)})
        yield Guest(proc, server, thread, host, console)
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        stop.set()
        if thread is not None:
            thread.join(timeout=10)
        elif server is not None:
            server.close()
        host.close()
        peer.close()
        assert thread is None or not thread.is_alive(), "the server did not stop"
        assert not _uml_processes(init), "UML processes left behind"


def _uml_processes(init: Path) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid.isdigit() and str(init).encode() in cmd:
            found.append(pid)
    return found


def test_handshake_guest_sees_named_port(tmp_path: Path) -> None:
    body = f"""
d=${{PORT##*/}}
echo "GB-NAME $(cat $T/sys/class/virtio-ports/$d/name)"
[ -c "$PORT" ] && echo GB-CHARDEV
exec 3<>$PORT
echo "hello from $d" >&3
{BYE}
"""
    with uml_guest(tmp_path, body) as guest:
        greeting = guest.line()
        guest.bye()
        text = guest.wait()
        guest.thread.join(timeout=10)  # UML has gone: the server notices by itself
        assert not guest.thread.is_alive()
    port = re.search(r"GB-PORT \S*/(vport\d+p\d+)", text)
    assert port, text
    assert f"GB-NAME {PORT_NAME}" in text
    assert "GB-CHARDEV" in text
    assert greeting == f"hello from {port.group(1)}".encode()
    assert guest.server.stats["bytes_from_guest"] == len(greeting) + 1


def test_data_both_ways_intact(tmp_path: Path) -> None:
    size = 8 * 1024 * 1024
    to_guest = os.urandom(size)
    from_guest = os.urandom(size // 2 + 12345)  # not a multiple of any buffer size
    (tmp_path / "from_guest.bin").write_bytes(from_guest)
    body = f"""
exec 3<>$PORT
echo READY >&3
head -c {size} <&3 > $T/scratch/rx
echo "SHA $(sha256sum < $T/scratch/rx)" >&3
cat {tmp_path}/from_guest.bin >&3
echo DONE >&3
{BYE}
"""
    with uml_guest(tmp_path, body) as guest:
        assert guest.line() == b"READY"
        guest.host.sendall(to_guest)
        sha = guest.line()
        back = guest.read(len(from_guest))
        assert guest.line() == b"DONE"
        guest.bye()
        guest.wait()
    assert sha.split()[1] == hashlib.sha256(to_guest).hexdigest().encode()
    assert back == from_guest
    assert guest.server.stats["bytes_to_guest"] == size + len(b"bye\n")


def test_stalled_reader_loses_nothing(tmp_path: Path) -> None:
    """A busy machine's slow host reader, made certain (issue 45): the host reads nothing for 3 s, so the server
    stops taking the guest's buffers (its out buffer is full) and the guest's writer blocks on a full ring; once
    the host reads again all of it arrives, in order, and only then does the guest power off."""
    size = 12 * 1024 * 1024  # more than the server's out buffer, the socket's and the ring's (256 x 32 KiB)
    data = os.urandom(size)
    (tmp_path / "from_guest.bin").write_bytes(data)
    body = f"""
exec 3<>$PORT
echo READY >&3
read go <&3
cat {tmp_path}/from_guest.bin >&3
echo DONE >&3
{BYE}
"""
    with uml_guest(tmp_path, body) as guest:
        assert guest.line() == b"READY"
        guest.host.sendall(b"go\n")
        time.sleep(3.0)
        taken = guest.server.stats["bytes_from_guest"]
        back = guest.read(size)
        assert guest.line() == b"DONE"
        guest.bye()
        guest.wait()
    assert taken < len(b"READY\n") + size, "the host's stall did not hold the guest back"
    assert back == data


def test_what_the_server_took_reaches_the_peer_after_uml_has_gone(tmp_path: Path) -> None:
    """A guest that powers off right after a write (issue 45): the server had taken all of it from the ring, but
    the peer had read none, so most of it waited in the server's out buffer when UML went. It still arrives, in
    full, and only then does the server end."""
    size = 768 * 1024  # more than the socket's buffer, less than the server's out buffer (OUT_LIMIT)
    data = os.urandom(size)
    (tmp_path / "from_guest.bin").write_bytes(data)
    body = f"""
exec 3<>$PORT
cat {tmp_path}/from_guest.bin >&3
read off <&3
"""
    with uml_guest(tmp_path, body) as guest:
        deadline = time.monotonic() + 60
        while guest.server.stats["bytes_from_guest"] < size:  # all of it in the server: none read by the peer
            assert time.monotonic() < deadline and guest.proc.poll() is None, guest.server.stats
            time.sleep(0.05)
        queued = struct.unpack("i", fcntl.ioctl(guest.host, termios.FIONREAD, b"\0" * 4))[0]
        assert queued < size, f"the socket took all {size} bytes: nothing waits in the server to be drained"
        guest.host.sendall(b"off\n")
        guest.wait()  # UML has gone: its connection to the server is closed
        back = guest.read(size)
        guest.thread.join(timeout=10)
        assert not guest.thread.is_alive()
    assert back == data


def test_peer_close_reaches_guest_as_eof(tmp_path: Path) -> None:
    """When the peer closes, what it sent is still delivered, then the guest reads EOF and serve returns."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    body = """
exec 3<>$PORT
echo READY >&3
cat <&3 > $T/scratch/rx
echo "GB-EOF $(sha256sum < $T/scratch/rx)"
"""
    with uml_guest(tmp_path, body) as guest:
        assert guest.line() == b"READY"
        guest.host.sendall(data)
        guest.host.shutdown(socket.SHUT_RDWR)
        text = guest.wait()
        guest.thread.join(timeout=10)
        assert not guest.thread.is_alive()
    assert f"GB-EOF {hashlib.sha256(data).hexdigest()}" in text


def test_small_round_trips(tmp_path: Path) -> None:
    """libguestfs's traffic is mostly small requests and replies: each must go through at once, not wait
    for the server's idle tick (a lost kick or call would show as a 0.2 s round trip; printed, not
    asserted)."""
    n = 300
    body = f"""
exec 3<>$PORT
/usr/bin/python3 -S -c "
import os
os.write(3, b'READY\\n')
for _ in range({n}):
    b = b''
    while len(b) < 100:
        b += os.read(3, 100 - len(b))
    os.write(3, b)
"
{BYE}
"""
    rtts = []
    with uml_guest(tmp_path, body) as guest:
        assert guest.line() == b"READY"
        for i in range(n):
            msg = bytes([i % 256]) * 100
            start = time.monotonic()
            guest.host.sendall(msg)
            assert guest.read(100) == msg
            rtts.append(time.monotonic() - start)
        guest.bye()
        guest.wait()
    rtts.sort()
    print(f"\nvhost-console round trips of 100 bytes: median {rtts[n // 2] * 1e3:.2f} ms, "
          f"max {rtts[-1] * 1e3:.2f} ms ({n})")


@pytest.mark.parametrize("pinned", [True, False], ids=["uml-on-one-cpu", "uml-unpinned"])
def test_throughput_reported(tmp_path: Path, pinned: bool) -> None:
    """16 MiB each way; speeds are printed, only correctness is asserted (the machine is shared).

    The guest driver hands out at most one 4 KiB buffer per read(2), so the reader here (dd with 1 MiB
    full blocks) makes one read per 4 KiB, as guestfsd does; the guest's own 4 KiB syscall rate is
    printed alongside for scale.
    """
    label = "UML on one CPU" if pinned else "UML unpinned"
    size = 16 * 1024 * 1024
    data = os.urandom(size)
    body = f"""
t0=$(date +%s%N)
dd if=$T/dev/zero of=$T/dev/null bs=4096 count=4096 2>$T/dev/null
t1=$(date +%s%N)
echo "GB-FLOOR $((t1 - t0))"
exec 3<>$PORT
echo READY >&3
t0=$(date +%s%N)
dd bs=1048576 count={size >> 20} iflag=fullblock <&3 > $T/scratch/rx 2>$T/dev/null
t1=$(date +%s%N)
echo "RX $((t1 - t0))" >&3
echo "SHA $(sha256sum < $T/scratch/rx)" >&3
read go <&3
t0=$(date +%s%N)
cat $T/scratch/rx >&3
t1=$(date +%s%N)
echo "TX $((t1 - t0))" >&3
{BYE}
"""
    with uml_guest(tmp_path, body, io_timeout=120.0, pinned=pinned) as guest:
        assert guest.line() == b"READY"
        start = time.monotonic()
        guest.host.sendall(data)
        rx = guest.line().split()
        rx_wall = time.monotonic() - start
        sha = guest.line().split()
        guest.host.sendall(b"go\n")
        start = time.monotonic()
        back = guest.read(size)
        tx_wall = time.monotonic() - start
        tx = guest.line().split()
        guest.bye()
        text = guest.wait()
    assert rx[0] == b"RX" and tx[0] == b"TX"
    assert sha[1] == hashlib.sha256(data).hexdigest().encode()
    assert back == data
    mb = size / 1e6
    floor = re.search(r"GB-FLOOR (\d+)", text)
    print(f"\n[{label}]")
    print(f"vhost-console host->guest: {mb / rx_wall:.1f} MB/s wall, {mb / (int(rx[1]) / 1e9):.1f} MB/s "
          f"in the guest ({size >> 20} MiB)")
    print(f"vhost-console guest->host: {mb / tx_wall:.1f} MB/s wall, {mb / (int(tx[1]) / 1e9):.1f} MB/s "
          f"in the guest ({size >> 20} MiB)")
    if floor:
        rate = 16.777216 / (int(floor.group(1)) / 1e9)
        print(f"guest syscall floor: 4 KiB dd /dev/zero -> /dev/null at {rate:.1f} MB/s (two syscalls per 4 KiB)")
    print(f"server stats: {guest.server.stats}")
