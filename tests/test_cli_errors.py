"""Bad input of any kind: one line on stderr naming the offending thing, exit status 2, never a traceback.

Every case runs through ``guestbench.cli.main`` in-process (milliseconds each), and a representative subset
also runs as ``python -m guestbench ...`` in its own process: each such process pays about a second for
importing numpy and scipy, so running every case that way takes ~40 s on a small machine. Set
GUESTBENCH_CLI_SUBPROCESS_ALL=1 to run every case as a subprocess too.

No case may reach the run stage: every ``scenario`` command also gets ``--results`` naming a plain file, so
that if validation ever let a case through it would stop at the results-directory check instead of
launching an appliance (and the test would fail on the message).
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from guestbench.backends import BACKENDS
from guestbench.measurements import MEASUREMENTS
from guestbench.scenario.model import TOP_KEYS
from helpers.cli import guestbench, main_status
from helpers.paths import ROOT

ALL_BACKENDS = ", ".join(BACKENDS)
ALL_MEASUREMENTS = ", ".join(MEASUREMENTS)
MIN = "name: x\nmeasurements: [startup]\n"

# name -> scenario file text; written to the case directory as <name>.yaml
BAD_FILES: dict[str, str] = {
    "unknown-top-key": MIN + "repetition: 3\n",
    "unknown-appliance-key": MIN + "appliance:\n  memsize: 2048\n  cpus: 2\n",
    "repetitions-word": MIN + "repetitions: three\n",
    "repetitions-zero": MIN + "repetitions: 0\n",
    "repetitions-bool": MIN + "repetitions: true\n",
    "bad-size": "name: x\nmeasurements:\n  - startup\n  - measurement: upload\n    size: 12XB\n",
    "unknown-backend": MIN + "backends: [tcg, vmware]\n",
    "unknown-measurement": "name: x\nmeasurements: [startup, bogus]\n",
    "unknown-parameter": "name: x\nmeasurements:\n  - measurement: upload\n    fs: ext4\n",
    "bad-filesystem": "name: x\nmeasurements:\n  - measurement: upload\n    filesystem: ntfs\n",
    "empty-measurements": "name: x\nmeasurements: []\n",
    "measurements-not-list": "name: x\nmeasurements: startup\n",
    "empty-backends": MIN + "backends: []\n",
    "document-list": "- name: x\n- measurements: [startup]\n",
    "empty": "",
    "not-yaml": "a: [b",
    "disk-too-small": "name: x\nmeasurements:\n  - measurement: upload\n    size: 1GiB\n    disk_size: 1GiB\n",
    "upload-no-write-too-big": "name: x\nappliance:\n  memsize: 512\nmeasurements:\n"
                               "  - measurement: upload-no-write\n    size: 200MiB\n",
    "missing-name": "measurements: [startup]\n",
    "duplicate-label": "name: x\nmeasurements: [upload, upload]\n",
    "newline-in-key": MIN + '"bad\\nkey": 1\n',
}


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # {d} is replaced by the case directory
    needles: tuple[str, ...]  # must all be in the one stderr line ({d} likewise)
    status: int = 2


def scenario_args(path: str, *extra: str) -> tuple[str, ...]:
    return ("scenario", path, *extra, "--results", "{d}/not-a-dir")


CASES: dict[str, Case] = {
    # ---- scenario files
    **{f"file-{name}": Case(scenario_args(f"{{d}}/{name}.yaml"), needles)
       for name, needles in {
           "unknown-top-key": ("repetition: unknown key", "allowed: " + " ".join(TOP_KEYS)),
           "unknown-appliance-key": ("appliance.cpus: unknown key", "memsize, smp"),
           "repetitions-word": ("repetitions: 'three' is not an integer", "integer >= 1"),
           "repetitions-zero": ("repetitions: 0 is too small", "integer >= 1"),
           "repetitions-bool": ("repetitions: True is not an integer", "integer >= 1"),
           "bad-size": ("measurements[1].size: bad size '12XB'", "KiB, MiB, GiB"),
           "unknown-backend": ("backends[1]: unknown backend 'vmware'", ALL_BACKENDS),
           "unknown-measurement": ("measurements[1].measurement: unknown measurement 'bogus'", ALL_MEASUREMENTS),
           "unknown-parameter": ("measurements[0].fs: unknown parameter for upload",
                                 "label, matrix, cache, disk_size, filesystem, format, size"),
           "bad-filesystem": ("measurements[0].filesystem: 'ntfs' is not allowed", "ext2, ext3, ext4, xfs, btrfs"),
           "empty-measurements": ("measurements: the list is empty", ALL_MEASUREMENTS),
           "measurements-not-list": ("measurements: str is not a list", ALL_MEASUREMENTS),
           "empty-backends": ("backends: the list is empty", ALL_BACKENDS),
           "document-list": ("the document is a list, not a mapping", ", ".join(TOP_KEYS)),
           "empty": ("the file is empty", ", ".join(TOP_KEYS)),
           "not-yaml": ("not valid YAML at line 1, column 6", "expected ',' or ']'"),
           "disk-too-small": ("measurements[0].disk_size: 1GiB is too small for size 1GiB",
                              "at least size + 10% + 64MiB"),
           "upload-no-write-too-big": ("measurements[0].size: 200MiB does not fit", "memsize 512MiB",
                                       "at least 584"),
           "missing-name": ("name: missing", "non-empty string"),
           "duplicate-label": ("measurements[1].label: label 'upload' is used twice",),
           "newline-in-key": ("bad\\nkey: unknown key",),
       }.items()},
    "file-missing": Case(scenario_args("missing.yaml"), ("guestbench: missing.yaml: no such scenario file",)),
    "file-directory": Case(scenario_args("{d}"), ("guestbench: {d}: is a directory",)),
    # ---- command-line values (on a good scenario file)
    "repetitions-abc": Case(scenario_args("scenarios/startup.yaml", "--repetitions", "abc"),
                            ("command line", "--repetitions", "invalid int value: 'abc'")),
    "repetitions-zero": Case(scenario_args("scenarios/startup.yaml", "--repetitions", "0"),
                             ("command line: --repetitions: 0 is too small", "integer >= 1")),
    "backend-nosuch": Case(scenario_args("scenarios/startup.yaml", "--backend", "nosuch"),
                           ("command line: --backend[0]: unknown backend 'nosuch'", ALL_BACKENDS)),
    "size-12XB": Case(scenario_args("scenarios/upload.yaml", "--size", "12XB"),
                      ("command line: --size: bad size '12XB'", "MB", "MiB")),
    "size-too-big": Case(scenario_args("scenarios/upload.yaml", "--size", "1GiB"),
                         ("command line: --size (upload-no-write.size)", "memsize 1280MiB", "at least 1408")),
    "measurement-nosuch": Case(scenario_args("scenarios/uml-vs-kvm.yaml", "--measurement", "nosuch"),
                               ("command line: --measurement: 'nosuch' is not in this scenario",
                                "startup, upload, upload-no-write, write-no-upload")),
    "timeout-negative": Case(scenario_args("scenarios/startup.yaml", "--timeout", "-5"),
                             ("command line: --timeout: '-5' is not a duration", "seconds > 0")),
    "memsize-bad": Case(scenario_args("scenarios/startup.yaml", "--memsize", "lots"),
                        ("command line: --memsize: bad size 'lots'", "integer number of MiB")),
    "probe-timeout-negative": Case(scenario_args("scenarios/startup.yaml", "--probe-timeout", "-5"),
                                   ("command line: --probe-timeout: -5.0 is not a duration", "seconds > 0")),
    "probe-timeout-nan": Case(scenario_args("scenarios/startup.yaml", "--probe-timeout", "nan"),
                              ("command line: --probe-timeout: nan is not a duration",)),
    "results-not-a-dir": Case(scenario_args("scenarios/startup.yaml"),
                              ("--results {d}/not-a-dir: is not a directory",)),
    "unknown-option": Case(scenario_args("scenarios/startup.yaml", "--frobnicate"),
                           ("command line", "unrecognized arguments: --frobnicate")),
    "two-formats": Case(scenario_args("scenarios/startup.yaml", "--json", "--csv"),
                        ("command line", "not allowed with argument")),
    "scenario-without-file": Case(("scenario",), ("command line", "required: file")),
    # ---- the command itself
    "unknown-subcommand": Case(("frobnicate",), ("command line", "invalid choice: 'frobnicate'", "scenario",
                                                 "doctor", "show")),
    "no-subcommand": Case((), ("command line", "required: command")),
    # ---- show
    "show-missing": Case(("show", "{d}/nope.json"), ("guestbench: {d}/nope.json: no such results file",)),
    "show-directory": Case(("show", "{d}"), ("{d}: is a directory; give the path of a results file",)),
    "show-not-json": Case(("show", "{d}/text.json"), ("{d}/text.json: not valid JSON (line 1, column 1)",
                                                      "expected a guestbench results file")),
    "show-binary": Case(("show", "{d}/binary.json"), ("{d}/binary.json: not valid JSON",)),
    "show-not-results": Case(("show", "{d}/other.json"), ("{d}/other.json: not a guestbench results file",
                                                          "'guestbench-results'")),
    "show-future-version": Case(("show", "{d}/future.json"), ("{d}/future.json: schema_version 4 is not supported",
                                                              "reads version 1")),
}


# Run as real processes by default: one or two of each kind of mistake.
SUBPROCESS = ("file-bad-size", "file-not-yaml", "file-newline-in-key", "file-missing", "repetitions-abc",
              "backend-nosuch", "timeout-negative", "unknown-subcommand", "show-binary", "show-future-version")
if os.environ.get("GUESTBENCH_CLI_SUBPROCESS_ALL") == "1":
    SUBPROCESS = tuple(CASES)
assert set(SUBPROCESS) <= set(CASES)


def _prepare(d: Path) -> None:
    for name, text in BAD_FILES.items():
        (d / f"{name}.yaml").write_text(text)
    (d / "not-a-dir").write_text("")
    (d / "text.json").write_text("this is not JSON\n")
    (d / "binary.json").write_bytes(bytes(range(128, 256)) * 8)
    (d / "other.json").write_text(json.dumps({"name": "something else", "cells": []}))
    (d / "future.json").write_text(json.dumps({"schema": "guestbench-results", "schema_version": 4, "cells": []}))
    (d / "good.json").write_text(json.dumps({"schema": "guestbench-results", "schema_version": 1,
                                             "status": "complete", "scenario": {"name": "good"}, "cells": []}))


def _args(argv: tuple[str, ...], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


def _check(case: Case, d: Path, status: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr + stdout
    assert status == case.status, (status, stderr)
    assert stdout == ""
    assert stderr.endswith("\n"), repr(stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("guestbench: ")
    assert line.strip() != "guestbench:"
    assert "internal error" not in line
    for needle in case.needles:
        needle = needle.replace("{d}", str(d))
        assert needle in line, (needle, line)


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    _prepare(d)
    return d


# ---------------------------------------------------------------- in-process: every case


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_in_process(case_dir: Path, name: str, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GUESTBENCH_CACHE", str(case_dir / "cache"))
    monkeypatch.setenv("GUESTBENCH_TMPDIR", str(case_dir / "tmp"))
    case = CASES[name]
    status = main_status(_args(case.argv, case_dir))
    out, err = capsys.readouterr()
    _check(case, case_dir, status, out, err)


def test_file_errors_name_the_file(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in BAD_FILES:
        assert main_status(_args(CASES[f"file-{name}"].argv, case_dir)) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"guestbench: {case_dir}/{name}.yaml: "), line


def test_show_of_a_good_file_works(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_status(["show", str(case_dir / "good.json"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert isinstance(json.loads(out), dict)


# ---------------------------------------------------------------- as real processes


def _run(argv: tuple[str, ...], d: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return guestbench(*_args(argv, d), env=env, timeout=120)


@pytest.fixture(scope="module")
def runs(case_dir: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Start the subprocess cases together, a few at a time; each test then checks its own."""
    env = {**os.environ, "GUESTBENCH_CACHE": str(case_dir / "cache"), "GUESTBENCH_TMPDIR": str(case_dir / "tmp")}
    argvs = {**{k: CASES[k].argv for k in SUBPROCESS}, "help": ("scenario", "--help")}
    with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1) as pool:
        futures = {k: pool.submit(_run, a, case_dir, env) for k, a in argvs.items()}
        return {k: f.result() for k, f in futures.items()}


@pytest.mark.parametrize("name", SUBPROCESS)
def test_bad_input_subprocess(case_dir: Path, runs: dict[str, subprocess.CompletedProcess[str]],
                              name: str) -> None:
    r = runs[name]
    _check(CASES[name], case_dir, r.returncode, r.stdout, r.stderr)


def test_scenario_help(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    r = runs["help"]
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = r.stdout
    for key in TOP_KEYS:
        assert f"\n  {key}: " in out, key
    for m in MEASUREMENTS.values():
        assert f"\n  {m.name}: {m.summary}" in out, m.name
        assert f"timed: {m.timed}" in out, m.name  # exactly what the clock covers, unwrapped
        for p in m.params:
            assert f"    {p.name} (default {p.show(p.default)}): " in out, (m.name, p.name)
    for option in ("--backend", "--measurement", "--repetitions", "--size", "--timeout", "--results"):
        assert option in out
