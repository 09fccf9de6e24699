"""Command line: `guestbench scenario FILE`, `guestbench doctor`, `guestbench show RESULTS.json`,
`guestbench compare BASELINE.json OTHER.json...`, `guestbench report RESULTS.json... --output DIR`,
`guestbench export RESULTS.json [-o BENCH.json]`, `guestbench import BENCH.json [-o RESULTS.json]`.

Bad input of any kind ends in one line on stderr and exit status 2; a signal ends the run with the
results kept and exit status 128 + signal number. The grammar is parser.py; the commands are grouped by what
they touch: run.py (appliances), fleet.py, results.py (results files), doctor.py; common.py is what they share.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from guestbench.cli.common import EXIT_INTERNAL, EXIT_USAGE, HOST_PROBLEMS
from guestbench.cli.doctor import cmd_doctor
from guestbench.cli.fleet import cmd_fleet, cmd_worker
from guestbench.cli.parser import build_parser
from guestbench.cli.results import cmd_compare, cmd_export, cmd_history, cmd_import, cmd_report, cmd_show
from guestbench.cli.run import cmd_ab, cmd_env, cmd_exec, cmd_nested, cmd_scenario
from guestbench.cli.stack import cmd_stack
from guestbench.host import space
from guestbench.util.errors import Interrupted, UserError, clip_text, one_line as _one_line


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"scenario": cmd_scenario, "doctor": cmd_doctor, "show": cmd_show,
                "compare": cmd_compare, "report": cmd_report, "nested": cmd_nested, "export": cmd_export,
                "import": cmd_import, "env": cmd_env, "exec": cmd_exec, "ab": cmd_ab, "worker": cmd_worker,
                "fleet": cmd_fleet, "history": cmd_history, "stack": cmd_stack}[args.command](args)
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
