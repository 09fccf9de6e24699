"""`guestbench stack build NAME [--suite SUITE] [--packages full|lean] [--force]`, `stack list [--json]`,
`stack rm NAME`: the Debian suites' software stacks that a scenario can compare (guestbench.stacks)."""

from __future__ import annotations

import argparse
import json
import shutil

from rich import console as rich_console

from guestbench.util.errors import UserError, inert


def cmd_stack(args: argparse.Namespace) -> int:
    from guestbench.stacks import store

    if args.stack_command == "build":
        from guestbench.stacks import build

        err = rich_console.Console(stderr=True)
        name = store.check_name(args.name)
        stack = build.build(name, args.suite or name, args.packages, args.force,
                            lambda line: err.print("stack build: ", inert(line), sep="", highlight=False,
                                                   soft_wrap=True))
        print(stack.path)
        return 0
    if args.stack_command == "rm":
        from guestbench.host import locks, rundirs

        base = store.stacks_dir()
        stack = store.load(store.check_name(args.name), base)
        try:
            with locks.exclusive(base / ".lock", "the stacks", 60):  # not while a build replaces it
                aside = rundirs.make(base, store.BUILD_PREFIX)  # a removal stopped halfway: swept as a dead build
                try:
                    store.set_aside(stack.path, aside)
                finally:
                    shutil.rmtree(aside, ignore_errors=True)
        except locks.LockTimeout as e:
            raise UserError(str(e), source="command line", key=args.name) from None
        return 0
    stacks = store.all_stacks()
    if args.json:
        print(json.dumps([{**s.to_dict(), "path": str(s.path), "problem": s.problem} for s in stacks], indent=1))
        return 0
    out = rich_console.Console()
    if not stacks:
        out.print("no stacks; make one with 'guestbench stack build NAME' (e.g. trixie, sid)", highlight=False)
    for s in stacks:
        if s.problem:
            out.print(inert(f"{s.name}: {s.problem}"), highlight=False)
            continue
        shown = ", ".join(f"{k} {v}" for k, v in s.versions.items())
        out.print(inert(f"{s.name} ({s.suite}, {s.packages}, built {s.built_utc}): {shown or 'no versions read'}"),
                  highlight=False)
    return 0
