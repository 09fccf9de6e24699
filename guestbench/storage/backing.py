"""Host-side backings for a guest's disk: a plain file, a loop device, an NBD export (qemu-nbd or nbdkit,
optionally shown as a plain file through nbdfuse), or an LV of a loop-backed volume group.

The experiments compare how the *host* presents the same bytes to the hypervisor. Each way is a kind in
the registry guestbench.storage.backing_kinds.KINDS (one module each); this module is what the rest of
guestbench uses: `Backings` makes drives of any kind, `availability` says whether this host can.

Nothing may leak. Everything is recorded in a state file in the work dir (with the owner's pid and start
time) before, or right after, it exists (guestbench.storage.backing_build). Servers die with the process
that made them; loop devices, VGs and FUSE mounts outlive it: `sweep_stale` removes those of dead owners
on the next run (guestbench.storage.backing_teardown).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

from guestbench.util.errors import Unavailable
from guestbench.storage.drive import Drive
from guestbench.storage.backing_build import Builder, Resources
from guestbench.storage.backing_kinds import FORMATS, KINDS, Image, nbdkit
from guestbench.storage.backing_sys import fs_type, fuse_problem, nbdkit_has, which
from guestbench.storage.backing_sweep import owner_alive, read_state, sweep_stale, sweep_workdir
from guestbench.storage.backing_teardown import STATE_FILE, stop_server, unmount
from guestbench.util.units import parse_size as _parse_size

HOST_KINDS = tuple(KINDS)
NBD_KINDS = tuple(name for name, kind in KINDS.items() if kind.nbd)
PREALLOCATIONS = ("off", "metadata", "falloc", "full")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# what the rest of guestbench and the tests import from here
__all__ = ["FORMATS", "HOST_KINDS", "KINDS", "NBD_KINDS", "PREALLOCATIONS", "STATE_FILE", "Drive", "Backings",
           "Unavailable", "availability", "format_problem", "parse_size", "sweep_stale",
           "volatile_availability"]


def _unknown(kind: str) -> ValueError:
    return ValueError(f"unknown host storage kind {kind!r}; one of {', '.join(HOST_KINDS)}")


def availability(kind: str, as_file: bool = False, delay: bool = False) -> str | None:
    """None when this host can provide `kind` (as a file through FUSE, with a delay filter); else why not.

    Cheap: looks at programs and device nodes only, creates nothing.
    """
    if kind not in KINDS:
        raise _unknown(kind)
    missing = [p for p in KINDS[kind].programs if which(p) is None]
    if missing:
        return f"host {kind} storage needs {', '.join(missing)}, not installed on this host"
    if problem := KINDS[kind].problem(delay):
        return problem
    if as_file and (problem := fuse_problem()):
        return problem
    return None


def volatile_availability() -> str | None:
    """None when `Backings.volatile` can work here; else why not."""
    if reason := availability("nbdkit", as_file=True):
        return reason
    if not nbdkit_has("filter", "cache"):
        return "the volatile disk needs nbdkit's cache filter, missing on this host"
    return None


def format_problem(kind: str, fmt: str) -> str | None:
    """None when `kind` can present an image of format `fmt`; else one line saying which kinds can, for a
    scenario check (Backings.add would refuse it with the reason at run time)."""
    if fmt in KINDS[kind].formats:
        return None
    takes = [name for name, k in KINDS.items() if fmt in k.formats]
    return f"{kind} serves {', '.join(KINDS[kind].formats)} images here; allowed with {fmt}: {', '.join(takes)}"


def parse_size(size: int | str) -> int:
    """Bytes of an image from an int or a string such as "64M" or "1GiB" (guestbench.util.units.parse_size, whole
    numbers only as host image sizes always were)."""
    return _parse_size(size, what="image size", fractions=False)


def _validate(kind: str, name: str, fmt: str, preallocation: str, as_file: bool, delay_ms: int | None) -> None:
    """Reject requests that make no sense anywhere, before anything is created."""
    if kind not in KINDS:
        raise _unknown(kind)
    if not _NAME_RE.match(name):
        raise ValueError(f"drive name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    if fmt not in FORMATS:
        raise ValueError(f"image format {fmt!r}: one of {', '.join(FORMATS)}")
    if preallocation not in PREALLOCATIONS:
        raise ValueError(f"preallocation {preallocation!r}: one of {', '.join(PREALLOCATIONS)}")
    if preallocation == "metadata" and fmt != "qcow2":
        raise ValueError("preallocation=metadata is for qcow2 only (a raw image has no metadata); "
                         "raw takes off, falloc or full")
    if fmt not in KINDS[kind].formats:
        raise ValueError(KINDS[kind].format_refusal(fmt))
    if as_file and not KINDS[kind].nbd:
        raise ValueError(f"as_file is for the NBD kinds ({', '.join(NBD_KINDS)}); {kind} is already a host "
                         "file or device")
    if delay_ms is not None:
        if not KINDS[kind].delay:
            delayed = " or ".join(f"{k}'s" for k, v in KINDS.items() if v.delay)
            raise ValueError(f"delay_ms needs {delayed} delay filter; {kind} has none")
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms <= 0:
            raise ValueError(f"delay_ms must be a positive whole number of milliseconds, got {delay_ms!r}")


class Backings:
    """The host-side disks of one run (or cell), all under `workdir`; a context manager.

    `die_with_owner=False` lets servers outlive this process: only for testing `sweep_stale` and debugging.
    Servers get PDEATHSIG from the thread that starts them: create drives from a thread that lives as
    long as they are needed (the main thread).
    """

    def __init__(self, workdir: Path, *, die_with_owner: bool = True) -> None:
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.workdir / STATE_FILE
        self.die_with_owner = die_with_owner
        self._res = Resources(self.workdir)
        self._build = Builder(self._res, die_with_owner)
        if self.state_path.exists():
            state = read_state(self.state_path)
            if state is not None and owner_alive(state):
                raise ValueError(f"{self.workdir} already has live host storage (owner pid {state['owner']['pid']})")
            self._res.actions += sweep_workdir(self.workdir, state or {})
        self._res.save()

    @property
    def actions(self) -> list[str]:
        """What close()/power_cut() did, in order."""
        return self._res.actions

    def __enter__(self) -> Backings:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, kind: str, name: str, size: int | str, fmt: str = "raw", preallocation: str = "off",
            as_file: bool = False, delay_ms: int | None = None) -> Drive:
        """Create an image of `size` in the work dir and present it the way `kind` says."""
        self._check_open()
        _validate(kind, name, fmt, preallocation, as_file, delay_ms)
        self._check_new(name)
        if reason := availability(kind, as_file=as_file, delay=delay_ms is not None):
            raise Unavailable(reason)
        nbytes = parse_size(size)

        def make() -> Drive:
            path = self._build.create_image(name, nbytes, fmt, preallocation)
            what = f"{fmt} image (preallocation={preallocation}) on the host's {fs_type(self.workdir)}"
            return KINDS[kind].present(self._build, Image(name, path, fmt, what), as_file, delay_ms)

        return self._making(name, make)

    def volatile(self, name: str, size: int | str, as_file: bool = True) -> Drive:
        """The durability rig: a raw image behind nbdkit's writeback cache, shown as a file by nbdfuse.

        Writes stay in nbdkit's cache (an unlinked scratch file in the work dir) until the guest flushes;
        `power_cut()` then loses exactly the unflushed ones. A plain file, so every hypervisor (qemu or UML's
        ubd) can open it.
        """
        self._check_open()
        _validate("nbdkit", name, "raw", "off", True, None)
        self._check_new(name)
        if reason := volatile_availability():
            raise Unavailable(reason)
        nbytes = parse_size(size)
        cached = "behind nbdkit's cache filter in writeback mode (unflushed writes are lost on a power cut)"

        def make() -> Drive:
            image = self._build.create_image(name, nbytes, "raw", "off")
            # the log filter (outside the cache) records every request the hypervisor sent: how many flushes
            log = self._build.path(name, ".nbdlog")
            self._build.drives[name]["nbdlog"] = str(log)
            sock = nbdkit.serve(self._build, name, image, filters=["log", "cache"],
                                params=[f"logfile={log}", "cache=writeback"])
            self._build.drives[name]["volatile"] = True
            if not as_file:  # qemu reaches it over NBD itself (libvirt cannot hand a FUSE file to its qemu user)
                return Drive(filename="", format="raw", protocol="nbd", server=[f"unix:{sock}"], kind="volatile",
                             name=name, describe=f"raw image on the host {cached}, reached over NBD")
            return Drive(filename=self._build.fuse(name, sock), format="raw", kind="volatile", name=name,
                         describe=f"raw image on the host's {fs_type(self.workdir)} {cached}, presented as a plain "
                         "host file by nbdfuse")

        return self._making(name, make)

    def power_cut(self) -> list[str]:
        """Kill (SIGKILL) the nbdkit of every volatile drive, then unmount its file: unflushed writes are gone,
        and the image on the host (`image_path`) holds what a disk would after losing power."""
        log: list[str] = []
        for info in self._build.drives.values():
            if not info.get("volatile") or info.get("cut"):
                continue
            for role in ("nbdkit", "fuse", "nbdfuse"):  # the server dies first: nothing more reaches the image
                res = info.get(role)
                if res is None:  # served over NBD, no FUSE file
                    continue
                if not self._res.holds(res):
                    continue
                if role == "fuse":
                    done = unmount(str(res["mountpoint"]), log)
                else:
                    sig = signal.SIGKILL if role == "nbdkit" else signal.SIGTERM
                    done = stop_server(res, self._res.procs.get(int(res["pid"])), log, sig)
                if done:
                    self._res.forget(res)
            info["cut"] = True
        self._res.actions += log
        self._res.save()
        return log

    def requests(self, drive: Drive) -> dict[str, int]:
        """How many writes and flushes reached a volatile drive's server (nbdkit's log filter)."""
        counts = {"writes": 0, "flushes": 0}
        try:
            with open(self._build.drives[drive.name]["nbdlog"]) as f:
                for line in f:
                    if " Write " in line and "..." in line:
                        counts["writes"] += 1
                    elif " Flush " in line and "..." in line:
                        counts["flushes"] += 1
        except (KeyError, OSError):
            pass
        return counts

    def image_path(self, drive: Drive) -> Path:
        """The image file on the host behind a drive of this storage (for lvm: the PV's backing file)."""
        try:
            return Path(self._build.drives[drive.name]["image"])
        except KeyError:
            raise ValueError(f"drive {drive.name!r} is not one of this storage's drives") from None

    def close(self) -> list[str]:
        """Tear everything down in reverse order; idempotent and never raising. Returns what it did; lines
        starting with "failed:" name what is left (kept in the state file for `sweep_stale`)."""
        if self._res.closed:
            return []
        self._res.closed = True
        log: list[str] = []
        self._res.undo(0, log)
        self._res.actions += log
        return log

    def _check_open(self) -> None:
        if self._res.closed:
            raise RuntimeError("this Backings is closed")

    def _check_new(self, name: str) -> None:
        if name in self._build.drives:
            raise ValueError(f"a drive named {name!r} already exists here")

    def _making(self, name: str, make: Callable[[], Drive]) -> Drive:
        """`make()`'s drive; if it fails, whatever it made is undone before the error goes on."""
        mark = len(self._res.items)
        try:
            return make()
        except BaseException:
            self._res.undo(mark)
            self._build.drives.pop(name, None)
            raise
