"""User-Mode Linux for real: boot, mkfs, uploads and downloads with checksums, shutdown, no leftovers.

The bar from the issue: 256 MiB of random bytes uploaded intact, then 100 further requests of mixed
sizes (8 KiB to 4 MiB uploads, downloads, small calls) all complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import numpy as np
import pytest

from guestbench.backends.appliance import APPLIANCES_DIR, appliance_dir, uml_kernel_version
from guestbench.backends import BACKENDS
from guestbench.host.paths import cache_dir

from helpers.cli import guestbench, write_scenario
from helpers.leaks import processes_mentioning, socket_dirs, wait_no_leftovers
from helpers.session import session_tmp_path

pytestmark = pytest.mark.launch


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for a handle made in this process, and put the old values back."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def uml_processes() -> list[str]:
    # the UML kernel runs from the session's cached appliance (another session's or a user's UML is not ours)
    return processes_mentioning(f"{session_tmp_path() / 'tmp' / APPLIANCES_DIR}/uml-")


@pytest.fixture(scope="module")
def uml_env() -> Iterator[dict[str, str]]:
    av = BACKENDS["uml"].preconditions()
    if not av.usable:
        pytest.fail(f"UML is part of the set-up and must work here: {av.reason}")
    cfg = BACKENDS["uml"].handle_config(cache_dir())
    yield {"hv": cfg.hv or "", **cfg.env}


@contextlib.contextmanager
def uml_handle(uml_env: dict[str, str], tmp_path: Path, **extra_env: str) -> Iterator[Any]:
    """A libguestfs handle configured for the uml backend (not launched), closed on the way out.

    The environment stays set while the handle is in use: the hypervisor program reads it at launch.
    """
    import guestfs

    env = {k: v for k, v in uml_env.items() if k != "hv"}
    env["GUESTBENCH_WORKDIR"] = str(tmp_path)
    env.update(extra_env)
    with environment(env):
        g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
        try:
            g.set_hv(uml_env["hv"])
            g.set_tmpdir(str(tmp_path))
            yield g
        finally:
            g.close()


@pytest.fixture(scope="module")
def appliance(uml_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One UML appliance for the module's last two tests (freshness is not what they prove: one launch fewer); the
    tests before them judge that no UML process of the session is left, so these come last."""
    sockdirs = socket_dirs()
    tmp_path = tmp_path_factory.mktemp("uml")
    with uml_handle(uml_env, tmp_path) as g:
        disk = tmp_path / "disk.raw"
        g.disk_create(str(disk), "raw", 384 * 2**20)
        g.add_drive(str(disk), format="raw")
        g.launch()
        yield g
        g.shutdown()
    wait_no_leftovers(sockdirs)
    assert uml_processes() == [], uml_processes()
    assert [p for p in tmp_path.iterdir() if p.name.startswith("uml-")] == [], "the UML overlay dir is left"


def _random_file(path: Path, size: int, seed: int) -> str:
    data = np.random.default_rng(seed).bytes(size)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_scenario_on_uml(tmp_path: Path) -> None:
    """A scenario on UML with a warm-up kept apart from the samples, in a start-up cell and in a cell whose warm-up
    and sample share one launch. UML's uploads onto a disk: tests/test_soak.py (verified, 5 times); writes to its
    disks: the workloads of tests/test_workload_run.py; E1's measurements on tcg: tests/test_run_tcg.py and
    tests/test_order.py."""
    sc = write_scenario(tmp_path / "u.yaml", """
name: uml-small
repetitions: 1
warmup: 1
cold: false
timeout: 240
appliance: {memsize: 768}
measurements:
  - startup
  - {measurement: upload-no-write, size: 8MiB}
""")
    proc = guestbench("scenario", str(sc), "--backend", "uml", "--results", str(tmp_path / "r"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(next((tmp_path / "r").glob("*.json")).read_text())
    assert doc["backends"]["uml"]["usable"] is True
    assert doc["backends"]["uml"]["details"]["devices"] == "con=none ssl=none pty.legacy_count=0"  # said in results
    for cell in doc["cells"]:
        assert cell["backend"] == "uml"
        assert cell["failures"] == [] and [s["rep"] for s in cell["samples"]] == [1], cell
        assert [w["rep"] for w in cell["warmups"]] == [1], cell  # a warm-up is kept apart from the samples
        if cell["verification"] is not None:
            assert cell["verification"]["ok"] is True
    assert uml_processes() == []


def test_serial_channel_stalls_once_the_guest_tty_throttles(uml_env: dict[str, str], tmp_path: Path) -> None:
    """Why UML needs the virtio channel: on UML's serial line, small requests work, but a transfer that
    fills the guest tty's 4 KiB buffer throttles it, UML 6.x takes the line's fd out of its epoll set
    (line_throttle → deactivate_fd) and unthrottling never puts it back, so later bytes are never read.
    If this test starts failing, the stock UML kernel no longer stalls: re-measure the serial channel."""
    import signal
    import threading
    import time

    sockdirs = socket_dirs()
    with uml_handle(uml_env, tmp_path, GUESTBENCH_UML_CHANNEL="serial") as g:
        g.add_drive_scratch(64 * 2**20)
        g.launch()
        hv_pid = g.get_pid()  # asked now: a stalled call holds the handle's lock, and get_pid would wait on it
        t0 = time.monotonic()
        for _ in range(50):
            g.debug("sh", ["true"])  # small requests: each fits in the tty buffer
        small = time.monotonic() - t0
        g.debug("sh", ["mount -t tmpfs tmpfs /sysroot"])
        src = tmp_path / "p.bin"
        src.write_bytes(os.urandom(1024 * 1024))
        result: dict[str, object] = {}

        def transfer() -> None:
            # the upload throttles the tty; the requests after it are what never arrive
            for i in range(4):
                g.upload(str(src), f"/p{i}")
                for _ in range(10):
                    g.debug("sh", ["true"])

        t = threading.Thread(target=lambda: result.setdefault("r", _try(transfer)))
        t.start()
        t.join(15)  # a working channel does this in seconds (upload tests: MB/s); 15 s without an end is a stall
        stalled = t.is_alive()
        os.kill(hv_pid, signal.SIGKILL)  # the hypervisor program: its guardian kills UML's process group
        t.join(30)
    wait_no_leftovers(sockdirs)
    assert small < 20, f"50 small requests took {small:.1f} s"
    assert stalled, f"4 uploads of 1 MiB and 40 requests over the serial line completed ({result}): no stall"
    assert uml_processes() == []


def _try(fn: Any) -> object:
    try:
        return fn()
    except Exception as e:  # the upload is expected to die with its hypervisor
        return e


def test_boot_mkfs_upload_download_on_uml(appliance: Any, uml_env: dict[str, str], tmp_path: Path) -> None:
    g = appliance
    # guestbench's standard UML appliance: UML's own kernel, without the workload variant's tools
    assert uml_env["LIBGUESTFS_PATH"] == str(appliance_dir("uml"))
    release, fio = g.debug("sh", ["uname -r; command -v fio || echo no-fio"]).split()
    assert release == uml_kernel_version() and release.startswith("6.") and fio == "no-fio"
    # the tty devices of libguestfs's qemu appliance, no more: the console, no serial line (the daemon's channel is
    # virtio), no legacy pty (backends/uml/channel.py DEVICES: udev handled ~580 more at every boot, half of start-up)
    assert g.debug("sh", ["ls /sys/class/tty"]).split() == ["console", "ptmx", "tty", "tty0"]
    g.mkfs("ext2", "/dev/sda")
    g.mount("/dev/sda", "/")
    src = tmp_path / "up.bin"
    digest = _random_file(src, 6 * 2**20 + 12345, 1)
    g.upload(str(src), "/up.bin")
    assert g.checksum("sha256", "/up.bin") == digest
    back = tmp_path / "down.bin"
    g.download("/up.bin", str(back))
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest


def test_256mib_then_100_mixed_requests(appliance: Any, tmp_path: Path) -> None:
    g = appliance
    g.umount_all()  # the appliance the test before used: a fresh filesystem
    g.mkfs("ext2", "/dev/sda")
    g.mount("/dev/sda", "/")
    big = tmp_path / "big.bin"
    digest = _random_file(big, 256 * 2**20, 2)
    g.upload(str(big), "/big.bin")
    assert g.checksum("sha256", "/big.bin") == digest
    big.unlink()
    g.rm("/big.bin")
    rng = random.Random(3)
    done = 0
    for i in range(100):
        kind = i % 3
        if kind == 0:
            size = rng.randint(8 * 2**10, 4 * 2**20)
            f = tmp_path / "m.bin"
            d = _random_file(f, size, 100 + i)
            g.upload(str(f), f"/m{i}")
            assert g.checksum("sha256", f"/m{i}") == d
        elif kind == 1:
            target = f"/m{i - 1}"
            out = tmp_path / "d.bin"
            g.download(target, str(out))
            assert out.stat().st_size == g.filesize(target)
        else:
            g.touch(f"/t{i}")
            assert g.exists(f"/t{i}")
        done += 1
    assert done == 100
