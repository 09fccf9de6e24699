"""The commands that read results files: `show`, `compare`, `report`, `export` and `import`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guestbench.cli.common import percent, write_json
from guestbench.output import formats
from guestbench.results import load_results
from guestbench.util.errors import UserError, one_line as _one_line
from guestbench.util.lazy import on_first_use

compare = on_first_use("guestbench.analysis.compare")
results_doc = on_first_use("guestbench.output.results_doc")
compare_doc = on_first_use("guestbench.output.compare_doc")
comparison_table = on_first_use("guestbench.output.tables.comparison")
machines = on_first_use("guestbench.analysis.machines")


def cmd_show(args: argparse.Namespace) -> int:
    formats.emit(results_doc.printable(load_results(args.file), args.file), args.format)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    fail_above = None if args.fail_above is None else percent(args.fail_above)
    if args.format == "csv" and len(args.others) > 1:
        raise UserError("--csv compares one OTHER file (the CSV has no column naming the file); "
                        "run once per file or use --json", source="command line")
    base = load_results(args.baseline)
    others = [(path, load_results(path)) for path in args.others]
    for warning in machines.gate_machines(args.baseline, base, others, force=args.force):
        sys.stderr.write(f"guestbench: warning: {_one_line(warning)}\n")
    noise = None if args.noise is None else percent(args.noise, "--noise")
    comparisons = [compare.build_comparison(base, doc, args.baseline, path, noise, gate_resources=args.gate_resources)
                   for path, doc in others]
    formats.emit(compare_doc.printable(comparisons, fail_above), args.format)
    found = comparison_table.regression_lines(comparisons, fail_above)
    if found and formats.FORMATS[args.format].whole:  # the terminal's and Markdown's documents say them
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

    write_json(pbj.export(load_results(args.file), args.file), args.output)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from guestbench.results import pytest_benchmark as pbj

    doc, warnings = pbj.import_(pbj.load_pytest_benchmark(args.file), args.file)
    for warning in warnings:
        sys.stderr.write(f"guestbench: warning: {_one_line(warning)}\n")
    write_json(doc, args.output)
    return 0


def _floors(given: list[str] | None) -> tuple[dict[str, float], float | None]:
    """--noise PCT (every series) and --noise CELL=PCT (one series)."""
    floors: dict[str, float] = {}
    default = None
    for text in given or []:
        name, sep, pct = text.rpartition("=")
        value = percent(pct if sep else text, "--noise")
        if sep and name:
            floors[name] = value
        else:
            default = value
    return floors, default


def cmd_history(args: argparse.Namespace) -> int:
    from guestbench.analysis import baseline as baselines
    from guestbench.analysis import history_gate
    from guestbench.output import history_doc
    from guestbench.results import store

    floors, default = _floors(args.noise)
    pinned = baselines.load(args.baseline) if args.baseline else None
    found = history_gate.follow(store.load(args.paths), floors, default, pinned)  # decided once, then laid out
    if args.html:
        history_doc.page(found, Path(args.html))
    if args.write_baseline:
        baselines.write(found.history, args.write_baseline)
    formats.emit(history_doc.printable(found), args.format)
    verdict = found.verdict
    whole = formats.FORMATS[args.format].whole  # else the terminal's and Markdown's documents say these
    if whole and verdict.apart_line:
        sys.stderr.write(f"guestbench: warning: {_one_line(verdict.apart_line)}\n")
    if verdict.regressions and whole:
        sys.stderr.write(f"guestbench: {len(verdict.regressions)} regression(s): "
                         f"{_one_line('; '.join(verdict.regressions))}\n")
    if args.fail_on_regression:  # a CI log says which run the gate was about, whatever the format
        sys.stderr.write(f"guestbench: --fail-on-regression judged the newest run(s): "
                         f"{_one_line(verdict.judged_line)}\n")
    return verdict.status(args.fail_on_regression)
