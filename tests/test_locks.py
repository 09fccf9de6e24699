"""No other local user can stall or fail root's runs through a lock (issue 46): a lock file or registry entry is
one only root can open (0600), an older one that another user opened and holds (the real user nobody, through
runuser, holding a real flock) is replaced or discounted rather than waited on, and a wait on a lock says who
holds it. Real processes and real flocks; nothing launches an appliance."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Iterator

import pytest

from guestbench.host import locks
from guestbench.host import neighbours

from helpers.paths import ROOT
from helpers.session import session_tmp_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's flock needs root to run as nobody")

# run by nobody with the system's python: open the file read-only (flock needs no more), take LOCK_EX (waiting for
# it if need be), hold it until stdin closes
NOBODY_HOLDS = """
import fcntl, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
except PermissionError:
    print("denied", flush=True)
    sys.exit(3)
print("opened", flush=True)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""

ROOT_HOLDS = """
import sys
from pathlib import Path
from guestbench.host import locks
with locks.exclusive(Path(sys.argv[1]), "a test's thing", 10):
    print("holding", flush=True)
    sys.stdin.read()
"""

WAITS = """
import sys
from pathlib import Path
from guestbench.host import locks
with locks.exclusive(Path(sys.argv[1]), "a test's thing", float(sys.argv[2])):
    print("acquired", flush=True)
"""


@pytest.fixture
def private() -> Iterator[Path]:
    """A directory of root's, 0755 as guestbench makes its lock directories, that nobody can reach."""
    d = Path(tempfile.mkdtemp(prefix="locks-", dir=session_tmp_path()))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        for p in sorted(d.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
        d.rmdir()


class Nobody:
    """nobody running NOBODY_HOLDS on a path; said() is its next line."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(["runuser", "-u", "nobody", "--", "python3", "-c", NOBODY_HOLDS, str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def end(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # its read ends: it lets go and exits
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(20)


def nobody_opens(path: Path) -> str:
    """What nobody's attempt to open `path` says first ("denied" or "opened"); it lets go at once."""
    n = Nobody(path)
    try:
        return n.said()
    finally:
        n.end()


def legacy_file(path: Path) -> os.stat_result:
    """A lock file or registry entry of root's, 0644, as guestbench made them until issue 46."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchmod(fd, 0o644)
    os.close(fd)
    return os.lstat(path)


def test_a_lock_file_is_one_nobody_cannot_open(private: Path) -> None:
    with locks.exclusive(private / "fresh.lock", "a test's thing", 5):
        assert stat.S_IMODE(os.lstat(private / "fresh.lock").st_mode) == 0o600
    assert nobody_opens(private / "fresh.lock") == "denied"


def test_an_old_0644_lock_file_that_nobody_holds_is_replaced_not_waited_on(private: Path) -> None:
    path = private / "probes.json.lock"
    old = legacy_file(path)
    nobody = Nobody(path)
    try:
        assert (nobody.said(), nobody.said()) == ("opened", "held")
        # before issue 46: LockTimeout after the whole wait (60 s at the probe verdict, 30 min at a payload)
        with locks.exclusive(path, "the probe verdicts", 10):
            now = os.lstat(path)
            assert stat.S_IMODE(now.st_mode) == 0o600 and now.st_uid == 0
            assert not os.path.samestat(now, old), "chmod takes back no descriptor already open: a new file"
        assert nobody_opens(path) == "denied"
    finally:
        assert nobody.end() == 0


def test_a_lock_file_nobody_opened_before_it_was_made_0600_is_replaced_once_seen_held(
        private: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = private / "payload.lock"
    legacy_file(path)
    nobody = Nobody(path)
    try:
        assert (nobody.said(), nobody.said()) == ("opened", "held")
        os.chmod(path, 0o600)  # as someone tightening it by hand would: nobody's descriptor stays open
        with locks.exclusive(path, "the payload", 20):
            pass
        err = capsys.readouterr().err
        assert (f"guestbench: the lock on the payload ({path}) is held by pid " in err
                and " of nobody (python3 -c " in err and "not by this user: replaced by a new lock file" in err), err
    finally:
        assert nobody.end() == 0


OLD_RUN_HOLDS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
sys.stdin.read()
"""


def test_an_old_0644_lock_file_that_a_run_of_roots_holds_is_waited_on_not_replaced(private: Path) -> None:
    """An older guestbench's run, still going, holds its 0644 lock file: replacing it would let a second run in
    beside it, so it is waited on as before."""
    path = private / "appliance.lock"
    old = legacy_file(path)
    run = subprocess.Popen([sys.executable, "-c", OLD_RUN_HOLDS, str(path)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "holding"
        with pytest.raises(locks.LockTimeout, match=f"another guestbench process has held {path} for over 1 s"):
            with locks.exclusive(path, "the appliance", 1):
                pass
        assert os.path.samestat(os.lstat(path), old)
    finally:
        assert run.stdin is not None
        run.stdin.close()
        run.wait(20)
    with locks.exclusive(path, "the appliance", 5):  # let go: now it is replaced
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600


def _root_holder(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", ROOT_HOLDS, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def _waiter(path: Path, deadline_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WAITS, str(path), str(deadline_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_a_wait_on_a_lock_says_once_who_holds_it_and_goes_on_to_its_deadline(private: Path) -> None:
    path = private / "thing.lock"
    holder = _root_holder(path)
    said = f"guestbench: waiting for the lock on a test's thing ({path}), held by pid {holder.pid} of root ("
    try:
        short = _waiter(path, 6)  # the message once, then the wait to its deadline as before
        out, err = short.communicate(timeout=60)
        assert short.returncode != 0 and out == "", err
        assert err.count("waiting for the lock") == 1 and said in err, err
        assert f"another guestbench process has held {path} for over 6 s" in err, err
        long = _waiter(path, 60)
        assert long.stderr is not None
        line = long.stderr.readline()  # the message comes before the lock is free: the holder holds on
        assert line.startswith(said) and line.rstrip().endswith("up to 60 s in all"), line
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(20)
    out, err = long.communicate(timeout=60)
    assert long.returncode == 0 and out == "acquired\n", err


HOLD_ENTRY = """
import sys
from guestbench.host import neighbours
with neighbours.Registration("held by a test") as me:
    print(me.path, flush=True)
    sys.stdin.read()
"""


def _registered(runs: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[subprocess.Popen[str], Path]:
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(runs))
    run = subprocess.Popen([sys.executable, "-c", HOLD_ENTRY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, cwd=ROOT, env=dict(os.environ))
    assert run.stdout is not None
    return run, Path(run.stdout.readline().strip())


def test_a_registry_entry_is_one_nobody_cannot_open(private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, entry = _registered(private / "runs", monkeypatch)
    try:
        assert stat.S_IMODE(os.lstat(entry).st_mode) == 0o600
        assert nobody_opens(entry) == "denied"
    finally:
        assert run.stdin is not None
        run.stdin.close()
        run.wait(20)


def test_nobody_holding_a_killed_runs_old_entry_does_not_keep_that_run_active(
        private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, entry = _registered(private / "runs", monkeypatch)
    os.chmod(entry, 0o644)  # as guestbench made entries until issue 46
    nobody = Nobody(entry)
    try:
        assert nobody.said() == "opened"
        assert [e.pid for e in neighbours.active()] == [run.pid], "a live run of root's is active"
        run.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel drops its lock, nobody takes it
        run.wait(20)
        assert nobody.said() == "held"
        assert neighbours.active() == [], "the dead run is not active because nobody holds its entry"
        assert not entry.exists(), "its entry was removed as any dead run's is"
    finally:
        assert nobody.end() == 0


def test_a_brief_lock_is_never_made_or_taken_in_a_directory_another_user_could_change(private: Path) -> None:
    theirs = private / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *nobody_ids())  # as if nobody had made it where root's cache should be
    assert locks.brief(theirs / "uml-cpu.lock", 1) is None
    shared = private / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert locks.brief(shared / "uml-cpu.lock", 1) is None
    assert list(theirs.iterdir()) == list(shared.iterdir()) == [], "nothing made in them"
    fd = locks.brief(private / "uml-cpu.lock", 1)  # root's own: had, 0600
    assert fd is not None and stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
    os.close(fd)


def nobody_ids() -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


# root takes the flock, hands its descriptor to a process of nobody's and closes its own: /proc/locks still names
# root's pid (it took the lock) while only nobody holds it, as when nobody's taker ends and its pid is reused by a
# process of root's (issue 46, review)
ROOT_TAKES_NOBODY_KEEPS = """
import fcntl, os, subprocess, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
kept = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
                         "/usr/bin/python3", "-c",
                         "import sys; print('kept', flush=True); sys.stdin.read()"],
                        pass_fds=[fd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
os.close(fd)
print(kept.stdout.readline().strip(), flush=True)
sys.stdin.read()
kept.stdin.close()
kept.wait()
"""


def test_a_lock_only_nobody_holds_is_not_taken_for_roots_by_the_pid_that_took_it(private: Path) -> None:
    path = private / "probes.json.lock"
    old = legacy_file(path)
    proc = subprocess.Popen([sys.executable, "-c", ROOT_TAKES_NOBODY_KEEPS, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "kept"
        assert all(h.pid != proc.pid for h in locks.holders(old))  # root's pid has no descriptor on it any more
        with locks.exclusive(path, "the probe verdicts", 10):  # before: waited on as root's, LockTimeout
            assert not os.path.samestat(os.lstat(path), old)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(20)
