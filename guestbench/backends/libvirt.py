"""libguestfs's libvirt backend: libvirtd starts qemu from a transient domain libguestfs defines."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, TypeVar, cast
from collections.abc import Callable

from guestbench.host import daemons, procs
from guestbench.host import fingerprint
from guestbench.backends.base import Availability, Backend, HandleConfig, common_preconditions
from guestbench.backends.direct import explain_kvm_failure, kvm_probe_attempts, kvm_probe_timeout

URI = "qemu:///system"
# libguestfs names its transient domains "guestfs-" + 16 random characters.
DOMAIN_PREFIX = "guestfs-"
DAEMONS = ("virtlogd", "libvirtd")


OPEN_TIMEOUT_S = 10.0  # libvirtd answers a connection in milliseconds; a stopped or hung one never does
CALL_TIMEOUT_S = 60.0  # a listing or a destroy (libvirt gives a domain's qemu 10 s after SIGTERM before SIGKILL)
T = TypeVar("T")


def bounded(call: Callable[[], T], timeout: float, connected: threading.Event | None = None) -> T:
    """`call()`'s result, or TimeoutError after `timeout` s (and after OPEN_TIMEOUT_S if `call` has not set
    `connected` by then): libvirt's client waits without a deadline on a daemon that accepts and never answers
    (stopped, hung), so the call runs on a thread of its own, left to end when the daemon does (a connection it
    opens late is closed when it is collected). The error says what the daemons were doing at the deadline."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    thread = threading.Thread(target=run, name="libvirt-call", daemon=True)
    started = time.monotonic()
    thread.start()
    if connected is not None and not connected.wait(min(OPEN_TIMEOUT_S, timeout)):
        raise TimeoutError(silence(min(OPEN_TIMEOUT_S, timeout)))
    thread.join(max(0.0, timeout - (time.monotonic() - started)))
    if thread.is_alive():
        raise TimeoutError(silence(timeout))
    if "error" in box:
        error = box.pop("error")  # not kept in box: its traceback holds the frame that holds box (a cycle that
        try:  # keeps a domain and its connection alive until the collector runs, and closes them wherever it does)
            raise error
        finally:
            del error
    return cast(T, box.pop("value"))


def silence(timeout: float) -> str:
    """A call that passed its deadline, and what the daemons were doing then (host/daemons.py)."""
    return f"libvirtd did not answer within {timeout:.0f} s (stopped or hung?) [{daemons.describe()}]"


def connect_unbounded() -> Any:
    """A connection to libvirtd, waited for without a deadline: call it through bounded, or on a thread whose
    join has one."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # keep libvirt from printing to stderr
    return libvirt.open(URI)


def open_connection(timeout: float | None = None) -> Any:
    """A connection to libvirtd within `timeout` s (None: OPEN_TIMEOUT_S), or TimeoutError."""
    return bounded(connect_unbounded, OPEN_TIMEOUT_S if timeout is None else timeout)


def connect_error(timeout: float | None = None) -> str | None:
    """None when libvirtd answers on qemu:///system within `timeout` (None: OPEN_TIMEOUT_S), else why not (libvirt's
    error message)."""
    try:
        conn = open_connection(timeout)
    except ImportError:
        return "the libvirt Python bindings do not import (apt-get install python3-libvirt)"
    except Exception as e:  # libvirt.libvirtError, TimeoutError
        return " ".join(str(e).split())
    conn.close()
    return None


def ensure_daemons(wait_s: float = 15.0) -> str | None:
    """Start virtlogd and libvirtd when they are not running and we may (root); None when libvirt answers.

    There is no systemd on these machines, so the daemons are started directly, detached. A daemon that is running
    and does not answer (stopped, hung) is reported after at most about twice `wait_s`.
    """
    if (first := connect_error(min(OPEN_TIMEOUT_S, wait_s))) is None:
        return None
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install libvirt-daemon-system)"
    if os.geteuid() != 0:
        if _running("libvirtd"):
            return f"libvirtd is running but {URI} does not answer: {first}"
        return ("libvirtd is not running and guestbench is not root; run as root: virtlogd -d && libvirtd -d "
                "(or systemctl start libvirtd)")
    # A daemon that is still exiting (stopped a moment ago: it removes its socket as it goes) is waited for,
    # then started again; one that is running answers within the wait or is reported.
    deadline = time.monotonic() + wait_s
    started: list[str] = []
    while True:
        for d in DAEMONS:
            if d not in started and not _running(d):
                exe = shutil.which(d) or f"/usr/sbin/{d}"
                # a daemon outlives this run: it takes nothing of it (its environment, its directory, which a
                # test's or a run's temp dir may be and be removed under it)
                subprocess.run([exe, "-d"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30, start_new_session=True, cwd="/",
                               env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
                started.append(d)
        err = connect_error(max(1.0, min(OPEN_TIMEOUT_S, deadline - time.monotonic())))
        if err is None:
            return None
        if time.monotonic() >= deadline:
            what = f"started {' and '.join(started)}" if started else "virtlogd and libvirtd were running"
            return f"{what} but {URI} does not answer: {err}"
        time.sleep(0.3)


def _running(daemon: str) -> bool:
    """This root's daemon runs (a chroot's on the same machine, visible in /proc, is not ours: host/daemons.py)."""
    return daemons.running(daemon)


def guestfs_domains(workdir: Path | None = None) -> set[str]:
    """Names of libguestfs's domains (running or defined) whose disks or sockets are under `workdir`
    (None: all of them).

    Why by path and not "new since the worker started": other guestbench runs and other libguestfs users
    on this host create guestfs-* domains at the same time, and must never be touched. Every file of a
    guestbench launch (its disks, libguestfs's overlay and sockets: set_tmpdir) lives in its work dir.
    """
    return set(domains_under(DOMAIN_PREFIX, workdir))


def domains_under(prefix: str, under: Path | None = None) -> list[str]:
    """Domains named `prefix`... whose XML mentions a path under `under` (None: all); [] without libvirt, or when
    libvirtd does not answer in time (_with_connection; a clean-up then kills the qemu processes themselves)."""
    mark = str(under).rstrip("/") + "/" if under is not None else ""

    def listing(conn: Any) -> list[str]:
        found = []
        for d in conn.listAllDomains():
            try:
                if d.name().startswith(prefix) and mark in d.XMLDesc(0):
                    found.append(d.name())
            except Exception:  # gone meanwhile
                continue
        return found

    try:
        return _with_connection(listing)
    except Exception:
        return []


def destroy_domains(names: set[str]) -> list[str]:
    """Destroy (and undefine, if persistent) the given domains; return those that were removed (none when libvirtd
    does not answer in time: _with_connection)."""
    def destroy(conn: Any) -> list[str]:
        removed = []
        for name in sorted(names):
            try:
                dom = conn.lookupByName(name)
            except Exception:
                continue
            try:
                if dom.isActive():
                    dom.destroy()
                if dom.isPersistent():
                    dom.undefine()
                removed.append(name)
            except Exception:
                pass
        return removed

    if not names:
        return []
    try:
        return _with_connection(destroy)
    except Exception:
        return []


def _with_connection(use: Callable[[Any], T]) -> T:
    """`use(conn)` on a connection of its own, on one thread: connected within OPEN_TIMEOUT_S, all of it within
    CALL_TIMEOUT_S."""
    connected = threading.Event()

    def call() -> T:
        try:
            conn = connect_unbounded()
        finally:
            connected.set()  # or failed at once: either way no longer waiting on the daemon
        try:
            return use(conn)
        finally:
            conn.close()

    return bounded(call, CALL_TIMEOUT_S, connected)


# What libvirt's client says when libvirtd is not there or went away mid-call.
DAEMON_GONE = ("Failed to connect socket", "End of file while reading data", "Cannot recv data",
               "Cannot write data", "client socket is closed", "no connection driver available")


def explain_daemon_gone(reason: str) -> str | None:
    """The reason, led by what to do, when it says libvirtd stopped answering; None for any other failure."""
    if not any(k in reason for k in DAEMON_GONE):
        return None
    return (f"libvirtd stopped answering on {URI} (start it: libvirtd -d, or systemctl start libvirtd): "
            f"{reason}")


def kill_orphaned_qemus(workdir: Path) -> list[str]:
    """SIGKILL the qemu processes whose command line names a file in `workdir`: a domain's qemu outlives a
    libvirtd that went away, and no libvirt call can destroy it then. Another run's never name this work dir."""
    mark = str(workdir).rstrip("/") + "/"
    killed = []
    for pid in procs.pids():
        argv = procs.argv(pid)
        if argv and Path(argv[0]).name.startswith("qemu-system") and any(mark in a for a in argv):
            try:
                os.kill(pid, 9)
                killed.append(f"qemu pid {pid}")
            except ProcessLookupError:
                pass
    return killed


def kvm_group_problem(dev: Path = Path("/dev/kvm")) -> str | None:
    """Why libvirt would probe qemu again at every domain start: /dev/kvm owned by a group this host does not know.
    A qemu package installed in a chroot over this host's /dev gives it that root's kvm group; libvirt's qemu user
    then cannot open it, and libvirt 9 takes its cached qemu capabilities for stale at each start (about 40 s a start
    here, past the level-1 guest's 60 s deadline: docs/development.md's flake log). None when /dev/kvm is absent
    or its group is known."""
    try:
        gid = os.stat(dev).st_gid
    except OSError:
        return None
    try:
        grp.getgrgid(gid)
        return None
    except KeyError:
        return (f"{dev} belongs to group {gid}, which names no group on this host (a package installed in a chroot "
                f"over this host's /dev?): libvirt's qemu user cannot open it, and libvirt then probes qemu again at "
                f"every domain start; give it its group back: chgrp kvm {dev}")


class _LibvirtBackend(Backend):
    settings: list[str] = []
    volatile_disk_as_file = False  # libvirt chowns a disk to its qemu user, which a FUSE mount refuses
    daemons = ("libvirtd", "virtqemud", "virtlogd")  # the monolithic daemon or its modular ones, and the logger

    def preconditions(self) -> Availability:
        if (missing := common_preconditions()) is not None:
            return missing
        if (why := kvm_group_problem()) is not None:
            return Availability(False, why)
        err = ensure_daemons()
        if err is not None:
            return Availability(False, err)
        return Availability(True, f"libvirtd answers on {URI}", {"uri": URI})

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        # libguestfs's libvirt backend honours LIBGUESTFS_PATH too (the appliance is readable by libvirt's qemu)
        return HandleConfig("libvirt", list(self.settings),
                            env={"LIBGUESTFS_BACKEND": f"libvirt:{URI}", **self.workload_env(workload)})

    def probe_key(self) -> dict[str, Any]:
        v = fingerprint.versions()
        return {"libguestfs": v.get("libguestfs"), "qemu": v.get("qemu"), "libvirt": v.get("libvirt"),
                "kernel": v.get("kernel"), "kvm": fingerprint.kvm_device().get("flavour")}

    def cleanup(self, workdir: Path) -> list[str]:
        removed = destroy_domains(guestfs_domains(workdir))
        return removed + kill_orphaned_qemus(workdir)  # what libvirtd, gone, could not destroy

    def explain(self, reason: str, timed_out: bool) -> str:
        return explain_daemon_gone(reason) or reason


class LibvirtTcg(_LibvirtBackend):
    name = "libvirt-tcg"
    summary = "libguestfs libvirt backend (transient domain via libvirtd), TCG forced"
    settings = ["force_tcg"]
    colour = "#55a868"


class LibvirtKvm(_LibvirtBackend):
    name = "libvirt-kvm"
    summary = "libguestfs libvirt backend (transient domain via libvirtd), KVM forced"
    settings = ["force_kvm"]
    colour = "#c44e52"
    probe_timeout_s = 60.0

    def probe_timeout(self) -> float:
        return kvm_probe_timeout(self.probe_timeout_s)

    def probe_attempts(self) -> int:
        return kvm_probe_attempts()

    def preconditions(self) -> Availability:
        dev = fingerprint.kvm_device()
        if not dev["present"]:
            return Availability(False, "/dev/kvm does not exist, so libvirt cannot run a kvm domain",
                                {"kvm": dev})
        return super().preconditions()

    def explain(self, reason: str, timed_out: bool) -> str:
        return explain_daemon_gone(reason) or explain_kvm_failure(reason, timed_out)
