"""Backends: the KVM MSR-quirk wrapper, the quirk detection, and launch probes with cached verdicts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from guestbench.host import fingerprint
from guestbench.execute import probe
from guestbench.backends import BACKENDS
from guestbench.backends.direct import MSR_QUIRK_FEATURE, msr_quirk_needed, write_qemu_wrapper
from guestbench.backends.base import HV_PATH_MAX, HandleConfig, hv_path, qemu_path
from guestbench.host.paths import make_run_dir, remove_tree
from guestbench.execute.supervisor import Supervisor

from helpers.cli import guestbench
from helpers.session import session_tmp_path
from helpers.hv import HV, ScriptBackend


def _echo(tmp_path: Path) -> Path:
    """A stand-in for qemu that prints its arguments and its working directory: what the wrapper hands on."""
    echo = tmp_path / "echo-args"
    echo.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\npwd\n')
    echo.chmod(0o755)
    return echo


def test_quirk_wrapper_rewrites_every_cpu_model_and_nothing_else(tmp_path: Path) -> None:
    echo = _echo(tmp_path)
    wrapper = write_qemu_wrapper(tmp_path, str(echo), msr_quirk=True)
    args = ["-machine", "accel=kvm", "-cpu", "max,la57=off", "-append", "a b  c", "-cpu", "host", "-help"]
    out = subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.splitlines() == ["-machine", "accel=kvm", "-cpu", f"max,la57=off,{MSR_QUIRK_FEATURE}", "-append",
                                "a b  c", "-cpu", f"host,{MSR_QUIRK_FEATURE}", "-help", str(tmp_path)]
    mtime = wrapper.stat().st_mtime_ns
    time.sleep(0.01)
    assert write_qemu_wrapper(tmp_path, str(echo), msr_quirk=True) == wrapper
    assert wrapper.stat().st_mtime_ns == mtime, "unchanged wrapper is not rewritten (libguestfs caches probes by it)"


def test_wrapper_gives_an_appliance_launch_in_a_worker_a_qmp_socket_in_its_work_dir(tmp_path: Path) -> None:
    """Only a launch (-kernel) in a worker (GUESTBENCH_WORKDIR) gets one: libguestfs's probes run qemu as given."""
    echo = _echo(tmp_path)
    workdir = tmp_path / "cell"
    workdir.mkdir()
    wrapper = write_qemu_wrapper(tmp_path, str(echo))
    env = {"PATH": "/usr/bin:/bin", "GUESTBENCH_WORKDIR": str(workdir)}
    launch = subprocess.run([str(wrapper), "-cpu", "max", "-kernel", "/k"], capture_output=True, text=True,
                            check=True, env=env, cwd=tmp_path).stdout.splitlines()
    assert launch[:4] == ["-cpu", "max", "-kernel", "/k"] and launch[4] == "-qmp"
    assert launch[5].startswith("unix:qmp-") and launch[5].endswith(",server=on,wait=off")
    assert launch[-1] == str(workdir), "qemu runs in the work dir, where its socket is made"
    probe_run = subprocess.run([str(wrapper), "-help"], capture_output=True, text=True, check=True, env=env,
                               cwd=tmp_path).stdout.splitlines()
    assert probe_run == ["-help", str(tmp_path)]
    outside = subprocess.run([str(wrapper), "-kernel", "/k"], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path).stdout.splitlines()
    assert outside == ["-kernel", "/k", str(tmp_path)]


@pytest.mark.launch  # starts qemu with KVM, paused, and quits it through QMP
@pytest.mark.skipif(not Path("/dev/kvm").exists(), reason="no /dev/kvm on this machine")
def test_msr_quirk_detection_matches_qemu() -> None:
    qemu = qemu_path()
    assert qemu
    verdict = msr_quirk_needed(qemu)
    plain = subprocess.run([qemu, "-machine", "pc,accel=kvm", "-cpu", "max", "-display", "none", "-nodefaults",
                            "-S", "-qmp", "stdio"], input='{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n',
                           capture_output=True, text=True, timeout=30)
    if plain.returncode == 0:
        assert verdict == "not-needed"
    else:
        assert verdict in ("needed", "unfixable")
        if fingerprint.kvm_device()["flavour"] == "kvm_pvm":
            assert "MSR" in plain.stderr and verdict == "needed"


class BadFirstLaunch(ScriptBackend):
    """qemu TCG behind a program whose first launch hangs or fails at once; the backend allows `attempts`."""

    def __init__(self, mark: Path, how: str, attempts: int) -> None:
        super().__init__(HV / "bad-first-launch.sh")
        self.mark, self.how, self.attempts = mark, how, attempts

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        return HandleConfig("direct", ["force_tcg"], hv=str(self.script),
                            env={"GUESTBENCH_TEST_HANG_MARK": str(self.mark), "GUESTBENCH_TEST_FIRST_LAUNCH": self.how})

    def probe_attempts(self) -> int:
        return self.attempts


@pytest.mark.launch
@pytest.mark.parametrize("how,attempts,timeout", [
    ("hang", 1, 10),  # no launch has to finish: a short deadline
    # a hang, then a real TCG launch inside the deadline; retrying is also in fail-3 (sooner: a failure is at once)
    pytest.param("hang", 2, 45, marks=pytest.mark.long),
    ("fail", 3, 120)])  # the first attempt fails at once; the second is a real TCG launch, on a busy day too
def test_a_probe_launch_that_hangs_or_fails_is_tried_again_only_where_the_backend_allows(
        how: str, attempts: int, timeout: int, tmp_path: Path, no_leftovers) -> None:
    mark = tmp_path / "first-launch-done"
    run_dir = make_run_dir()
    try:
        av = probe.verdict(BadFirstLaunch(mark, how, attempts), Supervisor(), run_dir, refresh=True, timeout=timeout)
    finally:
        remove_tree(run_dir)
    assert mark.exists()  # the first launch reached the hypervisor and went wrong there
    if attempts == 1:
        assert not av.usable and av.details["timed_out"] and "attempts" not in av.details, av
        # where it hung: the last lines the launch printed, kept as the evidence
        assert any("stalled before the kernel (test: first launch)" in ln for ln in av.details["last_output"]), av
        return
    # the second attempt boots: usable, and the verdict keeps what went wrong before
    assert av.usable and av.details["attempts"] == 2, av
    earlier = av.details["earlier_attempts"]
    assert len(earlier) == 1, earlier
    if how == "hang":
        assert earlier == ["probe launch did not finish within 45 s and was killed"]
        assert any("stalled before the kernel" in ln for ln in av.details["earlier_last_output"][0]), av.details
    else:  # the failure quotes what the hypervisor said: probe launches are verbose
        assert earlier[0].startswith("probe launch failed"), earlier
        assert "kvm run failed Input/output error (test: first launch)" in earlier[0], earlier
    assert av.reason.startswith("launched in") and "; 1 earlier attempt(s) did not launch (probe launch" in av.reason
    assert av.details["probe_launch_s"] > 0
    # the verdict is cached: asked again, no launch (probing and its cache are the same for every backend)
    run_dir = make_run_dir()
    try:
        t0 = time.monotonic()
        again = probe.verdict(BadFirstLaunch(mark, how, attempts), Supervisor(), run_dir, timeout=timeout)
        assert time.monotonic() - t0 < 5, "a cached verdict needs no launch"
    finally:
        remove_tree(run_dir)
    assert again.usable and again.details.get("cached") is True and again.details["attempts"] == 2


@pytest.mark.launch
@pytest.mark.skipif(not Path("/dev/kvm").exists(), reason="no /dev/kvm on this machine")
def test_kvm_verdict_is_specific(no_leftovers) -> None:
    """On a PVM host the stock appliance hangs: the probe must be killed and say why; elsewhere KVM works."""
    run_dir = make_run_dir()
    try:
        t0 = time.monotonic()
        # on PVM the stock kernel spins a core until killed: 10 s says so; elsewhere the backend's own limit
        pvm = fingerprint.kvm_device()["flavour"] == "kvm_pvm"
        limit = 10 if pvm else BACKENDS["kvm"].probe_timeout()
        av = probe.verdict(BACKENDS["kvm"], Supervisor(), run_dir, refresh=True, timeout=limit)
        took = time.monotonic() - t0
    finally:
        remove_tree(run_dir)
    assert took < limit + 25
    if pvm:
        assert not av.usable
        assert "10 s" in av.reason and "kvm_pvm" in av.reason and "hangs in early boot" in av.reason
        assert av.details["msr_quirk"] == "needed"
    else:
        assert av.usable, av.reason


@pytest.mark.launch
def test_doctor_json_reports_tcg_and_the_host() -> None:
    import json

    proc = guestbench("doctor", "--json", "--backend", "tcg")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["backends"]["tcg"]["usable"] is True
    assert doc["host"]["versions"]["libguestfs"]
    assert doc["host"]["virtualization"]["summary"]


def test_doctor_rejects_unknown_backend() -> None:
    proc = guestbench("doctor", "--backend", "tcg,bogus")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bogus" in proc.stderr and "allowed" in proc.stderr


def test_a_wrapper_path_too_long_for_libguestfs_moves_to_a_short_one_of_its_cache_own(tmp_path: Path) -> None:
    """libguestfs 1.48 overflows its QMP probe's command buffer for some hypervisor paths over 80 bytes."""
    short = session_tmp_path() / "c"  # tmp_path may itself be long (pytest-xdist's popen-gwN/ adds to it)
    assert hv_path(short, "qemu") == short / "hv" / "qemu"
    seen = set()
    for n in range(1, 120):
        cache = tmp_path / ("d" * n)
        path = hv_path(cache, "qemu-kvm-no-arch-capabilities")
        assert len(str(path)) <= HV_PATH_MAX
        seen.add(path.parent if len(str(cache / "hv" / "qemu-kvm-no-arch-capabilities")) > HV_PATH_MAX else None)
    assert len(seen - {None}) == len([n for n in range(1, 120) if len(str(tmp_path / ("d" * n) / "hv" /
                                      "qemu-kvm-no-arch-capabilities")) > HV_PATH_MAX]), "two caches share one"
    # a temporary cache's wrappers' directory goes with it (at the next use of another): nothing stays till boot
    gone = tmp_path / ("e" * 90)
    gone.mkdir()
    first = hv_path(gone, "qemu").parent
    assert first.is_dir() and (first / "cache").read_text() == str(gone)
    gone.rmdir()
    kept = tmp_path / ("f" * 90)
    kept.mkdir()
    assert hv_path(kept, "qemu").parent.is_dir() and not first.exists()
    kept.rmdir()


@pytest.mark.launch  # a probe launch, killed at its 1 s deadline
def test_a_cache_whose_wrapper_path_libguestfs_would_overflow_on_probes_tcg(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An 89-byte wrapper path made the probing worker abort inside libguestfs ("corrupted size vs. prev_size")."""
    cache = tmp_path / "cache"
    cache = cache.with_name(cache.name + "x" * (89 - len(str(cache / "hv" / "qemu"))))
    assert len(str(cache / "hv" / "qemu")) == 89
    monkeypatch.setenv("GUESTBENCH_CACHE", str(cache))
    # 10 s: past libguestfs's QMP probes (about 1 s here, where the abort was) however busy the machine
    proc = guestbench("doctor", "--json", "--backend", "tcg", "--refresh", "--probe-timeout", "10")
    verdict = json.loads(proc.stdout)["backends"]["tcg"]
    assert "crashed" not in verdict["reason"] and "status -6" not in verdict["reason"], verdict
    assert verdict["usable"] or "did not finish within 10 s" in verdict["reason"], verdict


def test_a_kvm_device_of_a_group_unknown_here_makes_libvirt_unusable_with_the_fix(tmp_path: Path) -> None:
    """A qemu package installed in a chroot over this host's /dev gave /dev/kvm that root's kvm group: libvirt then
    probed qemu at every domain start (40 s each), past the level-1 guest's deadline (issue 45). A device node stands
    in for /dev/kvm here (a file of the same owner and group)."""
    import grp
    import os

    from guestbench.backends.libvirt import kvm_group_problem

    dev = tmp_path / "kvm"
    dev.write_text("")
    known = {g.gr_gid for g in grp.getgrall()}
    unknown = next(gid for gid in range(4_000_000, 4_001_000) if gid not in known)
    os.chown(dev, 0, unknown)
    why = kvm_group_problem(dev)
    assert why is not None and why.startswith(f"{dev} belongs to group {unknown}, which names no group on this host")
    assert why.endswith(f"chgrp kvm {dev}")
    os.chown(dev, 0, 0)
    assert kvm_group_problem(dev) is None  # a known group
    assert kvm_group_problem(tmp_path / "none") is None  # no device: nothing to say
