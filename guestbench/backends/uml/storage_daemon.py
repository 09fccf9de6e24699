"""qemu-storage-daemon serving libguestfs's drives to UML as vhost-user-blk disks.

One daemon per launch, one export (and socket) per drive: each drive opened as qemu would open libguestfs's -drive
(format or qemu's probe of it, backing chain, cache mode, read-only, snapshot overlay, discard, copy-on-read) and
shown with the block size libguestfs asked for. UML's virtio_uml connects to each socket as it boots
(`virtio_uml.device=SOCKET:2`, 2 being virtio's block device id).

Why a watcher: a daemon that dies or is stopped leaves UML waiting on its disk for ever; the watcher kills UML
within WATCH_S and says why, so that the sample fails in seconds, not at its deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.util.errors import printable
from guestbench.backends.uml.drives import (CACHE_MODES, URL_PROTOCOLS, Drive, TranslateError, backing_of,
                                            probed_format)

DAEMON = "qemu-storage-daemon"
BLOCK_DEVICE_ID = 2  # virtio's id for a block device
READY_S = 15.0  # the daemon's sockets must appear within this
WATCH_S = 0.25  # how often the watcher looks at the daemon
STOPPED_POLLS = 4  # a daemon found stopped this many polls in a row (1 s) has failed
LOG = "storage-daemon.log"


def nodes(d: Drive, n: int, tmp: Path) -> dict[str, Any]:
    """The block node (with its children) that export n serves: what qemu's -drive would open for `d`."""
    direct, no_flush, _ = CACHE_MODES[d.cache]
    common: dict[str, Any] = {"cache": {"direct": direct, "no-flush": no_flush}, "read-only": d.readonly,
                              **({"discard": "unmap"} if d.discard else {})}
    # auto-read-only as qemu's -drive: a protocol that cannot write (http) or a file it may only read opens read-only
    node = {"driver": d.fmt or probed_format(d.path), "file": {**_protocol_node(d), **common, "auto-read-only": True},
            **common}
    if d.locking_off_backing:  # libguestfs's overlay: its backing file is opened read-only, without locks
        node["backing"] = _unlocked_backing(d.path, common)
    if d.snapshot:  # qemu's snapshot=on: writes go to a temporary qcow2 overlay, gone with the launch
        overlay = tmp / f"snapshot{n}.qcow2"
        _create_overlay(d, overlay)
        writable = {**common, "read-only": False}
        node = {"driver": "qcow2", "file": {"driver": "file", "filename": str(overlay), **writable},
                "backing": {**node, "read-only": True}, **writable}
    if d.copy_on_read:  # the export's root: a node without discard drops the guest's discards
        node = {"driver": "copy-on-read", "file": node, **({"discard": "unmap"} if d.discard else {})}
    return {**node, "node-name": f"drive{n}"}


def _protocol_node(d: Drive) -> dict[str, Any]:
    if d.protocol == "file":
        try:
            block = stat.S_ISBLK(os.stat(d.path).st_mode)
        except OSError as exc:
            raise TranslateError(f"drive {d.path} cannot be opened: {exc.strerror}") from None
        return {"driver": "host_device" if block else "file", "filename": d.path}
    if d.protocol == "nbd":  # nbd:unix:PATH[:exportname=X] or nbd:HOST:PORT[:exportname=X] (libguestfs's qemu.c)
        m = re.match(r"^nbd:(?:unix:(?P<path>[^:]+)|(?P<host>[^:]+):(?P<port>\d+))(?::exportname=(?P<name>.*))?$",
                     d.path)
        if m is None:
            raise TranslateError(f"an NBD drive guestbench cannot read: {d.path}")
        server = ({"type": "unix", "path": m["path"]} if m["path"] else
                  {"type": "inet", "host": m["host"], "port": m["port"]})
        return {"driver": "nbd", "server": server, **({"export": m["name"]} if m["name"] is not None else {})}
    if d.protocol in URL_PROTOCOLS:
        return {"driver": d.protocol, "url": d.path}
    if d.protocol == "json":
        try:
            given = json.loads(d.path[len("json:"):])
        except ValueError:
            given = None
        if isinstance(given, dict) and isinstance(given.get("file"), dict):
            return dict(given["file"])
    raise TranslateError(f"the {d.protocol} drive {d.path.split('?')[0]} cannot reach UML: guestbench serves file, "
                         f"nbd, {', '.join(URL_PROTOCOLS)} drives to it")


def _unlocked_backing(path: str, common: dict[str, Any]) -> dict[str, Any]:
    _, backing, stated = backing_of(path)
    if backing is None:
        raise TranslateError(f"libguestfs's overlay {path} has no backing file")
    fmt = stated or probed_format(backing)
    child = Drive(backing, fmt, False, True)
    return {"driver": fmt, "file": {**_protocol_node(child), "locking": "off", **common, "read-only": True},
            **common, "read-only": True}


def _create_overlay(d: Drive, overlay: Path) -> None:
    fmt = d.fmt or probed_format(d.path)
    try:
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", fmt, "-b", d.path, str(overlay)],
                       capture_output=True, text=True, timeout=60, check=True, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        said = getattr(exc, "stderr", None) or exc
        raise TranslateError(f"no snapshot overlay for {d.path}: {' '.join(str(said).split())}") from None


def export(d: Drive, n: int, socket_path: str) -> dict[str, Any]:
    _, _, writethrough = CACHE_MODES[d.cache]
    return {"type": "vhost-user-blk", "id": f"export{n}", "node-name": f"drive{n}",
            "addr": {"type": "unix", "path": socket_path},
            "writable": (not d.readonly or d.snapshot) and d.protocol not in URL_PROTOCOLS,
            "writethrough": writethrough, **({"logical-block-size": d.blocksize} if d.blocksize else {})}


class StorageDaemon:
    """The launch's qemu-storage-daemon: started before UML (its sockets must listen when UML boots), watched while
    UML runs, stopped after it (SIGTERM: qcow2's metadata is written back; SIGKILL after STOP_S)."""

    STOP_S = 10.0

    def __init__(self, drives: list[tuple[int, Drive]], tmp: Path, preexec: Callable[[], None]) -> None:
        self.sockets = {n: str(tmp / f"disk{n}.sock") for n, _ in drives}  # drive index → its socket
        args: list[str] = []
        for (n, d), sock in zip(drives, self.sockets.values()):
            args += ["--blockdev", json.dumps(nodes(d, n, tmp)), "--export", json.dumps(export(d, n, sock))]
        daemon = shutil.which(DAEMON) or f"/usr/bin/{DAEMON}"
        self.log = tmp / LOG
        with open(self.log, "wb") as log:
            try:  # its own session (a terminal's Ctrl-C is for libguestfs to handle), dead with this program
                self.proc = subprocess.Popen([daemon, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True, preexec_fn=preexec)
            except OSError as exc:
                raise TranslateError(f"{DAEMON} cannot start: {exc.strerror} (apt-get install qemu-system-common)") \
                    from None
        self.died: str | None = None
        self._stopped_polls = 0  # the watcher's polls in a row that found the daemon stopped
        try:
            self._ready()
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> None:
        deadline = time.monotonic() + READY_S
        while not all(os.path.exists(s) for s in self.sockets.values()):
            if self.proc.poll() is not None:
                raise TranslateError(f"{DAEMON} refused the drives: {self.said()}")
            if time.monotonic() > deadline:
                raise TranslateError(f"{DAEMON} did not listen within {READY_S:g} s")
            time.sleep(0.01)

    def said(self) -> str:
        """The last thing the daemon wrote (its error), on one line."""
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        # printable: it may quote what a remote NBD or HTTP server said
        return printable(" ".join(lines[-1].split())[:300]) if lines else f"exit status {self.proc.returncode}"

    def problem(self) -> str | None:
        """Why the daemon no longer serves (it exited, or it has been stopped for STOPPED_POLLS polls in a row), or
        None. A tracer's stop (t: strace, gdb) is not one; nor is a moment's freeze (a supervisor freezes a process
        tree before it ends it)."""
        if self.proc.poll() is not None:
            return f"{DAEMON} (pid {self.proc.pid}) exited with status {self.proc.returncode}: {self.said()}"
        try:
            state = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None
        self._stopped_polls = self._stopped_polls + 1 if state == "T" else 0
        if self._stopped_polls < STOPPED_POLLS:
            return None
        return f"{DAEMON} (pid {self.proc.pid}) is stopped: the guest's disks cannot answer"

    def watch(self, stop: threading.Event, on_problem: Callable[[str], None]) -> threading.Thread:
        """A thread that calls on_problem(why) once if the daemon stops serving before `stop` is set."""
        def run() -> None:
            while not stop.wait(WATCH_S):
                if (why := self.problem()) is not None and not stop.is_set():
                    self.died = why
                    on_problem(why)
                    return
        thread = threading.Thread(target=run, name="storage-daemon-watch", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped daemon cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(self.STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:  # one stuck in the kernel (a hung NFS or NBD server) goes when it can, never waited for
                    self.proc.wait(self.STOP_S)
                except subprocess.TimeoutExpired:
                    pass
