"""Outputs written safely on a shared machine (issue 31): what another local user plants where guestbench writes
(a device, a FIFO, a symbolic link, a file or directory of theirs) is refused in one line, never replaced,
followed or written through; results files are reserved so that runs started in the same second never share
one; the level-1 guest's output tar cannot put a setuid file, a device or a link on the host, nor anything
outside its directory. Planted files are made by the real unprivileged user `nobody` (runuser)."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cli import guestbench
from helpers.paths import ROOT
from helpers.users import as_nobody
from guestbench.nested.guest import GuestError, extract_output
from guestbench.results import results_path
from guestbench.host.safe_write import UnsafeOutput, replace_file

REAL = sorted((ROOT / "tests" / "data" / "results").glob("*.json"))[0]
CLI_TIMEOUT = 120  # seconds: a refusal takes well under one; a hang on a FIFO would take forever
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another user: needs root")


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit status 2 and one short line saying why."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("guestbench: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert len(proc.stderr) < 400 and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def pytest_benchmark_file(tmp_path: Path) -> Path:
    out = tmp_path / "pb.json"
    assert guestbench("export", str(REAL), "-o", str(out), timeout=CLI_TIMEOUT).returncode == 0
    return out


# ---------------------------------------------------------------------------------------------- devices, FIFOs


@pytest.fixture()
def dev_null() -> Iterator[os.stat_result]:
    """/dev/null as it was; put back should the code under test have replaced it (the old code did: the whole
    machine then writes into a root-only regular file)."""
    before = os.lstat("/dev/null")
    try:
        yield before
    finally:
        if not stat.S_ISCHR(os.lstat("/dev/null").st_mode):
            os.unlink("/dev/null")
            os.mknod("/dev/null", stat.S_IFCHR | 0o666, before.st_rdev)
            os.chmod("/dev/null", 0o666)


def test_dev_null_stays_a_device_after_export_import_and_report(tmp_path: Path, dev_null: os.stat_result) -> None:
    before = dev_null
    pb = pytest_benchmark_file(tmp_path)
    refused(guestbench("export", str(REAL), "-o", "/dev/null", timeout=CLI_TIMEOUT), "character device", "use -")
    refused(guestbench("import", str(pb), "-o", "/dev/null", timeout=CLI_TIMEOUT), "character device")
    refused(guestbench("report", str(REAL), "-o", "/dev/null", timeout=CLI_TIMEOUT), "expected a directory")
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not list(Path("/dev").glob(".null.*.tmp")), "no temp file left beside it"


def test_a_fifo_as_output_is_refused_at_once(shared: Path) -> None:
    fifo = shared / "out.json"
    as_nobody("mkfifo", str(fifo))
    refused(guestbench("export", str(REAL), "-o", str(fifo), timeout=CLI_TIMEOUT), "is a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in shared.iterdir()) == ["out.json"]


def test_dash_is_still_standard_output() -> None:
    proc = guestbench("export", str(REAL), "-o", "-", timeout=CLI_TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.startswith("{")


# ---------------------------------------------------------------------------------------------- links, others' files


def test_a_symlink_as_output_is_neither_followed_nor_replaced(shared: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    link = shared / "out.json"
    as_nobody("ln", "-s", str(victim), str(link))
    refused(guestbench("export", str(REAL), "-o", str(link), timeout=CLI_TIMEOUT), "symbolic link")
    assert victim.read_text() == "root's own\n"
    assert os.readlink(link) == str(victim)


def test_another_users_symlinked_directory_is_not_followed(shared: Path, tmp_path: Path) -> None:
    """nobody's link on the way to the output could point anywhere, e.g. at /etc, by the time root writes."""
    as_nobody("ln", "-s", str(tmp_path), str(shared / "d"))
    refused(guestbench("export", str(REAL), "-o", str(shared / "d" / "passwd"), timeout=CLI_TIMEOUT),
            "symbolic link owned by nobody")
    assert not (tmp_path / "passwd").exists()


def test_another_users_file_is_refused_and_kept(shared: Path) -> None:
    theirs = shared / "out.json"
    as_nobody("sh", "-c", f"echo theirs > {theirs}")
    refused(guestbench("export", str(REAL), "-o", str(theirs), timeout=CLI_TIMEOUT), "owned by nobody")
    assert theirs.read_text() == "theirs\n" and theirs.stat().st_uid == NOBODY


def test_another_users_directory_is_refused(shared: Path) -> None:
    """nobody could swap a file of the report for a link between guestbench's check and its rename."""
    as_nobody("mkdir", "-m", "0755", str(shared / "report"))
    refused(guestbench("report", str(REAL), "-o", str(shared / "report"), timeout=CLI_TIMEOUT), "owned by nobody")
    assert not list((shared / "report").iterdir())
    refused(guestbench("export", str(REAL), "-o", str(shared / "report" / "x.json"), timeout=CLI_TIMEOUT),
            "owned by nobody")


def test_a_file_in_the_report_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "index.html").symlink_to(victim)
    refused(guestbench("report", str(REAL), "-o", str(tmp_path / "report"), timeout=CLI_TIMEOUT),
            "index.html is a symbolic link")
    assert victim.read_text() == "root's own\n"
    assert [p.name for p in (tmp_path / "report").iterdir()] == ["index.html"], "nothing written before the refusal"


def test_ones_own_file_is_replaced_atomically_and_a_hard_linked_one_is_not(tmp_path: Path) -> None:
    mine = tmp_path / "out.json"
    mine.write_text("old\n")
    inode = mine.stat().st_ino
    assert guestbench("export", str(REAL), "-o", str(mine), timeout=CLI_TIMEOUT).returncode == 0
    assert mine.read_text().startswith("{") and mine.stat().st_ino != inode  # a new file renamed into place
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600
    os.link(mine, tmp_path / "other-name")
    refused(guestbench("export", str(REAL), "-o", str(mine), timeout=CLI_TIMEOUT), "2 hard links")
    with pytest.raises(UnsafeOutput, match="2 hard links"):
        replace_file(mine, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-name", "out.json"]


# ---------------------------------------------------------------------------------------------- results files

RESERVER = """
import sys
from pathlib import Path
from guestbench.results import atomic_write_bytes, results_path
directory, tag, base = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
sys.stdin.readline()  # go: both processes start together
for i in range(100):
    path = results_path(directory, "demo", when=base + i)
    atomic_write_bytes(path, f"{tag} {i}".encode(), what="results file")
    print(path.name, flush=True)
"""


def test_runs_started_in_the_same_second_never_share_a_results_file(tmp_path: Path) -> None:
    """100 pairs: two real processes reserve a results file for the same second, then write it."""
    procs = [subprocess.Popen([sys.executable, "-c", RESERVER, str(tmp_path), tag, "1795000000"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for tag in "AB"]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    names = {tag: p.communicate(timeout=CLI_TIMEOUT)[0].split() for tag, p in zip("AB", procs)}
    assert [p.returncode for p in procs] == [0, 0]
    assert len(names["A"]) == len(names["B"]) == 100
    assert not set(names["A"]) & set(names["B"]), "two runs got one name"
    files = sorted(tmp_path.iterdir())
    assert len(files) == 200
    for tag in "AB":
        for i, name in enumerate(names[tag]):
            assert (tmp_path / name).read_text() == f"{tag} {i}", "a run's results were lost"


def test_a_results_directory_of_another_user_is_refused(shared: Path) -> None:
    as_nobody("mkdir", "-m", "0755", str(shared / "results"))
    with pytest.raises(UnsafeOutput, match="owned by nobody"):
        results_path(shared / "results", "demo")


# ---------------------------------------------------------------------------------------------- the level-1 tar


def _member(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = 0o644
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _hostile_tar(path: Path, outside: Path) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        _member(tar, "./results/run.json", data=b"{}", uid=NOBODY, gid=NOBODY, mode=0o666)
        _member(tar, "./exit-status", data=b"0\n")
        _member(tar, "./suid-root", data=b"#!/bin/sh\nid\n", uid=0, gid=0, mode=0o6755)
        _member(tar, "./sticky-dir", tarfile.DIRTYPE, uid=NOBODY, mode=0o3777)
        _member(tar, "./null", tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666)
        _member(tar, "./disk", tarfile.BLKTYPE, devmajor=7, devminor=0)
        _member(tar, "./fifo", tarfile.FIFOTYPE)
        _member(tar, "./etc", tarfile.SYMTYPE, linkname="/etc")
        _member(tar, "./etc/guestbench-was-here", data=b"through the link\n")
        _member(tar, "./passwd", tarfile.LNKTYPE, linkname="/etc/passwd")
        _member(tar, "../escaped", data=b"out\n")
        _member(tar, "./a/../../escaped-too", data=b"out\n")
        _member(tar, str(outside / "absolute"), data=b"out\n")
        _member(tar, "./exit-status", data=b"1\n")  # a second member of a name: the first stays


def test_the_level1_tar_cannot_make_setuid_files_devices_links_or_escape(tmp_path: Path) -> None:
    archive, dest = tmp_path / "output.raw", tmp_path / "run" / "out"
    passwd = os.stat("/etc/passwd")
    _hostile_tar(archive, tmp_path)
    skipped = extract_output(archive, dest)
    made = {str(p.relative_to(dest)): os.lstat(p) for p in dest.rglob("*")}
    assert sorted(made) == ["etc", "etc/guestbench-was-here", "exit-status", "results", "results/run.json",
                            "sticky-dir", "suid-root"]
    for name, st in made.items():
        assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), name
        assert st.st_uid == os.geteuid() and st.st_gid == os.getegid(), name
        assert stat.S_IMODE(st.st_mode) in (0o644, 0o755), (name, oct(st.st_mode))
    assert stat.S_IMODE(made["suid-root"].st_mode) == 0o755 and stat.S_IMODE(made["results/run.json"].st_mode) == 0o644
    assert (dest / "exit-status").read_text() == "0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["output.raw", "run"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["out"]
    assert not Path("/etc/guestbench-was-here").exists()
    after = os.stat("/etc/passwd")
    assert (after.st_nlink, after.st_mtime_ns) == (passwd.st_nlink, passwd.st_mtime_ns)
    assert {"./null", "./disk", "./fifo", "./etc", "./passwd", "../escaped", "./exit-status"} <= set(skipped)


def test_the_level1_tar_is_bounded_in_members_and_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "output.raw"
    with tarfile.open(archive, "w") as tar:
        for i in range(50):
            _member(tar, f"f{i}", data=b"x" * 1000)
    with pytest.raises(GuestError, match="more than 20 files"):
        extract_output(archive, tmp_path / "a", max_members=20)
    with pytest.raises(GuestError, match="more than 10000 bytes"):
        extract_output(archive, tmp_path / "b", max_bytes=10_000)
    assert len(extract_output(archive, tmp_path / "c")) == 0 and len(list((tmp_path / "c").iterdir())) == 50


def test_a_reserved_results_file_is_never_seen_empty(tmp_path: Path) -> None:
    """A reader polling the results directory (a user's `show`, a test waiting for the first sample) finds each new
    results file whole from its first instant: it is reserved holding the run's first document."""
    stop, empty = threading.Event(), []

    def reader() -> None:
        while not stop.is_set():
            for p in tmp_path.glob("*.json"):
                try:
                    if p.stat().st_size == 0:
                        empty.append(p)
                except FileNotFoundError:
                    pass

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        for _ in range(200):
            results_path(tmp_path, "s", when=0, content=b'{"status": "running"}')
    finally:
        stop.set()
        watcher.join()
    assert empty == [] and len(list(tmp_path.glob("*.json"))) == 200
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".json")] == []  # no temp file left
