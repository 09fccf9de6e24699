"""A scenario's cells in the order they run: measurement-major, so that the backends of one measurement are
measured close in time; `concurrency: N` makes a group of N cells (one per appliance) that run at once.
`blocks` then says which cells take turns (guestbench.plan.schedule): the single-cell groups of one scenario item
(its backends and variants), unless the order is sequential."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from guestbench.host import fingerprint
from guestbench.backends import BACKENDS
from guestbench.measurements.base import Measurement
from guestbench.results.model import HOST_STACK, Cell, system_name
from guestbench.measurements import get as get_measurement
from guestbench.scenario import SIDE, MeasurementSpec, Scenario


@dataclass
class Group:
    """Cells that run at the same time (usually one), and the iterations each of them runs."""

    cells: list[Cell]
    iterations: list[str]

    @property
    def backend(self) -> str:
        """The name its backend's verdict has (a stack's backend: `uml@sid`)."""
        return verdict_name(self.cells[0])

    @property
    def takes_turns(self) -> bool:
        """One appliance that can pause between iterations: not concurrent guests, not power-cut trials."""
        m = measurement_of(self.cells[0])
        return len(self.cells) == 1 and not m.kills_hypervisor and not m.density


@dataclass
class Block:
    """What the runner runs next: groups whose cells take turns (`turns`), or one group run as it is."""

    groups: list[Group]
    turns: bool


def _block_key(g: Group) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Which cells take turns together: a scenario item's (its backends and variants); for a workload, whose
    cells hold host disks for as long as they live, one variant's backends only (a matrix of filesystems would
    otherwise keep every variant's images and appliances at once), with both sides of `guestbench ab`."""
    cell = g.cells[0]
    if not measurement_of(cell).workload:
        return str(cell.group), ()
    variant = {k: v for k, v in (cell.variant or {}).items() if k != SIDE}
    return str(cell.group), tuple(sorted((k, repr(v)) for k, v in variant.items()))


# Every cell of a block keeps its appliance up, idle, while the others take their turns: idle guests hold
# memory and (under emulation) some CPU. A block holds at most this many cells, and fewer when half the host's
# RAM would not hold their appliances' memory.
MAX_BLOCK_CELLS = 8
ASSUMED_MEMSIZE_MIB = 1280  # libguestfs's default appliance memory on x86_64, when the scenario sets none


def block_cap(memsize_mib: int | None, row: int, total_bytes: int | None = None) -> int:
    """The most cells that take turns at once: bounded by MAX_BLOCK_CELLS and by half the RAM, and a whole
    number of rows (one variant's backends, `row` cells) where a row fits, so a variant's backends stay together."""
    total = fingerprint.memory_bytes() if total_bytes is None else total_bytes
    per = (memsize_mib or ASSUMED_MEMSIZE_MIB) * 2**20
    cap = max(2, min(MAX_BLOCK_CELLS, (total or 0) // 2 // per))
    return cap // row * row if 0 < row <= cap else cap


def blocks(groups: list[Group], interleave: bool, cap: int = MAX_BLOCK_CELLS) -> list[Block]:
    """Consecutive single-cell groups with one block key form one block when interleaving, `cap` cells at
    most; every other group (and every group of a sequential run) is a block of its own."""
    out: list[Block] = []
    for g in groups:
        last = out[-1] if out else None
        if interleave and g.takes_turns and last is not None and last.turns and len(last.groups) < cap \
                and _block_key(last.groups[0]) == _block_key(g):
            last.groups.append(g)
        else:
            out.append(Block([g], g.takes_turns))
    return out


def cells_per_item(groups: list[Group]) -> int:
    """The most cells one scenario item has (its backends × variants): two or more makes interleaving the default."""
    counts: dict[str, int] = {}
    for g in groups:
        group = str(g.cells[0].group)
        counts[group] = counts.get(group, 0) + 1
    return max(counts.values(), default=0)


@dataclass(frozen=True)
class System:
    """What a cell runs on: a backend on a software stack, and UML's mode and drive path where the scenario names
    them."""

    backend: str
    stack: str = HOST_STACK
    mode: str | None = None
    drive_path: str | None = None

    @property
    def verdict(self) -> str:
        """The name of its backend's verdict (the mode is the cell's: one probe per backend and stack)."""
        return system_name(self.backend, self.stack)


def systems(spec: MeasurementSpec, usable: list[str]) -> list[System]:
    """What an item's cells run on, in order: every usable verdict name (`tcg`, `uml@sid`), uml once per UML mode
    and drive path the item names."""
    out = []
    for name in usable:
        backend, _, stack = name.partition("@")
        uml = backend == "uml"
        for mode in (spec.uml_modes or (None,)) if uml else (None,):
            for path in (spec.drive_paths or (None,)) if uml else (None,):
                out.append(System(backend, stack or HOST_STACK, mode, path))
    return out


def verdict_names(sc: Scenario) -> list[str]:
    """The verdicts a run asks for: each backend on each of the scenario's stacks (`tcg`, `tcg@sid`, ...)."""
    return [system_name(b, stack) for b in (sc.backends or BACKENDS) for stack in sc.stacks]


def mode_lacking(cell: Cell, offered: Any) -> str | None:
    """Why a uml cell cannot run in the mode its item asks for (its UML's verdict lists the modes it `offered`), or
    None (no mode asked, or nothing known yet: the cell's own set-up then says)."""
    mode = cell.uml_mode
    if not mode or not isinstance(offered, list) or mode in offered:
        return None
    return f"this UML has no {mode} mode; it offers {', '.join(map(str, offered))} (seccomp mode came with Linux 6.16)"


def system_of(cell: Cell) -> str:
    """What a cell runs on, as its results name it (results.model.Cell.system): its work dir and its lines say it."""
    return cell.system


def verdict_name(cell: Cell) -> str:
    """The name of a cell's backend's verdict (results.model.system_name, without the mode)."""
    return system_name(cell.backend, cell.stack_name)


def stack_of(cell: Cell) -> str:
    return cell.stack_name


def measurement_of(cell: Cell) -> Measurement:
    """The measurement a planned cell runs (every cell the plan makes names one)."""
    return get_measurement(str(cell.measurement))


def params_of(cell: Cell) -> dict[str, Any]:
    """A planned cell's parameters (every cell the plan makes has them)."""
    return cell.params if cell.params is not None else {}


def plan(sc: Scenario, usable: list[str]) -> list[Group]:
    """Every group of the host placement, its cells typed as the results document will hold them (not yet
    recorded: guestbench.results.writer adds them); `usable`: verdict names, a stack's backends as `uml@sid`."""
    groups = []
    for spec in sc.measurements:
        m = get_measurement(spec.measurement)
        n = int(spec.params.get("concurrency", 1))
        for s in systems(spec, usable):
            groups.append(Group([new_cell(sc, spec, m, s, k, n) for k in range(1, n + 1)],
                                sc.iterations(m.times_launch)))
    return groups


def new_cell(sc: Scenario, spec: MeasurementSpec, m: Measurement, system: System, k: int, n: int) -> Cell:
    """The cell of guest k of n for one backend: what is measured, how, and what the clock covers; laid out with
    its keys in the order the results document has them (null ones too: docs/results-format.md)."""
    together: dict[str, Any] = ({"label": f"{spec.label}.guest{k}", "variant": {**spec.variant, "guest": k},
                                 "instance": k, "concurrency": n} if n > 1 else
                                {"label": spec.label, "variant": dict(spec.variant)})
    metrics = m.metrics(spec.params)
    backend = system.backend
    return Cell.laid_out(**{
        "backend": backend, "software": {"stack": system.stack}, **({"uml_mode": system.mode} if system.mode else {}),
        **({"drive_path": system.drive_path} if system.drive_path else {}),
        "placement": "host", "measurement": spec.measurement, "group": spec.group, **together,
        "params": dict(spec.params), "timed": m.timed_text(sc.cold), "cache_mode": m.cache_mode(spec.params),
        "bytes": m.nbytes(spec.params), "what": m.describe(spec.params),
        **({"metrics": [dataclasses.asdict(mt) for mt in metrics]} if metrics else {}),
        **({"phases": True, "phase_markers": BACKENDS[backend].phase_markers} if sc.phases and m.times_launch
           else {}),
        **({"env": dict(spec.env)} if spec.env else {}),
        **({"memsize": spec.memsize} if spec.memsize is not None else {}),
    })
