"""The watch: a thread in the worker that asks the appliance's hypervisor, twice a second, whether its guest still
runs. qemu's default on a write that finds the host disk full is to pause the guest (werror=enospc) and wait:
libguestfs then waits for a daemon that never answers, until the sample's deadline (30 minutes). The watch sees
the pause within a second, stores the reason ("host filesystem full at /var/tmp ..."), and ends the guest, so
the sample fails at once with that reason and the run goes on.

Direct backends: the qemu wrapper (guestbench.backends.direct.write_qemu_wrapper) opens a QMP socket
`qmp-<pid>` in the work dir. libvirt backends: the domain's state and disk errors, from libvirtd. UML has no
pause: its write errors reach the guest and fail the call, and the worker names the full filesystem (worker.why).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from guestbench.host import space

POLL_S = 0.5
PAUSED_FOR_S = 5.0  # paused by something else (a monitor command, libvirt's suspend) longer than this: a failure
QMP_TIMEOUT_S = 2.0


class Qmp:
    """A QMP connection to one qemu: capabilities negotiated, then one command at a time (events skipped)."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(QMP_TIMEOUT_S)
        try:
            self.sock.connect(path)
            self.reader = self.sock.makefile("r", encoding="utf-8")
            self._line()  # the greeting
            self.command("qmp_capabilities")
        except BaseException:
            self.sock.close()
            raise

    def _line(self) -> dict[str, Any]:
        line = self.reader.readline()
        if not line:
            raise ConnectionError("qemu closed its QMP socket")
        return dict(json.loads(line))

    def command(self, name: str) -> Any:
        self.sock.sendall((json.dumps({"execute": name}) + "\n").encode())
        while True:
            reply = self._line()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise RuntimeError(f"QMP {name}: {reply['error'].get('desc')}")

    def close(self) -> None:
        self.sock.close()


def image_reason(image: str | None, nospace: bool, who: str) -> str:
    """What a pause on an I/O error means, with the full filesystem first when there is one."""
    target = f" writing {image}" if image else ""
    full = space.full_reason(Path(image)) if image else None
    if nospace or full:
        where = full or "host filesystem full"
        return f"{where}: {who} paused the guest on ENOSPC{target}"
    return f"{who} paused the guest on an I/O error{target}"


class Watch(threading.Thread):
    """Watches the hypervisors of one worker's appliances (those with files in `workdir`) until stop()."""

    def __init__(self, workdir: Path, libvirt: bool) -> None:
        super().__init__(name="guestbench-watch", daemon=True)
        self.workdir = workdir
        self.libvirt = libvirt
        self.reason: str | None = None  # why the watch ended a guest; read once the sample failed
        self._halt = threading.Event()
        self._paused_since: dict[str, float] = {}
        self._qmp: dict[int, Qmp] = {}
        self._conn: Any = None

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        try:
            while not self._halt.wait(POLL_S):
                try:
                    self.check()
                except Exception:  # a hypervisor that went away between two looks: nothing to say
                    pass
        finally:
            for q in self._qmp.values():
                q.close()
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:
                    pass

    def check(self) -> None:
        if self.libvirt:
            self._check_libvirt()
        else:
            self._check_qemus()

    def _paused_too_long(self, key: str, paused: bool) -> bool:
        if not paused:
            self._paused_since.pop(key, None)
            return False
        since = self._paused_since.setdefault(key, time.monotonic())
        return time.monotonic() - since > PAUSED_FOR_S

    # ---------------------------------------------------------------- direct: QMP
    def _check_qemus(self) -> None:
        alive = set()
        for entry in self.workdir.glob("qmp-*"):
            pid = int(entry.name[4:]) if entry.name[4:].isdigit() else None
            if pid is None or not Path(f"/proc/{pid}").exists():
                continue
            alive.add(pid)
            q = self._qmp.get(pid)
            if q is None:
                q = self._qmp[pid] = Qmp(f"/proc/{pid}/cwd/qmp-{pid}")
            try:
                self._check_qemu(pid, q)
            except (OSError, ValueError, RuntimeError):
                self._qmp.pop(pid).close()
        for pid in set(self._qmp) - alive:
            self._qmp.pop(pid).close()

    def _check_qemu(self, pid: int, q: Qmp) -> None:
        status = q.command("query-status").get("status")
        reason = None
        if status == "io-error":
            image, nospace = None, False
            for dev in q.command("query-block"):
                if dev.get("io-status") in ("nospace", "failed"):
                    image = (dev.get("inserted") or {}).get("file")
                    nospace = dev.get("io-status") == "nospace"
                    break
            reason = image_reason(image, nospace, "qemu")
        elif status in ("internal-error", "guest-panicked"):
            reason = f"qemu stopped the guest: {status}"
        elif self._paused_too_long(str(pid), status in ("paused", "suspended", "debug")):
            reason = f"qemu's guest has been {status} for over {PAUSED_FOR_S:g} s (not by guestbench)"
        if reason is not None:
            self.reason = reason
            try:
                q.command("quit")
            except (OSError, ValueError, RuntimeError):
                os.kill(pid, 9)

    # ---------------------------------------------------------------- libvirt: domain state
    def _check_libvirt(self) -> None:
        import libvirt

        from guestbench.backends.libvirt import DOMAIN_PREFIX, connect_unbounded

        if self._conn is None:
            # on the watch's own thread: a daemon that hangs (here or in a call below) stops the watch until it
            # answers again, never the run (the watch's join is bounded)
            self._conn = connect_unbounded()
        mark = str(self.workdir).rstrip("/") + "/"
        for dom in self._conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            if not dom.name().startswith(DOMAIN_PREFIX):
                continue
            xml = dom.XMLDesc(0)
            if mark not in xml:
                continue
            state, why = dom.state()
            reason = None
            if state == libvirt.VIR_DOMAIN_PAUSED and why == libvirt.VIR_DOMAIN_PAUSED_IOERROR:
                errors = dom.diskErrors()
                bad = next((d for d, e in errors.items() if e != libvirt.VIR_DOMAIN_DISK_ERROR_NONE), None)
                reason = image_reason(_disk_source(xml, bad) if bad else None,
                                      errors.get(bad) == libvirt.VIR_DOMAIN_DISK_ERROR_NO_SPACE, "libvirt")
            elif state == libvirt.VIR_DOMAIN_CRASHED or (state == libvirt.VIR_DOMAIN_PAUSED
                                                         and why == libvirt.VIR_DOMAIN_PAUSED_CRASHED):
                reason = "libvirt says the guest crashed"
            elif self._paused_too_long(dom.name(), state == libvirt.VIR_DOMAIN_PAUSED):
                reason = f"libvirt has kept the guest paused for over {PAUSED_FOR_S:g} s (reason code {why})"
            if reason is not None:
                self.reason = reason
                dom.destroy()


def _disk_source(xml: str, target: str) -> str | None:
    """The file or device behind disk `target` (vda, sda...) in a domain's XML."""
    import xml.etree.ElementTree as ET

    for disk in ET.fromstring(xml).iter("disk"):
        t = disk.find("target")
        if t is not None and t.get("dev") == target:
            src = disk.find("source")
            if src is not None:
                return src.get("file") or src.get("dev") or src.get("name")
    return None
