"""The qemu → UML command-line translation, on the command line libguestfs 1.48 really gives qemu."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from guestbench.backends.uml.hv import TranslateError, parse, uml_command

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
    assert "ubd0=/work/a,b/disk.raw" in argv
    assert f"ubd1={tmp_path / 'appliance.cow'},/cache/uml-appliance/abc/root" in argv
    assert "root=/dev/ubdb" in argv and "rw" in argv and "console=tty0" in argv
    assert "virtio_uml.device=/x/vhost.sock:3" in argv
    assert "con0=fd:0,fd:1" in argv and "con=null" in argv and "ssl=null" in argv
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
    spelled = f"file.file.filename={overlay},file.driver=qcow2,file.backing.file.locking=off,cache=unsafe,id=hd0,if=none"
    return [spelled if a.startswith("file=/work/a") else a for a in QEMU_ARGS]


def test_an_empty_overlay_over_a_raw_image_becomes_a_uml_cow_file(tmp_path: Path) -> None:
    raw = tmp_path / "disk.raw"
    raw.write_bytes(b"\1" * 3 * 2**20 + b"\2" * 100)  # not a whole number of sectors: qemu rounds it up
    overlay = tmp_path / "overlay1.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(raw), "-F", "raw", str(overlay)],
                   check=True, timeout=60)
    launch = parse(_overlay_args(overlay))
    assert (launch.drives[0].path, launch.drives[0].backing) == (str(overlay), str(raw))
    argv = uml_command(launch, tmp_path, "virtio", None, "/x/vhost.sock")
    assert f"ubd0={tmp_path / 'drive0.cow'},{raw}" in argv  # guest writes go to the COW file, never the image
    # ...an overlay that holds zeroes or data of its own is refused, with the reason
    for write in ("write -z 0 64k", "write -P 7 64k 64k"):
        subprocess.run(["qemu-io", "-c", write, str(overlay)], check=True, capture_output=True, timeout=60)
        with pytest.raises(TranslateError, match=r"raw images only, not qcow2 .*holds data \(or zeroes\) of its own"):
            parse(_overlay_args(overlay))


def test_other_qcow2_is_refused_with_a_reason(tmp_path: Path) -> None:
    standalone = tmp_path / "own.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(standalone), "16M"], check=True, timeout=60)
    args = [a.replace("file=/work/a,,b/disk.raw", f"file={standalone}").replace("format=raw,id=hd0", "format=qcow2,id=hd0")
            for a in QEMU_ARGS]
    with pytest.raises(TranslateError, match="raw images only, not qcow2 .*no backing file"):
        parse(args)
    args = [a.replace("format=raw,id=hd0", "format=vmdk,id=hd0") for a in QEMU_ARGS]
    with pytest.raises(TranslateError, match="raw images only, not vmdk"):
        parse(args)


def test_probe_invocations_are_not_launches() -> None:
    with pytest.raises(TranslateError, match="no -kernel"):
        parse(["-machine", "none", "-device", "?"])


def test_concurrent_uml_guests_are_pinned_to_different_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """UML is pinned to one host CPU; two guests at once (concurrency: 2) must not share it."""
    import os

    from guestbench.backends.uml import hv
    from guestbench.host.paths import INSTANCE_ENV

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: UML is not pinned at all")
    chosen = []
    for instance in ("1", "2", str(len(cpus) + 1)):
        monkeypatch.setenv(INSTANCE_ENV, instance)
        chosen.append(hv.uml_cpu())
    assert chosen[0] == cpus[-1] and chosen[1] == cpus[-2]  # guest 2 on another CPU than guest 1
    assert chosen[2] == cpus[-1]  # more guests than CPUs: round robin
    monkeypatch.delenv(INSTANCE_ENV)
    assert hv.uml_cpu() == cpus[-1]  # a lone appliance, as before
