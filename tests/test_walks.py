"""Directories someone else may write are read through one descriptor-based walk (guestbench.util.walk, issue 46):
`history` over a directory owned by the real user nobody, who swaps a listed file or subdirectory for a link to
root's own 0600 results while root reads, never shows root's file; the dry run's estimates and `history` over a
pytest-benchmark `.benchmarks/` directory are bounded in files and in bytes actually read, one line past a bound.

The swaps are made by nobody (runuser) at a real file-system event: an inotify watch on nobody's directory sees
root open the first file, a run of 200,000 samples that root then takes about a second to parse, and nobody swaps
the next name meanwhile. Every case runs the real CLI in its own process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cli import guestbench
from helpers.history import results, write_series
from helpers.paths import ROOT
from guestbench.results import pytest_benchmark as pbj
from guestbench.results import store
from guestbench.results.model import Run

SECRET_DATE = "2026-11-13T13:13:13"  # root's own run: never in the output of a history of nobody's directory
SLOW_SAMPLES = 200_000  # ~6.5 MB: root parses it for about a second, while nobody swaps the next name

# watch DIR (argv[1]) for root opening TRIGGER (argv[2], or any of a comma-separated list), then go on
WAIT_FOR_OPEN = r"""
import ctypes, os, struct, sys
d, trigger = sys.argv[1:3]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
if fd < 0 or libc.inotify_add_watch(fd, d.encode(), 0x20) < 0:  # IN_OPEN
    sys.exit("inotify: " + os.strerror(ctypes.get_errno()))
print("watching", flush=True)
opened = False
while not opened:
    buf, i = os.read(fd, 65536), 0
    while i < len(buf):
        n = struct.unpack_from("iIII", buf, i)[3]
        opened |= buf[i + 16:i + 16 + n].rstrip(b"\0").decode() in trigger.split(",")
        i += 16 + n
"""

# nobody's side: then put a link to TARGET where VICTIM was (a file replaced in one rename; a directory moved aside
# first), say so and end.
WATCHER = WAIT_FOR_OPEN + r"""
victim, target = sys.argv[3:5]
os.symlink(target, os.path.join(d, ".link"))
if os.path.isdir(os.path.join(d, victim)):
    os.rename(os.path.join(d, victim), os.path.join(d, victim + ".aside"))
os.rename(os.path.join(d, ".link"), os.path.join(d, victim))
print("swapped", flush=True)
"""


@pytest.fixture
def nobodys() -> Iterator[Path]:
    """A directory owned by nobody, in a root-owned 0755 one under /tmp (pytest's tmp_path is under a 0700
    directory nobody cannot reach)."""
    base = Path(tempfile.mkdtemp(prefix="guestbench-test-walks-", dir="/tmp"))
    base.chmod(0o755)
    d = base / "results"
    d.mkdir()
    try:
        yield d
    finally:
        shutil.rmtree(base)


def _give_to_nobody(d: Path) -> None:
    subprocess.run(["chown", "-R", "nobody:", str(d)], check=True)


def _run_doc(started: str, seconds: list[float]) -> dict:
    return results(f"{started}Z", {"tcg/startup": seconds})


def _write(path: Path, doc: dict, mode: int = 0o644) -> None:
    path.write_text(json.dumps(doc))
    path.chmod(mode)


def _secret(where: Path) -> Path:
    """Root's own run, 0600 in a 0700 directory: what nobody tries to have root show."""
    where.mkdir(mode=0o700)
    path = where / "x.json"
    _write(path, _run_doc(SECRET_DATE, [77.0, 77.1, 77.2]), 0o600)
    return path


def _swapped_during(d: Path, trigger: str, victim: str, target: Path, *args: str) -> subprocess.CompletedProcess:
    """`guestbench ARGS... D` (as root; `history D --json` by default) while nobody waits for root to open
    `trigger` and then swaps `victim` for a link to `target`; the swap is checked to have happened."""
    watcher = subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", WATCHER, str(d), trigger,
                                victim, str(target)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "watching\n"
        done = guestbench(*(args or ("history", str(d), "--json")), timeout=120)
        assert watcher.stdout.readline() == "swapped\n"  # root did open the trigger, so nobody swapped
        assert watcher.wait(timeout=30) == 0
        return done
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()


def _one_line(done: subprocess.CompletedProcess, *says: str) -> str:
    line = done.stderr.rstrip("\n")
    assert done.returncode == 2 and "\n" not in line and "Traceback" not in done.stderr, (done.returncode,
                                                                                          done.stderr[-2000:])
    for text in says:
        assert text in line, line
    return line


def test_a_listed_file_swapped_for_a_link_to_roots_0600_results_is_never_read(nobodys: Path,
                                                                            tmp_path: Path) -> None:
    secret = _secret(tmp_path / "root-only")
    _write(nobodys / "a.json", _run_doc("2026-11-10T10:00:00", [6.0] * SLOW_SAMPLES))
    _write(nobodys / "b.json", _run_doc("2026-11-11T10:00:00", [6.0, 6.1, 6.2]))
    _write(nobodys / "c.json", _run_doc("2026-11-12T10:00:00", [6.0, 6.1, 6.2]))
    _give_to_nobody(nobodys)
    done = _swapped_during(nobodys, "a.json", "b.json", secret)
    assert SECRET_DATE not in done.stdout and "77.1" not in done.stdout
    _one_line(done, str(nobodys / "b.json"), "changed while being read", "now a symbolic link", "not followed")


def test_a_subdirectory_swapped_for_a_link_to_a_root_only_directory_is_not_followed(nobodys: Path,
                                                                                   tmp_path: Path) -> None:
    secret = _secret(tmp_path / "root-only")
    _write(nobodys / "a.json", _run_doc("2026-11-10T10:00:00", [6.0] * SLOW_SAMPLES))
    (nobodys / "sub").mkdir()
    _write(nobodys / "sub" / "x.json", _run_doc("2026-11-11T10:00:00", [6.0, 6.1, 6.2]))
    _give_to_nobody(nobodys)
    done = _swapped_during(nobodys, "a.json", "sub", secret.parent)
    assert SECRET_DATE not in done.stdout and "77.1" not in done.stdout
    _one_line(done, str(nobodys / "sub"), "listed as a directory, now a symbolic link", "not followed")


def test_a_link_listed_in_the_directory_is_passed_over(nobodys: Path, tmp_path: Path) -> None:
    """A link there before the walk is not a swap: passed over as it always was, and never followed."""
    secret = _secret(tmp_path / "root-only")
    write_series(nobodys, [20, 20, 20])
    (nobodys / "z.json").symlink_to(secret)
    (nobodys / "zz").symlink_to(secret.parent)
    done = guestbench("history", str(nobodys), "--json", timeout=120)
    assert done.returncode == 0 and SECRET_DATE not in done.stdout, done.stderr
    assert len(json.loads(done.stdout)["machines"][0]["runs"]) == 3


def test_a_hard_link_to_roots_0600_results_in_nobodys_directory_is_not_read(nobodys: Path) -> None:
    """With fs.protected_hardlinks=0 nobody could link root's 0600 file into nobody's directory; root makes the
    link here (the same inode nobody's link would be), whatever the machine's setting."""
    secret = _secret(nobodys.parent / "root-only")  # beside it: the same file system, as a link needs
    write_series(nobodys, [20, 20, 20])
    _give_to_nobody(nobodys)
    os.link(secret, nobodys / "zz.json")
    done = guestbench("history", str(nobodys), "--json", timeout=120)
    assert SECRET_DATE not in done.stdout and "77.1" not in done.stdout
    _one_line(done, str(nobodys / "zz.json"), "with 2 link(s)", "not read")


def test_a_hard_link_to_roots_0600_results_in_a_directory_anyone_can_write_is_not_read(nobodys: Path) -> None:
    """The same link in a root-owned directory that others can write (a team's shared 0777 results directory)."""
    secret = _secret(nobodys.parent / "root-only")
    write_series(nobodys, [20, 20, 20])
    nobodys.chmod(0o777)
    os.link(secret, nobodys / "zz.json")
    done = guestbench("history", str(nobodys), "--json", timeout=120)
    assert SECRET_DATE not in done.stdout and "77.1" not in done.stdout
    _one_line(done, str(nobodys / "zz.json"), "with 2 link(s)", "mode 777", "not read")


# root's side, a run saving its results: then write a new file and rename it over VICTIM (another inode under the
# same name, as ResultsFile.save does after every sample)
SAVER = WAIT_FOR_OPEN + r"""
victim = sys.argv[3]
with open(os.path.join(d, victim), "rb") as f:
    data = f.read()
with open(os.path.join(d, ".saving"), "wb") as f:
    f.write(data)
os.rename(os.path.join(d, ".saving"), os.path.join(d, victim))
print("saved", flush=True)
"""


def test_a_run_saving_into_the_directory_while_history_reads_it_is_read(tmp_path: Path) -> None:
    """A run renames a new results file over its own after every sample: history reads what stands there then,
    as it did before the walk (issue 46, review: the walk refused the new inode as a swap)."""
    _write(tmp_path / "a.json", _run_doc("2026-11-10T10:00:00", [6.0] * SLOW_SAMPLES))
    _write(tmp_path / "b.json", _run_doc("2026-11-11T10:00:00", [6.0, 6.1, 6.2]))
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path), "a.json", "b.json"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert saver.stdout is not None and saver.stdout.readline() == "watching\n"
        done = guestbench("history", str(tmp_path), "--json", timeout=120)
        assert saver.stdout.readline() == "saved\n" and saver.wait(timeout=30) == 0
    finally:
        if saver.poll() is None:
            os.killpg(saver.pid, signal.SIGKILL)
            saver.wait()
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["machines"][0]["runs"]) == 2


def _padded(doc: dict, size: int) -> str:
    """`doc` as JSON of `size` characters: white space after it (cheap to parse, counted as read)."""
    text = json.dumps(doc)
    return text + " " * (size - len(text))


def test_history_of_a_benchmarks_directory_stops_at_the_bytes_cap(tmp_path: Path) -> None:
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    third = store.MAX_TOTAL_BYTES // 3 + 1024  # three files: past the cap, each far under a file's own
    for i in range(3):
        run = Run.from_dict(_run_doc(f"2026-11-{10 + i}T10:00:00", [6.0, 6.1, 6.2]))
        (saved / f"000{i + 1}_run.json").write_text(_padded(pbj.export(run), third))
    done = guestbench("history", str(tmp_path / ".benchmarks"), "--json", timeout=120)
    _one_line(done, "0003_run.json", "more than 32MiB of results in all", "at most 32MiB")


def _dry_run_args(results_dir: Path) -> tuple[str, ...]:
    return ("scenario", str(ROOT / "scenarios" / "startup.yaml"), "--dry-run", "--json", "--results",
            str(results_dir))


def _dry_run(results_dir: Path) -> subprocess.CompletedProcess:
    return guestbench(*_dry_run_args(results_dir), timeout=120)


def test_the_dry_run_passes_over_a_file_swapped_for_a_link_saying_so(nobodys: Path, tmp_path: Path) -> None:
    """Two slow files around the swapped one: root reads one of them first whichever way it orders the names."""
    secret = _secret(tmp_path / "root-only")
    for name, started in (("20261110T100000Z-a.json", "2026-11-10T10:00:00"),
                          ("20261112T100000Z-c.json", "2026-11-12T10:00:00")):
        _write(nobodys / name, _run_doc(started, [6.0] * SLOW_SAMPLES))
    _write(nobodys / "20261111T100000Z-b.json", _run_doc("2026-11-11T10:00:00", []))  # nothing to estimate from
    _give_to_nobody(nobodys)
    done = _swapped_during(nobodys, "20261110T100000Z-a.json,20261112T100000Z-c.json", "20261111T100000Z-b.json",
                           secret, *_dry_run_args(nobodys))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["history"] == ["20261110T100000Z-a.json", "20261112T100000Z-c.json"]
    (line,) = done.stderr.splitlines()
    assert "20261111T100000Z-b.json: changed while being read" in line and "not followed" in line, line


def test_the_dry_run_reads_at_most_the_newest_files_of_the_cap_and_says_so(tmp_path: Path) -> None:
    shipped = ROOT / "tests" / "data" / "results" / "20261121T211449Z-startup.json"
    for i in range(store.MAX_FILES):  # older than the shipped run: passed over, not read
        (tmp_path / f"20200101T{i:06d}Z-old.json").write_text("{}")
    shutil.copy(shipped, tmp_path / shipped.name)
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "1 older results files passed over" in line and "the newest 10,000 at most" in line, line
    assert json.loads(done.stdout)["history"] == [shipped.name]


def test_the_dry_run_stops_at_the_bytes_cap_and_says_so(tmp_path: Path) -> None:
    shipped = json.loads((ROOT / "tests" / "data" / "results" / "20261121T211449Z-startup.json").read_text())
    half = store.MAX_TOTAL_BYTES // 2 + 1024
    for name in ("20261120T000000Z-a.json", "20261121T000000Z-b.json", "20261122T000000Z-c.json"):
        (tmp_path / name).write_text(_padded(shipped, half))
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "20261121T000000Z-b.json" in line and "more than 32MiB of results in all" in line, line
    assert json.loads(done.stdout)["history"] == ["20261122T000000Z-c.json"]  # the newest, read first
