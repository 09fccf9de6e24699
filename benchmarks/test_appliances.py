"""Regression benchmarks: guestbench's four measurements on every usable backend, with pytest-benchmark.

Run by `make bench` (not by `make test`: setup.cfg's testpaths is tests/). Sizes are modest so that the
whole run takes minutes on 2 cores; guestbench's scenarios are for the published sizes. Each test is one
backend × measurement (ids are backend names; unusable backends are skipped with doctor's reason); the
guestbench plugin times only the measurement's timed step, with a deadline on every step.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.launch

SIZE = "64MiB"  # bytes moved per round
DISK = "160MiB"  # sparse raw image for the filesystem: room for SIZE and ext2's metadata (at least SIZE + 10% + 64MiB)


def test_startup(benchmark, guestbench_backend):
    guestbench_backend.bench_startup(benchmark, disk_size="64MiB")


def test_upload(benchmark, guestbench_backend):
    guestbench_backend.bench_upload(benchmark, size=SIZE, disk_size=DISK)


def test_upload_no_write(benchmark, guestbench_backend):
    guestbench_backend.bench_upload_no_write(benchmark, size=SIZE)


def test_write_no_upload(benchmark, guestbench_backend):
    guestbench_backend.bench_write_no_upload(benchmark, size=SIZE, disk_size=DISK)
