"""A qemu-compatible hypervisor program that runs the libguestfs appliance under User-Mode Linux.

libguestfs 1.48 dropped its UML backend, but its direct backend will run any program as "qemu"
(LIBGUESTFS_HV). This program passes libguestfs's probe invocations (-help, -version, QMP queries) to
the real qemu, and turns the launch invocation into a UML command line:
  drives → ubd devices, the appliance root → a copy-on-write overlay in a private temp dir,
  `-m` → mem=, the kernel command line (root=, console=, init=), the console → UML's fd console,
  the daemon channel → a virtio-console port served over vhost-user (or, for comparison, a serial
  line, which stalls: see README).
It forwards SIGTERM/SIGINT/SIGHUP to UML, reaps every UML process, and reports UML's exit after a
clean power-off (status 1) as success, as libguestfs expects of qemu.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench.backends.uml.channel import (CHANNEL_ENV, DEVICES, DRIVE_PATHS_FILE, MODE_ENV, MODES, PORT_NAME,
                                             REFUSALS_FILE, SECCOMP, VIRTIO_BLK_ARG, offered_modes)
from guestbench.backends.uml.drives import (AUTO, DRIVES_ENV, VHOST_USER_BLK, Devices, Drive, TranslateError,
                                            choose, device, drive, kv, unguarded)
from guestbench.backends.uml.pinning import pinned
from guestbench.backends.uml.storage_daemon import BLOCK_DEVICE_ID, WATCH_S, StorageDaemon
from guestbench.host import procs
from guestbench.host.paths import WORKDIR_ENV

QEMU = "qemu-system-x86_64"
SERIAL_LINE = 3  # ssl3 = /dev/ttyS3 in the guest
# qemu options that take no value; every other option takes exactly one.
FLAGS = {"-no-user-config", "-nodefaults", "-no-reboot", "-no-hpet", "-enable-kvm", "-nographic", "-S",
         "-no-acpi", "-no-shutdown"}
# Parts of libguestfs's kernel command line that mean nothing to UML or that UML gets otherwise.
DROP_APPEND = re.compile(r"^(root|console|8250\.nr_uarts|edd|lpj|tsc|no_timer_check|cgroup_disable|usbcore\.nousb"
                         r"|cryptomgr\.notests|panic|udevtimeout|udev\.event-timeout|printk\.time)(=.*)?$")


@dataclass
class Launch:
    """What libguestfs asked qemu for, in UML's terms."""

    kernel: str
    memory_mib: int
    append: list[str]
    drives: list[Drive] = field(default_factory=list)
    channel_socket: str | None = None


def parse(args: list[str]) -> Launch:
    opts: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in FLAGS or not a.startswith("-"):
            opts.append((a, None))
            i += 1
        else:
            opts.append((a, args[i + 1] if i + 1 < len(args) else ""))
            i += 2
    kernel = next((v for k, v in opts if k == "-kernel"), None)
    if not kernel:
        raise TranslateError("no -kernel in the launch command line")
    mem = next((v for k, v in opts if k == "-m"), "1280") or "1280"
    launch = Launch(kernel=kernel, memory_mib=int(re.sub(r"[^0-9]", "", mem) or 1280),
                    append=(next((v for k, v in opts if k == "-append"), "") or "").split())
    devices = Devices()
    for k, v in opts:
        if k == "-drive" and v:
            launch.drives.append(drive(kv(v)))
        elif k == "-device" and v:
            device(kv(v.split(",", 1)[1]) if "," in v else {}, devices)
        elif k == "-chardev" and v and "socket" in v:
            launch.channel_socket = kv(v.split(",", 1)[1] if v.startswith("socket,") else v).get("path")
    for d in launch.drives:
        d.blocksize = devices.blocksize.get(d.drive_id)
        d.label = devices.label.get(d.drive_id)
    if launch.channel_socket is None:
        raise TranslateError("no daemon channel (-chardev socket,path=...) in the launch command line")
    return launch


def uml_command(launch: Launch, tmp: Path, channel: str, channel_fd: int | None, vhost_socket: str | None,
                mode: str | None = None, disk_sockets: dict[int, str] | None = None) -> list[str]:
    """The UML kernel command line for this launch (the kernel is the fixed appliance's UML binary); `mode`: the
    userspace mode asked for (a UML with seccomp mode is told which; None: the kernel's only mode, ptrace);
    `disk_sockets`: drive index → the vhost-user-blk socket serving it (guestbench.backends.uml.storage_daemon)."""
    disk_sockets = disk_sockets or {}
    argv = [launch.kernel, f"mem={launch.memory_mib}M", *DEVICES, "con0=fd:0,fd:1"]
    if mode in MODES and SECCOMP in offered_modes(Path(launch.kernel)):  # an older UML has ptrace alone
        argv.append("seccomp=on" if mode == SECCOMP else "seccomp=off")
    root_dev = None
    for n, d in enumerate(launch.drives):
        if n in disk_sockets:  # in drive order: the appliance names them by their place (drives.py)
            argv.append(f"virtio_uml.device={disk_sockets[n]}:{BLOCK_DEVICE_ID}")
        elif d.appliance:
            # never write to the shared appliance root: UML makes a copy-on-write file for this launch
            argv.append(f"ubd{n}={tmp / 'appliance.cow'},{d.path}")
            root_dev = f"/dev/ubd{chr(ord('a') + n)}"
        elif d.backing is not None:  # the guest may write; its writes stay in the COW file, as in the overlay
            argv.append(f"ubd{n}={tmp / f'drive{n}.cow'},{d.backing}")
        else:
            # d: data only: UML must not read a COW header from the image (a guest could have written one there)
            argv.append(f"ubd{n}{'r' if d.readonly else ''}d={d.path}")
    if root_dev is None:
        raise TranslateError("no appliance drive in the launch command line")
    kept = [a for a in launch.append if not DROP_APPEND.match(a)]
    argv += [f"root={root_dev}", "rw", "console=tty0", "init=/guestbench-uml-init"]
    if disk_sockets:
        argv.append(f"{VIRTIO_BLK_ARG}=1")  # the init loads virtio_blk (udev does not)
    if channel == "serial":
        argv += [f"ssl{SERIAL_LINE}=fd:{channel_fd}", f"guestfs_channel=/dev/ttyS{SERIAL_LINE}"]
    else:
        argv.append(f"virtio_uml.device={vhost_socket}:3")
    return argv + kept


RAM_DIRS = ("/dev/shm", "/tmp")  # where UML may keep guest RAM, best first
MIN_RAM_FREE_MIB = 256  # below this nothing boots: the appliance's kernel, daemon and page cache touch that much


def ram_tmpdir(memory_mib: int, candidates: tuple[str, ...] = RAM_DIRS) -> tuple[str | None, str | None]:
    """(TMPDIR for UML's guest RAM, a warning or None), or (None, why none will do). UML maps guest RAM from a
    sparse file in $TMPDIR: it must allow exec, and a page the guest touches that the filesystem cannot give
    kills the guest (SIGBUS). The first directory, in order (/dev/shm's tmpfs before a /tmp that may be a disk,
    where guest RAM is written back to it: many times slower inside a level-1 guest), that has room to boot;
    with a warning when not all of it fits (guests rarely touch all their RAM: a 2 GiB level-1 guest runs
    1280 MiB appliances in 982 MiB of /dev/shm); under MIN_RAM_FREE_MIB everywhere, the reason."""
    options = {}
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _dev, mnt, _fstype, opts = line.split()[:4]
                options[mnt] = opts.split(",")
    except OSError:
        pass
    free: dict[str, int] = {}
    for d in candidates:
        if "noexec" in options.get(d, []) or not os.path.isdir(d):
            continue
        st = os.statvfs(d)
        free[d] = st.f_bavail * st.f_frsize // 2**20
        if free[d] >= memory_mib:
            return d, None
        if free[d] >= MIN_RAM_FREE_MIB:
            return d, (f"UML's {memory_mib} MiB of guest RAM may not all fit: {d} has {free[d]} MiB free; a guest "
                       "that touches more dies (SIGBUS)")
    if not free:
        return None, "no executable TMPDIR for UML's guest RAM (/dev/shm and /tmp are noexec or missing)"
    said = " and ".join(f"{d} has {mib} MiB free" for d, mib in free.items())
    return None, (f"UML needs {memory_mib} MiB free for the guest's RAM, at least {MIN_RAM_FREE_MIB} MiB to boot, "
                  f"but {said} (free space there, or give the appliance less memory: appliance.memsize)")


SUN_PATH_MAX = 108  # bytes in an AF_UNIX socket address, its final NUL included


def run(args: list[str]) -> int:
    launch = parse(args)
    channel = os.environ.get(CHANNEL_ENV, "virtio")
    base = os.environ.get(WORKDIR_ENV) or "/var/tmp"
    # a deep work dir (a fleet worker's, a long label)
    if len(base) + len("/uml-12345678/disk999.sock") >= SUN_PATH_MAX:
        base = "/tmp"  # the sockets must fit in an AF_UNIX address; the guardian removes this dir as any
    tmp = Path(tempfile.mkdtemp(prefix="uml-", dir=base))
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server = None
    disks: StorageDaemon | None = None
    uml: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    watching = threading.Event()  # set: the storage daemon's watcher ends
    try:
        guardian = _start_guardian(tmp)  # at once, and before any thread: fork is safe only while single-threaded
        assert launch.channel_socket is not None
        peer.connect(launch.channel_socket)  # libguestfs listens; qemu would connect here too
        vhost_socket = None
        if channel == "virtio":
            from guestbench.backends.uml.vhost_console import DRAIN_S, POLL_S, VhostConsole

            vhost_socket = str(tmp / "vhost.sock")
            server = VhostConsole(vhost_socket, PORT_NAME, peer)  # listening now; served once UML is started
        disks = _drives(launch, tmp)
        argv = uml_command(launch, tmp, channel, peer.fileno(), vhost_socket, os.environ.get(MODE_ENV),
                           disks.sockets if disks else None)
        env = dict(os.environ)
        ram_dir, said = ram_tmpdir(launch.memory_mib)
        if ram_dir is None:
            sys.stderr.write(f"guestbench-uml: error: {said}\n")
            return 1
        if said:
            sys.stderr.write(f"guestbench-uml: warning: {said}\n")
        env["TMPDIR"] = ram_dir
        # No thread runs yet, so preexec_fn is safe: UML must die with this program even if it is SIGKILLed
        # (libguestfs's recovery process does that when its own parent dies).
        with pinned(launch.kernel) as pin:  # on one host CPU (guestbench.backends.uml.pinning)
            argv = pin.command(argv)
            sys.stderr.write("guestbench-uml: " + " ".join(argv) + "\n")
            sys.stderr.flush()
            uml = subprocess.Popen(argv, stdin=0, stdout=1, stderr=2, env=env, start_new_session=True,
                                   pass_fds=(peer.fileno(),) if channel == "serial" else (),
                                   preexec_fn=procs.die_with(os.getpid()))
            _tell(guardian, f"g{uml.pid};")
            pin.started(uml)
        relay: tuple[threading.Thread, Any] | None = None
        if server is not None:
            relay = (threading.Thread(target=_named(server.serve, b"vhost-console"), args=(stop,),
                                      name="vhost-console", daemon=True), server)
            relay[0].start()
            server = None  # serve() closes it when it returns
        signalled: list[int] = []  # the handler takes no lock (stop's would deadlock it in a stop.set below)
        running = uml
        watcher = disks.watch(watching, lambda why: _disks_failed(why, running)) if disks is not None else None

        def forward(signum: int, _frame: object) -> None:
            # libguestfs stops qemu with SIGTERM after syncing the disks: stop UML and all its processes (while UML
            # is unreaped: its group id is not ours after that), and the relay (_end_relay: libguestfs reads no more)
            signalled.append(signum)
            if uml.returncode is None:
                procs.killpg(uml.pid, signal.SIGKILL)

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, forward)
        rc = uml.wait()
        watching.set()  # UML is gone: what the daemon does now is its shutdown, not a failure
        if watcher is not None:
            watcher.join(2 * WATCH_S)  # its last look is over before its verdict is read
        procs.killpg(uml.pid, signal.SIGKILL)  # UML's helper processes, if any outlived it
        _tell(guardian, "r")  # reaped and killed: the guardian must not kill that group id later
        if relay is not None:
            _end_relay(*relay, stop, signalled, DRAIN_S + 2 * POLL_S)
        if disks is not None and disks.died:
            return 1
        # UML exits 1 after a clean power-off, and is killed by us when libguestfs shuts it down
        return 0 if rc in (0, 1, -signal.SIGKILL) else (rc if rc > 0 else 128 - rc)
    finally:
        stop.set()
        watching.set()
        if uml is not None and uml.returncode is None:  # an exception between its start and its reaping
            procs.killpg(uml.pid, signal.SIGKILL)
            uml.wait()
        if disks is not None:
            disks.stop()
        if server is not None:  # never served: UML did not start
            server.close()
        peer.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _drives(launch: Launch, tmp: Path) -> StorageDaemon | None:
    """Each drive's path chosen and said; the storage daemon for the virtio ones started (before UML, which connects
    to each socket as it boots; dead with this program, as UML), or None when no drive is virtio."""
    choose(launch.drives, os.environ.get(DRIVES_ENV) or AUTO)
    for warning in unguarded(launch.drives):
        sys.stderr.write(f"guestbench-uml: warning: {warning}\n")
    _say_drive_paths(launch.drives)
    virtio = [(n, d) for n, d in enumerate(launch.drives) if d.route == VHOST_USER_BLK]
    return StorageDaemon(virtio, tmp, procs.die_with(os.getpid())) if virtio else None


def _say_drive_paths(drives: list[Drive]) -> None:
    """The path each of libguestfs's drives takes (the appliance's root aside), for the results (DRIVE_PATHS_FILE in
    the work dir, which the worker reads after the launch) and the console."""
    routes = [d.route for d in drives if not d.appliance]
    workdir = os.environ.get(WORKDIR_ENV)
    if not routes:
        if workdir:  # no note of an earlier launch must pass for this one's
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(workdir, DRIVE_PATHS_FILE))
        return
    said = ", ".join(f"{d.path} via {d.route}" for d in drives if not d.appliance)
    sys.stderr.write(f"guestbench-uml: drives: {said}\n")
    if workdir and os.path.isdir(workdir):
        fd, name = tempfile.mkstemp(dir=workdir, prefix=".drive-paths-")
        with os.fdopen(fd, "w") as f:
            json.dump(routes, f)
        os.replace(name, os.path.join(workdir, DRIVE_PATHS_FILE))


def _tell(guardian: int, what: str) -> None:
    """Tell the guardian something; a guardian that has gone (killed) is no reason to fail a launch."""
    try:
        os.write(guardian, what.encode())
    except OSError:
        pass


def _disks_failed(why: str, uml: subprocess.Popen[bytes]) -> None:
    """The storage daemon stopped serving: UML would wait on its disks for ever. End UML, then say why (a full disk
    or console must not keep UML alive)."""
    if uml.returncode is None:
        procs.killpg(uml.pid, signal.SIGKILL)
    try:
        sys.stderr.write(f"guestbench-uml: error: {why}\n")
        sys.stderr.flush()
        note_refusal(why, "ended a launch")  # `guestbench exec` prints it (our stderr is seen only in verbose mode)
    except OSError:
        pass


PR_SET_NAME = 15


def _named(target: Any, name: bytes) -> Any:
    """`target`, run in a thread that the kernel names `name` (top, /proc/PID/task/TID/comm): the vhost-user
    server's CPU time is this program's, and a reader can find the thread that spent it."""
    def run(*args: Any) -> Any:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)
        return target(*args)
    return run


def _end_relay(relay: threading.Thread, server: Any, stop: threading.Event, signalled: list[int],
               drain_s: float) -> None:
    """After UML has gone: what the relay took from a guest that powered off right after writing still goes to
    libguestfs (the server's bounded drain), unless libguestfs asked for the end (a signal) or UML never
    connected; then the relay is stopped and waited for, so that the channel is not closed under it."""
    deadline = time.monotonic() + drain_s
    while relay.is_alive() and server.connected and not signalled and time.monotonic() < deadline:
        relay.join(0.05)
    stop.set()
    relay.join(2.0)


def _start_guardian(tmp: Path) -> int:
    """Fork a process that outlives this program and then removes what UML leaves; the write end of its pipe.

    PDEATHSIG kills UML's main process when this program dies, but UML's helper processes are not its
    children and would run on as orphans. The guardian holds the read end of a pipe whose write end
    only this program holds: end of file means this program is gone, however it died (libguestfs's
    recovery process SIGKILLs qemu). It then kills UML's process group (its id written as "g<pgid>;" once UML
    runs), unless this program wrote "r" first (UML reaped and its group killed: the id may be another group's by
    then), and removes the launch's temp dir (the storage daemon's sockets and overlays too). Started as soon as
    that dir exists, before anything that may take long (qemu-img, the storage daemon's start).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a supervisor signals every descendant: the
                signal.signal(s, signal.SIG_IGN)  # guardian ends at the pipe's end of file, after its clean-up
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # the console socket must not be held open by the guardian
                os.dup2(devnull, fd)
            os.closerange(3, r)
            os.closerange(r + 1, 65536)  # nor the daemon channel: libguestfs must see it close
            said = b""
            while chunk := os.read(r, 64):
                said += chunk
            group = re.search(rb"g(\d+);", said)
            if group is not None and b"r" not in said:
                procs.killpg(int(group.group(1)), signal.SIGKILL)
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            os._exit(0)
    os.close(r)
    os.set_inheritable(w, False)  # UML must not hold it, or the guardian would wait for UML too
    return w


def note_refusal(reason: str, what: str = "refused a launch") -> None:
    """Keep why a launch was refused (or ended: `what`) in the work dir too: libguestfs shows the hypervisor's
    stderr only in verbose mode, so `guestbench exec` prints it from there after the command
    (guestbench.run.command)."""
    workdir = os.environ.get(WORKDIR_ENV)
    if workdir and os.path.isdir(workdir):
        with open(os.path.join(workdir, REFUSALS_FILE), "a") as f:
            f.write(what + ": " + " ".join(reason.split()) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-kernel" not in args:
        # a probe (-help, -version, -machine none -device ?, QMP): the real qemu answers it
        qemu = shutil.which(QEMU) or f"/usr/bin/{QEMU}"
        os.execv(qemu, [qemu, *args])
    try:
        return run(args)
    except TranslateError as e:
        sys.stderr.write(f"guestbench-uml: {e}\n")
        note_refusal(str(e))
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
