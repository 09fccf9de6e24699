"""The pieces host storage kinds are built from (images, loop devices, servers, FUSE files), and the record
of each piece, written to the work dir's state file before or right after the piece exists.

Servers run in their own process group, under PDEATHSIG=SIGKILL (setpriv) unless the storage was made
with die_with_owner=False, so they die with the process that made them even when it is SIGKILLed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from guestbench.results import atomic_write_json
from guestbench.storage import backing_sys as bs
from guestbench.storage.backing_teardown import STATE_FILE, teardown
from guestbench.host import procs

READY_TIMEOUT_S = 30.0
FULL_PREALLOC_BYTES_PER_S = 20 * 2**20  # a slow shared disk: the timeout for writing a whole image


class Resources:
    """What one Backings made, oldest first, kept in its state file so that `sweep_stale` can undo it
    when the owner dies before undoing it itself."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.state_path = workdir / STATE_FILE
        self.actions: list[str] = []  # what close()/power_cut() did, in order
        self.items: list[dict[str, Any]] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.closed = False

    def record(self, res: dict[str, Any]) -> None:
        self.items.append(res)
        self.save()

    def forget(self, res: dict[str, Any]) -> None:
        self.items = [r for r in self.items if r is not res]

    def holds(self, res: dict[str, Any]) -> bool:
        return any(r is res for r in self.items)

    def undo(self, mark: int, log: list[str] | None = None) -> None:
        """Tear down resources from index `mark` on, newest first; keep (and record) those that failed."""
        log = self.actions if log is None else log
        failed = []
        for res in reversed(self.items[mark:]):
            proc = self.procs.get(int(res["pid"])) if res["type"] == "server" else None
            if not teardown(res, proc, log):
                failed.append(res)
        self.items = self.items[:mark] + list(reversed(failed))
        if self.items or not self.closed:
            self.save()
        else:
            self.state_path.unlink(missing_ok=True)

    def save(self) -> None:
        atomic_write_json(self.state_path, {
            "owner": {"pid": os.getpid(), "start": procs.proc_start(os.getpid())},
            "workdir": str(self.workdir),
            "resources": self.items,
        })


class Builder:
    """Makes the pieces of host storage in the work dir, recording each in `res`; `drives` says, per drive
    name, which pieces are its own (image, servers by program, fuse mount, nbdlog)."""

    def __init__(self, res: Resources, die_with_owner: bool) -> None:
        self.res = res
        self.workdir = res.workdir
        self.die_with_owner = die_with_owner
        self.drives: dict[str, dict[str, Any]] = {}
        self._logs: dict[int, Path] = {}

    def create_image(self, name: str, nbytes: int, fmt: str, preallocation: str) -> Path:
        image = self.workdir / f"{name}.{fmt}"
        if image.exists():
            raise ValueError(f"{image} already exists")
        self.drives[name] = {"image": str(image)}
        self.res.record({"type": "image", "path": str(image)})
        timeout = bs.COMMAND_TIMEOUT_S
        if preallocation in ("full", "falloc"):
            timeout += nbytes / FULL_PREALLOC_BYTES_PER_S
        bs.checked([bs.exe("qemu-img"), "create", "-q", "-f", fmt, "-o", f"preallocation={preallocation}", str(image),
                  str(nbytes)], timeout=timeout)
        return image

    def path(self, name: str, suffix: str) -> Path:
        """A file or directory <workdir>/<name><suffix> of a drive's, removed with it."""
        path = self.workdir / f"{name}{suffix}"
        self.res.record({"type": "path", "path": str(path)})
        return path

    def losetup(self, image: Path) -> str:
        device = bs.checked([bs.exe("losetup"), "--find", "--show", str(image)]).strip()
        self.res.record({"type": "loop", "device": device, "backing": str(image)})
        return device

    def start(self, name: str, program: str, argv: list[str], env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        """Start a server in its own process group, its output in a log file in the work dir."""
        log_path = self.path(name, f".{program}.log")
        if self.die_with_owner and (setpriv := bs.which("setpriv")):
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env)
        self.res.procs[proc.pid] = proc
        self._logs[proc.pid] = log_path
        res = {"type": "server", "program": program, "pid": proc.pid, "start": procs.proc_start(proc.pid), "name": name}
        self.res.record(res)
        self.drives[name][program] = res
        return proc

    def socket(self, name: str) -> Path:
        sock = self.workdir / f"{name}.sock"
        if len(str(sock).encode()) > 107:
            raise ValueError(f"socket path {sock} is longer than a unix socket address allows (107 bytes)")
        sock.unlink(missing_ok=True)  # a server refuses to bind over a stale socket
        self.res.record({"type": "path", "path": str(sock)})
        return sock

    def wait_nbd(self, sock: Path, proc: subprocess.Popen[bytes], program: str) -> None:
        """Wait until the server greets a client with the NBD magic (it is serving, not just bound)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{program} exited with status {proc.returncode}: {self.log_tail(program, proc)}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(2)
                    s.connect(str(sock))
                    if s.recv(8, socket.MSG_WAITALL) == b"NBDMAGIC":
                        # libvirt runs qemu as its own user (libvirt-qemu), which must be able to connect
                        os.chmod(sock, 0o666)
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{program} did not serve {sock} within {READY_TIMEOUT_S:.0f} s: "
                                   f"{self.log_tail(program, proc)}")
            time.sleep(0.05)

    def fuse(self, name: str, sock: Path) -> str:
        """Present an NBD export as the plain file <workdir>/<name>.fuse/disk (nbdfuse)."""
        mnt = self.workdir / f"{name}.fuse"
        mnt.mkdir()
        self.res.record({"type": "path", "path": str(mnt)})
        pidfile = self.path(name, ".nbdfuse.pid")
        # allow_other: libvirt's qemu runs as another user; root may set it without /etc/fuse.conf
        options = ["-o", "allow_other"] if os.geteuid() == 0 else []
        proc = self.start(name, "nbdfuse", [bs.exe("nbdfuse"), "-P", str(pidfile), *options, f"{mnt}/disk",
                                            "--unix", str(sock)])
        fuse = {"type": "fuse", "mountpoint": str(mnt)}
        self.res.record(fuse)
        self.drives[name]["fuse"] = fuse
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (pidfile.exists() and pidfile.read_text().strip() and str(mnt) in bs.mounts()):
            if proc.poll() is not None:
                raise RuntimeError(f"nbdfuse exited with status {proc.returncode}: {self.log_tail('nbdfuse', proc)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nbdfuse did not mount {mnt} within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        return f"{mnt}/disk"

    def log_tail(self, program: str, proc: subprocess.Popen[bytes]) -> str:
        """The last lines a server wrote, for an error message."""
        try:
            text = self._logs[proc.pid].read_text(errors="replace").strip()
        except (KeyError, OSError):
            text = ""
        return " | ".join(text.splitlines()[-5:]) if text else f"({program} wrote nothing)"
