"""Test hypervisors: programs in tests/hv given to libguestfs as its qemu (LIBGUESTFS_HV), which pass its probes
to the real qemu, then hang, crash or fail at the launch, and the backend that launches through one."""

from __future__ import annotations

from pathlib import Path

from guestbench.backends.base import Availability, Backend, HandleConfig

HV = Path(__file__).parent.parent / "hv"  # tests/hv


class ScriptBackend(Backend):
    """The direct backend with a given program as the hypervisor."""

    def __init__(self, script: Path) -> None:
        self.name = script.stem
        self.script = script

    def preconditions(self) -> Availability:
        return Availability(True, "test hypervisor")

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        return HandleConfig("direct", ["force_tcg"], hv=str(self.script))
