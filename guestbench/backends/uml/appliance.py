"""A UML-flavoured fixed libguestfs appliance, built with supermin from this host's packages, cached.

The stock appliance boots under UML, but its kernel modules are the host kernel's; the appliance needs
UML's own (virtio_console for the daemon channel). supermin builds the same appliance with UML's
kernel and modules in a few seconds. The result is keyed by everything it is made from, so a package
update rebuilds it and nothing else does.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from guestbench.paths import cache_dir

UML_KERNEL = Path("/usr/bin/linux")
UML_MODULES_ROOT = Path("/usr/lib/uml/modules")
SUPERMIN_D = Path("/usr/lib/x86_64-linux-gnu/guestfs/supermin.d")
BUILD_TIMEOUT_S = 900
INIT_NAME = "guestbench-uml-init"
PREBUILT_ENV = "GUESTBENCH_UML_APPLIANCE"
# Runs as PID 1 before the appliance's own /init: the daemon's channel is a virtio-console port, whose
# driver is a module that must be loaded before /init's udev settles and guestfsd opens the port.
INIT_SCRIPT = """#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
modprobe virtio_console || echo "guestbench-uml-init: cannot load virtio_console" >&2
umount /sys
umount /proc
exec /init "$@"
"""


class ApplianceError(Exception):
    """The UML appliance could not be built: the message says why."""


def uml_kernel_version() -> str | None:
    """The version of the installed UML modules tree (matches `linux --version`)."""
    if not UML_MODULES_ROOT.is_dir():
        return None
    versions = sorted(p.name for p in UML_MODULES_ROOT.iterdir() if (p / "modules.dep").exists())
    return versions[-1] if versions else None


def _stat_key(path: Path) -> list[object]:
    st = path.stat()
    return [str(path), st.st_size, int(st.st_mtime)]


def inputs_key(version: str) -> str:
    """A hash of what the appliance is made from: supermin.d, UML kernel and modules, supermin, our init."""
    parts: list[object] = [INIT_SCRIPT, _stat_key(UML_KERNEL), _stat_key(UML_MODULES_ROOT / version / "modules.dep")]
    parts += [_stat_key(p) for p in sorted(SUPERMIN_D.iterdir())]
    supermin = shutil.which("supermin")
    parts.append(_stat_key(Path(supermin)) if supermin else None)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _init_tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = INIT_SCRIPT.encode()
        info = tarfile.TarInfo(INIT_NAME)
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def appliance_dir(build: bool = True) -> Path:
    """The fixed appliance directory (kernel = the UML binary, root, initrd, README.fixed); built if missing.

    $GUESTBENCH_UML_APPLIANCE names a prebuilt one instead: guestbench's level-1 guest carries the host's,
    because supermin cannot build in a root that supermin made (it has no package database).
    """
    given = os.environ.get(PREBUILT_ENV)
    if given:
        if not (Path(given) / "README.fixed").exists():
            raise ApplianceError(f"${PREBUILT_ENV}={given} is not a fixed appliance (no README.fixed)")
        return Path(given)
    version = uml_kernel_version()
    if not UML_KERNEL.exists() or version is None:
        raise ApplianceError("User-Mode Linux is not installed (apt-get install user-mode-linux)")
    if not SUPERMIN_D.is_dir():
        raise ApplianceError(f"{SUPERMIN_D} is missing (apt-get install libguestfs0)")
    if shutil.which("supermin") is None:
        raise ApplianceError("supermin is not installed (apt-get install supermin)")
    base = cache_dir() / "uml-appliance"
    out = base / inputs_key(version)
    if (out / "README.fixed").exists():
        return out
    if not build:
        raise ApplianceError("the UML appliance is not built yet")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=base))
    try:
        sd = work / "supermin.d"
        shutil.copytree(SUPERMIN_D, sd)
        (sd / "guestbench-uml.tar.gz").write_bytes(_init_tarball())
        env = dict(os.environ, SUPERMIN_KERNEL=str(UML_KERNEL),
                   SUPERMIN_MODULES=str(UML_MODULES_ROOT / version), SUPERMIN_KERNEL_VERSION=version)
        built = work / "appliance"
        try:
            proc = subprocess.run(["supermin", "--build", "--copy-kernel", "-f", "ext2", "--host-cpu", "x86_64",
                                   "-o", str(built), str(sd)], env=env, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ApplianceError(f"supermin did not finish within {BUILD_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ApplianceError(f"supermin failed (exit {proc.returncode}): {last}")
        (built / "README.fixed").write_text("UML-flavoured libguestfs appliance built by guestbench\n")
        for old in base.iterdir():  # keep one appliance: older builds are from older inputs
            if old.is_dir() and not old.name.startswith(".") and old != out:
                shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(built, out)
        except OSError:
            if not (out / "README.fixed").exists():  # another process may have won the race
                raise
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
