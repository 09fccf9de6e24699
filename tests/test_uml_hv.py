"""The qemu → UML command-line translation, on the command line libguestfs 1.48 really gives qemu."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from guestbench.backends.uml.drives import AUTO, UBD, VHOST_USER_BLK, choose, drive, kv, unguarded
from guestbench.backends.uml.hv import Launch, TranslateError, parse, uml_command
from guestbench.backends.uml.storage_daemon import export, nodes

QEMU_ARGS = [
    "-global", "virtio-blk-pci.scsi=off", "-no-user-config", "-nodefaults", "-display", "none",
    "-machine", "accel=tcg", "-cpu", "max,la57=off", "-m", "768", "-no-reboot", "-rtc", "driftfix=slew",
    "-no-hpet", "-global", "kvm-pit.lost_tick_policy=discard",
    "-kernel", "/cache/uml-appliance/abc/kernel", "-initrd", "/cache/uml-appliance/abc/initrd",
    "-object", "rng-random,filename=/dev/urandom,id=rng0", "-device", "virtio-rng-pci,rng=rng0",
    "-device", "virtio-scsi-pci,id=scsi",
    "-drive", "file=/work/a,,b/disk.raw,cache=writeback,format=raw,id=hd0,if=none", "-device", "scsi-hd,drive=hd0",
    "-drive", "file=/cache/uml-appliance/abc/root,snapshot=on,id=appliance,cache=unsafe,if=none,format=raw",
    "-device", "scsi-hd,drive=appliance", "-device", "virtio-serial-pci", "-serial", "stdio",
    "-chardev", "socket,path=/tmp/libguestfsAbCdEf/guestfsd.sock,id=channel0",
    "-device", "virtserialport,chardev=channel0,name=org.libguestfs.channel.0",
    "-append", "panic=1 console=ttyS0 edd=off udevtimeout=6000 udev.event-timeout=6000 no_timer_check "
               "lpj=10384520 printk.time=1 cgroup_disable=memory usbcore.nousb cryptomgr.notests tsc=reliable "
               "8250.nr_uarts=1 root=UUID=e1b7e273-b56b-43be-84f6-4419e1faeec9 selinux=0 quiet TERM=xterm",
]


def test_parse_reads_what_libguestfs_asked_for() -> None:
    launch = parse(QEMU_ARGS)
    assert launch.kernel == "/cache/uml-appliance/abc/kernel"
    assert launch.memory_mib == 768
    assert launch.channel_socket == "/tmp/libguestfsAbCdEf/guestfsd.sock"
    assert [(d.path, d.appliance) for d in launch.drives] == [("/work/a,b/disk.raw", False),
                                                            ("/cache/uml-appliance/abc/root", True)]


def test_virtio_command_line(tmp_path: Path) -> None:
    argv = uml_command(parse(QEMU_ARGS), tmp_path, "virtio", None, "/x/vhost.sock")
    assert argv[0] == "/cache/uml-appliance/abc/kernel"
    assert "mem=768M" in argv
    assert "ubd0d=/work/a,b/disk.raw" in argv  # d: data only, never a COW header read from the image
    assert f"ubd1={tmp_path / 'appliance.cow'},/cache/uml-appliance/abc/root" in argv
    assert "root=/dev/ubdb" in argv and "rw" in argv and "console=tty0" in argv
    assert "virtio_uml.device=/x/vhost.sock:3" in argv
    # the console line, configured after every line's "none"; the guest's devices: test_uml (a real UML guest)
    assert argv.index("con0=fd:0,fd:1") > argv.index("con=none") and "ssl=none" in argv
    # libguestfs's own options stay; the ones that mean nothing to UML go
    assert "selinux=0" in argv and "quiet" in argv and "TERM=xterm" in argv
    assert not any(a.startswith(("root=UUID", "console=ttyS0", "lpj=", "8250.")) for a in argv)
    assert not any(a.startswith("guestfs_channel=") for a in argv)  # guestfsd's default port name is used


def test_serial_command_line(tmp_path: Path) -> None:
    argv = uml_command(parse(QEMU_ARGS), tmp_path, "serial", 7, None)
    assert "ssl3=fd:7" in argv and "guestfs_channel=/dev/ttyS3" in argv
    assert not any(a.startswith("virtio_uml.device") for a in argv)


def _overlay_args(overlay: Path) -> list[str]:
    """QEMU_ARGS with the data drive spelled as libguestfs spells its overlay of a read-only drive."""
    spelled = (f"file.file.filename={overlay},file.driver=qcow2,file.backing.file.locking=off,cache=unsafe,id=hd0,"
               "if=none")
    return [spelled if a.startswith("file=/work/a") else a for a in QEMU_ARGS]


def _chosen(args: list[str], wanted: str = AUTO) -> Launch:
    launch = parse(args)
    choose(launch.drives, wanted)
    return launch


def test_an_empty_overlay_over_a_raw_image_becomes_a_uml_cow_file_on_ubd(tmp_path: Path) -> None:
    raw = tmp_path / "disk.raw"
    raw.write_bytes(b"\1" * 3 * 2**20 + b"\2" * 100)  # not a whole number of sectors: qemu rounds it up
    overlay = tmp_path / "overlay1.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(raw), "-F", "raw", str(overlay)],
                   check=True, timeout=60)
    launch = _chosen(_overlay_args(overlay), UBD)
    assert (launch.drives[0].path, launch.drives[0].backing, launch.drives[0].route) == (str(overlay), str(raw), UBD)
    argv = uml_command(launch, tmp_path, "virtio", None, "/x/vhost.sock")
    assert f"ubd0={tmp_path / 'drive0.cow'},{raw}" in argv  # guest writes go to the COW file, never the image
    assert "guestbench.virtio_blk=1" not in argv
    # ...an overlay that holds zeroes or data of its own: ubd refuses it, saying why
    for write in ("write -z 0 64k", "write -P 7 64k 64k"):
        subprocess.run(["qemu-io", "-c", write, str(overlay)], check=True, capture_output=True, timeout=60)
        with pytest.raises(TranslateError, match=r"cannot take .*overlay1.qcow2 \(a qcow2 overlay holding data of "
                                                 r"its own\); GUESTBENCH_UML_DRIVES=ubd asked for it alone"):
            _chosen(_overlay_args(overlay), UBD)


def test_drives_take_vhost_user_blk_unless_ubd_is_asked_for(tmp_path: Path) -> None:
    assert [d.route for d in _chosen(QEMU_ARGS).drives] == [VHOST_USER_BLK, UBD]  # the appliance's root: ubd
    assert [d.route for d in _chosen(QEMU_ARGS, VHOST_USER_BLK).drives] == [VHOST_USER_BLK, UBD]
    assert [d.route for d in _chosen(QEMU_ARGS, UBD).drives] == [UBD, UBD]
    standalone = tmp_path / "own.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(standalone), "16M"], check=True, timeout=60)
    args = [a.replace("file=/work/a,,b/disk.raw", f"file={standalone}")
            .replace("format=raw,id=hd0", "format=qcow2,id=hd0") for a in QEMU_ARGS]
    with pytest.raises(TranslateError, match="cannot take .*own.qcow2 \\(qcow2 with no backing file\\)"):
        _chosen(args, UBD)
    with pytest.raises(TranslateError, match="cannot take /work/a,b/disk.raw \\(vmdk, not raw\\)"):
        _chosen([a.replace("format=raw,id=hd0", "format=vmdk,id=hd0") for a in QEMU_ARGS], UBD)
    # a block size: ubd has none to give; vhost-user-blk shows it
    sized = [a.replace("scsi-hd,drive=hd0", "scsi-hd,drive=hd0,physical_block_size=4096,logical_block_size=4096")
             for a in QEMU_ARGS]
    launch = _chosen(sized)
    assert (launch.drives[0].blocksize, launch.drives[0].route) == (4096, VHOST_USER_BLK)
    with pytest.raises(TranslateError, match="cannot take /work/a,b/disk.raw \\(a block size of 4096 bytes\\)"):
        _chosen(sized, UBD)
    argv = uml_command(launch, tmp_path, "virtio", None, "/x/vhost.sock", disk_sockets={0: "/x/disk0.sock"})
    assert "virtio_uml.device=/x/disk0.sock:2" in argv and "guestbench.virtio_blk=1" in argv
    assert not any(a.startswith("ubd0") for a in argv) and "root=/dev/ubdb" in argv
    with pytest.raises(TranslateError, match="GUESTBENCH_UML_DRIVES='nvme': allowed auto, ubd, vhost-user-blk"):
        _chosen(sized, "nvme")


def test_a_formatless_writable_raw_drive_is_warned_of_and_a_label_or_write_through_is_refused(tmp_path: Path) -> None:
    """qemu guards a probed raw image's first sector against a guest that would make it look like another format;
    neither of UML's paths can, so such a drive is warned of (once, on the console). Disk labels and write-through
    cache modes cannot reach UML's disks: refused, saying why."""
    raw = tmp_path / "noformat.img"
    raw.write_bytes(bytes(2**20))
    formatless = _chosen([a.replace("file=/work/a,,b/disk.raw,cache=writeback,format=raw",
                                    f"file={raw},cache=writeback") for a in QEMU_ARGS])
    assert [d.route for d in formatless.drives] == [VHOST_USER_BLK, UBD]
    [warning] = unguarded(formatless.drives)
    assert warning.startswith(f"drive {raw} was added without a format and probes as raw") and "format=raw" in warning
    assert unguarded(_chosen(QEMU_ARGS).drives) == []  # a format given: nothing to say, nothing probed
    labelled = [a.replace("scsi-hd,drive=hd0", "scsi-hd,drive=hd0,serial=boot") for a in QEMU_ARGS]
    with pytest.raises(TranslateError, match="has the label 'boot': UML's disks cannot carry one"):
        _chosen(labelled)
    through = [a.replace("cache=writeback,format=raw", "cache=directsync,format=raw") for a in QEMU_ARGS]
    with pytest.raises(TranslateError, match="cache mode directsync of drive /work/a,b/disk.raw cannot reach UML"):
        _chosen(through)
    assert [d.route for d in _chosen(through, UBD).drives] == [UBD, UBD]


def test_storage_daemon_opens_each_drive_as_qemu_would(tmp_path: Path) -> None:
    """The block nodes qemu-storage-daemon is given: libguestfs's overlay with its backing file unlocked and
    read-only, the cache mode, NBD addresses; a protocol guestbench does not serve is refused with the ones it does."""
    raw = tmp_path / "disk.raw"
    raw.write_bytes(bytes(2**20))
    overlay = tmp_path / "overlay1.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(raw), "-F", "raw", str(overlay)],
                   check=True, timeout=60)
    d = parse(_overlay_args(overlay)).drives[0]
    node = nodes(d, 0, tmp_path)
    assert node["driver"] == "qcow2" and node["file"]["filename"] == str(overlay)
    assert node["cache"] == {"direct": False, "no-flush": True}  # cache=unsafe
    assert node["backing"]["file"] == {"driver": "file", "filename": str(raw), "locking": "off", "read-only": True,
                                       "cache": {"direct": False, "no-flush": True}}
    assert export(d, 0, "/x/d.sock")["writable"] is True and "logical-block-size" not in export(d, 0, "/x/d.sock")
    assert node["file"]["auto-read-only"] is True  # as qemu's -drive: what can only be read opens read-only
    cor = drive(kv(f"file={raw},cache=none,format=raw,copy-on-read=on,discard=unmap,id=hd0,if=none"))
    assert nodes(cor, 2, tmp_path)["driver"] == "copy-on-read" and nodes(cor, 2, tmp_path)["discard"] == "unmap"
    assert export(drive(kv("file=https://h/d.img,format=raw,id=hd0,if=none")), 3, "/x/e.sock")["writable"] is False
    nbd = drive(kv("file=nbd:unix:/run/n.sock:exportname=disk,cache=none,format=raw,id=hd0,if=none"))
    assert nodes(nbd, 1, tmp_path)["file"] == {"driver": "nbd", "server": {"type": "unix", "path": "/run/n.sock"},
                                               "export": "disk", "cache": {"direct": True, "no-flush": False},
                                               "read-only": False, "auto-read-only": True}
    iscsi = drive(kv("file=iscsi://h/iqn.x/0,format=raw,id=hd0,if=none"))
    with pytest.raises(TranslateError,
                       match="the iscsi drive iscsi://h/iqn.x/0 cannot reach UML: guestbench serves file, nbd, http"):
        nodes(iscsi, 0, tmp_path)


def test_probe_invocations_are_not_launches() -> None:
    with pytest.raises(TranslateError, match="no -kernel"):
        parse(["-machine", "none", "-device", "?"])


def test_concurrent_uml_guests_are_pinned_to_different_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """UML is pinned to one host CPU; two guests at once (concurrency: 2) must not share it, and a guest that another
    run (another worker, a fleet worker on this machine) already pinned takes its CPU out of the choice."""
    import os
    from collections import Counter

    from guestbench.backends.uml import pinning as hv
    from guestbench.host.paths import INSTANCE_ENV, WORKDIR_ENV

    monkeypatch.delenv(WORKDIR_ENV, raising=False)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: UML is not pinned at all")
    chosen = []
    for instance in ("1", "2", str(len(cpus) + 1)):
        monkeypatch.setenv(INSTANCE_ENV, instance)
        chosen.append(hv.uml_cpu(Counter()))
    assert chosen[0] == cpus[-1] and chosen[1] == cpus[-2]  # guest 2 on another CPU than guest 1
    assert chosen[2] == cpus[-1]  # more guests than CPUs: round robin
    monkeypatch.delenv(INSTANCE_ENV)
    assert hv.uml_cpu(Counter()) == cpus[-1]  # a lone appliance, as before
    assert hv.uml_cpu(Counter({cpus[-1]: 1})) == cpus[-2]  # ... unless another run's guest is pinned there
    assert hv.uml_cpu(Counter({cpus[-1]: 2, cpus[-2]: 1})) == (cpus[0] if len(cpus) > 2 else cpus[-2])
    assert hv.uml_cpu(Counter({c: 1 for c in cpus})) == cpus[-1]  # all taken alike: the instance's own
    # runs starting guests at the same moment (none sees the other's yet) start their rounds at CPUs of their own;
    # within a run, concurrent guests still take different CPUs
    firsts = set()
    for run in range(16):
        monkeypatch.setenv(WORKDIR_ENV, f"/var/lib/guestbench/tmp/guestbench-run-{run}/startup-uml-1")
        pair = []
        for instance in ("1", "2"):
            monkeypatch.setenv(INSTANCE_ENV, instance)
            pair.append(hv.uml_cpu(Counter()))
        assert pair[0] != pair[1]
        firsts.add(pair[0])
    assert len(firsts) > 1, firsts  # not every run on one CPU


def test_pinned_guests_are_counted_by_their_first_process(tmp_path: Path) -> None:
    """A real process tree named as a UML binary, pinned and in a session of its own as UML is: its leader counts,
    its children (a UML guest's own processes) do not, and an unpinned one does not."""
    import contextlib
    import os
    import shutil
    import signal

    from guestbench.backends.uml import pinning as hv

    cpus = sorted(os.sched_getaffinity(0))
    name = f"gbpin{os.getpid()}"[:15]
    binary = tmp_path / name
    shutil.copy("/bin/sh", binary)
    stay = "sleep 300; true"  # not exec'd: the shell stays, with its name
    script = f"{binary} -c '{stay}' & {binary} -c '{stay}' & wait"  # two children of the same name
    if not shutil.which("taskset"):
        pytest.skip("no taskset here: UML is not pinned at all")
    started: list[subprocess.Popen[bytes]] = []
    try:
        pinned = subprocess.Popen(["taskset", "-c", str(cpus[0]), str(binary), "-c", script], start_new_session=True)
        started.append(pinned)
        loose = subprocess.Popen([str(binary), "-c", stay], start_new_session=True,
                                 preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        started.append(loose)
        deadline = time.monotonic() + 30
        while not _settled(name) and time.monotonic() < deadline:  # each of the 3 shells in its sleep
            time.sleep(0.05)
        assert len(_named(name)) == 4, _named(name)
        assert hv.pinned_guests(name) == ({cpus[0]: 1} if len(cpus) > 1 else {cpus[0]: 2})
        children = [pid for pid in _named(name) if pid not in (pinned.pid, loose.pid)]
        pinned.kill()  # a guest killed: its processes linger a moment, orphaned, in its session; not a guest
        pinned.wait()
        assert set(children) <= set(_named(name)) and len(children) == 2, (children, _named(name))
        assert hv.pinned_guests(name) == ({} if len(cpus) > 1 else {cpus[0]: 1})
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader
            proc.wait()


def _settled(comm: str) -> bool:
    """Four processes named `comm`, three of them each waiting in its sleep: none forking any more."""
    from guestbench.host import procs

    named = _named(comm)
    sleeping = [pid for pid in procs.pids() if procs.proc_comm(pid) == "sleep"
                and (st := procs.stat(pid)) is not None and st.ppid in named]
    return len(named) == 4 and len(sleeping) == 3


def _named(comm: str) -> list[int]:
    from guestbench.host import procs

    return [pid for pid in procs.pids() if procs.proc_comm(pid) == comm]


def test_a_guests_cpu_choice_is_held_until_its_uml_runs_and_the_next_guest_takes_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pin, as the hypervisor program uses it, with a real pinned process standing in for UML: the choice's lock is
    held from the choice until the process runs under UML's name, then let go; the next guest, seeing it, takes
    another CPU. Without taskset, or with no lock to be had, a guest is never failed for it."""
    import contextlib
    import fcntl
    import os
    import shutil
    import signal

    from guestbench.backends.uml import pinning
    from guestbench.host.paths import INSTANCE_ENV, WORKDIR_ENV

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not shutil.which("taskset"):
        pytest.skip("one CPU or no taskset: UML is not pinned at all")
    for name in (INSTANCE_ENV, WORKDIR_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GUESTBENCH_CACHE", str(tmp_path / "cache"))
    binary = tmp_path / f"gbchoose{os.getpid()}"[:15]
    shutil.copy("/bin/sh", binary)
    lock = tmp_path / "cache" / "uml-cpu.lock"

    def held() -> bool:
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return False
            except BlockingIOError:
                return True

    started: list[subprocess.Popen[bytes]] = []
    try:
        with pinning.pinned(str(binary)) as first:
            assert first.cpu == cpus[-1] and held()
            proc = subprocess.Popen(first.command([str(binary), "-c", "sleep 300; true"]), start_new_session=True)
            started.append(proc)
            first.started(proc)
            assert not held() and pinning.procs.proc_comm(proc.pid) == binary.name
        assert os.stat(lock).st_mode & 0o777 == 0o600
        with pinning.pinned(str(binary)) as second:
            assert second.cpu == cpus[-2]  # the first guest's CPU is taken
        monkeypatch.setenv("PATH", str(tmp_path / "no-such-dir"))
        with pinning.pinned(str(binary)) as third:  # no taskset: UML runs unpinned, not refused
            assert third.cpu is None and third.command(["x"]) == ["x"]
    finally:
        for p in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.parametrize(("connected", "signalled"), [(False, []), (True, [15])], ids=["never-connected", "sigterm"])
def test_the_relay_is_stopped_at_once_when_uml_never_connected_or_libguestfs_ended_it(connected: bool,
                                                                                      signalled: list[int]) -> None:
    """After UML has gone the hypervisor program waits for the vhost relay's drain (what a guest that powered off
    right after writing still has to send), but not for a relay still waiting for a UML that died before it
    connected, nor once libguestfs has asked for the end: those are stopped at once (a drain of 600 s here)."""
    import threading
    from types import SimpleNamespace

    from guestbench.backends.uml.hv import _end_relay

    stop = threading.Event()
    relay = threading.Thread(target=stop.wait)  # a server that serves until it is told to stop
    relay.start()
    t0 = time.monotonic()
    _end_relay(relay, SimpleNamespace(connected=connected), stop, signalled, drain_s=600.0)
    assert stop.is_set() and not relay.is_alive() and time.monotonic() - t0 < 60


def test_a_relay_that_ends_by_itself_is_waited_for_before_the_channel_closes() -> None:
    """The drain's end: the relay ends by itself (its bytes sent) and only then is the channel closed."""
    import threading
    from types import SimpleNamespace

    from guestbench.backends.uml.hv import _end_relay

    stop, drained, ended_by = threading.Event(), threading.Event(), []

    def serve() -> None:  # draining until the peer has read it all, or until told to stop
        while not drained.wait(0.01) and not stop.is_set():
            pass
        ended_by.append("drained" if drained.is_set() else "stop")

    relay = threading.Thread(target=serve)
    relay.start()
    threading.Timer(0.3, drained.set).start()  # the peer reads the rest
    _end_relay(relay, SimpleNamespace(connected=True), stop, [], drain_s=600.0)
    assert ended_by == ["drained"] and not relay.is_alive()


def test_the_backend_never_imports_the_program_it_runs_with_python_m() -> None:
    """runpy warns into the console log users read (`exec -v`) when `python -m guestbench.backends.uml.hv` finds the
    module already imported by its package: what both share lives in channel.py (CI at 5551e4a: test_exec caught it)."""
    import sys

    code = ("import sys, guestbench.backends, guestbench.backends.uml; "
            "print('guestbench.backends.uml.hv' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
