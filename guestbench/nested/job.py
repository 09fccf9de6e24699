"""Placement 'nested': the same scenario run by guestbench inside a level-1 guest, merged into the host's file.

The host hands the guest its scenario (placement host only, every time-out scaled), this guestbench's
source, and a job that runs it (guestbench.nested.inside). The guest's results come back while it runs
(live snapshots) and at the end (output disk); its cells join the host's results file as placement
'nested', and the guest's own fingerprint, backend verdicts and level-1 set-up go under
doc["placements"]["nested"].
"""

from __future__ import annotations

import io
import shlex
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

import guestbench
from guestbench.backends import appliance
from guestbench.backends import BACKENDS
from guestbench.results import Run, read_json
from guestbench.util.errors import UserError
from guestbench.measurements import get as get_measurement
from guestbench.nested import image as nested_image
from guestbench.nested.image import GUEST_CACHE, GUEST_DATA
from guestbench.scenario import Scenario
from guestbench.util.units import format_duration

# Time-outs inside the level-1 guest are the scenario's times this. Measured here with the level-1 guest on
# TCG: UML start-up 107 s against 5.8 s on the host (18x); TCG inside TCG slower still.
TCG_SCALE = 25.0
KVM_SCALE = 3.0
BOOT_ALLOWANCE_S = 600.0  # level-1 boot and set-up before the scenario starts, TCG included
SILENCE_S = 600.0  # the guest prints a heartbeat every minute (guestbench.nested.inside): this much silence = hung
LIVE_DEVICE = "/dev/vde"
GUEST_OUT = "/guestbench-l1/out"
GUEST_IN = "/guestbench-l1/in"
PLACEMENT = "nested"


@dataclass(frozen=True)
class Level1:
    """How the level-1 guest runs, and the limits that follow from it; recorded with the results."""

    hypervisor: str  # "kvm" or "tcg"
    memory_mib: int
    vcpus: int
    timeout_scale: float
    launch_timeout_s: float
    sample_timeout_s: float
    probe_timeout_s: float
    deadline_s: float

    @property
    def kvm(self) -> bool:
        return self.hypervisor == "kvm"

    def describe(self) -> str:
        accel = "KVM" if self.kvm else "qemu TCG (no usable KVM here: the guest is emulated)"
        return (f"nested: level-1 guest on {accel}, {self.vcpus} vCPU{'s' if self.vcpus > 1 else ''}, "
                f"{self.memory_mib} MiB; every time-out inside is ×{self.timeout_scale:g}: "
                f"launch {self.launch_timeout_s:.0f} s, timed step "
                f"{self.sample_timeout_s:.0f} s, backend probe {self.probe_timeout_s:.0f} s; the whole level-1 run "
                f"is stopped after {format_duration(self.deadline_s)}, or after {SILENCE_S:.0f} s without a word "
                "from it")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(sc: Scenario, kvm: bool, probe_timeout: float | None) -> Level1:
    """Limits for the level-1 run: each inside time-out scaled, and a worst case for the whole run."""
    scale = sc.nested.timeout_scale or (KVM_SCALE if kvm else TCG_SCALE)
    launch, sample = sc.timeout * scale, sc.sample_timeout * scale
    probe = (probe_timeout or sc.timeout) * scale  # a probe is a launch: the scenario's launch limit, scaled
    backends = list(sc.backends or BACKENDS)
    worst = BOOT_ALLOWANCE_S + len(backends) * probe
    for spec in sc.measurements:
        m = get_measurement(spec.measurement)
        per_iteration = launch if m.times_launch else launch + sample
        # uml once per mode and drive path
        cells = len(backends) + ("uml" in backends) * (max(len(spec.uml_modes), 1) * max(len(spec.drive_paths), 1) - 1)
        worst += cells * len(sc.iterations(m.times_launch)) * per_iteration
    deadline = sc.nested.timeout or worst
    return Level1("kvm" if kvm else "tcg", sc.nested.memory_mib, sc.nested.vcpus, scale, launch, sample, probe,
                  deadline)


def inner_scenario(sc: Scenario, level1: Level1) -> dict[str, Any]:
    """The scenario file the guest runs: the same measurements, placement host, time-outs scaled."""
    doc = sc.to_file(placement=["host"], timeout=level1.launch_timeout_s, sample_timeout=level1.sample_timeout_s)
    doc.pop("stacks", None)  # the machine's own software only: the level-1 guest has no stacks built
    return doc


def _source() -> tuple[Path, bytes | None]:
    """This guestbench's package directory, and a tar of it unless the venv on the data disk already holds it."""
    package = Path(guestbench.__file__).resolve().parent
    venv = nested_image.venv_prefix()
    if venv is not None and venv.resolve() in package.parents:
        return package, None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(package), arcname=package.name)  # byte-code too: tar keeps the mtimes it is checked by
    return package, buf.getvalue()


def guestbench_job(command: str) -> dict[str, bytes | Path]:
    """job.sh (and, for editable installs, the source) running `command` with this guestbench inside the guest:
    its environment points guestbench and libguestfs at the appliances on the data disk; `{python}` in the
    command is the virtualenv's python."""
    venv = nested_image.venv_prefix()
    if venv is None:
        raise nested_image.BuildError("nested runs need guestbench installed in a virtualenv (make setup makes one)")
    package, src = _source()
    files: dict[str, bytes | Path] = {}
    unpack = ""
    if src is not None:
        files["src.tar"] = src
        parent = shlex.quote(str(package.parent))
        unpack = f"mkdir -p {parent} && tar -xf {GUEST_IN}/src.tar -C {parent} || exit 90\n"
    python = shlex.quote(str(venv / "bin" / "python"))
    workload_env = " ".join(f"{appliance.PREBUILT_ENV[(flavour, 'workload')]}={GUEST_DATA}/{name}"
                            for flavour, name in nested_image.WORKLOAD_APPLIANCES.items())
    files["job.sh"] = f"""# guestbench inside the level-1 guest (written by guestbench.nested.job)
export GUESTBENCH_CACHE={GUEST_CACHE} LIBGUESTFS_PATH={GUEST_DATA}/appliance
export GUESTBENCH_UML_APPLIANCE={GUEST_DATA}/uml-appliance COLUMNS=200 TERM=dumb
export {workload_env}
{unpack}cd {GUEST_IN}
{command.format(python=python)}
""".encode()
    return files


def job_files(sc: Scenario, level1: Level1) -> dict[str, bytes | Path]:
    """job.sh, scenario.yaml and (editable installs) the source: everything the guest's /init is given."""
    files = guestbench_job(
        f"exec {{python}} -m guestbench.nested.inside {LIVE_DEVICE} {GUEST_OUT}/results -- {GUEST_IN}/scenario.yaml "
        f"\\\n  --defer-probe --probe-timeout {level1.probe_timeout_s:.0f} --csv > {GUEST_OUT}/report.csv")
    files["scenario.yaml"] = yaml.safe_dump(inner_scenario(sc, level1), sort_keys=False).encode()
    return files


def guest_results(output: Path) -> dict[str, Any] | None:
    """The results file the guest wrote (the authoritative copy, from its output disk), if any; read as any
    untrusted JSON is (bounded: results.limits), and then through the model where it is merged (execute.remote)."""
    files = sorted((output / "results").glob("*.json")) if (output / "results").is_dir() else []
    for path in reversed(files):
        try:
            doc = read_json(path, "level-1 results file", "a guestbench results file")
        except UserError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def exit_problem(run: Run) -> str | None:
    """Why the nested placement produced nothing usable, if it did not."""
    info = run.placements.get(PLACEMENT)
    if info is None:
        return None
    error = (info.level1 or {}).get("error")
    return str(error) if error else None


__all__ = ["Level1", "plan", "job_files", "inner_scenario", "guest_results", "exit_problem"]
