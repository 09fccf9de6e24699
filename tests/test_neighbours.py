"""The host-wide registry of active runs: a live run is seen by others, a dead one (even SIGKILLed) is not, and a
run's samples say when another run measured beside them. Real processes; nothing launches an appliance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guestbench.host import neighbours

HOLD = """
import sys, time
from guestbench.host import neighbours
with neighbours.Registration("held by a test"):
    print("registered", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(tmp_path / "runs"))
    return tmp_path / "runs"


def _holder() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ), cwd=Path(__file__).parent.parent)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "registered"
    return proc


def test_another_run_is_seen_while_it_lives_and_its_entry_goes_when_it_is_killed(runs_dir: Path) -> None:
    with neighbours.Registration("this test") as me:
        assert [e.id for e in neighbours.active()] == [me.id]
        assert neighbours.active(exclude=me.id) == []
        other = _holder()
        try:
            seen = neighbours.active(exclude=me.id)
            assert [(e.pid, e.what) for e in seen] == [(other.pid, "held by a test")]
            assert neighbours.other_runs() == 1, "the fingerprint counts it too"
        finally:
            other.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel drops its lock
            other.wait(10)
        assert neighbours.active(exclude=me.id) == []
        assert sorted(p.name for p in runs_dir.iterdir()) == [f"{me.id}.run"], "the dead run's entry was removed"
    assert list(runs_dir.iterdir()) == []


def test_a_sample_is_shared_when_another_run_was_active_during_it_and_not_after_it_ended(runs_dir: Path) -> None:
    with neighbours.Registration("this test") as me, neighbours.Neighbours(me) as others:
        assert others.during(1.0) == 0
        other = _holder()
        try:
            assert others.during(1.0) == 1
        finally:
            other.terminate()
            other.wait(10)
        assert others.during(0.5) == 1, "a sample that ended just now overlapped it"
        deadline = time.monotonic() + 30
        while others.during(0.0) and time.monotonic() < deadline:  # one poll interval later it is history
            time.sleep(0.2)
        assert others.during(0.0) == 0
        assert others.during(3600.0) == 1, "a long sample that began before it ended still overlapped it"


LOCK_HOLDER = """
import sys, time
from pathlib import Path
from guestbench.host import locks
with locks.exclusive(Path(sys.argv[1]), "a test's thing", 10):
    print("holding", flush=True)
    time.sleep(600)
"""


def test_a_cache_lock_makes_the_second_process_wait_and_a_killed_holder_frees_it(tmp_path: Path) -> None:
    from guestbench.host import locks

    path = tmp_path / "thing.lock"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parent.parent)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(locks.LockTimeout, match=f"another guestbench process has held {path} for over 0.5 s "
                                                    "while making the payload"):
            with locks.exclusive(path, "the payload", 0.5):
                pass
    finally:
        holder.kill()  # SIGKILL: no release of its own
        holder.wait(10)
    with locks.exclusive(path, "the payload", 5):
        pass
