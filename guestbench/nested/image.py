"""The level-1 guest image for nested runs, built offline from this host's own packages and cached.

Why two disks: the root (supermin from the host's Debian packages: python3 and the libguestfs bindings,
qemu, UML, our /init) changes only with packages; the data disk carries what the guest cannot build
itself (supermin in a supermin-made root has no dpkg database): a fixed libguestfs appliance, the UML
appliance, and this host's virtualenv at its own path, so guestbench runs inside exactly as here. Both
are keyed by a hash of everything they are made from and rebuilt only when that changes.

Images live under temp_root()/guestbench-nested (/var/lib/guestbench for root: owned.home), 0755: libvirt's
qemu user must be able to read them. The guest boots their kernel and runs their root as root, so each directory
and file is checked at each use to be the effective user's alone (owned): a planted image is refused in one
line, never booted. Layout of an image directory (<key>/): kernel, initrd, root (ext2, supermin),
data.img (ext2, mke2fs -d), inputs.json (what the key was made of), uuid (the root's filesystem UUID).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.backends import appliance
from guestbench.host import commands, locks
from guestbench.host import owned
from guestbench.host.paths import temp_root

# What the level-1 guest needs to run guestbench's backends (dependencies come with them): qemu for tcg and
# kvm, UML, libvirtd and its qemu driver for the libvirt ones; and libguestfs's own programs for the command
# measurement (guestfish; guestfs-tools has the virt-* tools).
PACKAGES = ("bash", "coreutils", "grep", "util-linux", "procps", "kmod", "iproute2", "e2fsprogs", "tar", "gzip",
            "python3", "python3-guestfs", "python3-yaml", "libguestfs0", "qemu-system-x86", "qemu-utils",
            "user-mode-linux", "supermin", "guestfish", "guestfs-tools", "libvirt-daemon",
            "libvirt-daemon-driver-qemu", "libvirt-clients", "python3-libvirt")
# the workload appliances on the data disk, by flavour: the guest cannot build them (no dpkg database there)
WORKLOAD_APPLIANCES = {"qemu": "appliance-workload", "uml": "uml-appliance-workload"}
ROOT_SIZE = "8G"  # sparse; room for the disk images a nested scenario creates under /var/tmp
BUILD_TIMEOUT_S = 1800
BUILD_LOCK_WAIT_S = 4 * BUILD_TIMEOUT_S  # a build runs several steps, each under BUILD_TIMEOUT_S
# where the data disk is mounted in the guest; not /guestbench: from / that would be importable as a package
GUEST_DATA = "/guestbench-l1/data"
GUEST_CACHE = "/var/cache/guestbench"  # GUESTBENCH_CACHE in the guest (on the root overlay: writable)

OUTPUT_WRITTEN = "guestbench-l1: output written"  # INIT says it once the output disk is written and synced

# PID 1 of the level-1 guest (after supermin's mini initrd): mount, unpack the job from the input disk,
# run it, write its output directory to the output disk as a tar, power off. The console (ttyS0) shows
# progress lines the host relays; the job's own output goes to the console too.
INIT = """#!/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm /run /tmp /var/tmp /guestbench-l1/data /guestbench-l1/in /guestbench-l1/out
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
ip link set lo up 2>/dev/null
echo "guestbench-l1: booted after $(cut -d' ' -f1 /proc/uptime) s"
# KVM for the appliances inside, where this guest's CPU offers it (on TCG with the maximum CPU model: AMD-V)
if grep -qw svm /proc/cpuinfo; then modprobe kvm_amd; elif grep -qw vmx /proc/cpuinfo; then modprobe kvm_intel; fi
if [ -c /dev/kvm ]; then
  echo "guestbench-l1: /dev/kvm ready ($(ls /sys/module | grep -E '^kvm_(amd|intel)$' | head -n1))"
else
  echo "guestbench-l1: no /dev/kvm inside (the guest's CPU offers neither svm nor vmx)"
fi
# libvirtd inside (guestbench starts it as on a host): the image has no user database (no package scripts ran),
# and libvirt's qemu driver will not start without its build's default user; its domains run as root here
[ -e /etc/passwd ] || printf '%s\n' root:x:0:0:root:/root:/bin/sh \\
    libvirt-qemu:x:64055:64055::/var/lib/libvirt:/bin/false > /etc/passwd
[ -e /etc/group ] || printf 'root:x:0:\nkvm:x:64054:\nlibvirt-qemu:x:64055:\n' > /etc/group
mkdir -p /var/lib/libvirt/qemu /var/cache/libvirt/qemu /var/log/libvirt/qemu
printf 'user = "root"\ngroup = "root"\nnamespaces = []\n' >> /etc/libvirt/qemu.conf 2>/dev/null
mount -o ro /dev/vdb /guestbench-l1/data || echo "guestbench-l1: cannot mount the data disk"
if [ -d /guestbench-l1/data/venv-path ]; then
  venv=$(cat /guestbench-l1/data/venv-path.txt)
  mkdir -p "$venv" && mount --bind /guestbench-l1/data/venv-path "$venv"
fi
tar -xf /dev/vdc -C /guestbench-l1/in || echo "guestbench-l1: cannot unpack the job"
echo "guestbench-l1: job starts"
sh /guestbench-l1/in/job.sh > /dev/console 2>&1
echo $? > /guestbench-l1/out/exit-status
echo "guestbench-l1: job exit status $(cat /guestbench-l1/out/exit-status)"
tar -cf /dev/vdd -C /guestbench-l1/out . && sync
echo "guestbench-l1: output written"
echo o > /proc/sysrq-trigger
sleep 30 2>/dev/null  # the power-off is under way; sleep may fail as the disks go
"""


class BuildError(Exception):
    """The image could not be built: the message says why."""


@dataclass(frozen=True)
class Image:
    path: Path

    @property
    def kernel(self) -> Path:
        return self.path / "kernel"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd"

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def data(self) -> Path:
        return self.path / "data.img"

    @property
    def uuid(self) -> str:
        return (self.path / "uuid").read_text().strip()


def _package_versions() -> dict[str, str]:
    said = commands.output(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", *PACKAGES],
                           timeout=60)  # exit 1 when a package is unknown: what it listed still counts
    if said is None:
        raise BuildError("dpkg-query could not run (or did not answer within 60 s): the level-1 guest is built from "
                         "this host's Debian packages")
    found = {}
    for line in said[1].splitlines():
        name, version, status = (line.split() + ["", "", ""])[:3]
        if status == "installed":
            found[name] = version
    return found


def venv_prefix() -> Path | None:
    """This interpreter's virtualenv (None when guestbench runs from the system Python)."""
    return Path(sys.prefix) if sys.prefix != sys.base_prefix else None


def _installed() -> str:
    """What this Python can import as installed distributions, `name==version` a line, sorted, editable installs (a
    checkout of guestbench) left out: what `pip freeze --exclude-editable` lists, read in-process (pip took a third of
    a cached `guestbench doctor`, issue 49)."""
    import importlib.metadata as md

    found: dict[str, str] = {}
    for dist in md.distributions():  # in sys.path's order: the first of a name is the one imported, as pip says
        name = str(dist.metadata["Name"] or "").lower().replace("_", "-")
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct = {}
        editable = isinstance(direct, dict) and (direct.get("dir_info") or {}).get("editable")
        if name and name != "guestbench" and not editable:  # guestbench's own checkout: its code is in the image
            found.setdefault(name, f"{name}=={dist.version}")
    return "\n".join(sorted(found.values()))


def inputs() -> dict[str, object]:
    """Everything the image is made from; its hash names the image."""
    packages = _package_versions()  # once: dpkg-query is a process (it ran once per package, issue 49)
    missing = [p for p in PACKAGES if p not in packages]
    if missing:
        raise BuildError(f"host packages missing for the level-1 guest: {', '.join(missing)} "
                         "(make setup installs them)")
    venv = venv_prefix()
    freeze = _installed() if venv is not None else ""
    try:  # the appliances the data disk carries
        appliances = {f"{f}-{v}": appliance.inputs(f, v) for f in appliance.FLAVOURS for v in appliance.VARIANTS}
    except appliance.ApplianceError as e:
        raise BuildError(str(e)) from None
    return {"packages": packages, "init": INIT, "root_size": ROOT_SIZE,
            "appliances": {name: appliance.inputs_key(ins) for name, ins in appliances.items()},
            "venv": str(venv) if venv else None, "pip_freeze": hashlib.sha256(freeze.encode()).hexdigest()}


IMAGE_FILES = ("kernel", "initrd", "root", "data.img", "inputs.json", "uuid")


def images_dir() -> Path:
    """Where level-1 images live, made and checked (owned.ensure_dir)."""
    return owned.ensure_dir(temp_root() / "guestbench-nested", "the level-1 images")


def built(out: Path) -> bool:
    """Whether `out` holds a whole image of the effective user's own; UnsafePath (one line, nothing touched) when
    it or a file in it is not: a symlink, another user's, writable by others."""
    if not os.path.lexists(out):
        return False
    owned.check_dir(out, "a level-1 image")
    return all([owned.own_file(out / name, "a level-1 image's file", booted=True) for name in IMAGE_FILES])


def key(ins: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(ins, sort_keys=True).encode()).hexdigest()[:16]


def cached() -> Image | None:
    """The image for the current inputs if it is built (no build)."""
    try:
        out = images_dir() / key(inputs())
    except BuildError:
        return None
    return Image(out) if built(out) else None


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    return commands.checked(argv, what, BUILD_TIMEOUT_S, env=env, error=BuildError, missing="to build the image")


def _stage(src: Path, dest: Path, what: str) -> None:
    """`src` into the data disk's staging tree: hard links where both are on one filesystem (mke2fs -d reads each
    file once either way; a copy of gigabytes only to be read and removed cost a build most of a minute on a busy
    machine), else a copy that keeps holes. The staging tree is the build's own and removed after it."""
    def link(source: str, target: str) -> None:
        # a file swapped for a symlink meanwhile: the link, not its target
        os.link(source, target, follow_symlinks=False)

    try:
        shutil.copytree(src, dest, symlinks=True, copy_function=link)
    except (OSError, shutil.Error):  # another filesystem (EXDEV), or links refused
        shutil.rmtree(dest, ignore_errors=True)
        if dest.exists():
            raise BuildError(f"{dest} could not be cleared to copy {what} there") from None
        _run(["cp", "-aT", "--sparse=always", str(src), str(dest)], f"copying {what}")


def _tarball(files: dict[str, tuple[bytes | None, int, str | None]]) -> bytes:
    """A .tar.gz of {name: (content, mode, symlink target)} for supermin's base images."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, (data, mode, link) in files.items():
            info = tarfile.TarInfo(name)
            info.mode = mode
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build(say: Callable[[str], None] = lambda s: None, force: bool = False) -> Image:
    """Build (or reuse) the image for the current inputs; `say` gets one line per step."""
    ins = inputs()
    base = images_dir()
    out = base / key(ins)
    if built(out) and not force:
        say(f"image up to date: {out}")
        return Image(out)
    try:
        with locks.exclusive(base / ".lock", "the level-1 image", BUILD_LOCK_WAIT_S):
            if built(out) and not force:  # another run built it while this one waited
                say(f"image built by another run meanwhile: {out}")
                return Image(out)
            return _build(ins, base, out, say)
    except locks.LockTimeout as e:
        raise BuildError(str(e)) from None


def _build(ins: dict[str, Any], base: Path, out: Path, say: Callable[[str], None]) -> Image:
    """Build into a temp dir beside `out`, then move it into place (under the images' lock)."""
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=base))
    try:
        made = work / "image"
        made.mkdir()
        sd = work / "supermin.d"
        say(f"resolving {len(PACKAGES)} host packages and their dependencies (supermin --prepare)")
        _run(["supermin", "--prepare", "-o", str(sd), *PACKAGES], "supermin --prepare")
        # our PID 1, and UML's alternatives link (not part of the package's file list)
        (sd / "guestbench-l1.tar.gz").write_bytes(_tarball({
            "init": (INIT.encode(), 0o755, None), "usr/bin/linux": (None, 0o777, "linux.uml")}))
        say(f"building the root filesystem ({ROOT_SIZE} sparse ext2, supermin --build)")
        _run(["supermin", "--build", "-f", "ext2", "--size", ROOT_SIZE, "--copy-kernel", "--host-cpu", "x86_64",
              "-o", str(made), str(sd)], "supermin --build")
        uuid = _run(["blkid", "-o", "value", "-s", "UUID", str(made / "root")], "blkid").strip()
        staging = work / "data"
        staging.mkdir()
        say("building a fixed libguestfs appliance for the guest (supermin)")
        try:
            appliance.build_to(staging / "appliance", appliance.inputs("qemu"))
            uml = appliance.appliance_dir("uml")
        except appliance.ApplianceError as e:
            raise BuildError(str(e)) from None
        say("adding the UML appliance")
        _stage(uml, staging / "uml-appliance", "the UML appliance")
        for flavour, name in WORKLOAD_APPLIANCES.items():  # fio, bonnie++, dbench ... for workload measurements
            say(f"adding the {flavour} workload appliance")
            try:
                src = appliance.appliance_dir(flavour, "workload")
            except appliance.ApplianceError as e:
                raise BuildError(str(e)) from None
            _stage(src, staging / name, f"the {flavour} workload appliance")
        venv = venv_prefix()
        if venv is not None:
            say(f"adding this host's virtualenv ({venv})")
            # with its byte-code: compiling numpy, rich ... on every emulated boot costs tens of seconds
            # (a .pyc names its source's mtime and size, which a link or a copy keeps, so a stale one is not used)
            _stage(venv, staging / "venv-path", "the virtualenv")
            (staging / "venv-path.txt").write_text(str(venv))
        size_mib = sum(f.lstat().st_blocks * 512 for f in staging.rglob("*")) // 2**20  # allocated, not apparent
        say(f"building the data disk ({size_mib} MiB of files, mke2fs -d)")
        _run(["mke2fs", "-q", "-t", "ext2", "-d", str(staging), str(made / "data.img"), f"{size_mib * 2 + 512}M"],
             "mke2fs")
        (made / "inputs.json").write_text(json.dumps(ins, indent=1))
        (made / "uuid").write_text(uuid + "\n")
        for f in made.iterdir():
            os.chmod(f, 0o644)  # libvirt's qemu user reads them
        os.chmod(made, 0o755)
        for old in base.iterdir():  # keep one image: older ones are from older inputs (base is checked: ours)
            if old.is_dir() and not old.is_symlink() and not old.name.startswith(".") and old != out:
                shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(made, out)
        say(f"image built: {out}")
        return Image(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def status(kvm_usable: bool) -> dict[str, object]:
    """What doctor says about nested runs here: possible or not and why, the image's state, the accelerator."""
    from guestbench.backends.libvirt import connect_error

    try:
        ins = inputs()
    except BuildError as e:
        return {"possible": False, "reason": str(e), "image": None}
    out = images_dir() / key(ins)
    try:
        whole = built(out)
    except owned.UnsafePath as e:
        return {"possible": False, "reason": str(e), "image": None}
    libvirt_problem = connect_error()
    accel = ("kvm (hardware virtualization)" if kvm_usable else
             "qemu TCG (no usable KVM here): the level-1 guest is emulated, appliances inside are many times slower")
    return {"possible": libvirt_problem is None,
            "reason": (f"libvirt is not reachable: {libvirt_problem}" if libvirt_problem else
                       f"level-1 guest through libvirt, domain type {accel}"),
            "image": str(out) if whole else None,
            "image_state": "built" if whole else "not built yet (guestbench nested build, ~1 min)"}
