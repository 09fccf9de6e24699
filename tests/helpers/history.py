"""`guestbench history`'s input as the tests write it (results documents run by run, a series of runs at given
levels with seeded noise) and the command as they call it, in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guestbench.results import SCHEMA, SCHEMA_VERSION
from helpers.cli import main_in_process

FINGERPRINT = {"cpu_model": "Test CPU 9000", "cores": 2, "memory_bytes": 24 * 2**30, "kernel": "6.1.0-test",
               "virtualization": {"vm": "kvm", "summary": "KVM guest"},
               "versions": {"libguestfs": "1.48.6", "qemu": "7.2.0", "libvirt": "9.0.0", "uml": "6.1.176"}}


def results(started: str, cells: dict[str, list[float]], **versions: str) -> dict[str, Any]:
    """A results document of one run: `cells` maps backend/label to its samples' seconds."""
    fp = json.loads(json.dumps(FINGERPRINT))
    fp["versions"].update(versions)
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "status": "complete", "started_utc": started,
            "guestbench": {"version": "0.1.0", "git_commit": None}, "scenario": {"name": "history"}, "host": fp,
            "backends": {}, "cells": [
                {"backend": name.split("/")[0], "label": name.split("/")[1], "measurement": name.split("/")[1],
                 "placement": "host", "status": "done",
                 "samples": [{"rep": i + 1, "seconds": s} for i, s in enumerate(values)]}
                for name, values in cells.items()]}


def noisy(level: float, rng: np.random.Generator, n: int = 3) -> list[float]:
    """A run's samples: the run's own offset (2%) and each sample's noise (2%)."""
    run = level * (1 + 0.02 * rng.standard_normal())
    return [round(run * (1 + 0.02 * x), 4) for x in rng.standard_normal(n)]


def write_series(directory: Path, levels: list[float], seed: int = 7, **changes: dict[str, str]) -> list[Path]:
    """One run per level (start-up at that level, upload-no-write unchanged); `changes` gives a run's versions
    ("run4": {"qemu": "8.0.0"}) from that run on."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths, versions = [], {}
    for i, level in enumerate(levels):
        versions.update(changes.get(f"run{i + 1}", {}))
        doc = results(f"2026-11-{10 + i:02d}T10:00:00Z",
                      {"tcg/startup": noisy(level, rng), "tcg/upload-no-write": noisy(7.3, rng)}, **versions)
        paths.append(directory / f"2026111{i}T100000Z-history.json")
        paths[-1].write_text(json.dumps(doc))
    return paths


def history(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`guestbench history ARGS` in this process: its exit status, stdout and stderr."""
    return main_in_process(capsys, "history", *args)


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """`guestbench history ARGS --json`: its exit status and the document it printed."""
    status, out, err = history(capsys, *args, "--json")
    return status, json.loads(out)
