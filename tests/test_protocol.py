"""The worker protocol and the executor seam: one request type, one set of message kinds, and a runner that
reaches workers only through the executor it is given."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest
from rich.console import Console

from guestbench.backends import BACKENDS
from guestbench.backends.base import Backend
from guestbench.host.paths import make_run_dir, remove_tree, workdir_for
from guestbench.execute import protocol
from guestbench.execute.executor import Executor, local
from guestbench.execute.protocol import Message, Msg, Request, WorkerExit
from guestbench.run.runner import RunOptions, exit_status, run_scenario
from guestbench.scenario import parse_scenario

from helpers.paths import ROOT
from helpers.hv import HV, ScriptBackend
from guestbench.results import Run

KINDS = {v for k, v in vars(Msg).items() if k.isupper()}


def _request(**changes: Any) -> Request:
    return Request(**{"measurement": "startup", "params": {}, "iterations": ["cold", "rep"],
                      "backend": {"libguestfs_backend": "direct", "settings": []}, "workdir": "/nowhere",
                      "timeout": 10.0, "sample_timeout": 20.0, **changes})


def test_a_request_survives_json_both_ways_and_ignores_keys_it_does_not_know() -> None:
    req = _request(rendezvous={"dir": "/x", "guest": 1, "guests": 2, "wait_s": 3.0, "indexes": [0, 1]}, instance=2)
    back = Request.from_dict(json.loads(json.dumps(req.to_dict())))
    assert back == req
    old = {**req.to_dict(), "cachedir": "/old"}  # a key older workers were sent and never read
    assert Request.from_dict(old) == req


def test_every_message_the_worker_sends_is_a_documented_kind() -> None:
    """The worker names each kind by Msg (no bare strings), and the protocol's docstring describes each."""
    source = (ROOT / "guestbench/execute/worker.py").read_text()
    sent = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "send":
            first = node.args[0]
            assert isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) and \
                first.value.id == "Msg", ast.unparse(node)
            sent.add(getattr(Msg, first.attr))
    assert sent <= KINDS and {Msg.BEGIN, Msg.SAMPLE, Msg.FAILURE, Msg.DONE, Msg.CRASH} <= sent
    documented = set(re.findall(r"^  (\w+) ", protocol.__doc__ or "", re.M))
    assert documented == KINDS, documented ^ KINDS


def test_a_worker_that_cannot_start_its_measurement_ends_as_a_crash_with_its_reason() -> None:
    """A real worker process through the local executor: its last words (crash) become the exit's reason."""
    run_dir = make_run_dir()
    try:
        messages: list[Message] = []
        req = _request(measurement="no-such-measurement", workdir=str(workdir_for(run_dir, "cell")))
        ex = local().run_worker(req, BACKENDS["tcg"], messages.append)
    finally:
        remove_tree(run_dir)
    assert [m["t"] for m in messages] == [Msg.CRASH]
    assert ex.kind == "crash" and "no-such-measurement" in (ex.reason or ""), ex
    assert "the worker died (" in ex.explain(BACKENDS["tcg"])


def test_how_a_worker_ended_is_said_in_the_backends_terms() -> None:
    class Says(Backend):
        name = "says"

        def explain(self, reason: str, timed_out: bool) -> str:
            return f"{'TIMEOUT' if timed_out else 'DIED'}: {reason}"

    timeout = WorkerExit("timeout", what="launch", limit_s=8.0)
    assert Says().explain("x", True).startswith("TIMEOUT")
    assert timeout.explain(Says()) == "TIMEOUT: launch did not finish within 8 s; the hypervisor was killed"
    crash = WorkerExit("crash", stderr_tail=["noise", "qemu: error: could not open disk", "bye"])
    assert crash.explain(Says()) == "DIED: the worker died (qemu: error: could not open disk)"


class CountingExecutor:
    """A second executor: the local one, with every request it is given kept (what a scheduler would see)."""

    def __init__(self, inner: Executor, seen: list[Request]) -> None:
        self.inner = inner
        self.seen = seen
        self.verbose = inner.verbose

    def run_worker(self, request: Request, backend: Backend, on_message: Callable[[Message], None]) -> WorkerExit:
        self.seen.append(request)
        return self.inner.run_worker(request, backend, on_message)

    def abort(self) -> None:
        self.inner.abort()

    def kill(self) -> None:
        self.inner.kill()

    def spawn(self) -> Executor:
        return CountingExecutor(self.inner.spawn(), self.seen)


@pytest.mark.launch
def test_the_runner_reaches_every_worker_through_the_executor_it_is_given(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leftovers) -> None:
    """Probe and cells alike: with a crashing hypervisor, the probe's launch and the one cell's launches are
    all requests the executor saw, and the results say what the workers reported through it."""
    backend = ScriptBackend(HV / "crash.sh")
    monkeypatch.setitem(BACKENDS, backend.name, backend)
    sc = parse_scenario({"name": "seam", "backends": ["crash"], "repetitions": 1, "warmup": 0, "timeout": 60,
                         "measurements": ["startup"]}, "test")
    seen: list[Request] = []
    rf = run_scenario(sc, RunOptions(results_dir=tmp_path, reprobe=True, defer_probe=True), Console(stderr=True),
                      executor=CountingExecutor(local(), seen))
    doc = json.loads(rf.path.read_text())
    assert [r.iterations for r in seen] == [["cold", "rep"]]  # deferred: the cell's worker is also the probe
    assert seen[0].measurement == "startup" and seen[0].backend["hv"] == str(HV / "crash.sh")
    assert doc["backends"]["crash"]["usable"] is False
    # the first launch failed: the backend is refused at once, and the cell's next iteration makes no launch
    assert len(doc["cells"][0]["failures"]) == 1 and exit_status(Run.from_dict(doc)) == 0
    assert "not usable" in doc["cells"][0]["skip_reason"]


@pytest.mark.launch
def test_a_backend_refused_in_a_block_makes_no_second_launch(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leftovers) -> None:
    """With a deferred probe, two cells of a crashing backend take turns: the first launch fails, the backend is
    refused at once, and neither cell launches again; both say why the rest was not run."""
    backend = ScriptBackend(HV / "crash.sh")
    monkeypatch.setitem(BACKENDS, backend.name, backend)
    sc = parse_scenario({"name": "refused", "backends": ["crash"], "repetitions": 2, "warmup": 0, "timeout": 60,
                         "measurements": [{"measurement": "startup", "matrix": {"cache": ["writeback", "unsafe"]}}]},
                        "test")
    seen: list[Request] = []
    rf = run_scenario(sc, RunOptions(results_dir=tmp_path, reprobe=True, defer_probe=True), Console(stderr=True),
                      executor=CountingExecutor(local(), seen))
    doc = json.loads(rf.path.read_text())
    assert doc["order"]["mode"] == "interleaved" and len(seen) == 2  # both cells' workers started, in one block
    assert [len(c["failures"]) for c in doc["cells"]] == [1, 0]
    assert doc["backends"]["crash"]["usable"] is False
    assert all(c["status"] == "skipped" and "not usable" in c["skip_reason"] for c in doc["cells"])


def test_a_worker_writing_megabytes_to_stderr_without_a_newline_is_kept_in_cut_lines() -> None:
    """A worker's stderr carries the appliance's console under -v: a guest writing without newlines must not grow
    the supervisor's line buffer without bound (issue 46); what it wrote is shown in pieces as it comes."""
    import subprocess
    import sys
    from guestbench.execute.supervisor import STDERR_LINE_MAX, Supervisor
    script = ("import os, sys\n"
              "for _ in range(320): os.write(2, b'x' * 65536)\n"  # 20 MiB, no newline
              "print('{\"t\": \"done\"}', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    echoed: list[str] = []
    try:
        ex = Supervisor(verbose=True, echo=echoed.append)._pump(proc, lambda m: None)
    finally:
        proc.kill()
        proc.wait()
    assert ex.kind == "done"
    assert echoed and max(map(len, echoed)) <= STDERR_LINE_MAX + len(" [line cut]")
    assert len(echoed) >= 2 and all(e.endswith(" [line cut]") for e in echoed)  # shown as it came, in pieces
