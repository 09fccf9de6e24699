"""Faults a user meets: a host disk that fills during a sample, libvirtd going away mid-run. Each ends the sample
it hits with a reason that says what and where, soon, and the run goes on with nothing left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from guestbench.host import daemons, space
from guestbench.backends.appliance import APPLIANCES_DIR
from guestbench.backends import libvirt as libvirt_backend
from guestbench.backends.libvirt import connect_error, ensure_daemons, guestfs_domains

from helpers.cli import guestbench, start_guestbench, stop_run, write_scenario
from helpers.dirs import small_tmpfs
from helpers.leaks import processes_mentioning
from helpers.session import session_tmp_path

pytestmark = pytest.mark.launch

LEFT_FREE = 16 * 2**20  # after the fill: enough for mkfs and the appliance's overlay, not for the 100 MiB upload


def _doc(results: Path) -> dict | None:
    files = list(results.glob("*.json")) if results.exists() else []
    try:
        return json.loads(files[0].read_text()) if files else None
    except (OSError, ValueError):
        return None


def _start(sc: Path, results: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return start_guestbench("scenario", str(sc), "--results", str(results), *args, env={**os.environ, **(env or {})})


# qemu's pause seen through QMP (tcg; libvirt's domain state is the same watch's other half, tried by hand: the
# README's fault table) and UML's write errors found in its kernel log
@pytest.mark.parametrize(("backend", "size"), [("tcg", "300m"), ("uml", "1g")])
def test_a_disk_that_fills_during_an_upload_ends_the_sample_at_once_with_where_and_the_run_goes_on(
        tmp_path: Path, backend: str, size: str) -> None:
    sc = write_scenario(tmp_path / "s.yaml", """
name: full-disk
repetitions: 1
warmup: 0
sample_timeout: 600
measurements:
  - {measurement: upload, size: 100MiB, disk_size: 200MiB, filesystem: ext2}
  - startup
""")
    results = tmp_path / "results"
    with small_tmpfs(size) as mnt:
        proc = _start(sc, results, "--backend", backend, env={"GUESTBENCH_TMPDIR": str(mnt)})
        try:
            deadline = time.monotonic() + 400
            # the upload cell's appliance is being launched (not the backend's probe, which comes before the cell)
            while not processes_mentioning(f"/upload-{backend}/", f"{mnt}/"):  # this run's, not another worker's
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
                time.sleep(0.2)
            filler = mnt / "filler"
            with open(filler, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, space.free_bytes(mnt) - LEFT_FREE)
            out, err = proc.communicate(timeout=900)
        finally:
            stop_run(proc)
        doc = _doc(results)
        assert doc is not None, err[-2000:]
        upload, startup = doc["cells"]
        reason = upload["failures"][0]["reason"] if upload["failures"] else ""
        assert upload["samples"] == [] and f"host filesystem full at {mnt}" in reason, (upload, err[-2000:])
        if backend != "uml":  # qemu pauses the guest; the watch names the image it could not write
            assert "paused the guest on ENOSPC writing" in reason and str(mnt) in reason.split("writing")[1], reason
        assert "deadline" not in reason and "timed out" not in reason, reason
        # the run went on: the next cell was checked and said what it needs, where
        assert startup["status"] == "unavailable", startup
        assert f"free on {mnt}" in startup["skip_reason"] and "needs" in startup["skip_reason"], startup
        assert proc.returncode == 1, (proc.returncode, err[-2000:])
        assert "internal error" not in err and "Traceback" not in err, err[-2000:]
        filler.unlink()
        left = [p for p in mnt.iterdir() if p.name != APPLIANCES_DIR]  # UML's appliance cache lives in the temp root
        assert left == [], f"left on the full filesystem: {left}"
        assert processes_mentioning(str(mnt)) == []
        assert not guestfs_domains(mnt)


def _libvirtd(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "libvirtd"
    except OSError:
        return False


def _gone(pids: list[str], patience: float = 30.0) -> None:
    """The libvirtd this test stopped, gone before another is started: one that is still exiting removes the new
    one's socket, and libvirtd has been seen to hang in its shutdown: after `patience` it is killed (still a
    libvirtd: a pid is not reused while its process lives), and given `patience` more to go."""
    for kill in (False, True):
        deadline = time.monotonic() + patience
        while any(_libvirtd(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for p in pids if kill else []:
            with contextlib.suppress(ProcessLookupError):
                if _libvirtd(p):
                    os.kill(int(p), signal.SIGKILL)
        if not any(_libvirtd(p) for p in pids):
            return


@pytest.mark.alone  # stops the host's libvirtd, which the other workers' libvirt runs use
def test_libvirtd_stopped_mid_run_fails_the_libvirt_cell_with_the_reason_and_the_others_complete(
        tmp_path: Path) -> None:
    assert ensure_daemons() is None, connect_error()
    # Alone, so every second here is the suite's wall time: libvirt's first launch is its probe (--defer-probe)
    # and its cold launch, and libvirtd is stopped once that launch is recorded. Turns go libvirt cold, uml cold,
    # libvirt rep 1 (the launch that meets the stopped daemon), uml rep 1 (after the stop).
    sc = write_scenario(tmp_path / "s.yaml", "name: daemon-gone\nrepetitions: 1\nwarmup: 0\ntimeout: 240\n"
                        "measurements: [startup]\n")
    results = tmp_path / "results"
    proc = _start(sc, results, "--backend", "libvirt-tcg,uml", "--defer-probe")
    stopped: list[str] = []
    try:
        deadline = time.monotonic() + 400
        while True:
            doc = _doc(results)
            cells = {c["backend"]: c for c in doc["cells"]} if doc else {}
            if "libvirt-tcg" in cells and cells["libvirt-tcg"]["cold_s"] is not None:
                break
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        stopped = [str(p) for p in daemons.pids_of("libvirtd")]  # this root's: never a chroot's on the machine
        assert stopped
        for p in stopped:
            os.kill(int(p), signal.SIGTERM)
        out, err = proc.communicate(timeout=900)
    finally:
        stop_run(proc)
        _gone(stopped)
        assert ensure_daemons() is None, "libvirtd could not be started again for the tests after this one"
    doc = _doc(results)
    assert doc is not None
    cells = {c["backend"]: c for c in doc["cells"]}
    lv, uml = cells["libvirt-tcg"], cells["uml"]
    said = [f["reason"] for f in lv["failures"]] + [lv.get("skip_reason") or ""]
    assert lv["cold_s"] > 0 and lv["samples"] == [], lv  # libvirt worked in this run, until the daemon went
    assert doc["backends"]["libvirt-tcg"]["details"]["probe"] == "first launch of the run", doc["backends"]
    assert any("libvirtd stopped answering" in r for r in said), (lv, err[-2000:])
    assert len(uml["samples"]) == 1 and uml["status"] == "done", uml
    # the run completed (its failures are data), and a usable backend without a sample is exit status 1
    assert doc["status"] == "complete" and proc.returncode == 1, (doc["status"], proc.returncode, err[-2000:])
    assert "internal error" not in err and "Traceback" not in err, err[-2000:]
    assert not guestfs_domains(session_tmp_path())
    assert [p for p in processes_mentioning(f"{session_tmp_path()}/") if "qemu" in p] == []


@pytest.mark.alone  # stops the host's libvirtd, which the other workers' libvirt runs use
def test_a_hung_libvirtd_is_reported_within_the_deadline_not_waited_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """libvirt.open() waits without a deadline on a daemon that accepts and never answers: a SIGSTOPped libvirtd."""
    assert ensure_daemons() is None, connect_error()
    pids = [str(p) for p in daemons.pids_of("libvirtd")]
    assert pids
    try:
        for p in pids:
            os.kill(int(p), signal.SIGSTOP)
        t0 = time.monotonic()
        err = connect_error(1.0)  # alone, so every second here is the suite's: a stopped daemon never answers
        took = time.monotonic() - t0
        assert err.startswith("libvirtd did not answer within 1 s (stopped or hung?) [") and took < 3, (err, took)
        # the failure names what libvirtd was doing: these very processes, stopped
        assert all(f"pid {p} stopped" in err for p in pids), err
        monkeypatch.setattr(libvirt_backend, "OPEN_TIMEOUT_S", 1.0)  # a listing connects within it, or gives up
        t0 = time.monotonic()  # a listing (a clean-up's, a leak check's) is bounded too: none, not a wait
        assert guestfs_domains(session_tmp_path()) == set() and time.monotonic() - t0 < 3
        t0 = time.monotonic()
        why = ensure_daemons(wait_s=1.0)
        took = time.monotonic() - t0
        assert why.startswith("virtlogd and libvirtd were running but qemu:///system does not answer: libvirtd "
                              "did not answer within 1 s (stopped or hung?) [libvirtd: pid "), why
        assert took < 6, took
    finally:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(p), signal.SIGCONT)
    assert ensure_daemons() is None, "libvirtd did not answer again after SIGCONT"


@contextlib.contextmanager
def _libvirtd_stopped() -> Any:
    """libvirtd SIGSTOPped for the block (after the connections it needs are open), SIGCONT at its end."""
    pids = daemons.pids_of("libvirtd")
    assert pids
    try:
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        yield
    finally:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)


@pytest.mark.alone  # stops the host's libvirtd, which the other workers' libvirt runs use
def test_a_libvirtd_that_hangs_after_answering_costs_a_deadline_and_the_level1_guest_its_qemu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A call on an open connection waits without a deadline too: a listing whose daemon stopped after it
    connected ends at the call's deadline. The level-1 guest's watch (nested.guest) on a real domain whose daemon
    is then stopped ends at that deadline with the guest's qemu killed (found by the run directory its command
    line names)."""
    from guestbench.nested import guest
    from guestbench.host.paths import make_run_dir, remove_tree

    assert ensure_daemons() is None, connect_error()
    conn = libvirt_backend.open_connection()
    with _libvirtd_stopped():
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="did not answer within 2 s"):
            libvirt_backend.bounded(lambda: conn.listAllDomains(0), 2.0)  # noqa: F821 (del below)
        assert time.monotonic() - t0 < 4
    del conn  # the listing's thread, answered now, lets it go
    assert ensure_daemons() is None, "libvirtd did not answer again after SIGCONT"
    run_dir = make_run_dir()
    domain = guest._Domain(run_dir)
    try:
        domain.open()
        with open(run_dir / "blank.raw", "wb") as f:
            f.truncate(2**20)
        os.chmod(run_dir / "blank.raw", 0o600)  # as the level-1 guest's: libvirt hands it to its qemu user
        # a real guest that boots nothing (its firmware finds a blank disk and waits), its disk in the run
        # directory as the level-1 guest's are
        domain.start(f"<domain type='qemu'><name>{guest.DOMAIN_PREFIX}hang-{os.getpid()}</name><memory unit='MiB'>"
                     "64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><devices><disk type='file' "
                     f"device='disk'><driver name='qemu' type='raw'/><source file='{run_dir}/blank.raw'/><target "
                     "dev='vda' bus='virtio'/></disk><memballoon model='none'/></devices></domain>")
        qemus = [p for p in processes_mentioning(f"{run_dir}/") if "qemu" in p]
        assert len(qemus) == 1 and domain.active(), qemus
        # the short deadline only while libvirtd is stopped: the checks after SIGCONT wait as long as a run's do
        with monkeypatch.context() as short, _libvirtd_stopped():
            short.setattr(libvirt_backend, "CALL_TIMEOUT_S", 2.0)  # once started: a TCG start may take longer
            t0 = time.monotonic()
            with pytest.raises(guest.GuestError, match=r"did not answer within 2 s.*qemu was killed \(qemu pid"):
                domain.active()
            assert time.monotonic() - t0 < 5 and domain.silent
            domain.end()  # with libvirtd still stopped
        deadline = time.monotonic() + 30  # killed: gone as soon as it is reaped
        while [p for p in processes_mentioning(f"{run_dir}/") if "qemu" in p] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in processes_mentioning(f"{run_dir}/") if "qemu" in p] == []
    finally:
        domain.end()  # after a failure above: destroyed, let go, no qemu of this run left
        remove_tree(run_dir)
    assert ensure_daemons() is None, "libvirtd did not answer again after SIGCONT"
    deadline = time.monotonic() + 30  # libvirtd, answering again, sees its qemu gone and drops the domain
    while libvirt_backend.domains_under(guest.DOMAIN_PREFIX, run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert libvirt_backend.domains_under(guest.DOMAIN_PREFIX, run_dir) == []


def test_two_runs_at_once_both_finish_say_the_host_was_shared_and_build_the_shared_cache_once(
        tmp_path: Path) -> None:
    """Both start on an empty cache and temp root: both need the UML appliance, the probe verdict and the payload
    at the same moment. The locks make one build each; the registry makes each run see the other."""
    fresh = Path(tempfile.mkdtemp(prefix="two-", dir=session_tmp_path()))
    os.chmod(fresh, 0o755)
    env = {"GUESTBENCH_CACHE": str(fresh / "cache"), "GUESTBENCH_TMPDIR": str(fresh / "tmp"),
           "GUESTBENCH_RUNS_DIR": str(fresh / "runs")}
    (fresh / "tmp").mkdir(mode=0o755)
    sc = write_scenario(tmp_path / "s.yaml", """
name: two-at-once
repetitions: 2
warmup: 0
measurements:
  - {measurement: upload, size: 8MiB, disk_size: 128MiB, filesystem: ext2}
""")
    procs = [_start(sc, tmp_path / f"r{k}", "--backend", "uml", env=env) for k in (1, 2)]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            stop_run(p)
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "internal error" not in err, err[-3000:]
    shared = 0
    for k in (1, 2):
        doc = _doc(tmp_path / f"r{k}")
        assert doc is not None and doc["status"] == "complete"
        for cell in doc["cells"]:
            assert cell["status"] == "done" and len(cell["samples"]) == 2 and not cell["failures"], cell
            shared += sum(1 for s in cell["samples"] if (s.get("load") or {}).get("other_runs", 0) >= 1)
        first = doc["cells"][0]["samples"][0]
        assert first["load"]["other_runs"] == 1, f"run {k}'s first sample was taken beside the other run: {first}"
        shown = guestbench("show", str(next((tmp_path / f"r{k}").glob("*.json"))), timeout=120)
        assert "SHARED host" in " ".join(shown.stdout.split()), shown.stdout[-2000:]
    assert shared >= 2
    # one probe launch: the other run takes its verdict, cached (execute/probe.verdict: waiting for it if it is
    # under way)
    cached = [_doc(tmp_path / f"r{k}")["backends"]["uml"]["details"].get("cached") for k in (1, 2)]
    assert sorted(map(bool, cached)) == [False, True], cached
    # the shared cache: one appliance, one payload with the right checksum, one verdict; no half-made leftovers
    (appliance,) = [d for d in (fresh / "tmp" / APPLIANCES_DIR / "uml-standard").iterdir() if d.is_dir()]
    assert not appliance.name.startswith("."), appliance
    payloads = fresh / "cache" / "payloads"
    assert sorted(p.name for p in payloads.iterdir()) == \
        ["random-8388608.bin", "random-8388608.sha256"]
    digest = subprocess.run(["sha256sum", str(payloads / "random-8388608.bin")], capture_output=True, text=True,
                            check=True).stdout.split()[0]
    assert (payloads / "random-8388608.sha256").read_text().strip() == digest
    assert json.loads((fresh / "cache" / "probes.json").read_text())["uml"]["usable"] is True
    assert list((fresh / "runs").iterdir()) == [], "both runs left the registry"
    assert [p for p in (fresh / "tmp").iterdir() if p.name != APPLIANCES_DIR] == []
    subprocess.run(["rm", "-rf", str(fresh)], check=True)
