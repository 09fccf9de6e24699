"""The figures `make test` ends with: only launches a real hypervisor made count as the day's tcg start-up (tests
write results files by hand too), and the wall time is the whole suite's, both of its pytest runs."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest

from suite_day import SuiteDay, launched, results_files, suite_started, tcg_startups

STARTED = "2026-11-26T10:00:00Z"


def _sample(seconds: float, qemu_cpu: float | None) -> dict:
    sample: dict = {"rep": 1, "seconds": seconds}
    if qemu_cpu is not None:
        sample["resources"] = {"cpu_s": qemu_cpu + 0.1,
                               "cpu_by_program": {"qemu-system-x86_64": qemu_cpu, "guestbench.execute.worker": 0.1}}
    return sample


def _doc(backend: str, samples: list[dict], placement: str = "host", measurement: str = "startup",
         cold_s: float | None = None) -> dict:
    return {"schema_version": 3, "started_utc": STARTED,
            "cells": [{"measurement": measurement, "backend": backend, "placement": placement, "samples": samples,
                       "cold_s": cold_s}]}


def test_only_samples_a_hypervisor_burned_for_count_as_the_days_tcg_start_up(tmp_path: Path) -> None:
    real, synthetic, idle = _sample(20.0, 19.5), _sample(1.1, None), _sample(12.0, 0.2)
    assert launched(real) and not launched(synthetic) and not launched(idle)
    assert not launched({"seconds": "x", "resources": {"cpu_by_program": {"qemu-system-x86_64": 1}}})
    docs = [_doc("tcg", [real, synthetic, idle]), _doc("uml", [_sample(5.0, 4.9)]),
            _doc("tcg", [_sample(30.0, 29.0)], placement="nested@l1"),
            # a cell's first launch of the standard appliance counts, when the cell launched for real
            _doc("tcg", [_sample(2.0, 1.9)], measurement="upload", cold_s=21.0),
            _doc("tcg", [_sample(2.0, None)], measurement="upload", cold_s=22.0),
            _doc("tcg", [_sample(2.0, 1.9)], measurement="fio", cold_s=40.0)]
    for k, doc in enumerate(docs):
        (tmp_path / f"{k}.json").write_text(json.dumps(doc))
    (tmp_path / "broken.json").write_text("{" * 100_000)  # a hostile file the suite leaves: skipped
    since = calendar.timegm((2026, 11, 26, 9, 0, 0, 0, 0, 0))  # an hour before the runs began
    assert sorted(tcg_startups(results_files([tmp_path]), since)) == [20.0, 21.0]
    assert tcg_startups(results_files([tmp_path]), since + 2 * 86400) == []  # runs from before the suite


def test_the_wall_time_is_counted_from_the_suites_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUESTBENCH_TEST_SUITE_STARTED", str(int(time.time()) - 600))
    assert 599 <= time.monotonic() - suite_started() <= 700
    for bad in ("soon", str(int(time.time()) + 3600), "-5"):
        monkeypatch.setenv("GUESTBENCH_TEST_SUITE_STARTED", bad)
        assert time.monotonic() - suite_started() < 3600


def test_the_wall_time_is_printed_in_whole_minutes_and_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """154 s is "2 min 34 s" (it was printed "3 min 34 s": minutes rounded, not floored)."""
    day = SuiteDay()
    for seconds, text in ((154, "2 min 34 s"), (59.6, "1 min 00 s"), (1881, "31 min 21 s")):
        monkeypatch.setenv("GUESTBENCH_TEST_SUITE_STARTED", str(time.time() - seconds))
        assert day.line().startswith(f"suite wall time {text};")
