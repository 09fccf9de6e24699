"""What `guestbench scenario --dry-run` prints: the backends' cached verdicts, the cells that would run with their
estimate, what they run on this host (a scenario file is code), and what the estimate rests on."""

from __future__ import annotations

import os
import shlex

from guestbench.output.document import Bullets, Document, Para, Section, Table
from guestbench.output.formats import Printable
from guestbench.plan.dryrun import DryRun, PlannedCell
from guestbench.util.reasons import short_reason
from guestbench.util.units import format_duration


def printable(dr: DryRun) -> Printable:
    from guestbench.output.export import json as json_export

    return Printable(document=lambda: document(dr), summary=lambda: json_export.dryrun_summary(dr),
                     no_csv="is not available with --dry-run; allowed: --json, --markdown or the table")


def document(dr: DryRun) -> Document:
    """The dry run as a document: the backends' verdicts, the cells, the estimate and what it rests on."""
    sc = dr.scenario
    sampling = (f"{sc.repetitions} to {sc.rep_cap} repetitions (precision {sc.precision:.0%})" if sc.precision
                else f"{sc.repetitions} repetitions") + f", {sc.warmup} warm-up(s)" + ("" if sc.cold else
                                                                                 ", no cold first launch")
    verdicts = Table("verdicts", "Backends (cached verdicts; nothing is probed by a dry run)",
                     ["backend", "verdict", "reason"],
                     [[n, v.state, short_reason(v.reason)] for n, v in dr.verdicts.items()])
    rows = [[c.placement, c.backend, c.label, c.measurement, str(c.iterations),
             format_duration(c.estimate_s) if c.estimate_s is not None else "?", c.basis] for c in dr.cells]
    cells = Table("cells", f"Cells that would run ({len(dr.cells)})",
                  ["placement", "backend", "label", "measurement", "launches", "estimate", "from"], rows,
                  empty="no cell: no backend of the scenario is usable here")
    runs = [[c.placement, c.backend, c.label, shlex.join(c.program.get("argv") or []) or "-",
             " ".join(f"{k}={shlex.quote(v)}" for k, v in c.env.items()) or "-"]
            for c in dr.cells if c.program or c.env]
    who = "root" if os.geteuid() == 0 else "this user"
    programs = Table("programs", f"What the cells run on this host, as {who} (a scenario file is code)",
                     ["placement", "backend", "label", "command ({image}, {workdir}: the cell's)", "environment"], runs,
                     notes=[f"{c.label}: guestfish script: {_one_line(c.program['script'])}"
                            for c in _unique_scripts(dr.cells)], quiet_when_empty=True)
    known = dr.estimated_s - dr.probe_s
    lines = [f"estimated duration: {format_duration(known)} for the {len(dr.cells) - len(dr.unknown)} cells with an "
             "earlier figure" + (f", plus backend probes of up to {format_duration(dr.probe_s)} (their time-outs)"
                                 if dr.probe_s else "")]
    if dr.unknown:
        lines.append(f"{len(dr.unknown)} of {len(dr.cells)} cells have no earlier figure and are not in the estimate")
    if "nested" in sc.placements:
        lines.append("the nested placement adds the level-1 guest's build (first time) and boot, not in the estimate")
    lines.append(f"estimated from {len(dr.history)} earlier results file(s)" if dr.history
                 else "no earlier results file to estimate from: run it once, then a dry run can say")
    intro = [Para(f"{sc.source}: valid. {sampling}; placements {', '.join(sc.placements)}. Nothing was launched.",
                  "meta")]
    return Document(f"guestbench scenario --dry-run: {sc.name}", intro,
                    [Section("", "", [verdicts, cells, programs, Bullets(lines, title="Estimate")])])


def _one_line(script: str) -> str:
    return " ; ".join(ln.strip() for ln in script.splitlines() if ln.strip())


def _unique_scripts(cells: list[PlannedCell]) -> list[PlannedCell]:
    """One cell per scenario item with a guestfish script (its backends' cells run the same one)."""
    seen: dict[str, PlannedCell] = {}
    for c in cells:
        if "script" in c.program:
            seen.setdefault(c.label, c)
    return list(seen.values())
