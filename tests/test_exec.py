"""libguestfs's own programs on guestbench's backends: `guestbench env` and `guestbench exec` for real, with
libguestfs-test-tool, guestfish and the virt-* tools, on uml (read-only drives through a UML COW file), tcg and
libvirt-tcg; the image a read-only tool looked at keeps its bytes, and a killed command leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from guestbench.backends.libvirt import guestfs_domains
from guestbench.storage.image import DATA_DIR, ImageSpec, make_image, sha256

from helpers.cli import guestbench, start_guestbench
from helpers.leaks import hypervisor_processes, processes_mentioning, socket_dirs, wait_no_leftovers
from helpers.session import session_tmp_path

pytestmark = pytest.mark.launch


@pytest.fixture(scope="module")
def os_image() -> Path:
    """A small ext4 image that libguestfs's inspection takes for Debian 12, with 5 files under /srv/data; in
    the session's directory, which libvirt's qemu user can reach (pytest's tmp_path is private to root)."""
    d = session_tmp_path() / "exec-images"
    d.mkdir(mode=0o755, exist_ok=True)
    return make_image(d / "os.img", ImageSpec(size=64 * 2**20, files=5))


def gb_exec(backend: str, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return guestbench("exec", backend, "--", *argv, timeout=timeout)


def test_env_prints_exports_that_a_shell_can_use() -> None:
    proc = guestbench("env", "uml")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(ln.startswith("export ") for ln in lines), lines
    names = {ln.split()[1].split("=", 1)[0] for ln in lines}
    assert {"LIBGUESTFS_BACKEND", "LIBGUESTFS_HV", "LIBGUESTFS_PATH"} <= names
    shell = subprocess.run(["sh", "-c", proc.stdout + 'test -x "$LIBGUESTFS_HV" && test -f "$LIBGUESTFS_PATH/root" '
                            '&& echo "$LIBGUESTFS_BACKEND"'], capture_output=True, text=True, timeout=30)
    assert shell.stdout.strip() == "direct", shell.stderr
    tcg = guestbench("env", "tcg")
    assert tcg.returncode == 0, tcg.stderr
    # after uml's lines, tcg's leave nothing of uml's behind: the next launch is qemu (through guestbench's
    # wrapper, which adds the watch's QMP socket), not UML
    shell = subprocess.run(["sh", "-c", proc.stdout + tcg.stdout + 'echo "${LIBGUESTFS_HV-unset} '
                            '${LIBGUESTFS_PATH-unset} $LIBGUESTFS_BACKEND_SETTINGS"'], capture_output=True, text=True,
                           timeout=30)
    hv, path, settings = shell.stdout.split()
    assert hv.endswith("/hv/qemu") and path == "unset" and settings == "force_tcg", (tcg.stdout, shell.stderr)
    assert "qemu-system-x86_64" in Path(hv).read_text(), "tcg's program is guestbench's qemu wrapper, not UML's"
    bad = guestbench("env", "nosuch")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "allowed: tcg" in bad.stderr


@pytest.mark.timeout(900)
@pytest.mark.parametrize("drives", ["ubd", "vhost-user-blk"])
def test_virt_tools_on_uml_leave_a_read_only_image_untouched(drives: str, os_image: Path, tmp_path: Path,
                                                             no_leftovers: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """On each way UML's drives go (GUESTBENCH_UML_DRIVES); libguestfs-test-tool: on tcg below (the same exec path);
    virt-make-fs: make test-long."""
    monkeypatch.setenv("GUESTBENCH_UML_DRIVES", drives)
    before = sha256(os_image)
    # one launch, two drives: a read-only one is writable through its overlay (the writes land in UML's COW file);
    # a writable one, a copy of the image, takes guestfish's upload (virt-ls on uml: tests/test_command.py)
    copy = tmp_path / "copy.img"
    shutil.copy(os_image, copy)
    payload = tmp_path / "payload"
    payload.write_bytes(os.urandom(8 * 2**20))
    both = gb_exec("uml", "guestfish", "-v", "add-ro", str(os_image), ":", "add", str(copy), ":", "run", ":",
                   "mount", "/dev/sda", "/", ":", "cat", "/etc/hostname", ":", "ls", "/" + DATA_DIR, ":",
                   "write", "/tmp/scratch", "written", ":", "cat", "/tmp/scratch", ":", "umount", "/", ":",
                   "mount", "/dev/sdb", "/", ":", "upload", str(payload), "/srv/payload", ":",
                   "checksum", "sha256", "/srv/payload")
    assert both.returncode == 0, both.stderr[-2000:]
    # the verbose console of an ordinary UML launch (-v prints it all) carries no Python warning
    assert "Linux version" in both.stderr and "RuntimeWarning" not in both.stdout + both.stderr, both.stderr[-2000:]
    assert f"{copy} via {drives}" in both.stderr  # the hypervisor program's account of where each drive went
    words = both.stdout.split()
    assert [w for w in words if w.endswith(".txt")] == [f"file{i:05d}.txt" for i in range(5)], both.stdout
    assert [w for w in words if not w.endswith(".txt")] == ["guestbench-image", "written", sha256(payload)], both.stdout
    assert sha256(os_image) == before  # read-only drives: the writes went to a COW file or overlay, never the image
    assert payload.read_bytes()[:1024] in copy.read_bytes()  # the writable drive took the upload (one block)


def _made_fs(tmp_path: Path) -> tuple[Path, Path]:
    """A small source tree, and the ext4 image virt-make-fs made of it on uml (a writable drive)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.txt").write_text("beta\n")
    made = tmp_path / "made.img"
    mk = gb_exec("uml", "virt-make-fs", "--type=ext4", "--size=+16M", str(src), str(made))
    assert mk.returncode == 0, mk.stderr[-2000:]
    return src, made


# more tools on the paths above (read-only overlay, writable drive): 1 min; make soak-tools times virt-cat
@pytest.mark.long
@pytest.mark.timeout(900)
def test_more_virt_tools_on_uml(os_image: Path, tmp_path: Path, no_leftovers: None) -> None:
    before = sha256(os_image)
    cat = gb_exec("uml", "virt-cat", "-a", str(os_image), f"/{DATA_DIR}/file00003.txt")
    assert cat.returncode == 0 and cat.stdout == "guestbench file 3\n" * 4, cat.stderr[-2000:]
    df = gb_exec("uml", "virt-df", "-a", str(os_image))
    assert df.returncode == 0 and "/dev/sda" in df.stdout, df.stderr[-2000:]
    src, made = _made_fs(tmp_path)
    assert made.stat().st_size > 16 * 2**20
    back = gb_exec("uml", "virt-cat", "-a", str(made), "-m", "/dev/sda", "/sub/b.txt")
    assert back.returncode == 0 and back.stdout == "beta\n", back.stderr[-2000:]
    copy = tmp_path / "copy.img"
    shutil.copy(os_image, copy)
    archive = tmp_path / "in.tar"
    with tarfile.open(archive, "w") as t:
        t.add(src, arcname=".")
    tin = gb_exec("uml", "virt-tar-in", "-a", str(copy), str(archive), "/root")
    assert tin.returncode == 0, tin.stderr[-2000:]
    out = tmp_path / "out.tar"
    tout = gb_exec("uml", "virt-tar-out", "-a", str(copy), "/root", str(out))
    assert tout.returncode == 0, tout.stderr[-2000:]
    with tarfile.open(out) as t:
        assert {"./a.txt", "./sub/b.txt"} <= set(t.getnames())
        member = t.extractfile("./a.txt")
        assert member is not None and member.read() == b"alpha\n"
    assert sha256(os_image) == before


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["uml", "tcg"])
def test_a_qcow2_with_a_backing_file_and_a_4096_byte_block_size(backend: str, os_image: Path, tmp_path: Path,
                                                                 no_leftovers: None) -> None:
    """What a cloud image and a 4Kn disk need, on uml (through qemu-storage-daemon's vhost-user-blk) as on tcg: a
    qcow2 overlay over the OS image is read and written (the writes stay in the overlay, the image keeps its bytes,
    qemu-img check finds the overlay sound), a drive added with blocksize 4096 shows 4096-byte sectors, and the
    drives keep libguestfs's names (/dev/sda, /dev/sdb)."""
    before = sha256(os_image)
    top = tmp_path / "top.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(os_image), str(top)],
                   check=True, timeout=60)
    scratch = tmp_path / "4k.raw"
    scratch.write_bytes(b"")
    os.truncate(scratch, 32 * 2**20)
    script = (f"add {top} format:qcow2\nadd {scratch} format:raw blocksize:4096\nrun\nlist-devices\n"
              "blockdev-getss /dev/sda\nblockdev-getss /dev/sdb\nmount /dev/sda /\n"
              f"cat /{DATA_DIR}/file00003.txt\nwrite /{DATA_DIR}/new.txt written-on-{backend}\numount-all\n")
    (tmp_path / "script.gf").write_text(script)
    proc = gb_exec(backend, "guestfish", "-f", str(tmp_path / "script.gf"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert lines[:4] == ["/dev/sda", "/dev/sdb", "512", "4096"], proc.stdout[:500]
    assert "\n".join(lines[4:8]) == ("guestbench file 3\n" * 4).strip()  # the backing file's, through the overlay
    assert sha256(os_image) == before
    check = subprocess.run(["qemu-img", "check", "-q", str(top)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    extents = json.loads(subprocess.run(["qemu-img", "map", "--output=json", str(top)], capture_output=True,
                                        text=True, timeout=60, check=True).stdout)
    assert any(e["depth"] == 0 and e["data"] for e in extents), "the guest's writes are in the overlay"
    back = gb_exec(backend, "guestfish", "--ro", "--format=qcow2", "-a", str(top), "-m", "/dev/sda", "cat",
                   f"/{DATA_DIR}/new.txt")
    assert back.stdout.strip() == f"written-on-{backend}", back.stderr[-2000:]


@pytest.mark.timeout(900)
# libvirt-tcg (its two launches through libvirtd: 1.5 min here) runs in make test-long; libvirt launches are in
# the suite through tests/test_appliance.py, tests/test_signals.py and tests/test_faults.py
@pytest.mark.parametrize("backend", ["tcg", pytest.param("libvirt-tcg", marks=pytest.mark.long)])
def test_libguestfs_test_tool_and_virt_ls_on_qemu_backends(backend: str, os_image: Path, no_leftovers: None) -> None:
    """A libguestfs program on each qemu backend (through the environment the command measurement uses too:
    tests/test_command.py times virt-ls on uml); virt-ls through libvirt, which opens the overlay libguestfs puts
    over the read-only image as libvirt's qemu user."""
    proc = gb_exec(backend, "libguestfs-test-tool")
    assert proc.returncode == 0 and "TEST FINISHED OK" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    if backend == "libvirt-tcg":
        before = sha256(os_image)
        ls = gb_exec(backend, "virt-ls", "-a", str(os_image), "/" + DATA_DIR)
        assert ls.returncode == 0 and "file00004.txt" in ls.stdout.split(), ls.stderr[-2000:]
        assert sha256(os_image) == before
        assert not guestfs_domains(session_tmp_path())  # this session's: another worker may be running its own


@pytest.mark.timeout(600)
def test_a_command_past_its_timeout_or_sigterm_is_killed_with_everything_it_started(os_image: Path) -> None:
    before = socket_dirs()
    hang = ["guestfish", "--ro", "-a", str(os_image), "run", ":", "debug", "sh", "sleep 900"]
    proc = guestbench("exec", "--timeout", "15", "uml", "--", *hang, timeout=300)
    assert proc.returncode == 124, proc.stderr[-2000:]
    assert "did not finish within 15 s on uml" in proc.stderr
    wait_no_leftovers(before)

    p = start_guestbench("exec", "uml", "--", *hang)
    deadline = time.monotonic() + 240
    while not any("con0=fd:0,fd:1" in h for h in hypervisor_processes()) and time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        time.sleep(0.2)  # waiting for an event: UML running this command's launch
    assert any("con0=fd:0,fd:1" in h for h in hypervisor_processes()), "UML never started"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err[-2000:]
    wait_no_leftovers(before)


def test_what_a_command_leaves_running_after_it_exits_is_killed(tmp_path: Path) -> None:
    """A daemon that outlives its parent (as `guestfish --listen` forks one) is killed when the command exits."""
    marker = f"sleep 3000.{os.getpid()}"  # a command line no other process has
    proc = gb_exec("uml", "sh", "-c", f"{marker} & exit 0", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [p for p in processes_mentioning(marker)], processes_mentioning(marker)
    bad = guestbench("exec", "uml", "--timeout", "5", "--", "true")
    assert bad.returncode == 2 and "options go before the backend" in bad.stderr, bad.stderr
