"""guestbench's pytest plugin, run as users run it: pytest in its own process (pytester), real appliances.

The launching test uses UML (about 3 s a launch) with one round; the skip test makes backends unusable the
way a real machine does, with a probe launch killed at its deadline (1 s), in a private cache so that the
session's cached verdicts stay true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.leaks import socket_dirs, wait_no_leftovers

pytest_plugins = ["pytester"]

TESTS = '''
import os

def test_startup(benchmark, guestbench_backend):
    env = dict(os.environ)
    guestbench_backend.bench_startup(benchmark, rounds=1, warmup_rounds=0)  # test_upload keeps its warm-up
    assert dict(os.environ) == env, "the backend's environment was not restored"

def test_upload(benchmark, guestbench_backend):
    guestbench_backend.bench_upload(benchmark, rounds=1, size="8MiB", disk_size="80MiB")

def test_launch_deadline(benchmark, guestbench_backend):
    guestbench_backend.bench_startup(benchmark, rounds=1, warmup_rounds=0, timeout=0.5)
'''


@pytest.fixture
def no_leaks():
    """Nothing of ours left: no run directory, no hypervisor of this session, no orphaned socket directory."""
    before = socket_dirs()
    yield
    wait_no_leftovers(before)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The inner session is a user's plain pytest run, not an xdist worker whatever this one is: pytest-benchmark
    turns itself off where it sees PYTEST_XDIST_WORKER (make test runs several workers)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PYTEST_XDIST_")}
    try:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args, timeout=600)
    finally:
        os.environ.update(saved)


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = ("import sys, guestbench.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('guestfs', 'libvirt', 'numpy', 'scipy') "
            "or m.startswith('guestbench.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "['guestbench.pytest_plugin']"


def test_ids_are_backend_names_and_collection_probes_nothing(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUESTBENCH_CACHE", str(pytester.path / "cache"))
    pytester.makepyfile(TESTS)
    result = _run(pytester, "--collect-only", "-q", "--guestbench-backends=uml,tcg")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_startup[[]uml[]]", "*test_startup[[]tcg[]]", "*test_upload[[]uml[]]"])
    assert not (pytester.path / "cache" / "probes.json").exists()

    pytester.makeini("[pytest]\nguestbench_backends = tcg\n")
    result = _run(pytester, "--collect-only", "-q")
    assert "test_startup[tcg]" in result.stdout.str() and "[uml]" not in result.stdout.str()


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = _run(pytester, "--guestbench-backends=uml,qemu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--guestbench-backends: unknown backend 'qemu'; allowed: tcg, kvm, libvirt-tcg, libvirt-kvm, uml" \
        in result.stderr.str()


@pytest.mark.launch  # probe launches, killed at their 1 s deadline
def test_unusable_backends_are_skipped_with_the_reason(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       no_leaks: None) -> None:
    monkeypatch.setenv("GUESTBENCH_CACHE", str(pytester.path / "cache"))
    pytester.makepyfile("def test_startup(benchmark, guestbench_backend):\n"
                        "    guestbench_backend.bench_startup(benchmark)\n")
    result = _run(pytester, "--guestbench-backends=kvm,tcg", "--guestbench-probe-timeout=1")
    result.assert_outcomes(skipped=2)
    text = result.stdout.str()
    assert "SKIPPED [1] test_unusable_backends_are_skipped_with_the_reason.py:1: tcg is not usable here: probe " \
           "launch did not finish within 1 s and was killed" in text
    assert "kvm is not usable here: " in text
    verdicts = json.loads((pytester.path / "cache" / "probes.json").read_text())
    assert verdicts["tcg"]["usable"] is False  # the same verdict doctor shows, cached


@pytest.mark.launch
def test_benchmarks_on_uml_record_what_guestbench_records(pytester: pytest.Pytester, no_leaks: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(TESTS)
    out = pytester.path / "bench.json"
    result = _run(pytester, "--guestbench-backends=uml", f"--benchmark-json={out}")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*StepFailed: uml: launch did not finish within 0.5 s; the hypervisor was killed*"])

    doc = json.loads(out.read_text())
    by_name = {b["name"]: b for b in doc["benchmarks"]}
    assert set(by_name) == {"test_startup[uml]", "test_upload[uml]"}  # the failed one is not saved
    startup, upload = by_name["test_startup[uml]"], by_name["test_upload[uml]"]
    assert startup["group"] == "startup" and startup["param"] == "uml"
    info = upload["extra_info"]
    assert info["backend"] == "uml" and info["measurement"] == "upload" and info["placement"] == "host"
    assert info["params"] == {"size": 8 * 2**20, "disk_size": 80 * 2**20, "filesystem": "ext2", "format": "raw",
                              "cache": "writeback"}
    assert info["bytes"] == 8 * 2**20 and info["cache_mode"] == "writeback" and info["timed"].startswith("upload()")
    assert info["verification"]["ok"] is True and info["verification"]["what"].startswith("sha256")
    assert info["cold_s"] > 0 and info["mb_per_s"] > 0
    for bench in (startup, upload):
        assert len(bench["stats"]["data"]) == 1 and bench["stats"]["rounds"] == 1
    assert startup["stats"]["data"][0] > 1  # a real launch, not a no-op
    # what each measured round used, bracketed by setup and teardown: a UML launch is CPU-bound (README: CPU s
    # per launch 0.96 of its wall time) and its appliance is over 100 MiB
    for bench in (startup, upload):
        [meta] = bench["extra_info"]["sample_meta"]
        assert meta["resources"]["cpu_method"] == "proc" and bench["extra_info"]["median_cpu_s"] > 0
    used = startup["extra_info"]["sample_meta"][0]["resources"]
    # a launch's CPU, however the machine shares its cores (a UML start-up burns seconds of it)
    assert used["cpu_s"] > 1.0 and used["peak_pss_mib"] > 100, used
    section = doc["guestbench"]
    assert section["backends"]["uml"]["usable"] is True and section["host"]["cpu_model"]

    # guestbench import reads it back into a results file that show accepts
    from guestbench import cli

    results = pytester.path / "results.json"
    assert cli.main(["import", str(out), "-o", str(results)]) == 0
    assert cli.main(["show", str(results), "--csv"]) == 0
    csv_text = capsys.readouterr().out
    assert "uml,host,upload,1,0," in csv_text
    lines = csv_text.splitlines()
    header = next(line for line in lines if line.startswith("backend,placement,"))
    startup_row = dict(zip(header.split(","), next(line for line in lines if ",startup," in line).split(",")))
    assert float(startup_row["median_cpu_s"]) == pytest.approx(used["cpu_s"])
