"""guestbench's command line as the tests run it: in its own process, as a user would (the exit status, output and
clean-up a user sees), or in this one through `cli.main` (milliseconds, where the process itself is not tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import ROOT


def guestbench(*args: str, timeout: float = 900, cwd: Path = ROOT,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would, in its own process (with `env`, else this one's); past `timeout` it is
    stopped as a user would (SIGTERM, then SIGKILL), so that it cleans up before the test fails (a bare SIGKILL
    would leave its hypervisors)."""
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, stdin=subprocess.DEVNULL, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the time-out, or pytest-timeout's own interruption
        stop_run(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_guestbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The real CLI started in its own process (with `env`, else this one's), for a test that watches or signals it
    mid-run; stop_run ends it after a failed check."""
    return subprocess.Popen([sys.executable, "-m", "guestbench", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def stop_run(proc: subprocess.Popen[str]) -> None:
    """After a failed check: stop a run the way a user would (SIGTERM, then SIGKILL), so nothing is left behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=60)  # drains its pipes too, which a plain wait could block on
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def write_scenario(path: Path, text: str) -> Path:
    """A scenario file of `text`, for `guestbench scenario PATH`."""
    path.write_text(text)
    return path


def run_scenario_text(tmp_path: Path, text: str, *args: str,
                      timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`guestbench scenario` on a scenario given as text (and `args`), as a user runs it; the process and its one
    results file."""
    sc = write_scenario(tmp_path / "scenario.yaml", text)
    proc = guestbench("scenario", str(sc), *args, "--results", str(tmp_path / "r"), timeout=timeout)
    (path,) = (tmp_path / "r").glob("*.json")
    return proc, json.loads(path.read_text())


def run_measured(args: list[str], timeout: float) -> tuple[int, str, int]:
    """Exit status, stderr and the peak RSS in KiB of one guestbench process (wait4: that child's own); past
    `timeout` s it is killed."""
    with open(os.devnull, "wb") as out, subprocess.Popen([sys.executable, "-m", "guestbench", *args], cwd=ROOT,
                                                         stdout=out, stderr=subprocess.PIPE) as proc:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            err = proc.stderr.read() if proc.stderr else b""
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return proc.returncode, err.decode(errors="replace"), usage.ru_maxrss


def main_in_process(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """`guestbench ARGV` through `cli.main` in this process (no interpreter to start: milliseconds), for tests of
    what a command says rather than of its process: its exit status, and what it printed on stdout and stderr."""
    from guestbench import cli

    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def main_status(argv: list[str]) -> int:
    """`cli.main`'s exit status as a shell sees it, argparse's own exits (usage errors, --help) included, which
    leave the parser as SystemExit rather than as a returned status."""
    from guestbench import cli

    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
