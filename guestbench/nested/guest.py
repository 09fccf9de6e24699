"""Run a job in a level-1 guest: a transient libvirt domain from the cached image, always destroyed.

The job goes in as a tar on a read-only disk (the guest's /init unpacks it and runs job.sh); what the
job leaves in /guestbench-l1/out comes back as a tar on an output disk. No network and no shared
filesystem: disks are the one channel that works the same under KVM and TCG, as root and not. The
guest's console (a file) is relayed line by line so that a slow nested boot shows progress; the whole
run has a deadline past which the domain is destroyed and the reason says where it was.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import subprocess
import tarfile
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from collections.abc import Callable
from xml.sax.saxutils import escape

from guestbench.util.errors import one_line
from guestbench.nested import live
from guestbench.nested.console import LOG_MAX, TAIL, ConsoleLog
from guestbench.nested.image import OUTPUT_WRITTEN, Image
from guestbench.host.paths import make_run_dir, remove_tree

DOMAIN_PREFIX = "guestbench-l1-"
OUTPUT_SIZE = 256 * 2**20
# Once its output is written and synced the guest powers itself off, which takes a second or two. An
# emulated power-off often stalls here after the kernel's "Power down" (qemu TCG, 2 vCPUs: in 2 of the 4
# nested runs of one day), and nothing of the guest's is left to wait for, so past this it is destroyed.
POWEROFF_GRACE_S = 5.0
MAX_MEMBERS = 100_000  # files and directories taken from the guest's output; its size is bound by OUTPUT_SIZE
STATUS_BYTES = 32  # of the exit-status file read


class GuestError(Exception):
    """The level-1 guest failed or overran its deadline; the message says why and where it was."""


@dataclass
class JobResult:
    exit_status: int | None  # None: the job never reported one (crashed guest)
    output: Path  # the job's /guestbench-l1/out, unpacked on the host
    console: list[str]  # its last lines (guestbench.nested.console.TAIL)
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

    # no_timer_check: an emulated vCPU that the host starves at boot lets the kernel's IO-APIC timer check see no tick
    # and panic (libguestfs gives its own appliances the same option; CI run C7's level-1 guest died at 0.024 s)
    # TCG's default CPU model lacks what this host's wheels (numpy) are built for: give it every feature
    cpu = "<cpu mode='host-passthrough'/>" if kvm else "<cpu mode='maximum'/>"
    return f"""<domain type='{'kvm' if kvm else 'qemu'}'>
<name>{escape(name)}</name><memory unit='MiB'>{memory_mib}</memory><vcpu>{vcpus}</vcpu>{cpu}
<os><type arch='x86_64' machine='pc'>hvm</type><kernel>{escape(str(image.kernel))}</kernel>
<initrd>{escape(str(image.initrd))}</initrd>
<cmdline>console=ttyS0 root=UUID={image.uuid} rw panic=1 quiet no_timer_check</cmdline></os>
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
    from guestbench.backends.libvirt import ensure_daemons

    if (why := ensure_daemons()) is not None:
        raise GuestError(f"libvirt is not usable: {why}")
    run_dir = make_run_dir()
    name = f"{DOMAIN_PREFIX}{uuidlib.uuid4().hex[:12]}"
    t0 = time.monotonic()
    domain = _Domain(run_dir)
    last_seq = 0
    relay = ConsoleLog(run_dir / "console.log", on_console, watch=OUTPUT_WRITTEN)
    try:
        domain.open()
        _disks(run_dir, image, files)
        domain.start(domain_xml(name, image, run_dir, memory_mib, vcpus, kvm))
        heard = time.monotonic()
        written_at: float | None = None
        while True:
            heard_now = relay.read()
            now = time.monotonic()
            if heard_now:
                heard = now
                if written_at is None and relay.watched:
                    written_at = now
            last_seq = _pass_live(run_dir, last_seq, on_live)
            if not domain.active():
                break
            if written_at is not None and now - written_at > poweroff_grace_s:
                relay.say(f"guestbench: the level-1 guest wrote its output but had not powered off "
                          f"{poweroff_grace_s:.0f} s later; destroyed")
                domain.destroy()
                break
            last = (relay.last(1) or ["no console output"])[0]
            if relay.size() > LOG_MAX:  # qemu writes the file: the guest, not this loop, decides how fast
                raise GuestError(f"the level-1 guest wrote more than {LOG_MAX // 2**20} MiB to its console and was "
                                 f"destroyed; its console last said: {last}")
            if now - t0 > timeout_s:
                raise GuestError(f"the level-1 guest did not finish within {timeout_s:.0f} s and was destroyed; "
                                 f"its console last said: {last}")
            if silence_s is not None and now - heard > silence_s:
                raise GuestError(f"the level-1 guest said nothing for {silence_s:.0f} s (hung?) and was destroyed; "
                                 f"its console last said: {last}")
            time.sleep(0.5)
        relay.drain()
        try:
            extract_output(run_dir / "output.raw", dest)
        except tarfile.ReadError:
            tail = relay.last(3) or ["no console output"]
            raise GuestError("the level-1 guest wrote no output; its console last said: " + " / ".join(tail)) from None
        return JobResult(_exit_status(dest / "exit-status"), dest, relay.last(TAIL), time.monotonic() - t0)
    finally:
        try:
            domain.end()
        finally:  # also when a signal lands in end()
            try:
                _pass_live(run_dir, last_seq, on_live)  # what the guest wrote in its last moments
            finally:
                remove_tree(run_dir)


def _disks(run_dir: Path, image: Image, files: dict[str, bytes | Path]) -> None:
    """The guest's disks in its run dir: an overlay on the image, the job's tar, the output and live disks."""
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root),
                    str(run_dir / "root.qcow2")], check=True, capture_output=True, stdin=subprocess.DEVNULL)
    (run_dir / "job.tar").write_bytes(_tar(files))
    with open(run_dir / "output.raw", "wb") as f:
        f.truncate(OUTPUT_SIZE)
    with open(run_dir / "live.raw", "wb") as f:
        f.truncate(live.DISK_SIZE)
    # root's alone (the run dir is listable, and its name is in qemu's command line): libvirt's dynamic ownership
    # hands each disk to its qemu user for the domain's life and gives it back after (checked here, libvirt 9.0)
    for made in ("root.qcow2", "job.tar", "output.raw", "live.raw"):
        os.chmod(run_dir / made, 0o600)


def _pass_live(run_dir: Path, last_seq: int, on_live: Callable[[live.Snapshot], None]) -> int:
    snap = live.read(run_dir / "live.raw")
    if snap is None or snap.seq <= last_seq:
        return last_seq
    on_live(snap)
    return snap.seq


def _exit_status(path: Path) -> int | None:
    """The job's exit status as the guest wrote it; None when missing or not a small number."""
    try:
        with open(path, "rb") as f:
            return int(f.read(STATUS_BYTES))
    except (OSError, ValueError):
        return None


def _inside(name: str) -> tuple[str, ...] | None:
    """A member's path as parts below the destination; None for one that is absolute or climbs out with '..'."""
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts:
        return None
    return tuple(p for p in parts if p != ".")


def _make_dirs(dest: Path, parts: tuple[str, ...]) -> Path:
    """dest/parts as directories made by this process (0755); nothing the tar made can be a link on the way."""
    cur = dest
    for part in parts:
        cur = cur / part
        try:
            os.mkdir(cur, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(cur).st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(cur)) from None
    return cur


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, parts: tuple[str, ...]) -> None:
    """A regular file, made new (O_EXCL, never through a link), owned by the effective user, 0755 or 0644."""
    where = _make_dirs(dest, parts[:-1])
    mode = 0o755 if member.mode & 0o111 else 0o644
    fd = os.open(where / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)  # the umask may have taken bits away
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has data
        left = member.size
        while left > 0:
            chunk = source.read(min(left, 2**20))
            if not chunk:
                raise tarfile.ReadError("unexpected end of data")
            out.write(chunk)
            left -= len(chunk)


def extract_output(archive: Path, dest: Path, *, max_members: int = MAX_MEMBERS,
                   max_bytes: int = OUTPUT_SIZE) -> list[str]:
    """Unpack the level-1 guest's output tar into `dest`, which the guest does not get to trust: only regular
    files and directories, made new by this process (owned by the effective user, modes 0644/0755, never setuid,
    setgid or sticky), nothing absolute or climbing out with '..', no links, devices or FIFOs, and at most
    `max_members` members and `max_bytes` bytes (GuestError past either). Returns the names passed over.
    (tarfile's extraction filters came with Python 3.11.4; this is the same "data" policy, spelled out.)"""
    dest.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    try:
        return _extract(archive, dest, max_members, max_bytes, skipped)
    except tarfile.TarError as e:
        raise GuestError(f"the level-1 guest's output is not a readable tar: {one_line(e)[:120]}") from None


def _extract(archive: Path, dest: Path, max_members: int, max_bytes: int, skipped: list[str]) -> list[str]:
    total = 0
    with tarfile.open(archive, mode="r:") as tar:
        for count, member in enumerate(tar, start=1):
            if count > max_members:
                raise GuestError(f"the level-1 guest's output holds more than {max_members} files; refused")
            parts = _inside(member.name)
            if parts is None or not (member.isreg() or member.isdir()) or member.issparse():
                skipped.append(member.name[:80])
                continue
            try:
                if member.isdir():
                    _make_dirs(dest, parts)
                    continue
                total += member.size
                if total > max_bytes:
                    raise GuestError(f"the level-1 guest's output holds more than {max_bytes} bytes; refused")
                if parts:
                    _write_member(tar, member, dest, parts)
            except OSError:  # a second member of one name (the first one stays), a name too long for the host
                skipped.append(member.name[:80])
            # tarfile's list of what it read: not kept, so memory stays bounded whatever the count
            tar.members.clear()  # type: ignore[attr-defined]
    return skipped


class _Domain:
    """The level-1 guest's domain and its libvirt connection, every call under a deadline. When libvirtd stops
    answering, the guest's qemu is killed by the run directory its command line names (its disks are there) and
    libvirt is not asked again: each call that hung keeps one thread blocked until the daemon answers."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.conn: Any = None
        self.dom: Any = None
        self.silent = False  # libvirtd stopped answering

    def open(self) -> None:
        import libvirt

        from guestbench.backends.libvirt import open_connection

        try:
            self.conn = open_connection()
        except (TimeoutError, libvirt.libvirtError) as e:
            raise GuestError(f"libvirt is not usable: {one_line(e)}") from None

    def start(self, xml: str) -> None:
        """AUTODESTROY: libvirtd destroys the guest when the connection closes, also when guestbench is killed
        outright (SIGKILL) and cannot destroy it itself. A start given up on (its deadline, a signal) is its
        thread's to destroy once libvirt returns it."""
        import libvirt

        from guestbench.backends.libvirt import CALL_TIMEOUT_S, bounded

        abandoned = threading.Event()

        def create() -> Any:  # self, not a local: no frame of this call keeps the connection alive after end()
            dom = self.conn.createXML(xml, libvirt.VIR_DOMAIN_START_AUTODESTROY)
            if abandoned.is_set():
                with contextlib.suppress(libvirt.libvirtError):
                    dom.destroy()
            return dom

        try:
            self.dom = bounded(create, CALL_TIMEOUT_S)
            return
        except libvirt.libvirtError as e:
            why = str(e)
        except TimeoutError as e:
            abandoned.set()
            why = f"{e}; its qemu killed ({self._hung()})"
        except BaseException:
            abandoned.set()
            raise
        raise GuestError(f"libvirt could not start the level-1 guest: {why}")  # out of the handler: no context

    def active(self) -> bool:
        """Whether the guest still runs; GuestError (its qemu killed) when libvirtd stops answering meanwhile."""
        import libvirt

        from guestbench.backends.libvirt import CALL_TIMEOUT_S, bounded

        if self.silent or self.dom is None:
            return False
        try:
            return bool(bounded(self.dom.isActive, CALL_TIMEOUT_S))
        except libvirt.libvirtError:
            return False
        except TimeoutError as e:
            why = str(e)
        raise GuestError(f"{why}; the level-1 guest's qemu was killed ({self._hung()})")  # no context kept

    def destroy(self) -> None:
        import libvirt

        from guestbench.backends.libvirt import CALL_TIMEOUT_S, bounded

        if self.dom is None or self.silent:
            return
        try:
            bounded(self.dom.destroy, CALL_TIMEOUT_S)
        except libvirt.libvirtError:
            pass  # already gone (powered off)
        except TimeoutError:
            self._hung()

    def end(self) -> None:
        """Destroyed, the connection let go, and no qemu of this run left (a start given up on at a signal)."""
        from guestbench.backends.libvirt import OPEN_TIMEOUT_S, bounded, kill_orphaned_qemus

        try:
            self.destroy()
            # the domain holds a reference to the connection: libvirt closes it (and AUTODESTROY acts) when the
            # last one goes, which is done on a thread of its own, waited for only while libvirtd answers
            held = [self.dom, self.conn]
            self.dom = self.conn = None
            if self.silent:
                threading.Thread(target=held.clear, name="libvirt-close", daemon=True).start()
            else:
                with contextlib.suppress(TimeoutError):
                    bounded(held.clear, OPEN_TIMEOUT_S)
        finally:  # also when a signal lands in the middle
            kill_orphaned_qemus(self.run_dir)

    def _hung(self) -> str:
        from guestbench.backends.libvirt import kill_orphaned_qemus

        self.silent = True
        return ", ".join(kill_orphaned_qemus(self.run_dir)) or "none found"


def leftover_domains(under: Path | None = None) -> list[str]:
    """Level-1 domains that exist now whose files lie under `under` (None: all), defined or running.

    There should be none between runs; `under` keeps a check to one's own runs on a shared host.
    """
    from guestbench.backends.libvirt import domains_under

    return domains_under(DOMAIN_PREFIX, under)


__all__ = ["GuestError", "JobResult", "run_job", "extract_output", "leftover_domains"]
