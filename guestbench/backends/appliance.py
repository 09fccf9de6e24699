"""Fixed libguestfs appliances that guestbench builds with supermin from this host's packages, cached.

Why guestbench builds its own: the UML backend needs an appliance carrying UML's kernel and modules (the
stock one has the host kernel's), and workload measurements need tools the stock appliance lacks (fio,
bonnie++, dbench, more mkfs programs). supermin makes either from the host's packages in seconds. The
result is a directory libguestfs takes through LIBGUESTFS_PATH (kernel, initrd, root, README.fixed).

Flavours (FLAVOURS, one recipe each): `qemu` (the host kernel, as supermin picks it: tcg, kvm, libvirt-*) and
`uml`; a backend names the one it boots (Backend.appliance_flavour). Variants:
`standard` (libguestfs's own package set) and `workload` (plus WORKLOAD_PACKAGES that are installed here).
Each appliance is keyed by a hash of everything it is made from, so a package or kernel update rebuilds
it and nothing else does; one build per flavour and variant is kept. They live under
temp_root()/guestbench-appliances (/var/lib/guestbench for root: owned.home), 0755 so that libvirt's qemu user
(libvirt-qemu), who opens a domain's backing files, can read them. UML runs the appliance's `kernel` as root, so
every directory level of the cache is checked at each use to be the effective user's alone (owned), and each
file of an appliance to be its own regular file: a planted appliance is refused in one line, never run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar
from collections.abc import Iterable, Mapping

from guestbench.host import locks
from guestbench.host import owned
from guestbench.host.paths import temp_root

VARIANTS = ("standard", "workload")
# Tools the workload measurements run inside the appliance; jfsutils, reiserfsprogs and xfsprogs for mkfs.
WORKLOAD_PACKAGES = ("fio", "bonnie++", "dbench", "jfsutils", "reiserfsprogs", "xfsprogs")
RECIPE = 1  # bump when the way appliances are built changes, so that cached ones are rebuilt
SUPERMIN_D = Path("/usr/lib/x86_64-linux-gnu/guestfs/supermin.d")
UML_KERNEL = Path("/usr/bin/linux")
UML_MODULES_ROOT = Path("/usr/lib/uml/modules")
# supermin's own search for the host kernel (after its SUPERMIN_* variables, which a build unsets first)
HOST_KERNEL_GLOBS = (("/lib/modules", "*/vmlinuz"), ("/boot", "vmlinuz-*"), ("/lib/modules", "*/modules.dep"))
SUPERMIN_ENV = ("SUPERMIN_KERNEL", "SUPERMIN_MODULES", "SUPERMIN_KERNEL_VERSION", "SUPERMIN_DTB")
BUILD_TIMEOUT_S = 900
STALE_BUILD_S = 2 * BUILD_TIMEOUT_S  # a temp build dir this old belongs to a build that was killed
PACKAGES_FILE = "packages-guestbench"  # the workload variant's extra supermin.d package list
INFO_FILE = "guestbench.json"  # what an appliance was made from and what it holds
APPLIANCES_DIR = "guestbench-appliances"
FILES = ("kernel", "initrd", "root", "README.fixed")  # a fixed appliance: what LIBGUESTFS_PATH must hold
INIT_NAME = "guestbench-uml-init"
# Runs as PID 1 before the appliance's own /init on UML: the daemon's channel is a virtio-console port,
# whose driver is a module that must be loaded before /init's udev settles and guestfsd opens the port; so is
# virtio_blk's when a disk is served over vhost-user-blk (udev does not load it), whose disks are then told they have a
# write-back cache: qemu-storage-daemon offers them as write-through (wce 0), and a guest that thinks so never
# flushes, so an fsync would reach no disk (docs/experiments/durability.md).
INIT_SCRIPT = """#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
modprobe virtio_console || echo "guestbench-uml-init: cannot load virtio_console" >&2
case " $(cat /proc/cmdline) " in *" guestbench.virtio_blk=1 "*)
  modprobe virtio_blk || echo "guestbench-uml-init: cannot load virtio_blk" >&2
  for c in /sys/block/vd*/cache_type; do echo "write back" > "$c"; done;;
esac
umount /sys
umount /proc
exec /init "$@"
"""


class ApplianceError(Exception):
    """An appliance could not be found or built: the message says why."""


def uml_kernel_version() -> str | None:
    """The version of the installed UML modules tree (matches `linux --version`)."""
    if not UML_MODULES_ROOT.is_dir():
        return None
    versions = sorted(p.name for p in UML_MODULES_ROOT.iterdir() if (p / "modules.dep").exists())
    return versions[-1] if versions else None


def host_kernel_version() -> str | None:
    """The version of the newest kernel whose modules are installed: the one supermin puts in a qemu appliance."""
    found = sorted((p.parent.name for p in Path("/lib/modules").glob("*/modules.dep")),
                   key=lambda v: [int(n) if n.isdigit() else n for n in re.split(r"(\d+)", v)])
    return found[-1] if found else None


class Flavour:
    """An appliance recipe: which kernel supermin puts in and what goes in besides libguestfs's packages.

    Why a class per flavour: a new kernel to boot (another hypervisor's) is one subclass and one FLAVOURS entry.
    """

    name: ClassVar[str]
    # A prebuilt appliance per variant to use instead of building: guestbench's level-1 guest carries the
    # host's, because supermin cannot build in a root that supermin made (it has no package database).
    prebuilt_env: ClassVar[Mapping[str, str]] = {}

    def kernel_inputs(self) -> dict[str, Any]:
        """What its kernel (and any extra file) is made from, for the inputs; ApplianceError when missing."""
        raise NotImplementedError

    def prepare(self, supermin_d: Path, ins: dict[str, Any], env: dict[str, str]) -> None:
        """Add to the build's copy of supermin.d and to supermin's environment (SUPERMIN_* unset)."""


class HostKernelFlavour(Flavour):
    """The host's kernel, as supermin's own search picks it: what qemu boots."""

    name = "qemu"
    prebuilt_env = {"workload": "GUESTBENCH_WORKLOAD_APPLIANCE_QEMU"}

    def kernel_inputs(self) -> dict[str, Any]:
        return {"kernel": {"candidates": [_stat(p) for root, pattern in HOST_KERNEL_GLOBS
                                          for p in sorted(Path(root).glob(pattern))]}}


class UmlFlavour(Flavour):
    """UML's kernel and modules, plus an init that loads virtio_console before the appliance's /init."""

    name = "uml"
    prebuilt_env = {"standard": "GUESTBENCH_UML_APPLIANCE", "workload": "GUESTBENCH_WORKLOAD_APPLIANCE_UML"}

    def kernel_inputs(self) -> dict[str, Any]:
        version = uml_kernel_version()
        if not UML_KERNEL.exists() or version is None:
            raise ApplianceError("User-Mode Linux is not installed (apt-get install user-mode-linux)")
        return {"kernel": {"version": version, "kernel": _stat(UML_KERNEL),
                           "modules": _stat(UML_MODULES_ROOT / version / "modules.dep")},
                "init": INIT_SCRIPT}

    def prepare(self, supermin_d: Path, ins: dict[str, Any], env: dict[str, str]) -> None:
        (supermin_d / "guestbench-uml.tar.gz").write_bytes(_init_tarball())
        version = ins["kernel"]["version"]
        env.update(SUPERMIN_KERNEL=str(UML_KERNEL), SUPERMIN_MODULES=str(UML_MODULES_ROOT / version),
                   SUPERMIN_KERNEL_VERSION=version)


FLAVOURS: dict[str, Flavour] = {f.name: f for f in (HostKernelFlavour(), UmlFlavour())}
PREBUILT_ENV = {(f.name, variant): var for f in FLAVOURS.values() for variant, var in f.prebuilt_env.items()}


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """{package: version} of those of `names` that dpkg has installed."""
    names = list(names)
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", *names],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in proc.stdout.splitlines():
        name, version, status = (line.split() + ["", "", ""])[:3]
        if status == "installed" and name in names:
            found[name] = version
    return found


def _stat(path: Path) -> list[object]:
    st = path.stat()
    return [str(path), st.st_size, int(st.st_mtime)]


def _check(flavour: str, variant: str) -> None:
    if flavour not in FLAVOURS or variant not in VARIANTS:
        raise ValueError(f"no appliance {flavour!r}/{variant!r}: flavours {tuple(FLAVOURS)}, variants {VARIANTS}")


def inputs(flavour: str, variant: str = "standard") -> dict[str, Any]:
    """Everything the appliance is made from (file stats and one dpkg query: cheap); its hash names it.

    Raises ApplianceError when something needed to build it is missing.
    """
    _check(flavour, variant)
    if not SUPERMIN_D.is_dir():
        raise ApplianceError(f"{SUPERMIN_D} is missing (apt-get install libguestfs0)")
    supermin = shutil.which("supermin")
    if supermin is None:
        raise ApplianceError("supermin is not installed (apt-get install supermin)")
    ins: dict[str, Any] = {"recipe": RECIPE, "flavour": flavour, "variant": variant, "supermin": _stat(Path(supermin)),
                           "supermin.d": [_stat(p) for p in sorted(SUPERMIN_D.iterdir())]}
    ins.update(FLAVOURS[flavour].kernel_inputs())
    if variant == "workload":
        ins["packages"] = installed_versions(WORKLOAD_PACKAGES)
    return ins


def inputs_key(ins: dict[str, Any]) -> str:
    """The hash that names an appliance built from `ins` (a pure function of them)."""
    return hashlib.sha256(json.dumps(ins, sort_keys=True).encode()).hexdigest()[:16]


def included_packages(ins: dict[str, Any]) -> list[str]:
    """The workload packages the appliance made from `ins` carries, in WORKLOAD_PACKAGES order."""
    return [p for p in WORKLOAD_PACKAGES if p in (ins.get("packages") or {})]


def missing_packages(ins: dict[str, Any]) -> list[str]:
    """The workload packages left out because the host does not have them installed."""
    if ins.get("variant") != "workload":
        return []
    return [p for p in WORKLOAD_PACKAGES if p not in (ins.get("packages") or {})]


def appliances_root() -> Path:
    """The appliance cache, made and checked (owned.ensure_dir)."""
    return owned.ensure_dir(temp_root() / APPLIANCES_DIR, "the appliance cache")


def variant_dir(flavour: str, variant: str) -> Path:
    """Where the builds of one flavour and variant live (one at a time, named by its inputs' hash); checked."""
    return owned.ensure_dir(appliances_root() / f"{flavour}-{variant}",
                            f"the {flavour} {variant} appliance directory")


def complete(path: Path) -> bool:
    """Whether `path` holds a whole fixed appliance (a cleaner may have taken some of it)."""
    return all((path / name).exists() for name in FILES)


def built(out: Path) -> bool:
    """Whether the cache's `out` holds a whole appliance of the effective user's own; UnsafePath (one line, nothing
    touched) when `out` or a file in it is not: a symlink, another user's, writable by others."""
    if not os.path.lexists(out):
        return False
    owned.check_dir(out, "a cached appliance")
    booted = out.parent.name.split("-")[0] != "uml"  # UML's kernel runs on the host: it must be the user's alone
    return all([owned.own_file(out / name, "a cached appliance's file", booted=booted) for name in FILES])


def prebuilt(flavour: str, variant: str) -> Path | None:
    """The appliance named by this flavour and variant's environment variable, if one is set."""
    name = PREBUILT_ENV.get((flavour, variant))
    given = os.environ.get(name) if name else None
    if not given:
        return None
    if not complete(Path(given)):
        raise ApplianceError(f"${name}={given} is not a fixed appliance (it needs {', '.join(FILES)})")
    return Path(given)


def appliance_dir(flavour: str, variant: str = "standard", build: bool = True) -> Path:
    """The fixed appliance directory for this flavour and variant, built (~10 s) if missing and `build`."""
    _check(flavour, variant)
    given = prebuilt(flavour, variant)
    if given is not None:
        return given
    ins = inputs(flavour, variant)
    base = variant_dir(flavour, variant)
    out = base / inputs_key(ins)
    if built(out):
        return out
    if not build:
        raise ApplianceError(f"the {flavour} {variant} appliance is not built yet")
    try:
        with locks.exclusive(appliances_root() / ".locks" / f"{flavour}-{variant}.lock",
                             f"the {flavour} {variant} appliance", STALE_BUILD_S):
            if built(out):  # another run built it while this one waited
                return out
            return _build(ins, base, out)
    except locks.LockTimeout as e:
        raise ApplianceError(str(e)) from None


def _build(ins: dict[str, Any], base: Path, out: Path) -> Path:
    """Build into a temp dir beside `out`, then move it into place (under the variant's lock); `base` is checked,
    so what is in it is this user's own."""
    _sweep_stale_builds(base)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=base))
    try:
        made = work / "appliance"
        build_to(made, ins)
        for old in base.iterdir():  # keep one appliance: older builds are from older inputs
            if _own_dir(old) and not old.name.startswith(".") and old != out:
                shutil.rmtree(old, ignore_errors=True)
        if os.path.lexists(out):  # partly cleaned away (built() checked it is ours)
            shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(made, out)
        except OSError:
            if not built(out):  # another process may have won the race
                raise
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _own_dir(path: Path) -> bool:
    """Whether `path` is a directory of the effective user's that nobody else can write (one guestbench made)."""
    try:
        owned.check_dir(path, "")
    except owned.UnsafePath:
        return False
    return True


def build_to(dest: Path, ins: dict[str, Any]) -> dict[str, Any]:
    """Build the appliance described by `ins` (from inputs()) into `dest`, which must not exist; uncached.

    Returns what is written to dest/guestbench.json: the inputs, the packages included and missing, the
    build time.
    """
    flavour, variant = ins["flavour"], ins["variant"]
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=".supermin-d-", dir=dest.parent))
    try:
        sd = work / "supermin.d"
        shutil.copytree(SUPERMIN_D, sd)
        env = {k: v for k, v in os.environ.items() if k not in SUPERMIN_ENV}
        FLAVOURS[flavour].prepare(sd, ins, env)
        included = included_packages(ins)
        if included:
            (sd / PACKAGES_FILE).write_text("".join(f"{p}\n" for p in included))
        _supermin(["supermin", "--build", "--copy-kernel", "-f", "ext2", "--host-cpu", "x86_64", "-o", str(dest),
                   str(sd)], env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (dest / "README.fixed").write_text(f"libguestfs fixed appliance ({flavour} flavour, {variant} variant) built "
                                       "by guestbench with supermin; use it with LIBGUESTFS_PATH\n")
    info = {"inputs": ins, "key": inputs_key(ins), "included": included, "missing": missing_packages(ins),
            "build_seconds": round(time.monotonic() - t0, 2),
            "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (dest / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    os.chmod(dest, 0o755)
    for f in dest.iterdir():  # readable by libvirt's qemu user, writable by nobody else (built() checks)
        if not f.is_symlink():  # a link (a supermin build without --copy-kernel) would chmod its target
            os.chmod(f, (f.lstat().st_mode | 0o444) & ~0o022)
    return info


def _supermin(argv: list[str], env: dict[str, str]) -> None:
    """Run supermin in its own process group, so that a timeout takes its helpers down with it."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ApplianceError(f"supermin did not finish within {BUILD_TIMEOUT_S} s") from None
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
    if proc.returncode != 0:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ApplianceError(f"supermin failed (exit {proc.returncode}): {last}")


def _sweep_stale_builds(base: Path) -> None:
    """Remove temp build dirs of builds that were killed (a live build is far younger)."""
    now = time.time()
    for d in base.glob(".build-*"):
        try:
            if _own_dir(d) and now - d.lstat().st_mtime > STALE_BUILD_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


def _init_tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = INIT_SCRIPT.encode()
        info = tarfile.TarInfo(INIT_NAME)
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install_hint(missing: list[str]) -> str | None:
    return f"apt-get install {' '.join(missing)}" if missing else None


def state(flavour: str, variant: str = "standard") -> dict[str, Any]:
    """What doctor says about one appliance, without building it: built or not, where, what it holds."""
    _check(flavour, variant)
    st: dict[str, Any] = {"flavour": flavour, "variant": variant, "built": False, "path": None, "key": None,
                          "prebuilt_from": None, "included": [], "missing": [], "install_hint": None,
                          "root_bytes_allocated": None, "root_bytes_apparent": None, "built_utc": None,
                          "build_seconds": None, "error": None}
    try:
        given = prebuilt(flavour, variant)
        if given is not None:
            st.update(path=str(given), prebuilt_from=PREBUILT_ENV[(flavour, variant)])
            out, whole = given, True
        else:
            ins = inputs(flavour, variant)
            out = variant_dir(flavour, variant) / inputs_key(ins)
            missing = missing_packages(ins)
            st.update(path=str(out), key=inputs_key(ins), included=included_packages(ins), missing=missing,
                      install_hint=install_hint(missing))
            whole = built(out)
    except (ApplianceError, owned.UnsafePath) as e:
        st["error"] = str(e)
        return st
    if not (whole and complete(out)):
        return st
    st["built"] = True
    try:
        info = json.loads((out / INFO_FILE).read_text())
    except (OSError, ValueError):
        info = {}
    for k in ("key", "included", "missing", "build_seconds", "built_utc"):
        if info.get(k) is not None:
            st[k] = info[k]
    st["install_hint"] = install_hint(st["missing"])
    if st["built_utc"] is None:
        st["built_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((out / "README.fixed").stat().st_mtime))
    root = out / "root"
    if root.exists():
        rs = root.stat()
        st.update(root_bytes_allocated=rs.st_blocks * 512, root_bytes_apparent=rs.st_size)
    return st
