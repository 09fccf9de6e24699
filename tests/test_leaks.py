"""The leak watch's judgement (guestbench.run.leaks), from readings: fds and threads by how far the end's floor rose
above the baseline's highest, RSS by its median,
the worst series counts, too few readings judge nothing. Its live use is tests/test_soak.py and `make soak`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from guestbench.run.leaks import Growth, ProcessReading, growth, hypervisor_processes, judged, read_process


def _series(fds: list[int], threads: int | list[int] = 4, rss: int = 50_000) -> list[ProcessReading]:
    counts = threads if isinstance(threads, list) else [threads] * len(fds)
    return [ProcessReading(f, t, rss) for f, t in zip(fds, counts)]


def test_a_reading_that_caught_the_next_launch_is_no_leak_but_a_raised_floor_is() -> None:
    # one reading per sample; a few catch the next launch's sockets (+3) - the floor stays, so no growth
    busy = _series([10, 13, 10, 10, 13, 10, 10, 13])
    assert growth([busy], warmup=1, window=3)["fds"] == 0
    # seen in CI: a start-up worker read between its appliances (sockets closed) in the baseline, during a launch at
    # the end; and the other way round: no growth either way
    assert growth([_series([5, 6, 4, 6, 6])], warmup=1, window=2)["fds"] == 0
    assert growth([_series([5, 6, 6, 6, 4])], warmup=1, window=2)["fds"] == 0
    # one fd kept per sample: the floor climbs past everything the baseline saw
    leaking = _series([10, 11, 12, 13, 14, 15, 16, 17])
    assert growth([leaking], warmup=1, window=3)["fds"] == 2
    assert growth([_series([10, 11, 12, 13, 14])], warmup=1, window=2)["fds"] == 1
    # the worst series is the figure; threads and RSS alongside
    g = growth([busy, leaking], warmup=1, window=3)
    assert g == {"fds": 2, "threads": 0, "rss_kib": 0}
    assert Growth(runner=g).problems() == ["guestbench gained 2 fds"]
    # a worker is read anywhere in its appliance's cycle (CI: 4 fds and 2 threads in the baseline, between two
    # appliances; 6 and 3 at the end, during launches): growth up to one appliance's sockets and thread is no
    # leak of the worker's, past it it is
    cycle = growth([_series([5, 4, 4, 6, 6], threads=[3, 2, 2, 3, 3])], warmup=1, window=2)
    assert cycle["fds"] == 2 and cycle["threads"] == 1 and Growth(worker=cycle).problems() == []
    assert Growth(worker={"fds": 3, "threads": 2}).problems() == ["its worker gained 3 fds",
                                                                   "its worker gained 2 threads"]
    assert Growth(runner={"fds": 1}).problems() == ["guestbench gained 1 fds"]  # the runner has no such cycle


def test_rss_by_its_median_with_slack() -> None:
    rss = [ProcessReading(10, 4, kib) for kib in (50_000, 50_000, 51_000, 50_500, 90_000, 70_500, 70_600, 70_700)]
    g = growth([rss], warmup=1, window=3)
    assert g["rss_kib"] == 70_600 - 50_500
    assert Growth(worker=g).problems() == ["its worker gained 19.6 MiB RSS"]
    assert Growth(worker={"rss_kib": 8 * 1024}).problems() == []  # under the 16 MiB slack: allocator noise


def test_a_reading_at_a_cells_last_sample_is_not_judged() -> None:
    # seen in CI: at the start-up cell's last sample the runner had gone on to make the upload cell's payload
    # (+35 MiB for a moment); the same readings without it judge no growth. Readings keyed by (cell, its samples).
    cells = [{"samples": [{}] * 6}, {"samples": [{}] * 6}]
    runner = {0: [((0, n), ProcessReading(10, 4, 50_000)) for n in range(1, 6)] +
              [((0, 6), ProcessReading(10, 4, 85_000))]}
    series = judged(runner, cells)
    assert [len(s) for s in series] == [5]
    assert growth(series, warmup=1, window=2) == {"fds": 0, "threads": 0, "rss_kib": 0}
    # a worker is read at every sample of any cell: a reading at cell 0's last sample (the next cell's worker
    # starting) is not judged, its readings at cell 1's samples are
    worker = {7: [((0, 6), ProcessReading(3, 1, 12_000))] + [((1, n), ProcessReading(9, 3, 42_000))
                                                             for n in range(1, 6)]}
    assert judged(worker, cells) == [[ProcessReading(9, 3, 42_000)] * 5]


def test_too_few_readings_judge_nothing() -> None:
    assert growth([_series([10, 20, 30, 40, 50, 60])], warmup=1, window=3) == {}
    assert growth([_series(list(range(14)))], warmup=2) == {"fds": 1, "threads": 0, "rss_kib": 0}  # WINDOW 6: 8 - 7


def test_readings_of_a_live_process_and_a_hypervisor_found_by_name(tmp_path: Path) -> None:
    me = read_process(os.getpid())
    assert me is not None and me.fds > 0 and me.threads >= 1 and me.rss_kib > 0
    fake = tmp_path / "qemu-system-x86_64"  # a program named like a hypervisor that waits on its stdin
    shutil.copy("/bin/cat", fake)
    proc = subprocess.Popen([str(fake)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        # Popen returns once exec has closed the child's close-on-exec fds, before the kernel has laid out the new
        # program's arguments: /proc/PID/cmdline is empty for that moment (CI of 313be43, beside three workers).
        # Wait for the event, the program in place, then the reading must find it at once.
        deadline = time.monotonic() + 30
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert f"{proc.pid} qemu-system-x86_64" in hypervisor_processes()
    finally:
        proc.communicate(b"")
    assert f"{proc.pid} qemu-system-x86_64" not in hypervisor_processes()
    assert read_process(proc.pid) is None
