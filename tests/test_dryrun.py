"""`guestbench scenario FILE --dry-run`: every shipped scenario lists its cells and an estimate, launching nothing."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import guestbench
from helpers.paths import ROOT
from guestbench.plan import dryrun
from guestbench.plan.cells import verdict_names
from guestbench.scenario import load_scenario

# the scenarios the checkout ships (git's list), not a user's own beside them
SCENARIOS = sorted(ROOT / p for p in subprocess.run(
    ["git", "ls-files", "scenarios/*.yaml", "scenarios/**/*.yaml"],
    cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
HISTORY = ROOT / "tests" / "data" / "results"
HYPERVISORS = ("qemu-system", "/linux", "vmlinux", "libvirtd", "virtqemud", "guestfish", "supermin")


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_dry_run_of_every_shipped_scenario_lists_its_cells_and_starts_no_hypervisor(path: Path, tmp_path: Path) -> None:
    """Every program the dry run executes is recorded by strace: none may be a hypervisor or a daemon."""
    trace = tmp_path / "execs"
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), sys.executable, "-m",
                           "guestbench", "scenario", str(path), "--dry-run", "--json", "--results", str(HISTORY)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    sc = load_scenario(path)
    assert out["cells"], out
    assert {c["placement"] for c in out["cells"]} == set(sc.placements)
    assert {c["measurement"] for c in out["cells"]} == {m.measurement for m in sc.measurements}
    assert set(out["backends"]) == set(verdict_names(sc) if sc.backends else out["backends"])  # stacks: uml@sid
    assert out["estimated_s"] >= 0 and out["cells_without_estimate"] <= len(out["cells"])
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line and line.endswith("= 0")]
    # a program asked for its version (qemu, supermin: the cached verdicts' key) is not started as a hypervisor
    started = [e for e in execs if any(h in e.split("execve(", 1)[1].split(",", 1)[0] for h in HYPERVISORS)
               and '"--version"]' not in e]
    assert not started, started


def test_the_estimate_is_the_earlier_runs_median_times_the_launches() -> None:
    sc = load_scenario(ROOT / "scenarios" / "startup.yaml")
    dr = dryrun.dry_run(sc, HISTORY)
    newest = sorted(p for p in HISTORY.glob("*.json") if any(
        c["backend"] == "tcg" and c["measurement"] == "startup" and c.get("placement", "host") == "host"
        for c in json.loads(p.read_text())["cells"]))[-1]
    earlier = json.loads(newest.read_text())
    tcg = next(c for c in earlier["cells"] if c["backend"] == "tcg" and c["measurement"] == "startup")
    cell = next(c for c in dr.cells if c.backend == "tcg")
    assert cell.iterations == 1 + sc.warmup + sc.repetitions  # cold + warm-ups + repetitions
    assert cell.estimate_s == pytest.approx(cell.iterations * statistics.median(s["seconds"] for s in tcg["samples"]))
    assert newest.name in cell.basis
    assert dr.estimated_s >= cell.estimate_s


def test_dry_run_prints_the_table_and_exits_0_and_bad_input_is_one_line(tmp_path: Path) -> None:
    ok = guestbench("scenario", "scenarios/upload.yaml", "--dry-run", "--backend", "uml,tcg", "--results",
                    str(HISTORY))
    assert ok.returncode == 0, ok.stderr
    assert "Cells that would run" in ok.stdout and "Nothing was launched" in ok.stdout
    bad = guestbench("scenario", "scenarios/upload.yaml", "--dry-run", "--csv", "--results", str(tmp_path))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--csv" in bad.stderr


COMMANDS = """name: commands
repetitions: 1
warmup: 0
backends: [tcg]
measurements:
  - measurement: command
    label: listing
    argv: [virt-ls, -a, "{image}", /etc]
    env: {LD_PRELOAD: /opt/hook.so, LIBGUESTFS_DEBUG: 1}
  - measurement: command
    label: script
    guestfish: |
      run
      mount /dev/sda /
      ls /srv
"""


def test_dry_run_shows_the_argv_script_and_environment_each_cell_would_run_as_root(tmp_path: Path) -> None:
    """A scenario's command, guestfish script and env run as root on the host: a reviewer sees them first."""
    for program in ("virt-ls", "guestfish"):
        if shutil.which(program) is None:
            pytest.skip(f"{program} is not installed")
    sc = tmp_path / "s.yaml"
    sc.write_text(COMMANDS)
    shown = guestbench("scenario", str(sc), "--dry-run", "--results", str(tmp_path / "r"))
    assert shown.returncode == 0, shown.stderr
    out = " ".join(shown.stdout.split())  # the table may wrap
    assert "What the cells run on this host" in out, out
    assert "virt-ls -a '{image}' /etc" in out and "LD_PRELOAD=/opt/hook.so LIBGUESTFS_DEBUG=1" in out, out
    assert "guestfish --format=raw -a '{image}' -f '{workdir}/script.gf'" in out, out
    assert "script: guestfish script: run ; mount /dev/sda / ; ls /srv" in out, out
    doc = json.loads(guestbench("scenario", str(sc), "--dry-run", "--json", "--results", str(tmp_path / "r")).stdout)
    cells = {c["label"]: c for c in doc["cells"]}
    assert cells["listing"]["program"] == {"argv": ["virt-ls", "-a", "{image}", "/etc"]}
    assert cells["listing"]["env"] == {"LD_PRELOAD": "/opt/hook.so", "LIBGUESTFS_DEBUG": "1"}
    assert cells["script"]["program"]["script"] == "run\nmount /dev/sda /\nls /srv\n" and cells["script"]["env"] == {}
    assert not (tmp_path / "r").exists()
