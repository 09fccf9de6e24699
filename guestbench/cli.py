"""Command line: `guestbench scenario FILE`, `guestbench doctor`, `guestbench show RESULTS.json`,
`guestbench compare BASELINE.json OTHER.json...`, `guestbench report RESULTS.json... --output DIR`,
`guestbench export RESULTS.json [-o BENCH.json]`, `guestbench import BENCH.json [-o RESULTS.json]`.

Bad input of any kind ends in one line on stderr and exit status 2; a signal ends the run with the
results kept and exit status 128 + signal number.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

from guestbench import __version__
from guestbench.analysis import ab
from guestbench.backends import appliance
from guestbench.host import fingerprint as host
from guestbench.host import space
from guestbench.backends import BACKENDS
from guestbench.util.errors import Interrupted, UserError, clip_text, one_line as _one_line
from guestbench.util.lazy import on_first_use
from guestbench.output.export import columns as csv_columns
from guestbench.host.paths import make_run_dir, remove_tree, workdir_for
from guestbench.util.reasons import short_reason
from guestbench.results import load_results
from guestbench.scenario import ab as scenario_ab, apply_overrides, help_text, load_scenario
from guestbench.run import probe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

compare = on_first_use("guestbench.analysis.compare")
report = on_first_use("guestbench.report")
markdown = on_first_use("guestbench.output.render.markdown")
results_doc = on_first_use("guestbench.output.results_doc")
terminal = on_first_use("guestbench.output.render.terminal")
compare_doc = on_first_use("guestbench.output.compare_doc")
rich_console = on_first_use("rich.console")
rich_markup = on_first_use("rich.markup")
rich_table = on_first_use("rich.table")

EXIT_USAGE = 2
EXIT_INTERNAL = 70
# OSErrors that are the host's state, not guestbench's bug: a full or read-only filesystem, a denied permission
# OSErrors the user can act on (and a path given that no system call takes: too long, a loop of links)
HOST_PROBLEMS = (*space.NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ELOOP)
# the appliances doctor reports: the UML backend's, and the workload ones of both flavours
DOCTOR_APPLIANCES = (("uml", "standard"), ("qemu", "workload"), ("uml", "workload"))


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"guestbench: command line: {_one_line(message, limit=160)}; see '{self.prog} --help'\n")
        raise SystemExit(EXIT_USAGE)


INSECURE_HELP = ("allow a plain tcp:// scheduler address that is not loopback, with a warning: anyone who reaches its "
                 "port can run code as root on every worker (without it such an address is refused; use tls://)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="guestbench", description="Which hypervisor backend should my libguestfs appliances run "
                "on, here, and what will it cost me?")
    p.add_argument("--version", action="version", version=f"guestbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("scenario", help="run a YAML scenario file", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run every measurement of a scenario on every selected, usable backend, save "
                       "every sample in results/, and print the comparison.", epilog=help_text())
    s.add_argument("file", help="scenario YAML file, e.g. scenarios/startup.yaml")
    s.add_argument("--dry-run", action="store_true",
                   help="validate, list the cells that would run with the backends' cached verdicts and an estimated "
                   "duration from earlier results files (in --results); nothing is launched")
    _add_run_options(s)
    s.add_argument("--cluster", metavar="ADDRESS",
                   help="run on the hosts of a Dask cluster (tls://HOST:8786) whose workers are 'guestbench worker's; "
                   "one results file here, each cell naming its host")
    s.add_argument("--hosts", metavar="NAMES", help="with --cluster: comma-separated worker names, or all (default)")
    s.add_argument("--insecure", action="store_true", help=INSECURE_HELP)
    s.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)  # a fleet host's run
    _add_fleet(sub)

    d = sub.add_parser("doctor", help="which backends work here, why not, versions, host fingerprint")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.add_argument("--backend", help=f"comma-separated backends to check ({', '.join(BACKENDS)})")
    d.add_argument("--refresh", action="store_true", help="probe again instead of reusing cached verdicts")
    d.add_argument("--probe-timeout", type=float, help="limit for a backend's probe launch, seconds")
    d.add_argument("-v", "--verbose", action="store_true", help="show probe launches' console")

    sh = sub.add_parser("show", help="print a saved results file again")
    sh.add_argument("file", help="results JSON file written by guestbench scenario")
    _add_output(sh)

    c = sub.add_parser("compare", help="compare results files against a baseline: did an update slow things down?",
                       description="Per cell measured in both files: ratio of medians with a bootstrap 95% CI "
                       "and a Mann-Whitney U p-value. Exit status 1 when a ratio exceeds --fail-above.")
    c.add_argument("baseline", help="results JSON file to compare against")
    c.add_argument("others", nargs="+", metavar="other", help="results JSON file(s) to compare with the baseline")
    c.add_argument("--fail-above", metavar="PCT",
                   help="a cell is a regression, and the exit status 1, when its median is more than PCT percent "
                   "above the baseline's (10 and 10%% both mean 10 percent)")
    _add_gate_resources(c)
    c.add_argument("--noise", metavar="PCT", help="a change smaller than PCT percent is 'no change' whatever p says "
                   "(the machine's run-to-run noise, e.g. 5%%)")
    c.add_argument("--force", action="store_true", help="compare even when the host fingerprints differ")
    _add_output(c, csv_columns.COMPARISON)

    r = sub.add_parser("report", help="write results files as an HTML page, Markdown and charts (PNG, SVG)",
                       description="Write DIR/index.html (one self-contained page: tables, charts, host "
                       "fingerprint; one section per results file), DIR/report.md, and every chart as PNG and SVG.")
    r.add_argument("results", nargs="+", metavar="RESULTS", help="results JSON file(s) written by guestbench scenario")
    r.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the report (made if missing; "
                   "its files replace only files of your own)")

    n = sub.add_parser("nested", help="the level-1 guest for nested runs: build its image (cached)")
    nsub = n.add_subparsers(dest="nested_command", required=True, metavar="build")
    nb = nsub.add_parser("build", help="build the level-1 guest image from this host's packages (cached by inputs)")
    nb.add_argument("--force", action="store_true", help="rebuild even when the cached image is up to date")

    e = sub.add_parser("export", help="write a results file as pytest-benchmark JSON",
                       description="Write a results file in another tool's format: pytest-benchmark JSON (raw "
                       "samples in stats.data, pytest-benchmark's summary fields, everything else in extra_info "
                       "and a 'guestbench' section), readable by pytest-benchmark compare and --benchmark-compare.")
    e.add_argument("file", help="results JSON file written by guestbench scenario")
    e.add_argument("--format", choices=["pytest-benchmark"], default="pytest-benchmark", help="output format")
    e.add_argument("-o", "--output", metavar="FILE", help=OUTPUT_HELP)

    i = sub.add_parser("import", help="turn pytest-benchmark JSON into a results file",
                       description="Read pytest-benchmark JSON (from the guestbench pytest plugin, guestbench export "
                       "or any pytest-benchmark run saved with its data) and write a guestbench results file for "
                       "show and compare.")
    i.add_argument("file", help="pytest-benchmark JSON file (--benchmark-json, or .benchmarks/*/NNNN_*.json)")
    i.add_argument("-o", "--output", metavar="FILE", help=OUTPUT_HELP)
    _add_libguestfs_programs(sub)
    _add_ab(sub)
    return p


def _add_run_options(s: argparse.ArgumentParser) -> None:
    """What `scenario` and `ab` share: the scenario's overrides, the output, where results go, the probes."""
    s.add_argument("--backend", help=f"comma-separated backends to measure ({', '.join(BACKENDS)})")
    s.add_argument("--measurement", help="comma-separated labels of the scenario's measurements to run")
    s.add_argument("--repetitions", type=int, help="measured samples per backend and measurement")
    s.add_argument("--warmup", type=int, help="discarded samples taken first")
    s.add_argument("--timeout", help="limit for one launch, seconds (e.g. 300, 5min)")
    s.add_argument("--sample-timeout", help="limit for one timed operation, seconds")
    s.add_argument("--size", help="bytes moved per sample for every measurement with a size (e.g. 500MB, 64MiB)")
    s.add_argument("--memsize", help="appliance memory (MiB, or e.g. 2GiB)")
    s.add_argument("--placement", help="comma-separated placements: host, nested (inside a level-1 VM); "
                   "overrides the scenario's 'placement'")
    s.add_argument("--phases", action="store_true", default=None,
                   help="break start-up samples into boot phases (verbose appliance console)")
    s.add_argument("--order", help="interleaved, random or sequential: in which order a measurement's cells take "
                   "their samples (default interleaved when it has two or more cells)")
    s.add_argument("--seed", type=int, help="seed of --order random (default: drawn and recorded)")
    s.add_argument("--precision", help="sample each cell until its 95%% CI half-width is this fraction of the "
                   "median (e.g. 5%%); --repetitions is then the minimum")
    s.add_argument("--max-repetitions", type=int, help="with --precision: the most samples a cell takes")
    _add_output(s)
    s.add_argument("--results", default="results", help="directory for the results file (default: results)")
    s.add_argument("--reprobe", action="store_true", help="ignore cached backend verdicts and probe again")
    s.add_argument("--probe-timeout", type=float, help="limit for a backend's probe launch, seconds")
    s.add_argument("--defer-probe", action="store_true",
                   help="no separate probe launch: a backend's first launch in the run is its probe, and if it "
                        "fails the backend's other cells are skipped (one launch fewer where launches are slow, "
                        "as in a nested guest; nested runs use it inside the level-1 guest)")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="show the appliance console and the exact hypervisor command line")


def _add_fleet(sub: Any) -> None:
    w = sub.add_parser("worker", help="join a fleet: check the backends, then serve a Dask scheduler's fleet runs",
                       description="Check this host's backends as doctor does, then run a Dask worker (one thread) "
                       "that offers the usable ones to the scheduler; one fleet measurement at a time. When the "
                       "worker ends, however it ends, what it started is stopped and removed.")
    w.add_argument("address", help="the Dask scheduler's address, e.g. tls://10.0.0.1:8786 (plain tcp:// on "
                   "loopback, or with --insecure)")
    w.add_argument("--backend", help=f"comma-separated backends to offer ({', '.join(BACKENDS)}; default: every "
                   "usable one)")
    w.add_argument("--name", help="this host's name in results (default: the host name)")
    w.add_argument("--refresh", action="store_true", help="probe again instead of reusing cached verdicts")
    w.add_argument("--probe-timeout", type=float, help="limit for a backend's probe launch, seconds")
    w.add_argument("-v", "--verbose", action="store_true", help="show probe launches' console")
    w.add_argument("--insecure", action="store_true", help=INSECURE_HELP)
    f = sub.add_parser("fleet", help="fleet helpers: a scheduler and workers on this machine")
    fsub = f.add_subparsers(dest="fleet_command", required=True, parser_class=_Parser)
    fl = fsub.add_parser("local", help="start a Dask scheduler and N guestbench workers here, speaking TLS with "
                         "throw-away certificates; print the address and the client settings; stop them on Ctrl-C")
    fl.add_argument("workers", type=int, help="how many workers (0: the scheduler alone)")
    fl.add_argument("--backend", help="comma-separated backends each worker offers (default: every usable one)")


def _add_gate_resources(parser: Any) -> None:
    parser.add_argument("--gate-resources", action="store_true",
                        help="let --fail-above act on CPU s and peak MiB too (by default they are compared but do not "
                        "set the exit status: on a busy host they move against the seconds)")


def _add_ab(sub: Any) -> None:
    a = sub.add_parser("ab", help="measure two configurations of a scenario in one interleaved run and compare them",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run every item of the scenario twice per backend, as A and as B, taking turns "
                       "sample by sample, then print per backend and figure the ratio B/A with its bootstrap 95% CI, "
                       "a permutation test and a verdict: within the noise threshold there is no change; otherwise "
                       "a significant change is an improvement or a regression, whichever way the figure is better.",
                       epilog="A side is KEY=VALUE words: a measurement parameter (cache=unsafe, size=64MiB), "
                       "memsize=MiB, or an environment variable in capitals for the cells' workers and the libguestfs "
                       "programs they run (LIBGUESTFS_HV=/path/to/qemu, LIBGUESTFS_PATH=/path/to/appliance).\n"
                       "e.g. guestbench ab scenarios/startup.yaml --backend uml --a cache=writeback --b cache=unsafe")
    a.add_argument("file", help="scenario YAML file, e.g. scenarios/startup.yaml")
    a.add_argument("--a", nargs="+", default=[], metavar="KEY=VALUE", help="configuration A (default: as written)")
    a.add_argument("--b", nargs="+", required=True, metavar="KEY=VALUE", help="configuration B")
    a.add_argument("--noise", metavar="PCT", default=f"{ab.DEFAULT_NOISE_PCT:g}%",
                   help="a change smaller than PCT percent is no change whatever p says (default %(default)s)")
    a.add_argument("--fail-above", metavar="PCT", help="exit status 1 when B is worse than A by more than PCT percent")
    _add_gate_resources(a)
    _add_run_options(a)


def _add_libguestfs_programs(sub: Any) -> None:
    """`env` and `exec`: libguestfs's own programs on a backend."""
    ev = sub.add_parser("env", help="print the shell exports that make libguestfs's own programs use a backend",
                        description="Print export lines (LIBGUESTFS_BACKEND, LIBGUESTFS_BACKEND_SETTINGS, "
                        "LIBGUESTFS_HV, LIBGUESTFS_PATH and what guestbench's hypervisor programs need) that make "
                        "any libguestfs program (guestfish, virt-*, libguestfs-test-tool) run its appliance on "
                        "BACKEND, after building what it needs. Use: eval \"$(guestbench env uml)\"")
    ev.add_argument("backend", help=f"one of {', '.join(BACKENDS)}")
    ev.add_argument("--workload", action="store_true", help="boot guestbench's workload appliance (fio, bonnie++, "
                    "dbench inside) instead of the standard one")

    x = sub.add_parser("exec", help="run a libguestfs program on a backend, and clean up after it",
                       usage="guestbench exec [-h] [--timeout S] [--workload] BACKEND -- COMMAND [ARG...]",
                       description="Run COMMAND with guestbench env BACKEND's settings, in a private work dir. "
                       "However it ends (exit, --timeout, Ctrl-C, SIGTERM), every process it started is killed and "
                       "its overlays, sockets, hypervisor files and libvirt domains are removed. The exit status "
                       "is the command's (124 when it was killed at --timeout, 128+N after signal N).")
    x.add_argument("backend", help=f"one of {', '.join(BACKENDS)}")
    x.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command and its arguments")
    x.add_argument("--timeout", default="1h", help="kill the command and everything it started after this long "
                   "(seconds, or e.g. 10min; default 1h)")
    x.add_argument("--workload", action="store_true", help="boot guestbench's workload appliance")


def _add_output(p: argparse.ArgumentParser, csv_header: str = csv_columns.RESULTS) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", dest="format", action="store_const", const="json", help="print a summary as JSON")
    g.add_argument("--markdown", dest="format", action="store_const", const="markdown", help="print Markdown")
    g.add_argument("--csv", dest="format", action="store_const", const="csv",
                   help=f"print CSV with the header {csv_header}")
    p.set_defaults(format="table")


def _wide_console() -> Console:
    return rich_console.Console(width=max(rich_console.Console().width, 160))


def _print_report(doc: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        summary = report.to_summary_json(doc)
        if "hosts" in summary:  # a fleet run: and the hosts side by side
            from guestbench import fleet_report

            summary["fleet"] = {"tables": fleet_report.to_json(doc), "warnings": fleet_report.warnings(doc)}
        sys.stdout.write(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(markdown.to_markdown(results_doc.show_document(doc)))
    elif fmt == "csv":
        sys.stdout.write(report.to_csv(doc))
    else:
        terminal.render(results_doc.show_document(doc, brief=True), _wide_console())


def _scenario_from_args(args: argparse.Namespace) -> Any:
    sc = load_scenario(args.file)
    _check_probe_timeout(args)
    return apply_overrides(sc, backend=args.backend, measurement=args.measurement, repetitions=args.repetitions,
                           warmup=args.warmup, timeout=args.timeout, sample_timeout=args.sample_timeout,
                           size=args.size, memsize=args.memsize, phases=args.phases,
                           placement=args.placement, order=args.order, seed=args.seed, precision=args.precision,
                           max_repetitions=args.max_repetitions)


def _run(args: argparse.Namespace, sc: Any, console: Console) -> Any:
    """Run a scenario as the command line asked; the results file (kept however the run ends)."""
    from guestbench.run.runner import RunOptions, run_scenario

    results_dir = Path(args.results)
    if results_dir.exists() and not results_dir.is_dir():
        raise UserError("is not a directory; allowed: a directory for results files", source="command line",
                        key=f"--results {args.results}")
    opts = RunOptions(results_dir=results_dir, verbose=args.verbose, reprobe=args.reprobe,
                      probe_timeout=args.probe_timeout, defer_probe=args.defer_probe,
                      command=("guestbench", *sys.argv[1:]))
    try:
        return run_scenario(sc, opts, console)
    except Interrupted as e:
        console.print("[yellow]interrupted[/]: samples taken so far are kept in the results file "
                      "(status 'interrupted')")
        raise e


def _exit_with_stdin() -> None:
    """Stop as on SIGTERM when stdin closes: a fleet host's run ends with the Dask worker that started it."""
    import signal
    import threading

    def watch() -> None:
        while os.read(0, 4096):  # the raw fd: a daemon thread in a buffered read aborts the interpreter's exit
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-stdin", daemon=True).start()


def _run_fleet(args: argparse.Namespace, sc: Any, console: Console) -> Any:
    from guestbench.run.fleet.coordinator import FleetOptions, run_fleet

    hosts = None
    if args.hosts and args.hosts != "all":
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        if not hosts:
            raise UserError("names no host; allowed: comma-separated worker names, or all", source="command line",
                            key=f"--hosts {args.hosts}")
    child = [*(["--reprobe"] if args.reprobe else []), *(["--defer-probe"] if args.defer_probe else []),
             *(["--probe-timeout", str(args.probe_timeout)] if args.probe_timeout else [])]
    opts = FleetOptions(address=args.cluster, hosts=hosts, child_options=child, command=("guestbench", *sys.argv[1:]),
                        insecure=args.insecure)
    try:
        return run_fleet(sc, opts, Path(args.results), console)
    except Interrupted:
        console.print("[yellow]interrupted[/]: the hosts were stopped; samples taken so far are kept in the "
                      "results file (status 'interrupted')")
        raise


def cmd_worker(args: argparse.Namespace) -> int:
    from guestbench.run.fleet import worker

    from guestbench.run.fleet import address, tls

    _check_probe_timeout(args)
    where = f"guestbench worker {args.address}"
    err = rich_console.Console(stderr=True)
    address.check(args.address, args.insecure, "command line", where,
                  lambda line: err.print(line, style="yellow", highlight=False, markup=False))
    tls.check(args.address, "worker", "command line", where)
    listen = address.listen_host(args.address, "command line", where)
    names = list(BACKENDS)
    if args.backend:
        from guestbench.scenario import Checker

        names = list(Checker("command line").backends("--backend", args.backend))
    with err.status("") as status:
        checked = probe.check_all(names, refresh=args.refresh, timeout=args.probe_timeout, verbose=args.verbose,
                                  on_checking=lambda name: status.update(f"checking {name}"))
    for name, av in checked.items():
        err.print(f"{'[green]✓[/]' if av.usable else '[yellow]–[/]'} {name}: {short_reason(av.reason or '')}",
                  highlight=False)
    import socket

    name = args.name or socket.gethostname().split(".")[0]
    return worker.serve(args.address, listen, [n for n, av in checked.items() if av.usable], name,
                        lambda line: err.print(line, highlight=False, markup=False))


def cmd_fleet(args: argparse.Namespace) -> int:
    from guestbench.run.fleet.local import LocalCluster

    if args.workers < 0:
        raise UserError("is negative; allowed: a number of workers >= 0", source="command line",
                        key=f"fleet local {args.workers}")
    if args.backend:
        from guestbench.scenario import Checker

        Checker("command line").backends("--backend", args.backend)
    err = rich_console.Console(stderr=True)
    cluster = LocalCluster(args.workers, args.backend, lambda line: err.print(line, highlight=False))
    try:
        print(cluster.address, flush=True)
        err.print(f"fleet local: scheduler {cluster.address}, {args.workers} worker(s) starting; Ctrl-C stops them",
                  highlight=False, soft_wrap=True)
        err.print(f"fleet local: mutual TLS; for `guestbench scenario --cluster {cluster.address}` (as root): "
                  f"{cluster.exports()}", highlight=False, markup=False, soft_wrap=True)
        cluster.wait()
    finally:
        cluster.close()
    return 0


def _dry_run(sc: Any, args: argparse.Namespace) -> int:
    from guestbench.run import dryrun

    dr = dryrun.dry_run(sc, Path(args.results))
    if args.format == "json":
        sys.stdout.write(json.dumps(dryrun.to_dict(dr), indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(markdown.to_markdown(dryrun.document(dr)))
    elif args.format == "csv":
        raise UserError("is not available with --dry-run; allowed: --json, --markdown or the table",
                        source="command line", key="--csv")
    else:
        terminal.render(dryrun.document(dr), _wide_console())
    return 0


def cmd_scenario(args: argparse.Namespace) -> int:
    sc = _scenario_from_args(args)
    for flag in ("hosts", "insecure"):
        if getattr(args, flag) and not args.cluster:
            raise UserError("needs --cluster ADDRESS", source="command line", key=f"--{flag}")
    if args.dry_run:
        if args.cluster:
            raise UserError("is not available with --cluster (each host's gate decides there)",
                            source="command line", key="--dry-run")
        return _dry_run(sc, args)
    if args.exit_with_stdin:
        _exit_with_stdin()
    err = rich_console.Console(stderr=True)
    rf = _run_fleet(args, sc, err) if args.cluster else _run(args, sc, err)
    doc = dict(rf.doc)
    doc["_path"] = str(rf.path)
    _print_report(doc, args.format)
    err.print(f"results: {rf.path}", highlight=False)
    from guestbench.run.runner import exit_status

    return exit_status(rf.doc)


def cmd_ab(args: argparse.Namespace) -> int:
    from guestbench.run.runner import exit_status

    a, b = scenario_ab.parse_side(args.a, "--a"), scenario_ab.parse_side(args.b, "--b")
    noise = compare.parse_fail_above(args.noise, "--noise")
    fail_above = None if args.fail_above is None else compare.parse_fail_above(args.fail_above)
    sc = scenario_ab.ab_scenario(_scenario_from_args(args), a, b)
    err = rich_console.Console(stderr=True)
    rf = _run(args, sc, err)
    with rf.lock:
        rf.doc["ab"] = {"a": a, "b": b, "noise_percent": noise}
        rf.save()
    doc = dict(rf.doc)
    doc["_path"] = str(rf.path)
    if args.format not in ("json", "csv"):  # those print the comparison alone: one document on stdout
        _print_report(doc, args.format)
    c = ab.comparison(doc, a, b, noise, str(rf.path), args.gate_resources)
    if args.format == "json":
        sys.stdout.write(json.dumps(compare.to_summary_json([c], fail_above), indent=2, allow_nan=False) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(markdown.to_markdown(compare_doc.compare_document([c], fail_above)))
    elif args.format == "csv":
        sys.stdout.write(compare.to_csv([c], fail_above))
    else:
        terminal.render(compare_doc.compare_document([c], fail_above), _wide_console())
    err.print(f"results: {rf.path}", highlight=False)
    status = exit_status(rf.doc)
    return status or (1 if compare.regressions([c], fail_above) else 0)


def _check_probe_timeout(args: argparse.Namespace) -> None:
    if args.probe_timeout is not None:
        from guestbench.scenario import Checker

        args.probe_timeout = Checker("command line").seconds("--probe-timeout", args.probe_timeout)


def cmd_doctor(args: argparse.Namespace) -> int:
    _check_probe_timeout(args)
    names = list(BACKENDS)
    if args.backend:
        from guestbench.scenario import Checker

        names = list(Checker("command line").backends("--backend", args.backend))
    fp = host.fingerprint()
    with rich_console.Console(stderr=True).status("") as status:
        checked = probe.check_all(names, refresh=args.refresh, timeout=args.probe_timeout, verbose=args.verbose,
                                  on_checking=lambda name: status.update(f"checking {name}"))
    verdicts: dict[str, Any] = {name: av.to_dict() for name, av in checked.items()}
    from guestbench.nested import image as nested_image

    nested = nested_image.status(bool(verdicts.get("kvm", {}).get("usable")))
    appliances = {f"{f}-{v}": appliance.state(f, v) for f, v in DOCTOR_APPLIANCES}
    if args.json:
        print(json.dumps({"host": fp, "backends": verdicts, "nested": nested, "appliances": appliances}, indent=2))
    else:
        _print_doctor(fp, verdicts, args.verbose)
        _print_appliances(appliances)
        rich_console.Console().print(
            f"nested runs: {'possible' if nested['possible'] else 'not possible'} — {nested['reason']}; "
            f"image: {nested.get('image_state') or 'n/a'}", highlight=False)
    return 0 if any(v["usable"] for v in verdicts.values()) else 1


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
        t.add_row(name, "[green]yes[/]" if v["usable"] else "[red]no[/]", why, origin)
    return t


def _print_doctor(fp: dict[str, Any], verdicts: dict[str, Any], verbose: bool) -> None:
    con = rich_console.Console()
    con.print(doctor_table(verdicts, verbose))
    if not verbose and any(short_reason(v["reason"]) != v["reason"] for v in verdicts.values()):
        con.print("(reasons shortened: the full text with -v or --json)", highlight=False)
    virt = fp.get("virtualization") or {}
    vers = fp.get("versions") or {}
    h = rich_table.Table(title="host", show_header=False)
    h.add_column("key")
    h.add_column("value")
    h.add_row("cpu", f"{fp.get('cpu_model')} × {fp.get('cores')} cores")
    h.add_row("memory", f"{(fp.get('memory_bytes') or 0) / 2**30:.1f} GiB")
    h.add_row("os / kernel", f"{fp.get('os')} / {fp.get('kernel')}")
    h.add_row("virtualization", str(virt.get("summary")))
    for k in ("libguestfs", "qemu", "libvirt", "uml", "supermin", "python", "guestbench"):
        h.add_row(k, str(vers.get(k)))
    h.add_row("git commit", str((fp.get("guestbench") or {}).get("git_commit")))
    con.print(h)


def _print_appliances(appliances: dict[str, dict[str, Any]]) -> None:
    """One line each, paths whole: guestbench's own appliances (built on first use, ~10 s each)."""
    con = rich_console.Console()
    con.print("guestbench's appliances (built on first use, ~10 s each):", highlight=False)
    for name, st in appliances.items():
        if st["error"]:
            con.print(f"  {name}: [red]cannot be built[/]: {rich_markup.escape(st['error'])}", highlight=False)
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


def cmd_nested(args: argparse.Namespace) -> int:
    from guestbench.nested import image as nested_image

    err = rich_console.Console(stderr=True)
    try:
        img = nested_image.build(lambda line: err.print(f"nested build: {line}", highlight=False), force=args.force)
    except nested_image.ImageError as e:
        sys.stderr.write(f"guestbench: nested build failed: {_one_line(str(e))}\n")
        return 1
    print(img.path)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    doc = load_results(args.file)
    doc["_path"] = args.file
    _print_report(doc, args.format)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    fail_above = None if args.fail_above is None else compare.parse_fail_above(args.fail_above)
    if args.format == "csv" and len(args.others) > 1:
        raise UserError("--csv compares one OTHER file (the CSV has no column naming the file); "
                        "run once per file or use --json", source="command line")
    base = load_results(args.baseline)
    others = [(path, load_results(path)) for path in args.others]
    for warning in compare.gate_hosts(args.baseline, base, others, force=args.force):
        sys.stderr.write(f"guestbench: warning: {_one_line(warning)}\n")
    noise = None if args.noise is None else compare.parse_fail_above(args.noise, "--noise")
    comparisons = [compare.build_comparison(base, doc, args.baseline, path, noise, gate_resources=args.gate_resources)
                   for path, doc in others]
    if args.format == "json":
        sys.stdout.write(json.dumps(compare.to_summary_json(comparisons, fail_above), indent=2, allow_nan=False)
                         + "\n")
    elif args.format == "markdown":
        sys.stdout.write(markdown.to_markdown(compare_doc.compare_document(comparisons, fail_above)))
    elif args.format == "csv":
        sys.stdout.write(compare.to_csv(comparisons, fail_above))
    else:
        terminal.render(compare_doc.compare_document(comparisons, fail_above), _wide_console())
    found = compare.regressions(comparisons, fail_above)
    if found and args.format in ("json", "csv"):
        sys.stderr.write(f"guestbench: {len(found)} regression(s): {_one_line('; '.join(found))}\n")
    return 1 if found else 0


def cmd_report(args: argparse.Namespace) -> int:
    from guestbench.output.render import html  # matplotlib: only this command pays for importing it

    inputs = [(path, load_results(path)) for path in args.results]
    written = html.write(inputs, Path(args.output))
    charts = len(written) - 2
    print(f"report: {Path(args.output) / html.INDEX} and {Path(args.output) / html.MARKDOWN}, "
          f"{charts // 2} chart(s) as PNG and SVG in {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from guestbench.results import pytest_benchmark as pbj

    _write_json(pbj.export(load_results(args.file)), args.output)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from guestbench.results import pytest_benchmark as pbj

    doc, warnings = pbj.import_(pbj.load_pytest_benchmark(args.file), args.file)
    for warning in warnings:
        sys.stderr.write(f"guestbench: warning: {_one_line(warning)}\n")
    _write_json(doc, args.output)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from guestbench.run import command

    run_dir = make_run_dir()
    try:
        _, config = command.ready(args.backend, run_dir, args.workload)
    finally:
        remove_tree(run_dir)
    sys.stdout.write(command.exports(config))
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    from guestbench.run import command
    from guestbench.scenario import Checker

    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):
        what = f"{argv[0]!r} where the command should be (options go before the backend)" if argv else \
            "no command after the backend"
        raise UserError(f"{what}; allowed: guestbench exec [--timeout S] [--workload] BACKEND -- COMMAND [ARG...]",
                        source="command line")
    timeout = Checker("command line").seconds("--timeout", args.timeout)
    run_dir = make_run_dir()
    try:
        backend, config = command.ready(args.backend, run_dir, args.workload)
        done = command.run(argv, backend, config, workdir_for(run_dir, "exec"), timeout)
    finally:
        remove_tree(run_dir)
    if done.timed_out:
        sys.stderr.write(f"guestbench: exec: {argv[0]} did not finish within {timeout:g} s on {args.backend}; it "
                         "and everything it started were killed\n")
    return done.status


OUTPUT_HELP = ("write here instead of stdout (- is stdout): a new file, or a regular file of your own, replaced "
               "atomically; a device, FIFO, symbolic link or another user's file is refused")


def _write_json(doc: dict[str, Any], output: str | None) -> None:
    """To stdout, or atomically to a file (a failed write is bad input: one line, exit 2)."""
    if output is None or output == "-":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    from guestbench.results import atomic_write_json

    try:
        atomic_write_json(Path(output), doc)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", source=output) from None
    sys.stderr.write(f"guestbench: wrote {output}\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"scenario": cmd_scenario, "doctor": cmd_doctor, "show": cmd_show,
                "compare": cmd_compare, "report": cmd_report, "nested": cmd_nested, "export": cmd_export,
                "import": cmd_import, "env": cmd_env, "exec": cmd_exec, "ab": cmd_ab, "worker": cmd_worker,
                "fleet": cmd_fleet}[args.command](args)
    except UserError as e:  # values are clipped where quoted; the limit is for whatever was not
        sys.stderr.write(f"guestbench: {_one_line(str(e), limit=1000)}\n")
        return e.exit_status
    except Interrupted as e:
        return 128 + e.signum
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        if e.errno not in HOST_PROBLEMS:
            return _internal_error(e, args)
        # the user frees space or fixes a permission, and runs again: said like bad input
        if e.filename is not None:  # a path given on the command line is quoted, not copied
            e.filename = clip_text(str(e.filename), 200)
        sys.stderr.write(f"guestbench: {_one_line(space.os_error_line(e), limit=1000)}\n")
        return EXIT_USAGE
    except Exception as e:
        return _internal_error(e, args)


def _internal_error(e: Exception, args: argparse.Namespace) -> int:
    """A bug, not bad input: one line, the traceback only with -v."""
    if getattr(args, "verbose", False):
        traceback.print_exc()
    sys.stderr.write(f"guestbench: internal error: {type(e).__name__}: {_one_line(str(e), limit=1000)} "
                     "(run with -v for the traceback)\n")
    return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
