"""The command line's grammar: every command, its flags and its help (argparse); a usage error is one line."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from guestbench import __version__
from guestbench.analysis import ab
from guestbench.backends import BACKENDS
from guestbench.cli.common import EXIT_USAGE, OUTPUT_HELP
from guestbench.output import formats
from guestbench.output.export import columns as csv_columns
from guestbench.scenario import help_text
from guestbench.util.errors import one_line as _one_line


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

    s = sub.add_parser("scenario", help="run a YAML scenario file",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
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
    d.add_argument("--stack", help="comma-separated software stacks whose backends to check too (guestbench stack "
                   "list; each in its sandbox: its UML's modes, its libvirtd)")
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

    _add_history(sub)

    n = sub.add_parser("nested", help="the level-1 guest for nested runs: build its image (cached)")
    nsub = n.add_subparsers(dest="nested_command", required=True, metavar="build")
    nb = nsub.add_parser("build", help="build the level-1 guest image from this host's packages (cached by inputs)")
    nb.add_argument("--force", action="store_true", help="rebuild even when the cached image is up to date")

    _add_stack(sub)

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


def _add_stack(sub: Any) -> None:
    st = sub.add_parser("stack", help="Debian suites' software stacks (libguestfs, qemu, libvirt, UML, Python) to "
                        "compare: build, list, remove (docs/stacks.md)")
    stsub = st.add_subparsers(dest="stack_command", required=True, metavar="build|list|rm")
    sb = stsub.add_parser("build", help="make a stack's root file system from this machine's apt sources (as root)")
    sb.add_argument("name", metavar="NAME", help="the stack's name (e.g. trixie, sid)")
    sb.add_argument("--suite", help="the Debian suite (default: NAME)")
    sb.add_argument("--packages", choices=["full", "uml", "lean"], default="full",
                    help="full: everything guestbench drives; uml: what a uml start-up needs; lean: Python only "
                    "(the last two for tests)")
    sb.add_argument("--force", action="store_true", help="rebuild a stack that exists")
    sl = stsub.add_parser("list", help="the stacks built here and their software's versions")
    sl.add_argument("--json", action="store_true", help="as JSON")
    sr = stsub.add_parser("rm", help="remove a stack")
    sr.add_argument("name", metavar="NAME")


def _add_history(sub: Any) -> None:
    h = sub.add_parser("history", help="follow every figure across runs: its steps, the run where each started and "
                       "what changed then",
                       description="Group the runs by machine (the fingerprint's CPU, cores, memory, VM, /dev/kvm) and "
                       "cell, order them in time, and find the steps in each figure's series (runs as the units), "
                       "with their size and CI, the run where each starts and the software that changed there; "
                       "slow drift too. pytest-benchmark's saved runs (.benchmarks/) are read as runs. With "
                       "--fail-on-regression the exit status is 1 when a series' newest run regressed.")
    h.add_argument("paths", nargs="*", default=["results"], metavar="RESULTS",
                   help="results directories or files (default: results), pytest-benchmark JSON files or "
                   ".benchmarks/ too")
    h.add_argument("--noise", action="append", metavar="[CELL=]PCT",
                   help="the noise floor: a change smaller than PCT percent is no alarm, for every series or for the "
                   "one CELL names (as the table names it, e.g. tcg/host/startup=8%%); repeatable. By default the "
                   "larger of 5%% and three times the series' run-to-run noise")
    h.add_argument("--baseline", metavar="FILE", help="expected values per machine and cell (YAML, as "
                   "--write-baseline writes it): a newest run worse than its expected value by more than its "
                   "tolerance is a regression")
    h.add_argument("--write-baseline", metavar="FILE", help="write the newest level of every series as a baseline "
                   "(tolerance: its noise floor); the file replaces only a regular file of your own")
    h.add_argument("--fail-on-regression", action="store_true",
                   help="exit status 1 when the newest run of a series regressed (or missed its baseline), else 0")
    h.add_argument("--html", metavar="DIR", help="also write DIR/index.html (a trend chart per series), "
                   "DIR/report.md and the charts as PNG and SVG")
    _add_output(h)


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
    s.add_argument("--stack", help="comma-separated software stacks: host (the machine's own) and stacks built with "
                   "`guestbench stack build`; overrides the scenario's 'stacks'")
    s.add_argument("--uml-mode", help="comma-separated UML userspace modes (seccomp, ptrace), one uml cell each; "
                   "overrides every item's 'uml_mode'")
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
    for name, f in formats.FORMATS.items():
        if f.flag:
            g.add_argument(f.flag, dest="format", action="store_const", const=name,
                           help=f.help.format(csv_header=csv_header))
    p.set_defaults(format=formats.DEFAULT)
