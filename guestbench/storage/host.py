"""Host-side backings for a guest's disk: a plain file, a loop device, an NBD export (qemu-nbd or nbdkit,
optionally shown as a plain file through nbdfuse), or an LV of a loop-backed volume group.

The experiments compare how the *host* presents the same bytes to the hypervisor, so every caching
choice is made the same way for every kind: the image file is reached through the host page cache and
guest flushes reach the disk (qemu-nbd --cache=writeback, nbdkit's file plugin default, losetup without
direct I/O). The kinds then differ by the layer in between, not by cache policy.

Nothing may leak. Everything is recorded in a state file in the work dir (with the owner's pid and start
time) before, or right after, it exists. Servers run in their own process group under PDEATHSIG=SIGKILL
(setpriv), so they die with the process that made them, even when it is SIGKILLed (nbdkit 1.32 also asks
for SIGTERM on its parent's death by itself, then ends when its last client goes). Loop devices, VGs and
FUSE mounts outlive it: `sweep_stale` removes those of dead owners on the next run.

Choices: loop and lvm are raw only (a loop device presents bytes; qcow2 behind it would still need qemu
and could not grow past the device). qemu-nbd serves raw or qcow2 and the drive is then raw (qemu-nbd
decodes). nbdkit is raw only: 1.32 has no qcow2dec filter. Host LVM needs device-mapper in the host
kernel; `availability` says so (cheaply, before anything is created) instead of the kind disappearing.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from guestbench.paths import RUN_PREFIX, temp_root

HOST_KINDS = ("file", "loop", "qemu-nbd", "nbdkit", "lvm")
NBD_KINDS = ("qemu-nbd", "nbdkit")
FORMATS = ("raw", "qcow2")
PREALLOCATIONS = ("off", "metadata", "falloc", "full")
STATE_FILE = "host-storage.json"
SERVER_PROGRAMS = ("qemu-nbd", "nbdkit", "nbdfuse")
COMMAND_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
NBDFUSE_GRACE_S = 2.0
FULL_PREALLOC_BYTES_PER_S = 20 * 2**20  # a slow shared disk: the timeout for writing a whole image
LV_NAME = "disk"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"
_vg_serial = itertools.count(1)


class Unavailable(RuntimeError):
    """This host cannot provide a kind of storage; the message says why and is shown to the user as is."""


@dataclass
class Drive:
    """What the worker passes to libguestfs's `g.add_drive`; crosses the JSON pipe to the worker process.

    An NBD drive names no file: libguestfs wants the export name (the default export is "") and the
    server address, e.g. add_drive("", protocol="nbd", server=["unix:/path.sock"], format="raw").
    """

    filename: str
    format: str
    protocol: str = "file"
    server: list[str] = field(default_factory=list)
    describe: str = ""
    kind: str = ""
    name: str = ""

    def add_drive_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `g.add_drive(**kwargs)`."""
        kw: dict[str, Any] = {"filename": self.filename, "format": self.format}
        if self.protocol != "file":
            kw["protocol"] = self.protocol
            kw["server"] = list(self.server)
        return kw

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Drive:
        return cls(filename=str(d["filename"]), format=str(d["format"]), protocol=str(d.get("protocol", "file")),
                   server=[str(s) for s in d.get("server") or []], describe=str(d.get("describe", "")),
                   kind=str(d.get("kind", "")), name=str(d.get("name", "")))


# ------------------------------------------------------------------ what this host can do

def _which(program: str) -> str | None:
    """Find a program on PATH or in the sbin directories (which a test's PATH may lack)."""
    return shutil.which(program, path=os.environ.get("PATH", "") + ":" + _SBIN_PATH)


def _exe(program: str) -> str:
    path = _which(program)
    if path is None:
        raise Unavailable(f"{program} is not installed on this host")
    return path


@lru_cache(maxsize=None)
def _nbdkit_config() -> dict[str, str]:
    """`nbdkit --dump-config` as a dict (filterdir, plugindir, version...); empty without nbdkit."""
    exe = _which("nbdkit")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "--dump-config"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _nbdkit_has(what: str, name: str) -> bool:
    """Whether nbdkit has a plugin or filter (what = "plugin" or "filter")."""
    d = _nbdkit_config().get(f"{what}dir")
    return d is not None and Path(d, f"nbdkit-{name}-{what}.so").exists()


def _device_mapper_problem() -> str | None:
    """None when the kernel's device-mapper answers; else what failed. Opening the control node is all
    dmsetup does first, and it creates nothing."""
    try:
        fd = os.open("/dev/mapper/control", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        try:
            listed = "device-mapper" in Path("/proc/misc").read_text()
        except OSError:
            listed = False
        return (f"opening /dev/mapper/control failed: {e.strerror} (errno {e.errno}); /proc/misc "
                f"{'lists' if listed else 'lists no'} device-mapper driver")
    os.close(fd)
    return None


def _fuse_problem() -> str | None:
    missing = [p for p in ("nbdfuse", "fusermount3") if _which(p) is None]
    if missing:
        return f"presenting NBD as a file needs {' and '.join(missing)} (Debian: libnbd-bin, fuse3)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC))
    except OSError as e:
        return f"presenting NBD as a file needs FUSE: opening /dev/fuse failed: {e.strerror}"
    return None


def _loop_problem() -> str | None:
    if os.geteuid() != 0:
        return "loop devices need root"
    if not Path("/dev/loop-control").exists():
        return "the host kernel has no loop driver (/dev/loop-control is missing)"
    return None


_PROGRAMS = {
    "file": ("qemu-img",),
    "loop": ("qemu-img", "losetup"),
    "qemu-nbd": ("qemu-img", "qemu-nbd"),
    "nbdkit": ("qemu-img", "nbdkit"),
    "lvm": ("qemu-img", "losetup", "pvcreate", "vgcreate", "lvcreate", "vgremove", "pvremove"),
}


def availability(kind: str, as_file: bool = False, delay: bool = False) -> str | None:
    """None when this host can provide `kind` (as a file through FUSE, with a delay filter); else why not.

    Cheap: looks at programs and device nodes only, creates nothing.
    """
    if kind not in HOST_KINDS:
        raise ValueError(f"unknown host storage kind {kind!r}; one of {', '.join(HOST_KINDS)}")
    missing = [p for p in _PROGRAMS[kind] if _which(p) is None]
    if missing:
        return f"host {kind} storage needs {', '.join(missing)}, not installed on this host"
    if kind in ("loop", "lvm") and (problem := _loop_problem()):
        return f"host {kind} storage: {problem}"
    if kind == "lvm" and (problem := _device_mapper_problem()):
        return f"host LVM needs device-mapper in the host kernel: {problem}"
    if kind == "nbdkit" and not _nbdkit_has("plugin", "file"):
        return "nbdkit has no file plugin on this host"
    if kind == "nbdkit" and delay and not _nbdkit_has("filter", "delay"):
        return "nbdkit has no delay filter on this host"
    if as_file and (problem := _fuse_problem()):
        return problem
    return None


def volatile_availability() -> str | None:
    """None when `HostStorage.volatile` can work here; else why not."""
    if reason := availability("nbdkit", as_file=True):
        return reason
    if not _nbdkit_has("filter", "cache"):
        return "the volatile disk needs nbdkit's cache filter, missing on this host"
    return None


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as "64M" or "1GiB" (binary units, like qemu-img)."""
    if isinstance(size, int) and not isinstance(size, bool):
        n = size
    else:
        m = _SIZE_RE.match(str(size))
        if not m:
            raise ValueError(f"image size {size!r} is not a number of bytes or a number with K/M/G/T")
        n = int(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if n <= 0:
        raise ValueError(f"image size must be positive, got {size!r}")
    return n


def _validate(kind: str, name: str, fmt: str, preallocation: str, as_file: bool, delay_ms: int | None) -> None:
    """Reject requests that make no sense anywhere, before anything is created."""
    if kind not in HOST_KINDS:
        raise ValueError(f"unknown host storage kind {kind!r}; one of {', '.join(HOST_KINDS)}")
    if not _NAME_RE.match(name):
        raise ValueError(f"drive name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    if fmt not in FORMATS:
        raise ValueError(f"image format {fmt!r}: one of {', '.join(FORMATS)}")
    if preallocation not in PREALLOCATIONS:
        raise ValueError(f"preallocation {preallocation!r}: one of {', '.join(PREALLOCATIONS)}")
    if preallocation == "metadata" and fmt != "qcow2":
        raise ValueError("preallocation=metadata is for qcow2 only (a raw image has no metadata); "
                         "raw takes off, falloc or full")
    if kind in ("loop", "lvm") and fmt != "raw":
        raise ValueError(f"{kind} is raw only: a loop device presents the image's bytes, so a qcow2 image behind "
                         "it would still be decoded by qemu and could not grow past the device's fixed size; "
                         "use qemu-nbd to serve qcow2")
    if kind == "nbdkit" and fmt != "raw":
        version = _nbdkit_config().get("version", "?")
        why = ("its qcow2dec filter only reads" if _nbdkit_has("filter", "qcow2dec")
               else f"nbdkit {version} has no qcow2dec filter (newer ones have a read-only one)")
        raise ValueError(f"nbdkit serves raw images only here: {why}; use qemu-nbd to serve qcow2")
    if as_file and kind not in NBD_KINDS:
        raise ValueError(f"as_file is for the NBD kinds ({', '.join(NBD_KINDS)}); {kind} is already a host "
                         "file or device")
    if delay_ms is not None:
        if kind != "nbdkit":
            raise ValueError(f"delay_ms needs nbdkit's delay filter; {kind} has none")
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms <= 0:
            raise ValueError(f"delay_ms must be a positive whole number of milliseconds, got {delay_ms!r}")


# ------------------------------------------------------------------ small host helpers

def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a short command; a timeout becomes a RuntimeError naming it."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1"))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None


def _check(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    r = _run(argv, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def _proc_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (tells a pid from a later reuse); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def _proc_comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _same_process(pid: int, start: int | None) -> bool:
    now = _proc_start(pid)
    return now is not None and (start is None or now == start)


def _wait_gone(pid: int, start: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _same_process(pid, start):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill(pid: int, sig: int) -> None:
    """Signal a process and, when it leads a process group (our servers lead their own session), its group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pgid: int, sig: int) -> None:
    """Signal a whole process group, if any process is left in it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _mounts() -> list[str]:
    """Mount points from /proc/self/mounts, with their octal escapes decoded."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), ln.split()[1]) for ln in lines if ln.split()]


def _fs_type(path: Path) -> str:
    """The type of the filesystem holding `path` (the longest mount point that contains it)."""
    best, kind = "", "?"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    p = str(path)
    for ln in lines:
        parts = ln.split()
        if len(parts) > 2 and (p == parts[1] or p.startswith(parts[1].rstrip("/") + "/")) and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind


def _loop_backing(device: str) -> str | None:
    """The file behind a loop device (without the kernel's " (deleted)" mark); None when unattached."""
    try:
        text = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None
    return text.removesuffix(" (deleted)")


def _loops_under(directory: Path) -> list[tuple[str, str]]:
    """(device, backing file) of every loop device whose backing file is inside `directory`."""
    found = []
    prefix = str(directory).rstrip("/") + "/"
    for sysdir in sorted(Path("/sys/block").glob("loop*")):
        backing = _loop_backing(f"/dev/{sysdir.name}")
        if backing and backing.startswith(prefix):
            found.append((f"/dev/{sysdir.name}", backing))
    return found


def _servers_under(directory: Path) -> list[int]:
    """Pids of NBD/FUSE server processes whose command line names something inside `directory`."""
    prefix = str(directory).rstrip("/") + "/"
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _proc_comm(int(entry)) in SERVER_PROGRAMS and prefix in _proc_cmdline(int(entry)):
            pids.append(int(entry))
    return pids


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------ tearing things down (close and sweep)

def _unmount(mountpoint: str, log: list[str]) -> bool:
    if mountpoint not in _mounts():
        return True
    fusermount = _which("fusermount3") or "fusermount3"
    r = _run([fusermount, "-u", mountpoint])
    if r.returncode == 0 and mountpoint not in _mounts():
        log.append(f"unmounted {mountpoint}")
        return True
    # busy: a hypervisor still has the file open. Detach it now; the kernel ends it when the last user goes.
    r = _run([fusermount, "-u", "-z", mountpoint])
    if mountpoint not in _mounts():
        log.append(f"unmounted {mountpoint} (lazily: it was busy)")
        return True
    log.append(f"failed: could not unmount {mountpoint}: {r.stderr.strip()}")
    return False


def _stop_server(res: dict[str, Any], proc: subprocess.Popen[bytes] | None, log: list[str],
                 sig: int = signal.SIGTERM, grace: float = 0.0) -> bool:
    """Stop a server: after `grace` seconds for it to end by itself, SIGTERM (SIGKILL for a power cut), then
    SIGKILL its group if it lingers."""
    pid, start, program = int(res["pid"]), res.get("start"), str(res.get("program", "server"))
    if proc is not None:
        if proc.poll() is None:
            if grace > 0:
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                _killpg(pid, sig)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    _killpg(pid, signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT_S)
            log.append(f"stopped {program} pid {pid} (exit {proc.returncode})")
        _killpg(pid, signal.SIGKILL)  # anything it left in its group
        return True
    # not our child (a sweep): act only if the pid is still the very process we started
    if not _same_process(pid, start) or _proc_comm(pid) not in SERVER_PROGRAMS:
        return True
    _kill(pid, signal.SIGKILL)
    if _wait_gone(pid, start, STOP_TIMEOUT_S):
        log.append(f"killed {program} pid {pid}")
        return True
    log.append(f"failed: {program} pid {pid} survived SIGKILL")
    return False


def _detach_loop(res: dict[str, Any], log: list[str]) -> bool:
    device, backing = str(res["device"]), str(res["backing"])
    if _loop_backing(device) != backing:
        return True  # already detached (and maybe reused by someone else: never touch it then)
    r = _run([_which("losetup") or "losetup", "-d", device])
    if r.returncode == 0 or _loop_backing(device) != backing:
        log.append(f"detached {device}")
        return True
    log.append(f"failed: losetup -d {device}: {r.stderr.strip()}")
    return False


def _remove_vg(res: dict[str, Any], log: list[str]) -> bool:
    vg, pv = str(res["vg"]), str(res["pv"])
    devices = ["--devices", pv]
    ok = True
    r = _run([_which("vgremove") or "vgremove", *devices, "-ff", "-y", vg])
    if r.returncode == 0:
        log.append(f"removed volume group {vg}")
    elif "not found" not in (r.stderr + r.stdout).lower() and "no such" not in r.stderr.lower():
        log.append(f"failed: vgremove {vg}: {r.stderr.strip()}")
        ok = False
    r = _run([_which("pvremove") or "pvremove", *devices, "-ff", "-y", pv])
    if r.returncode == 0:
        log.append(f"removed physical volume {pv}")
    return ok


def _remove_path(res: dict[str, Any], log: list[str]) -> bool:
    path = Path(res["path"])
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    except FileNotFoundError:
        return True
    except OSError as e:
        log.append(f"failed: removing {path}: {e.strerror}")
        return False
    if res["type"] == "image":
        log.append(f"removed {path}")
    return True


def _teardown(res: dict[str, Any], proc: subprocess.Popen[bytes] | None, log: list[str]) -> bool:
    """Undo one resource; True when it is gone (or was already). Never raises."""
    try:
        kind = res["type"]
        if kind == "fuse":
            return _unmount(str(res["mountpoint"]), log)
        if kind == "server":
            # a clean unmount (done just before) ends nbdfuse by itself; a lazy one (file still open) does not
            return _stop_server(res, proc, log, grace=NBDFUSE_GRACE_S if res.get("program") == "nbdfuse" else 0.0)
        if kind == "loop":
            return _detach_loop(res, log)
        if kind == "vg":
            return _remove_vg(res, log)
        return _remove_path(res, log)
    except Exception as e:  # a teardown must go on with the rest
        log.append(f"failed: tearing down {res}: {e}")
        return False


# ------------------------------------------------------------------ the storage of one run

class HostStorage:
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
        self.actions: list[str] = []  # what close()/power_cut() did, in order
        self._resources: list[dict[str, Any]] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, Path] = {}
        self._drives: dict[str, dict[str, Any]] = {}
        self._closed = False
        if self.state_path.exists():
            state = _read_state(self.state_path)
            if state is not None and _owner_alive(state):
                raise ValueError(f"{self.workdir} already has live host storage (owner pid {state['owner']['pid']})")
            self.actions += _sweep_workdir(self.workdir, state or {})
        self._save()

    # -------------------------------------------------------------- public API
    def __enter__(self) -> HostStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, kind: str, name: str, size: int | str, fmt: str = "raw", preallocation: str = "off",
            as_file: bool = False, delay_ms: int | None = None) -> Drive:
        """Create an image of `size` in the work dir and present it the way `kind` says."""
        self._check_open()
        _validate(kind, name, fmt, preallocation, as_file, delay_ms)
        if name in self._drives:
            raise ValueError(f"a drive named {name!r} already exists here")
        if reason := availability(kind, as_file=as_file, delay=delay_ms is not None):
            raise Unavailable(reason)
        nbytes = parse_size(size)
        mark = len(self._resources)
        try:
            return self._add(kind, name, nbytes, fmt, preallocation, as_file, delay_ms)
        except BaseException:
            self._undo(mark)
            self._drives.pop(name, None)
            raise

    def volatile(self, name: str, size: int | str, as_file: bool = True) -> Drive:
        """The durability rig: a raw image behind nbdkit's writeback cache, shown as a file by nbdfuse.

        Writes stay in nbdkit's cache (an unlinked scratch file in the work dir) until the guest flushes;
        `power_cut()` then loses exactly the unflushed ones. A plain file, so every hypervisor (qemu or UML's
        ubd) can open it.
        """
        self._check_open()
        _validate("nbdkit", name, "raw", "off", True, None)
        if name in self._drives:
            raise ValueError(f"a drive named {name!r} already exists here")
        if reason := volatile_availability():
            raise Unavailable(reason)
        nbytes = parse_size(size)
        mark = len(self._resources)
        try:
            image = self._create_image(name, nbytes, "raw", "off")
            # the log filter (outside the cache) records every request the hypervisor sent: how many flushes
            log = self._nbd_log(name)
            sock = self._serve_nbdkit(name, image, filters=["log", "cache"], params=[f"logfile={log}", "cache=writeback"])
            if not as_file:  # qemu reaches it over NBD itself (libvirt cannot hand a FUSE file to its qemu user)
                self._drives[name]["volatile"] = True
                return Drive(filename="", format="raw", protocol="nbd", server=[f"unix:{sock}"], kind="volatile",
                             name=name, describe="raw image on the host behind nbdkit's cache filter in writeback "
                             "mode (unflushed writes are lost on a power cut), reached over NBD")
            path = self._fuse(name, sock)
        except BaseException:
            self._undo(mark)
            self._drives.pop(name, None)
            raise
        self._drives[name]["volatile"] = True
        return self._drive(path, "raw", "volatile", name,
                           f"raw image on the host's {_fs_type(self.workdir)} behind nbdkit's cache filter in "
                           "writeback mode (unflushed writes are lost on a power cut), presented as a plain "
                           "host file by nbdfuse")

    def power_cut(self) -> list[str]:
        """Kill (SIGKILL) the nbdkit of every volatile drive, then unmount its file: unflushed writes are gone,
        and the image on the host (`image_path`) holds what a disk would after losing power."""
        log: list[str] = []
        for info in self._drives.values():
            if not info.get("volatile") or info.get("cut"):
                continue
            for role in ("nbdkit", "fuse", "nbdfuse"):  # the server dies first: nothing more reaches the image
                res = info.get(role)
                if res is None:  # served over NBD, no FUSE file
                    continue
                if not any(r is res for r in self._resources):
                    continue
                if role == "fuse":
                    done = _unmount(str(res["mountpoint"]), log)
                else:
                    sig = signal.SIGKILL if role == "nbdkit" else signal.SIGTERM
                    done = _stop_server(res, self._procs.get(int(res["pid"])), log, sig)
                if done:
                    self._forget(res)
            info["cut"] = True
        self.actions += log
        self._save()
        return log

    def _nbd_log(self, name: str) -> Path:
        log = self.workdir / f"{name}.nbdlog"
        self._record({"type": "path", "path": str(log)})
        self._drives[name]["nbdlog"] = str(log)
        return log

    def requests(self, drive: Drive) -> dict[str, int]:
        """How many writes and flushes reached a volatile drive's server (nbdkit's log filter)."""
        counts = {"writes": 0, "flushes": 0}
        try:
            with open(self._drives[drive.name]["nbdlog"]) as f:
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
            return Path(self._drives[drive.name]["image"])
        except KeyError:
            raise ValueError(f"drive {drive.name!r} is not one of this storage's drives") from None

    def close(self) -> list[str]:
        """Tear everything down in reverse order; idempotent and never raising. Returns what it did; lines
        starting with "failed:" name what is left (kept in the state file for `sweep_stale`)."""
        if self._closed:
            return []
        self._closed = True
        log: list[str] = []
        self._undo(0, log)
        self.actions += log
        return log

    # -------------------------------------------------------------- building
    def _add(self, kind: str, name: str, nbytes: int, fmt: str, preallocation: str, as_file: bool,
             delay_ms: int | None) -> Drive:
        image = self._create_image(name, nbytes, fmt, preallocation)
        where = f"on the host's {_fs_type(self.workdir)}"
        what = f"{fmt} image (preallocation={preallocation}) {where}"
        if kind == "file":
            return self._drive(str(image), fmt, kind, name, f"{what}, opened by the hypervisor as a file")
        if kind == "loop":
            device = self._losetup(image)
            return self._drive(device, "raw", kind, name, f"{what} reached through {device}")
        if kind == "lvm":
            lv = self._lvm(image)
            return self._drive(lv, "raw", kind, name, f"LV {lv} of a volume group on a loop device over a {what}")
        if kind == "qemu-nbd":
            sock = self._serve_qemu_nbd(name, image, fmt)
            served = f"{what} served by qemu-nbd over NBD (unix socket{', qcow2 decoded by qemu-nbd' if fmt == 'qcow2' else ''})"
        else:
            filters, params = [], []
            if delay_ms is not None:
                filters = ["delay"]
                params = [f"delay-{op}={delay_ms}ms" for op in ("read", "write", "zero", "trim")]
            sock = self._serve_nbdkit(name, image, filters, params)
            served = f"{what} served by nbdkit's file plugin over NBD (unix socket)"
            if delay_ms is not None:
                served += f" with the delay filter (+{delay_ms} ms per read, write, zero and trim)"
        if as_file:
            path = self._fuse(name, sock)
            return self._drive(path, "raw", kind, name, f"{served}, presented as a plain host file by nbdfuse")
        return Drive(filename="", format="raw", protocol="nbd", server=[f"unix:{sock}"], describe=served,
                     kind=kind, name=name)

    def _drive(self, filename: str, fmt: str, kind: str, name: str, describe: str) -> Drive:
        return Drive(filename=filename, format=fmt, describe=describe, kind=kind, name=name)

    def _create_image(self, name: str, nbytes: int, fmt: str, preallocation: str) -> Path:
        image = self.workdir / f"{name}.{fmt}"
        if image.exists():
            raise ValueError(f"{image} already exists")
        self._drives[name] = {"image": str(image)}
        self._record({"type": "image", "path": str(image)})
        timeout = COMMAND_TIMEOUT_S
        if preallocation in ("full", "falloc"):
            timeout += nbytes / FULL_PREALLOC_BYTES_PER_S
        _check([_exe("qemu-img"), "create", "-q", "-f", fmt, "-o", f"preallocation={preallocation}", str(image),
                str(nbytes)], timeout=timeout)
        return image

    def _losetup(self, image: Path) -> str:
        device = _check([_exe("losetup"), "--find", "--show", str(image)]).strip()
        self._record({"type": "loop", "device": device, "backing": str(image)})
        return device

    def _lvm(self, image: Path) -> str:
        # checked before anything was created (availability); checked again in case the host changed
        if problem := _device_mapper_problem():
            raise Unavailable(f"host LVM needs device-mapper in the host kernel: {problem}")
        pv = self._losetup(image)
        vg = f"guestbench-{os.getpid()}-{next(_vg_serial)}"
        devices = ["--devices", pv]  # look at our PV only: no scan of the host's disks, no devices file
        self._record({"type": "vg", "vg": vg, "pv": pv})
        _check([_exe("pvcreate"), *devices, "-ff", "-y", pv])
        _check([_exe("vgcreate"), *devices, vg, pv])
        _check([_exe("lvcreate"), *devices, "-y", "-n", LV_NAME, "-l", "100%FREE", vg])
        lv = f"/dev/{vg}/{LV_NAME}"
        mapper = f"/dev/mapper/{vg.replace('-', '--')}-{LV_NAME}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not os.path.exists(lv):
            if os.path.exists(mapper):
                return mapper
            if time.monotonic() > deadline:
                raise RuntimeError(f"lvcreate made {vg}/{LV_NAME} but neither {lv} nor {mapper} appeared")
            time.sleep(0.1)
        return lv

    def _start(self, name: str, program: str, argv: list[str], env: dict[str, str] | None = None
               ) -> subprocess.Popen[bytes]:
        """Start a server in its own process group, its output in a log file in the work dir."""
        log_path = self.workdir / f"{name}.{program}.log"
        self._record({"type": "path", "path": str(log_path)})
        if self.die_with_owner and (setpriv := _which("setpriv")):
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env)
        self._procs[proc.pid] = proc
        self._logs[proc.pid] = log_path
        res = {"type": "server", "program": program, "pid": proc.pid, "start": _proc_start(proc.pid), "name": name}
        self._record(res)
        self._drives[name][program] = res
        return proc

    def _socket(self, name: str) -> Path:
        sock = self.workdir / f"{name}.sock"
        if len(str(sock).encode()) > 107:
            raise ValueError(f"socket path {sock} is longer than a unix socket address allows (107 bytes)")
        sock.unlink(missing_ok=True)  # a server refuses to bind over a stale socket
        self._record({"type": "path", "path": str(sock)})
        return sock

    def _serve_qemu_nbd(self, name: str, image: Path, fmt: str) -> Path:
        sock = self._socket(name)
        # --cache=writeback: the host page cache, flushes honoured, as for the file kind (qemu's default
        # drive cache mode); --persistent: libguestfs connects once per launch, and our readiness probe too
        proc = self._start(name, "qemu-nbd", [_exe("qemu-nbd"), f"--socket={sock}", f"--format={fmt}",
                                              "--cache=writeback", "--aio=threads", "--persistent", "--shared=16",
                                              str(image)])
        self._wait_nbd(sock, proc, "qemu-nbd")
        return sock

    def _serve_nbdkit(self, name: str, image: Path, filters: list[str], params: list[str]) -> Path:
        sock = self._socket(name)
        argv = [_exe("nbdkit"), "--foreground", "--unix", str(sock), *[f"--filter={f}" for f in filters],
                "file", f"file={image}", *params]
        env = dict(os.environ, TMPDIR=str(self.workdir))  # the cache filter's scratch file goes here
        proc = self._start(name, "nbdkit", argv, env)
        self._wait_nbd(sock, proc, "nbdkit")
        return sock

    def _wait_nbd(self, sock: Path, proc: subprocess.Popen[bytes], program: str) -> None:
        """Wait until the server greets a client with the NBD magic (it is serving, not just bound)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{program} exited with status {proc.returncode}: {self._log_tail(program, proc)}")
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
                                   f"{self._log_tail(program, proc)}")
            time.sleep(0.05)

    def _fuse(self, name: str, sock: Path) -> str:
        """Present an NBD export as the plain file <workdir>/<name>.fuse/disk (nbdfuse)."""
        mnt = self.workdir / f"{name}.fuse"
        pidfile = self.workdir / f"{name}.nbdfuse.pid"
        mnt.mkdir()
        self._record({"type": "path", "path": str(mnt)})
        self._record({"type": "path", "path": str(pidfile)})
        # allow_other: libvirt's qemu runs as another user; root may set it without /etc/fuse.conf
        options = ["-o", "allow_other"] if os.geteuid() == 0 else []
        proc = self._start(name, "nbdfuse", [_exe("nbdfuse"), "-P", str(pidfile), *options, f"{mnt}/disk",
                                             "--unix", str(sock)])
        fuse = {"type": "fuse", "mountpoint": str(mnt)}
        self._record(fuse)
        self._drives[name]["fuse"] = fuse
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (pidfile.exists() and pidfile.read_text().strip() and str(mnt) in _mounts()):
            if proc.poll() is not None:
                raise RuntimeError(f"nbdfuse exited with status {proc.returncode}: {self._log_tail('nbdfuse', proc)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nbdfuse did not mount {mnt} within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        return f"{mnt}/disk"

    def _log_tail(self, program: str, proc: subprocess.Popen[bytes]) -> str:
        """The last lines a server wrote, for an error message."""
        try:
            text = self._logs[proc.pid].read_text(errors="replace").strip()
        except (KeyError, OSError):
            text = ""
        return " | ".join(text.splitlines()[-5:]) if text else f"({program} wrote nothing)"

    # -------------------------------------------------------------- bookkeeping
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this HostStorage is closed")

    def _record(self, res: dict[str, Any]) -> None:
        self._resources.append(res)
        self._save()

    def _forget(self, res: dict[str, Any]) -> None:
        self._resources = [r for r in self._resources if r is not res]

    def _undo(self, mark: int, log: list[str] | None = None) -> None:
        """Tear down resources from index `mark` on, newest first; keep (and record) those that failed."""
        log = self.actions if log is None else log
        failed = []
        for res in reversed(self._resources[mark:]):
            proc = self._procs.get(int(res["pid"])) if res["type"] == "server" else None
            if not _teardown(res, proc, log):
                failed.append(res)
        self._resources = self._resources[:mark] + list(reversed(failed))
        if self._resources or not self._closed:
            self._save()
        else:
            self.state_path.unlink(missing_ok=True)

    def _save(self) -> None:
        _write_json_atomic(self.state_path, {
            "owner": {"pid": os.getpid(), "start": _proc_start(os.getpid())},
            "workdir": str(self.workdir),
            "resources": self._resources,
        })


# ------------------------------------------------------------------ leftovers of dead runs

def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _owner_alive(state: dict[str, Any]) -> bool:
    owner = state.get("owner") or {}
    try:
        return _same_process(int(owner["pid"]), owner.get("start"))
    except (KeyError, TypeError, ValueError):
        return False


def _sweep_workdir(workdir: Path, state: dict[str, Any]) -> list[str]:
    """Remove what a dead owner left in `workdir`: what its state lists, and anything of ours found there
    that it had no time to record (a kill between creating and recording)."""
    log: list[str] = []
    resources = [r for r in state.get("resources", []) if isinstance(r, dict) and "type" in r]
    prefix = str(workdir).rstrip("/") + "/"
    # unmount first: a dead FUSE mount makes even looking at its directory fail
    for mnt in sorted({str(r["mountpoint"]) for r in resources if r["type"] == "fuse"}
                      | {m for m in _mounts() if m.startswith(prefix)}):
        _unmount(mnt, log)
    for res in reversed(resources):
        if res["type"] == "server":
            _teardown(res, None, log)
    for pid in _servers_under(workdir):
        _teardown({"type": "server", "program": _proc_comm(pid), "pid": pid, "start": _proc_start(pid)}, None, log)
    for res in reversed(resources):
        if res["type"] == "vg":
            _teardown(res, None, log)
    loops = {(str(r["device"]), str(r["backing"])) for r in resources if r["type"] == "loop"}
    for device, backing in sorted(loops | set(_loops_under(workdir))):
        _teardown({"type": "loop", "device": device, "backing": backing}, None, log)
    for res in reversed(resources):
        if res["type"] in ("image", "path"):
            _teardown(res, None, log)
    (workdir / STATE_FILE).unlink(missing_ok=True)
    return log


def sweep_stale(root: Path | None = None) -> list[str]:
    """Tear down the host storage of runs under `root` (default: the temp root) whose owner process is gone.

    Looks at `<root>/guestbench-run-*/host-storage.json` and one directory level below (a cell's work
    dir). Directories left empty are removed; nothing else in a run dir is touched.
    """
    base = Path(root) if root is not None else temp_root()
    log: list[str] = []
    try:
        run_dirs = sorted(p for p in base.iterdir() if p.name.startswith(RUN_PREFIX))
    except OSError:
        return log
    for run_dir in run_dirs:
        candidates = [run_dir]
        try:
            with os.scandir(run_dir) as it:
                candidates += sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for workdir in candidates:
            state_path = workdir / STATE_FILE
            if not os.path.lexists(state_path):
                continue
            state = _read_state(state_path)
            if state is not None and _owner_alive(state):
                continue
            owner = (state or {}).get("owner", {}).get("pid", "?")
            done = _sweep_workdir(workdir.resolve(), state or {})
            log += [f"{workdir} (owner pid {owner} gone): {line}" for line in done]
            for d in ([workdir] if workdir == run_dir else [workdir, run_dir]):
                try:
                    d.rmdir()
                    log.append(f"removed empty {d}")
                except OSError:
                    pass
    return log
