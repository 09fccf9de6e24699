"""The level-1 guest, for real: build the image from this host's packages, boot it through libvirt, run a
job that uses guestbench and libguestfs inside, bring its output back; a job that overruns is destroyed.
Nothing may be left: no level-1 domain, no run directory, no overlay.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from guestbench.nested import guest, image
from guestbench.nested.console import LINE_MAX

from helpers.cli import guestbench, stop_run
from helpers.dirs import sticky_dir, tree
from helpers.paths import ROOT
from helpers.session import host_path_lock, run_dirs, session_tmp_path
from helpers.terminal import OBEYED
from helpers.users import as_nobody, planted

TMP = session_tmp_path()

pytestmark = pytest.mark.launch


@pytest.fixture(scope="module")
def built() -> Iterator[image.Image]:
    from guestbench.backends.libvirt import kvm_group_problem

    if (why := kvm_group_problem()) is not None:  # the machine's: libvirt re-probes qemu at every start (issue 45)
        pytest.skip(why)
    # where level-1 images were kept before (/var/tmp, anyone's): nobody plants one for today's inputs there, whose
    # kernel would leave a marker if booted; the build must neither take nor touch it
    old = Path("/var/tmp/guestbench-nested")
    with sticky_dir("drop-", TMP) as drop, host_path_lock("old-paths"):  # test_owned plants the same path
        plant = not old.exists()
        try:
            if plant:
                as_nobody("mkdir", "-p", str(old))
                planted(old, image.key(image.inputs()), drop / "kernel-ran")
            before = tree(old)
            img = _build()
            assert not img.path.is_relative_to(old) and tree(old) == before and not (drop / "kernel-ran").exists()
        finally:
            if plant:
                shutil.rmtree(old, ignore_errors=True)
    yield img


def _build() -> image.Image:
    proc = guestbench("nested", "build", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = image.cached()
    assert img is not None and Path(proc.stdout.strip()) == img.path
    assert img.kernel.exists() and img.initrd.exists() and img.root.exists() and img.data.exists()
    # built once: a second build with the same inputs reuses it
    again = guestbench("nested", "build")
    assert again.returncode == 0 and "up to date" in again.stderr
    return img


def _job(script: str) -> dict[str, bytes | Path]:
    return {"job.sh": script.encode()}


# What a level-1 guest may write to its console (the job's output goes there): sequences a terminal obeys, rich
# markup, a bidi override, and a line far longer than any shown (issue 46)
HOSTILE_JOB = ("printf 'title\\033]0;pwned\\007\\n\\033[2Jcleared\\n\\033[31mred\\033[0m\\n"
               "admin\\342\\200\\256exe.txt\\n[/] [link=http://evil.example]click[/link]\\n'\n"
               "head -c 100000 /dev/zero | tr '\\0' x; echo\n")


def test_job_runs_inside_and_its_output_and_exit_status_come_back(built: image.Image, tmp_path: Path,
                                                                  placement: Any) -> None:
    """The job's files and exit status cross back; guestbench and libguestfs inside are the end-to-end test's.
    What the job writes to the console reaches the terminal as a nested run shows it (NestedPlacement's console
    printer): shown, never obeyed, and a long line cut."""
    nested, terminal, _ = placement
    lines: list[str] = []

    def seen(line: str) -> None:
        lines.append(line)
        nested.show_console(line)

    result = guest.run_job(built, _job(HOSTILE_JOB + "cp /proc/cpuinfo /guestbench-l1/out/cpuinfo\nexit 3\n"),
                           tmp_path / "out", memory_mib=512, vcpus=1, kvm=False, timeout_s=600, on_console=seen)
    assert result.exit_status == 3
    shown = terminal.getvalue()
    for seq in OBEYED:
        assert seq not in shown, repr(seq)
    for visible in ("title\\x1b]0;pwned\\x07", "\\x1b[2Jcleared", "admin\\u202eexe.txt",
                    "[/] [link=http://evil.example]click[/link]"):
        assert f"level-1 │ {visible}" in shown, (visible, lines[-12:])
    assert "x" * LINE_MAX + f" [... cut: the line is longer than {LINE_MAX} bytes]" in lines
    assert "QEMU" in (result.output / "cpuinfo").read_text()  # it really ran in the guest
    assert any("guestbench-l1: booted" in ln for ln in lines), lines[-5:]
    assert any(image.OUTPUT_WRITTEN == ln.strip() for ln in lines), lines[-5:]
    if any("had not powered off" in ln for ln in lines):  # an emulated power-off that stalls (seen here and in CI)
        warnings.warn("the level-1 guest did not power itself off after its output; destroyed after the grace "
                      "period (tested by test_a_guest_that_does_not_power_off_after_its_output_is_destroyed...)",
                      stacklevel=2)
    assert guest.leftover_domains(TMP) == []
    assert run_dirs() == []


def test_a_job_that_overruns_is_destroyed(built: image.Image, tmp_path: Path) -> None:
    with pytest.raises(guest.GuestError, match="did not finish within 5 s and was destroyed"):
        guest.run_job(built, _job("echo about to hang; sleep 3600"), tmp_path / "out", memory_mib=512, vcpus=1,
                      kvm=False, timeout_s=5)  # destroyed as it boots: the same path as mid-job
    assert guest.leftover_domains(TMP) == []
    assert run_dirs() == []


def test_a_guest_that_does_not_power_off_after_its_output_is_destroyed_and_the_output_kept(
        built: image.Image, tmp_path: Path) -> None:
    """A stalled emulated power-off (seen once in CI after the kernel's "Power down") costs a grace period,
    not the run: the job here writes the output itself, says so the way /init does, and never powers off."""
    script = (f"mkdir -p /tmp/o && echo kept > /tmp/o/marker && echo 5 > /tmp/o/exit-status\n"
              f"tar -cf /dev/vdd -C /tmp/o . && sync\necho '{image.OUTPUT_WRITTEN}'\nsleep 3600\n")
    lines: list[str] = []
    t0 = time.monotonic()
    result = guest.run_job(built, _job(script), tmp_path / "out", memory_mib=512, vcpus=1, kvm=False,
                           timeout_s=600, on_console=lines.append, poweroff_grace_s=5)
    assert time.monotonic() - t0 < 300, "destroyed after the grace, long before the time-out"
    assert result.exit_status == 5 and (result.output / "marker").read_text() == "kept\n"
    assert any("had not powered off 5 s later; destroyed" in ln for ln in lines), lines[-5:]
    assert guest.leftover_domains(TMP) == []
    assert run_dirs() == []


def test_doctor_says_whether_nested_runs_are_possible(built: image.Image) -> None:
    proc = guestbench("doctor", "--json", "--backend", "uml")
    nested = json.loads(proc.stdout)["nested"]
    assert nested["possible"] is True and nested["image"] == str(built.path)


# ------------------------------------------------------------------ placement nested, end to end

# long: 2.5 min when a probe launches, 13.5 min when every attempt stalls (three 240 s limits; seen here on
# 2026-11-25 and in CI), which alone can take the suite past CI's limit; `make test-long` runs it
@pytest.mark.long
def test_kvm_inside_the_level1_guest_is_decided_by_its_own_probe(built: image.Image, tmp_path: Path) -> None:
    """KVM on the level-1 guest's emulated AMD-V: /init loads kvm_amd, and guestbench's doctor inside decides as on
    any host: preconditions, the MSR check, then real probe launches with the limit and attempts for an emulated
    CPU. Here such a probe launches (in 25-45 s, 12 of 12 by hand); CI has seen every attempt of one level-1 boot
    stall. Either verdict must be a decided one: launched within the limit, or every attempt killed at the limit
    with where it stopped kept as the evidence (then said as a warning, for the next look at the cause)."""
    from guestbench.backends.direct import EMULATED_KVM_PROBE_ATTEMPTS, EMULATED_KVM_PROBE_TIMEOUT_S
    from guestbench.nested import job

    files = job.guestbench_job("{python} -m guestbench doctor --json --backend kvm > /guestbench-l1/out/doctor.json")
    lines: list[str] = []
    result = guest.run_job(built, files, tmp_path / "out", memory_mib=2048, vcpus=2, kvm=False, timeout_s=1200,
                           on_console=lines.append)
    assert any("guestbench-l1: /dev/kvm ready (kvm_" in ln for ln in lines), lines[-20:]
    doc = json.loads((result.output / "doctor.json").read_text())
    assert doc["host"]["cpu_model"].startswith("QEMU TCG CPU")  # the guest's, not this host's
    kvm = doc["backends"]["kvm"]
    details = kvm["details"]
    assert details["kvm"]["flavour"] in ("kvm_amd", "kvm_intel") and details["msr_quirk"] == "not-needed"
    assert details["probe_timeout_s"] == EMULATED_KVM_PROBE_TIMEOUT_S
    if kvm["usable"]:
        assert result.exit_status == 0, kvm
        assert kvm["reason"].startswith("launched in") and "(probe)" in kvm["reason"], kvm
        assert 0 < details["probe_launch_s"] < EMULATED_KVM_PROBE_TIMEOUT_S
    else:
        assert result.exit_status == 1, kvm
        assert details["timed_out"] and details["attempts"] == EMULATED_KVM_PROBE_ATTEMPTS, details
        assert details["earlier_attempts"] == [details["failure"]] * (EMULATED_KVM_PROBE_ATTEMPTS - 1), details
        assert details["last_output"] and len(details["earlier_last_output"]) == EMULATED_KVM_PROBE_ATTEMPTS - 1
        warnings.warn(f"kvm inside the level-1 guest: every probe attempt stalled; where each stopped: "
                      f"{details['earlier_last_output'] + [details['last_output']]}", stacklevel=2)
    assert guest.leftover_domains(TMP) == []
    assert run_dirs() == []


SCENARIO = """name: nested-smoke
backends: [BACKENDS]
placement: [host, nested]
repetitions: 1
warmup: 0
timeout: 120
nested: {memory: 2048, vcpus: 2}
measurements: [{measurement: upload, size: 4MiB, disk_size: 80MiB}]  # one launch: a UML launch in TCG is ~2 min
"""
NESTED_SCENARIO = SCENARIO.replace("BACKENDS", "uml")
# KVM inside: on the level-1 guest's emulated AMD-V (a launch there ~30-45 s); on this host kvm is PVM (unusable)
NESTED_KVM_SCENARIO = SCENARIO.replace("BACKENDS", "uml, kvm")


def _virsh_domains_under(path: Path) -> list[str]:
    """What `virsh list --all` shows whose XML mentions `path`: this test session's domains, not another user's."""
    import subprocess

    names = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True,
                           text=True, timeout=60).stdout.split()
    return [n for n in names if str(path) in subprocess.run(["virsh", "-c", "qemu:///system", "dumpxml", n],
                                                              capture_output=True, text=True, timeout=60).stdout]


@pytest.mark.timeout(2700)
# Both in make test-long: one UML launch inside the TCG level-1 guest takes about 4 minutes here (238 s, with a
# 1280 or a 256 MiB appliance alike), the whole test 5.5 min; kvm inside a TCG guest's emulated AMD-V stalls
# some days (the probe test above says so). make test boots the level-1 guest for the job tests above and for
# the SIGTERM test below, which runs this scenario until the guest's own run has streamed back and been merged.
@pytest.mark.long
@pytest.mark.parametrize("scenario", [pytest.param(NESTED_SCENARIO, id="uml"),
                                      pytest.param(NESTED_KVM_SCENARIO, id="uml-kvm")])
def test_scenario_runs_on_the_host_and_nested_and_merges_one_results_file(scenario: str, built: image.Image,
                                                                          tmp_path: Path) -> None:
    """Boot the level-1 guest, run a one-repetition scenario inside (uml, and kvm in make test-long), check the
    merged file."""
    sc = tmp_path / "nested.yaml"
    sc.write_text(scenario)
    with_kvm = scenario == NESTED_KVM_SCENARIO
    proc = guestbench("scenario", str(sc), "--results", str(tmp_path / "results"), "--json", timeout=2400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = list((tmp_path / "results").glob("*.json"))
    doc = json.loads(path.read_text())
    assert doc["status"] == "complete"
    cells = {(c["placement"], c["backend"]): c for c in doc["cells"]}
    host_kvm = doc["backends"].get("kvm", {})  # in the scenario with kvm only
    # a backend not usable on the host has no host cell (here kvm: /dev/kvm is PVM); inside, both are measured
    expected = {("host", "uml"), ("nested", "uml")} | ({("nested", "kvm")} if with_kvm else set()) | (
        {("host", "kvm")} if with_kvm and host_kvm["usable"] else set())
    assert set(cells) == expected and len(doc["cells"]) == len(expected)
    for key, cell in cells.items():
        assert cell["measurement"] == "upload" and cell["status"] == "done", (key, cell)
        assert len(cell["samples"]) == 1 and cell["samples"][0]["seconds"] > 0, (key, cell)
        assert cell["cold_s"] is not None
        # the 4 MiB arrived intact: the same sha256 on the host and in the appliance
        assert cell["verification"]["ok"] is True and cell["verification"]["host"] == cell["verification"]["guest"]
    nested = doc["placements"]["nested"]
    assert nested["status"] == "complete" and nested["level1"]["error"] is None
    assert nested["level1"]["hypervisor"] == "tcg" and nested["level1"]["vcpus"] == 2  # no usable KVM here
    assert nested["level1"]["memory_mib"] == 2048 and nested["level1"]["image"] == built.path.name
    # the guest's own fingerprint: a qemu machine with the level-1 guest's RAM, not this host
    assert nested["host"]["memory_bytes"] < 2048 * 2**20 < doc["host"]["memory_bytes"]
    assert nested["host"]["cores"] == 2
    for name in ("uml", "kvm") if with_kvm else ("uml",):
        # inside, no probe launch of its own (a UML launch there takes minutes): the cell's launch was the probe
        assert nested["backends"][name]["usable"] is True, nested["backends"][name]
        assert nested["backends"][name]["details"]["probe"] == "first launch of the run", nested["backends"][name]
    if with_kvm:
        assert nested["backends"]["kvm"]["details"]["kvm"]["flavour"] in ("kvm_amd", "kvm_intel")
    # time-outs scaled inside: the guest's scenario says so
    assert nested["level1"]["launch_timeout_s"] == 120 * nested["level1"]["timeout_scale"]
    # the printed summary has the side-by-side row with the nested/host ratio of medians
    summary = json.loads(proc.stdout)
    rows = {r["backend"]: r for r in summary["placements"]}
    host_s, nested_s = (cells[(p, "uml")]["samples"][0]["seconds"] for p in ("host", "nested"))
    assert abs(rows["uml"]["ratio"] - nested_s / host_s) < 1e-9
    if not with_kvm:
        assert summary.get("placements_missing", []) == []
    elif not host_kvm["usable"]:  # the kvm row: measured inside, and why the host has nothing
        [gap] = summary["placements_missing"]
        assert (gap["backend"], gap["present"], gap["missing"], gap["unusable"]) == ("kvm", "nested", "host", True)
        assert host_kvm["reason"] in gap["reason"] and gap["nested"]["n"] == 1
        if host_kvm["details"]["kvm"]["flavour"] == "kvm_pvm":
            assert "hangs in early boot" in host_kvm["reason"] or "cannot run here" in host_kvm["reason"]
    assert "nested: level-1 guest on qemu TCG" in proc.stderr and "time-out" in proc.stderr
    # must-hold 3: no guestbench domain, no overlay or run directory left
    assert guest.leftover_domains(TMP) == [] and not _virsh_domains_under(TMP)
    assert run_dirs() == []


def _merged_from_inside(results: Path) -> bool:
    """Whether the results file there holds what the level-1 guest's own run sent: its fingerprint and cells."""
    try:
        [path] = list(results.glob("*.json"))
        doc = json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet (the file is replaced whole, never read half-written)
        return False
    nested = (doc.get("placements") or {}).get("nested") or {}
    return bool(nested.get("host")) and any(c.get("placement") == "nested" for c in doc.get("cells", []))


@pytest.mark.timeout(1800)
def test_sigterm_during_the_nested_part_destroys_the_guest_and_keeps_what_both_levels_sent(built: image.Image,
                                                                                      tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    sc = tmp_path / "nested.yaml"
    sc.write_text(NESTED_SCENARIO)
    results = tmp_path / "results"
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        # KVM's verdict for the level-1 guest: on a PVM host its probe hangs to the limit (a minute by default)
        # unless a verdict is cached; 15 s is enough to say so
        proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(sc), "--results", str(results),
                                 "--probe-timeout", "15"],
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            # until the guest's own run, streamed back as it goes, is merged into the results file here: its
            # fingerprint and its cells (the one UML launch inside, about 4 min, and the rest of the merge are
            # make test-long's test above)
            deadline = time.monotonic() + 900
            while not _merged_from_inside(results):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(1)
            assert guest.leftover_domains(TMP) != []  # the level-1 guest is running now
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        finally:
            stop_run(proc)
    assert guest.leftover_domains(TMP) == [] and not _virsh_domains_under(TMP)
    assert run_dirs() == []
    [path] = list(results.glob("*.json"))
    doc = json.loads(path.read_text())
    assert doc["status"] == "interrupted"
    [host_cell] = [c for c in doc["cells"] if c["placement"] == "host"]
    assert len(host_cell["samples"]) == 1  # taken before the nested part: kept
    nested = doc["placements"]["nested"]
    assert nested["status"] == "interrupted" and "interrupted" in nested["level1"]["error"]
    # what the guest sent is kept: its fingerprint (a qemu machine with the level-1 guest's RAM) and its cell
    assert nested["host"]["memory_bytes"] < 2048 * 2**20 < doc["host"]["memory_bytes"]
    [nested_cell] = [c for c in doc["cells"] if c["placement"] == "nested"]
    assert (nested_cell["backend"], nested_cell["measurement"]) == ("uml", "upload"), nested_cell
