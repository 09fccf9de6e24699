"""The backend interface: how to tell whether a backend can run here, and how to configure a handle.

A backend never launches anything itself: the worker launches, so that every launch has a deadline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from guestbench.host import fingerprint, owned
from guestbench.util.errors import UserError
from guestbench.backends.appliance import appliance_dir, host_kernel_version
from guestbench.host import os_release
from guestbench.host.paths import WORKDIR_ENV, scratch_env

QEMU = "qemu-system-x86_64"
# A user's libguestfs settings that would override a backend's handle configuration; never inherited.
LIBGUESTFS_OVERRIDES = ("LIBGUESTFS_HV", "LIBGUESTFS_BACKEND", "LIBGUESTFS_BACKEND_SETTINGS")


@dataclass
class Availability:
    """Whether a backend can be used here, and the specific reason when it cannot."""

    usable: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HandleConfig:
    """What the worker needs to make a libguestfs handle for this backend (JSON-serialisable)."""

    libguestfs_backend: str
    settings: list[str]
    hv: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HandleConfig:
        return cls(str(d["libguestfs_backend"]), list(d.get("settings") or []), d.get("hv"), dict(d.get("env") or {}))

    def with_environment(self, env: dict[str, str]) -> HandleConfig:
        """This configuration with a user's environment on top (a scenario item's `env`, an A/B side): the
        libguestfs settings it names replace the backend's (LIBGUESTFS_HV: another qemu), the rest is added."""
        given = dict(env)
        return HandleConfig(given.pop("LIBGUESTFS_BACKEND", self.libguestfs_backend),
                            given.pop("LIBGUESTFS_BACKEND_SETTINGS").split(":")
                            if "LIBGUESTFS_BACKEND_SETTINGS" in given else list(self.settings),
                            given.pop("LIBGUESTFS_HV", self.hv), {**self.env, **given})

    def environment(self) -> dict[str, str]:
        """The same configuration as environment variables, for libguestfs's own programs (virt-*, guestfish):
        what `guestbench env` prints and `guestbench exec` and the `command` measurement run with."""
        env = {"LIBGUESTFS_BACKEND": self.libguestfs_backend,
               "LIBGUESTFS_BACKEND_SETTINGS": ":".join(self.settings)}
        if self.hv:
            env["LIBGUESTFS_HV"] = self.hv
        return {**env, **self.env}

    def process_environment(self, workdir: Path | None) -> dict[str, str]:
        """The whole environment of a libguestfs program on this configuration: this process's, without the
        libguestfs settings that would override the backend's, plus the backend's. With a work dir,
        libguestfs's overlays and guestbench's hypervisor files go there, so that whatever a killed program
        leaves is found by path and removed."""
        env = {k: v for k, v in os.environ.items() if k not in LIBGUESTFS_OVERRIDES}
        if workdir is not None:
            env.update(scratch_env(workdir, env))
        env.update(self.environment())  # a scenario's env: over guestbench's choices
        if workdir is not None:
            env[WORKDIR_ENV] = str(workdir)
        return env


class Backend:
    """One way of running appliances. Subclasses override the checks and the handle configuration."""

    name: str = ""
    summary: str = ""
    phase_markers: str = "qemu"  # which boot markers its console prints (guestbench.instruments.markers.MARKERS)
    appliance_flavour: str = "qemu"  # which of guestbench's appliances it boots (backends/appliance.py FLAVOURS)
    # its bars in charts (guestbench.output.charts); the default is for names no longer registered (old results)
    colour: str = "#937860"
    # the limit for its probe launch: a working backend launches in seconds with KVM, in under a minute with TCG
    probe_timeout_s: float = 240.0
    # its hypervisor opens an NBD export itself; when not (UML opens only files), an NBD kind reaches it as a
    # file through nbdfuse (guestbench.storage.backing, as_file)
    opens_nbd: bool = True
    # the durability trials' volatile disk (nbdkit's write-back cache) is handed to it as a file by nbdfuse, as a
    # disk image normally is; libvirt cannot take a FUSE file (it chowns every disk to its qemu user): NBD then
    volatile_disk_as_file: bool = True
    # shared daemons that work for its launches (their CPU during a timed step is the cell's; their memory is
    # shared by every domain and not counted): guestbench.instruments.usage
    daemons: tuple[str, ...] = ()
    # its worker runs in namespaces of its own (a stack's sandbox: guestbench.stacks.backend), as a child of the
    # sandbox's first process (pid 1 there), seeing of the host only the paths it is given (worker_command)
    sandboxed: bool = False

    def worker_command(self, writable: list[str], readable: list[str], env: dict[str, str]) -> list[str]:
        """How its worker is started: guestbench's worker in this interpreter, `env` in its environment (a
        sandboxed backend binds `writable` and `readable`, the host paths the worker's request names, into its
        sandbox, and passes on `env` alone)."""
        return [sys.executable, "-m", "guestbench.execute.worker"]

    def software(self) -> dict[str, Any]:
        """What its cells record of the software they run on: the machine's own stack ("host") and its versions."""
        v = fingerprint.versions()
        return {"stack": "host", **{k: v[k] for k in ("python", "libguestfs", "qemu", "libvirt", "uml", "supermin")
                                    if v.get(k)}, "suite": _suite(), "kernel": host_kernel_version() or ""}

    def preconditions(self) -> Availability:
        """Cheap checks that need no launch (binaries, devices, daemons)."""
        raise NotImplementedError

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        """How to make a handle; `workload`: boot guestbench's workload appliance (fio, bonnie++, dbench...)."""
        raise NotImplementedError

    def workload_env(self, workload: bool) -> dict[str, str]:
        """LIBGUESTFS_PATH naming the workload appliance of this backend's flavour (built if missing), or
        nothing: the standard configuration keeps libguestfs's own appliance."""
        if not workload:
            return {}
        return {"LIBGUESTFS_PATH": str(appliance_dir(self.appliance_flavour, "workload"))}

    def probe_timeout(self) -> float:
        """The limit for its probe launch on this host (a backend may know the host is slow for it)."""
        return self.probe_timeout_s

    def probe_attempts(self) -> int:
        """How many probe launches may fail or run out of time before the verdict is 'not usable' (1: the first
        decides; a backend whose launches sometimes stall or crash on this host allows more)."""
        return 1

    def probe_key(self) -> dict[str, Any]:
        """What a cached launch verdict depends on: when any of it changes, probe again."""
        return {}

    def explain(self, reason: str, timed_out: bool) -> str:
        """Turn a launch failure into a specific, actionable reason for this backend."""
        return reason

    def cleanup(self, workdir: Path) -> list[str]:
        """Remove what a killed launch that kept its files in `workdir` left outside its process group
        (libvirt domains); never anything of another run or another libguestfs user. Returns what went."""
        return []


# libguestfs 1.48 builds its QMP probe command (`echo ... | "<hv>" -display none ... -qmp stdio`) in a buffer
# that it grows only once it is already full (lib/command.c, add_string): a piece that crosses the buffer's
# first 256 bytes is written past its end. Whether that corrupts the heap (the worker aborts: "corrupted size
# vs. prev_size") depends on the hypervisor path's length alone; a quoted path of 80 bytes or fewer never
# crosses, for either probe (query-qmp-schema, query-kvm). Seen here: 89, 90, 96 and 97 bytes abort, others not.
HV_PATH_MAX = 80


def _quoted_len(path: Path) -> int:
    """The path's length as libguestfs quotes it for sh (a backslash before each of $ ` \\ ")."""
    text = os.fsencode(path)
    return len(text) + sum(text.count(c) for c in (b"$", b"`", b"\\", b'"'))


def hv_path(cache_dir: Path, name: str) -> Path:
    """Where the hypervisor wrapper `name` lives: in the cache, or, when the cache's path is too long for
    libguestfs (HV_PATH_MAX), in a directory of that cache's own in guestbench's home (named by a hash of the
    cache's path, so that two caches never share a wrapper; not /run, which Debian mounts noexec); one line
    (exit 2) when both are."""
    path = cache_dir / "hv" / name
    if _quoted_len(path) <= HV_PATH_MAX:
        return path
    cache = Path(os.path.abspath(cache_dir))
    digest = hashlib.sha256(os.fsencode(cache)).hexdigest()[:12]
    short = owned.home() / "hv" / digest / name
    if _quoted_len(short) <= HV_PATH_MAX:
        owned.ensure_dir(short.parent, "the hypervisor wrappers' directory")
        _prune(short.parent.parent)
        origin = short.parent / ORIGIN
        if origin.is_symlink() or not origin.is_file():
            tmp = origin.with_name(f".{ORIGIN}.{os.getpid()}.tmp")
            tmp.write_bytes(os.fsencode(cache))
            os.replace(tmp, origin)  # replaces a link itself, never writes through it
        return short
    raise UserError(f"the hypervisor wrapper's path {path} is {_quoted_len(path)} bytes, and {short} too long as "
                    f"well: libguestfs 1.48 corrupts its memory on some paths over {HV_PATH_MAX}; set "
                    "GUESTBENCH_CACHE or GUESTBENCH_TMPDIR to a shorter directory")


ORIGIN = "cache"  # in a wrappers' directory of guestbench's home: the cache it stands in for


def _prune(parent: Path) -> None:
    """Remove the wrappers' directories (our own: guestbench's home is the euid's alone) whose cache is gone: a
    temporary cache's (a test's) would otherwise stay for good."""
    for d in parent.iterdir():
        origin = d / ORIGIN
        try:
            gone = not d.is_symlink() and d.is_dir() and origin.is_file() and not Path(origin.read_text()).exists()
        except OSError:
            continue
        if gone:
            shutil.rmtree(d, ignore_errors=True)


def install_script(path: Path, text: str) -> Path:
    """Write an executable script, atomically and only when it changed.

    Unchanged scripts keep their mtime: libguestfs caches its hypervisor probes keyed on the file. Root runs it,
    so its directory and an existing script must be the effective user's alone (owned), else one line refuses.
    """
    owned.ensure_dir(path.parent, "the hypervisor wrappers' directory", env="GUESTBENCH_CACHE")
    if not owned.own_file(path, "a hypervisor wrapper") or path.read_text() != text:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return path


def _suite() -> str:
    """The machine's Debian suite ('' on a machine whose os-release names none)."""
    try:
        return os_release.codename()
    except UserError:
        return ""


def qemu_path() -> str | None:
    return shutil.which(QEMU) or (f"/usr/bin/{QEMU}" if Path(f"/usr/bin/{QEMU}").exists() else None)


def common_preconditions() -> Availability | None:
    """What every backend needs (the libguestfs bindings and qemu); None when both are here."""
    if (why := libguestfs_available()) is not None:
        return Availability(False, why)
    if qemu_path() is None:
        return Availability(False, "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    return None


def libguestfs_available() -> str | None:
    """None when the libguestfs Python bindings import here, else the reason."""
    try:
        import guestfs  # noqa: F401
    except ImportError as e:
        return (f"the libguestfs Python bindings do not import ({e}); install python3-guestfs and run guestbench "
                "from a venv made with /usr/bin/python3 -m venv --system-site-packages (make run does this)")
    return None
