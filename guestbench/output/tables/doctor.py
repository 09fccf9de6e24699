"""What `guestbench doctor` prints on the terminal: the backends' verdicts, the host, guestbench's appliances and
whether nested runs are possible (--json prints the facts themselves)."""

from __future__ import annotations

from typing import Any

from rich import markup as rich_markup
from rich import table as rich_table
from rich.console import Console
from rich.table import Table

from guestbench.util.errors import inert
from guestbench.util.reasons import short_reason


def show(fp: dict[str, Any], verdicts: dict[str, Any], appliances: dict[str, dict[str, Any]], nested: dict[str, Any],
         verbose: bool, stacks: list[dict[str, Any]] | None = None) -> None:
    _print_doctor(fp, verdicts, verbose)
    _print_appliances(appliances)
    if stacks:
        Console().print(stacks_table(stacks))
    Console().print(inert(f"nested runs: {'possible' if nested['possible'] else 'not possible'} — {nested['reason']}; "
                          f"image: {nested.get('image_state') or 'n/a'}"), highlight=False)


def doctor_table(verdicts: dict[str, Any], verbose: bool) -> Table:
    """The backends' verdicts; a reason is one short sentence unless `verbose` (the full text is in --json)."""
    t = rich_table.Table(title="backends", show_lines=verbose)
    t.add_column("backend", no_wrap=True)
    t.add_column("usable")
    t.add_column("why")
    t.add_column("verdict from", no_wrap=not verbose)
    for name, v in verdicts.items():
        d = v.get("details") or {}
        when = str(d.get("probed_utc") or "")
        origin = (f"cached probe {when}" if verbose else f"cached {when[:16].replace('T', ' ')}") if d.get("cached") \
            else "probe launch just now" if "probe_timeout_s" in d else "preconditions"
        why = v["reason"] if verbose else short_reason(v["reason"])
        t.add_row(name, "[green]yes[/]" if v["usable"] else "[red]no[/]", inert(why), origin)  # a hypervisor's words
    return t


def stacks_table(stacks: list[dict[str, Any]]) -> Table:
    """The software stacks built here (guestbench stack list) and their versions; `doctor --stack NAME` checks a
    stack's backends in its sandbox (its UML's modes are in uml's verdict)."""
    t = rich_table.Table(title="software stacks (doctor --stack NAME checks their backends)")
    keys = ("python", "libguestfs", "qemu", "libvirt", "uml_kernel", "kernel")
    for col in ("stack", "suite", "built", *keys, "state"):
        t.add_column(col)
    for s in stacks:
        v = s.get("versions") or {}
        t.add_row(*(inert(str(x)) for x in (s["name"], s.get("suite") or "", (s.get("built_utc") or "")[:16],
                                             *(v.get(k, "") for k in keys), s.get("problem") or "whole")))
    return t


def _print_doctor(fp: dict[str, Any], verdicts: dict[str, Any], verbose: bool) -> None:
    con = Console()
    con.print(doctor_table(verdicts, verbose))
    if not verbose and any(short_reason(v["reason"]) != v["reason"] for v in verdicts.values()):
        con.print("(reasons shortened: the full text with -v or --json)", highlight=False)
    virt = fp.get("virtualization") or {}
    vers = fp.get("versions") or {}
    h = rich_table.Table(title="host", show_header=False)
    h.add_column("key")
    h.add_column("value")
    h.add_row("cpu", inert(f"{fp.get('cpu_model')} × {fp.get('cores')} cores"))  # the hypervisor's words in a VM
    h.add_row("memory", f"{(fp.get('memory_bytes') or 0) / 2**30:.1f} GiB")
    h.add_row("os / kernel", inert(f"{fp.get('os')} / {fp.get('kernel')}"))
    h.add_row("virtualization", inert(virt.get("summary")))
    for k in ("libguestfs", "qemu", "libvirt", "uml", "supermin", "python", "guestbench"):
        h.add_row(k, inert(vers.get(k)))
    h.add_row("git commit", inert((fp.get("guestbench") or {}).get("git_commit")))
    con.print(h)


def _print_appliances(appliances: dict[str, dict[str, Any]]) -> None:
    """One line each, paths whole: guestbench's own appliances (built on first use, ~10 s each)."""
    con = Console()
    con.print("guestbench's appliances (built on first use, ~10 s each):", highlight=False)
    for name, st in appliances.items():
        if st["error"]:
            con.print(f"  {name}: [red]cannot be built[/]: ", inert(st["error"]), sep="", highlight=False)
            continue
        state = "not built yet"
        if st["built"]:
            state = f"built {st['built_utc']}"
            if st["root_bytes_allocated"] is not None:
                state += f", {st['root_bytes_allocated'] / 2**20:.0f} MiB on disk"
        if st["prebuilt_from"]:
            state += f", given by ${st['prebuilt_from']}"
        line = f"  {name}: {state}, {rich_markup.escape(str(st['path']))}"
        if st["variant"] == "workload":
            line += f"; packages: {', '.join(st['included']) or 'none'}"
            if st["missing"]:
                line += (f"; [yellow]missing: {', '.join(st['missing'])}[/] (add them with {st['install_hint']}; "
                         "the appliance is rebuilt with them on next use)")
        con.print(line, highlight=False)
