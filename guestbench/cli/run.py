"""The commands that run appliances: `scenario` (here, or across a fleet with --cluster; --dry-run), `ab`,
`nested build`, `env` and `exec`. Scenario files are code: they name programs that run as root."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guestbench.analysis import ab
from guestbench.cli.common import check_probe_timeout, percent
from guestbench.host.paths import make_run_dir, remove_tree, workdir_for
from guestbench.output import formats
from guestbench.scenario import ab as scenario_ab, apply_overrides, load_scenario
from guestbench.util.errors import Interrupted, UserError, inert, one_line as _one_line
from guestbench.util.lazy import on_first_use

if TYPE_CHECKING:
    from rich.console import Console

compare = on_first_use("guestbench.analysis.compare")
results_doc = on_first_use("guestbench.output.results_doc")
compare_doc = on_first_use("guestbench.output.compare_doc")
rich_console = on_first_use("rich.console")


def _scenario_from_args(args: argparse.Namespace) -> Any:
    sc = load_scenario(args.file)
    check_probe_timeout(args)
    return apply_overrides(sc, backend=args.backend, measurement=args.measurement, repetitions=args.repetitions,
                           warmup=args.warmup, timeout=args.timeout, sample_timeout=args.sample_timeout,
                           size=args.size, memsize=args.memsize, phases=args.phases,
                           placement=args.placement, stack=args.stack, uml_mode=args.uml_mode, order=args.order,
                           seed=args.seed, precision=args.precision,
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


def _dry_run(sc: Any, args: argparse.Namespace) -> int:
    from guestbench.output.tables import dryrun as dryrun_table
    from guestbench.plan import dryrun

    formats.emit(dryrun_table.printable(dryrun.dry_run(sc, Path(args.results))), args.format)
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
    run = rf.run()
    formats.emit(results_doc.printable(run, str(rf.path)), args.format)
    err.print("results: ", inert(rf.path), sep="", highlight=False)
    from guestbench.run.runner import exit_status

    return exit_status(run)


def cmd_ab(args: argparse.Namespace) -> int:
    from guestbench.run.runner import exit_status

    a, b = scenario_ab.parse_side(args.a, "--a"), scenario_ab.parse_side(args.b, "--b")
    noise = percent(args.noise, "--noise")
    fail_above = None if args.fail_above is None else percent(args.fail_above)
    sc = scenario_ab.ab_scenario(_scenario_from_args(args), a, b)
    err = rich_console.Console(stderr=True)
    rf = _run(args, sc, err)
    from guestbench.results import AbSides

    rf.set_ab(AbSides.laid_out(a=a, b=b, noise_percent=noise))
    run = rf.run()
    if not formats.FORMATS[args.format].whole:  # a machine's format prints the comparison alone
        formats.emit(results_doc.printable(run, str(rf.path)), args.format)
    c = ab.comparison(run, a, b, noise, str(rf.path), args.gate_resources)
    formats.emit(compare_doc.printable([c], fail_above), args.format)
    err.print("results: ", inert(rf.path), sep="", highlight=False)
    status = exit_status(run)
    return status or (1 if compare.regressed([c], fail_above) else 0)


def cmd_nested(args: argparse.Namespace) -> int:
    from guestbench.nested import image as nested_image

    err = rich_console.Console(stderr=True)
    try:
        img = nested_image.build(lambda line: err.print("nested build: ", inert(line), sep="", highlight=False),
                                 force=args.force)
    except nested_image.BuildError as e:
        sys.stderr.write(f"guestbench: nested build failed: {_one_line(str(e))}\n")
        return 1
    print(img.path)
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
