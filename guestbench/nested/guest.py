"""Run a job in a level-1 guest: a transient libvirt domain from the cached image, always destroyed.

The job goes in as a tar on a read-only disk (the guest's /init unpacks it and runs job.sh); what the
job leaves in /guestbench-l1/out comes back as a tar on an output disk. No network and no shared
filesystem: disks are the one channel that works the same under KVM and TCG, as root and not. The
guest's console (a file) is relayed line by line so that a slow nested boot shows progress; the whole
run has a deadline past which the domain is destroyed and the reason says where it was.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from xml.sax.saxutils import escape

from guestbench.nested import live
from guestbench.nested.image import OUTPUT_WRITTEN, Image
from guestbench.paths import make_run_dir, remove_tree

DOMAIN_PREFIX = "guestbench-l1-"
OUTPUT_SIZE = 256 * 2**20
# Once its output is written and synced the guest powers itself off, which takes a second or two. An
# emulated power-off often stalls here after the kernel's "Power down" (qemu TCG, 2 vCPUs: in 2 of the 4
# nested runs of one day), and nothing of the guest's is left to wait for, so past this it is destroyed.
POWEROFF_GRACE_S = 5.0


class GuestError(Exception):
    """The level-1 guest failed or overran its deadline; the message says why and where it was."""


@dataclass
class JobResult:
    exit_status: int | None  # None: the job never reported one (crashed guest)
    output: Path  # the job's /guestbench-l1/out, unpacked on the host
    console: list[str]
    seconds: float


def _tar(files: dict[str, bytes | Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in files.items():
            if isinstance(content, Path):
                tar.add(str(content), arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(content)
                info.mode = 0o755
                tar.addfile(info, io.BytesIO(content))
    data = buf.getvalue()
    return data + b"\0" * (-len(data) % 512)


def domain_xml(name: str, image: Image, run_dir: Path, memory_mib: int, vcpus: int, kvm: bool) -> str:
    def disk(path: Path, dev: str, fmt: str, readonly: bool) -> str:
        return (f"<disk type='file' device='disk'><driver name='qemu' type='{fmt}' cache='unsafe'/>"
                f"<source file='{escape(str(path))}'/><target dev='{dev}' bus='virtio'/>"
                f"{'<readonly/>' if readonly else ''}</disk>")

    # TCG's default CPU model lacks what this host's wheels (numpy) are built for: give it every feature
    cpu = "<cpu mode='host-passthrough'/>" if kvm else "<cpu mode='maximum'/>"
    return f"""<domain type='{'kvm' if kvm else 'qemu'}'>
<name>{escape(name)}</name><memory unit='MiB'>{memory_mib}</memory><vcpu>{vcpus}</vcpu>{cpu}
<os><type arch='x86_64' machine='pc'>hvm</type><kernel>{escape(str(image.kernel))}</kernel>
<initrd>{escape(str(image.initrd))}</initrd>
<cmdline>console=ttyS0 root=UUID={image.uuid} rw panic=1 quiet</cmdline></os>
<on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot><on_crash>destroy</on_crash>
<devices>
{disk(run_dir / 'root.qcow2', 'vda', 'qcow2', False)}
{disk(image.data, 'vdb', 'raw', True)}
{disk(run_dir / 'job.tar', 'vdc', 'raw', True)}
{disk(run_dir / 'output.raw', 'vdd', 'raw', False)}
{disk(run_dir / 'live.raw', 'vde', 'raw', False)}
<serial type='file'><source path='{escape(str(run_dir / 'console.log'))}'/><target port='0'/></serial>
<memballoon model='none'/>
</devices></domain>"""


def run_job(image: Image, files: dict[str, bytes | Path], dest: Path, *, memory_mib: int, vcpus: int,
            kvm: bool, timeout_s: float, on_console: Callable[[str], None] = lambda line: None,
            on_live: Callable[[live.Snapshot], None] = lambda snap: None,
            silence_s: float | None = None, poweroff_grace_s: float = POWEROFF_GRACE_S) -> JobResult:
    """Boot the guest with `files` (must hold job.sh), wait for it to power off, unpack its output to `dest`.

    The job may write snapshots to /dev/vde (guestbench.nested.live): each new one reaches `on_live` while
    the guest runs, and once more after it is gone, also when this ends in an error or an interruption.
    `silence_s`: the guest is destroyed as hung when its console says nothing for that long.
    `poweroff_grace_s`: how long after its output is written the guest may take to power off.
    """
    import libvirt

    from guestbench.backends.libvirt import ensure_daemons

    if (why := ensure_daemons()) is not None:
        raise GuestError(f"libvirt is not usable: {why}")
    run_dir = make_run_dir()
    name = f"{DOMAIN_PREFIX}{uuidlib.uuid4().hex[:12]}"
    console: list[str] = []
    t0 = time.monotonic()
    dom = None
    last_seq = 0
    conn = libvirt.open("qemu:///system")
    try:
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root),
                        str(run_dir / "root.qcow2")], check=True, capture_output=True, stdin=subprocess.DEVNULL)
        (run_dir / "job.tar").write_bytes(_tar(files))
        with open(run_dir / "output.raw", "wb") as f:
            f.truncate(OUTPUT_SIZE)
        with open(run_dir / "live.raw", "wb") as f:
            f.truncate(live.DISK_SIZE)
        for made in run_dir.iterdir():
            os.chmod(made, 0o666)
        try:
            # AUTODESTROY: libvirtd destroys the guest when this connection closes, also when guestbench is
            # killed outright (SIGKILL) and cannot destroy it itself
            dom = conn.createXML(domain_xml(name, image, run_dir, memory_mib, vcpus, kvm),
                                 libvirt.VIR_DOMAIN_START_AUTODESTROY)
        except libvirt.libvirtError as e:
            raise GuestError(f"libvirt could not start the level-1 guest: {e}") from None
        seen = 0
        heard = time.monotonic()
        written_at: float | None = None
        while True:
            before, lines_before = seen, len(console)
            seen = _relay(run_dir / "console.log", seen, console, on_console)
            now = time.monotonic()
            if seen != before:
                heard = now
                if written_at is None and OUTPUT_WRITTEN in (line.strip() for line in console[lines_before:]):
                    written_at = now
            last_seq = _pass_live(run_dir, last_seq, on_live)
            if not _active(dom):
                break
            if written_at is not None and now - written_at > poweroff_grace_s:
                console.append(f"guestbench: the level-1 guest wrote its output but had not powered off "
                               f"{poweroff_grace_s:.0f} s later; destroyed")
                on_console(console[-1])
                _destroy(dom)
                break
            last = console[-1] if console else "no console output"
            if now - t0 > timeout_s:
                raise GuestError(f"the level-1 guest did not finish within {timeout_s:.0f} s and was destroyed; "
                                 f"its console last said: {last}")
            if silence_s is not None and now - heard > silence_s:
                raise GuestError(f"the level-1 guest said nothing for {silence_s:.0f} s (hung?) and was destroyed; "
                                 f"its console last said: {last}")
            time.sleep(0.5)
        _relay(run_dir / "console.log", seen, console, on_console)
        dest.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(run_dir / "output.raw", mode="r:") as tar:
                tar.extractall(dest, members=_safe_members(tar))
        except tarfile.ReadError:
            tail = console[-3:] if console else ["no console output"]
            raise GuestError("the level-1 guest wrote no output; its console last said: " + " / ".join(tail)) from None
        status_file = dest / "exit-status"
        status = int(status_file.read_text()) if status_file.exists() else None
        return JobResult(status, dest, console, time.monotonic() - t0)
    finally:
        if dom is not None:
            _destroy(dom)
        conn.close()
        try:
            _pass_live(run_dir, last_seq, on_live)  # what the guest wrote in its last moments
        finally:
            remove_tree(run_dir)


def _pass_live(run_dir: Path, last_seq: int, on_live: Callable[[live.Snapshot], None]) -> int:
    snap = live.read(run_dir / "live.raw")
    if snap is None or snap.seq <= last_seq:
        return last_seq
    on_live(snap)
    return snap.seq


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Only plain files and directories inside the destination: the guest's output is not trusted."""
    return [m for m in tar.getmembers() if (m.isfile() or m.isdir()) and not m.name.startswith("/")
            and ".." not in Path(m.name).parts]


def _destroy(dom: object) -> None:
    import libvirt

    try:
        dom.destroy()  # type: ignore[attr-defined]
    except libvirt.libvirtError:
        pass  # already gone (powered off)


def _active(dom: object) -> bool:
    import libvirt

    try:
        return bool(dom.isActive())  # type: ignore[attr-defined]
    except libvirt.libvirtError:
        return False


def _relay(path: Path, seen: int, console: list[str], on_console: Callable[[str], None]) -> int:
    """Pass new complete console lines on; returns how many bytes have been consumed."""
    try:
        with open(path, "rb") as f:
            f.seek(seen)
            data = f.read()
    except FileNotFoundError:
        return seen
    end = data.rfind(b"\n")
    if end < 0:
        return seen
    for raw in data[:end].split(b"\n"):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if line.strip():
            console.append(line)
            on_console(line)
    return seen + end + 1


def leftover_domains(under: Path | None = None) -> list[str]:
    """Level-1 domains that exist now whose files lie under `under` (None: all), defined or running.

    There should be none between runs; `under` keeps a check to one's own runs on a shared host.
    """
    from guestbench.backends.libvirt import domains_under

    return domains_under(DOMAIN_PREFIX, under)


__all__ = ["GuestError", "JobResult", "run_job", "leftover_domains"]
