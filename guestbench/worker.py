"""The worker: runs one cell (backend × measurement) in its own process and reports as JSON lines.

Why a separate process: libguestfs has no launch timeout of its own, and a hung hypervisor (KVM on
these machines) never returns. The worker runs in its own session, so the supervisor can kill it
together with its qemu and libguestfs's recovery process, as a process group, when a deadline passes.

Protocol (worker → supervisor, one JSON object per line on the protocol fd):
  {"t": "begin", "i": index}                       an iteration starts
  {"t": "deadline", "what": "launch", "s": 300}    the next step must finish within s seconds
  {"t": "deadline", "what": null}                   no step is under way
  {"t": "launched", "s": 12.3, "first": true}      a launch finished (first: first launch in this worker)
  {"t": "sample", "i": index, "s": 11.2}           a timed sample (start-up with phases: "phases": [...];
                                                   a workload: "metrics": {key: value} from its tool;
                                                   concurrent guests: "in_step", "waited_s")
  {"t": "failure", "i": index, "reason": "..."}    an iteration failed (the worker goes on)
  {"t": "verification", "record": {...}}
  {"t": "unavailable", "reason": "..."}             the cell cannot run here (no further iterations)
  {"t": "setup", "record": {...}}                  what after_launch built (a workload's disk stack)
  {"t": "powercut", "i": index}                    durability: the data is written and fsynced; kill me now
  {"t": "done"}
Request (supervisor → worker, one JSON document on stdin): measurement, params, iterations ("cold",
"warmup", "rep"), backend (HandleConfig.to_dict()), appliance (memsize, smp), timeout, sample_timeout,
workdir, verbose, verify, phases (null or the marker family, see guestbench.phases), drives (host-side
disks a workload runs on, guestbench.storage.host.Drive.to_dict()), step (concurrent guests: lockstep.Step
.to_dict() plus "indexes", the run's number of each iteration), instance (which of N concurrent guests,
1-based), and for uploads payload + payload_sha256. Built by runner.Runner and probe.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from guestbench import lockstep, phases
from guestbench.measurements import get as get_measurement
from guestbench.measurements.base import CellContext, Measurement, Unavailable, verification_problem
from guestbench.paths import INSTANCE_ENV, WORKDIR_ENV

SHUTDOWN_TIMEOUT_S = 120.0
POWER_CUT_WAIT_S = 120.0
LOCKSTEP_MARGIN_S = 60.0  # the supervisor's deadline over the rendezvous's own bound


class Channel:
    """Writes protocol lines on a private fd, so stray prints to stdout cannot corrupt it."""

    def __init__(self) -> None:
        self.fd = os.dup(1)
        os.dup2(2, 1)  # anything printed to stdout from now on goes to stderr

    def send(self, **msg: Any) -> None:
        data = (json.dumps(msg) + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


class Appliance:
    """One libguestfs handle, configured for the backend, with its console captured."""

    def __init__(self, req: dict[str, Any], measurement: Measurement, ctx: CellContext, chan: Channel) -> None:
        import guestfs  # imported here so that the supervisor never needs the bindings

        self.verbose = bool(req.get("verbose"))
        self.console: collections.deque[str] = collections.deque(maxlen=200)
        self.phase_markers: str | None = req.get("phases")
        self.lines = phases.LineClock()
        self.events: list[phases.Line] = []  # stamped with perf_counter at arrival; kept when recording phases
        cfg = req["backend"]
        g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
        self.g = g
        # appliance: the hypervisor's and the appliance's console; library: libguestfs's own log, which
        # in verbose mode holds the exact hypervisor command line
        self.console_event = guestfs.EVENT_APPLIANCE
        self.sources = {guestfs.EVENT_APPLIANCE: "appliance", guestfs.EVENT_LIBRARY: "libguestfs",
                        guestfs.EVENT_WARNING: "warning", guestfs.EVENT_TRACE: "trace"}
        events = guestfs.EVENT_APPLIANCE | guestfs.EVENT_LIBRARY | guestfs.EVENT_WARNING
        if self.verbose:
            events |= guestfs.EVENT_TRACE
        g.set_event_callback(self._on_event, events)
        g.set_backend(cfg["libguestfs_backend"])
        g.set_backend_settings(list(cfg["settings"]))
        if cfg.get("hv"):
            g.set_hv(cfg["hv"])
        if self.verbose:
            g.set_verbose(True)
            g.set_trace(True)
        if self.phase_markers:  # the markers are in the verbose console; see guestbench.phases
            g.set_verbose(True)
            g.set_append(phases.APPEND)
        appliance = req.get("appliance") or {}
        if appliance.get("memsize"):
            g.set_memsize(int(appliance["memsize"]))
        if appliance.get("smp"):
            g.set_smp(int(appliance["smp"]))
        g.set_tmpdir(req["workdir"])
        if req.get("cachedir"):
            g.set_cachedir(req["cachedir"])
        measurement.add_drives(g, ctx)

    def _on_event(self, ev: int, eh: int, buf: bytes | str, array: Any) -> None:
        now = time.perf_counter()  # the clock that times the launch
        text = buf.decode("utf-8", "replace") if isinstance(buf, bytes) else str(buf)
        source = self.sources.get(ev, "event")
        if ev != self.console_event:
            text += "\n"  # library, warning and trace events are whole messages; console output is chunks
        self._lines(self.lines.feed(now, source, text))

    def _lines(self, lines: list[phases.Line]) -> None:
        for ln in lines:
            if self.phase_markers:
                self.events.append(ln)
            source, line = ln.source, ln.text
            if line.strip():
                self.console.append(line)
                if self.verbose:
                    sys.stderr.write(f"[{source}] {line}\n")
                    sys.stderr.flush()

    def cut_phases(self, t0: float, elapsed: float) -> list[dict[str, Any]] | None:
        """The launch that started at perf_counter() == t0, cut into phases (None: not recording)."""
        if not self.phase_markers:
            return None
        self._lines(self.lines.flush())
        return phases.split(self.events, elapsed, self.phase_markers, origin=t0)

    def console_tail(self, n: int = 8) -> list[str]:
        return list(self.console)[-n:]

    def close(self) -> None:
        try:
            self.g.close()
        except Exception:  # closing a handle whose hypervisor died can raise; the process is gone anyway
            pass


def failure_reason(exc: BaseException, appliance: Appliance | None) -> str:
    """One readable reason: libguestfs's error without its generic advice, plus what the hypervisor said."""
    msg = " ".join(str(exc).split())
    advice = msg.find(" This usually means")
    if advice > 0:
        msg = msg[:advice]
    if appliance is not None:
        tail = [" ".join(ln.split()) for ln in appliance.console_tail(40)]
        telling = [ln for ln in tail if any(k in ln.lower() for k in
                                            ("error", "fail", "assert", "abort", "panic", "killed", "crash"))]
        shown = (telling or tail)[-3:]
        if shown:
            msg += " | hypervisor/console said: " + " / ".join(shown)
    return msg


def run(req: dict[str, Any], chan: Channel) -> None:
    measurement = get_measurement(req["measurement"])
    workdir = Path(req["workdir"])
    ctx = CellContext(params=req["params"], workdir=workdir,
                      payload=Path(req["payload"]) if req.get("payload") else None,
                      payload_sha256=req.get("payload_sha256"),
                      memsize_mib=(req.get("appliance") or {}).get("memsize"), drives=list(req.get("drives") or []))
    timeout = float(req["timeout"])
    sample_timeout = float(req["sample_timeout"])
    verify_pending = bool(req.get("verify", True))
    app: Appliance | None = None
    launching: Appliance | None = None  # the handle being launched, so a failed launch's console is kept
    first_launch = True

    def launch() -> tuple[Appliance, float, list[dict[str, Any]] | None]:
        nonlocal first_launch, launching
        chan.send(t="deadline", what="prepare", s=sample_timeout)  # handle and disk images (host side)
        a = launching = Appliance(req, measurement, ctx, chan)
        chan.send(t="deadline", what="launch", s=timeout)
        t0 = time.perf_counter()
        a.g.launch()
        a.g.ping_daemon()
        elapsed = time.perf_counter() - t0
        chan.send(t="deadline", what=None)
        chan.send(t="launched", s=elapsed, first=first_launch)
        first_launch = False
        launching = None
        return a, elapsed, a.cut_phases(t0, elapsed)

    def shutdown(a: Appliance) -> None:
        chan.send(t="deadline", what="shutdown", s=SHUTDOWN_TIMEOUT_S)
        try:
            measurement.before_shutdown(a.g, ctx)
            a.g.shutdown()
        finally:
            a.close()
            chan.send(t="deadline", what=None)

    step = lockstep.Step.from_dict(req["step"]) if req.get("step") else None
    step_index: list[int] = list((req.get("step") or {}).get("indexes") or [])  # the run's iteration numbers
    for i, _it in enumerate(req["iterations"]):
        chan.send(t="begin", i=i)
        in_step: dict[str, Any] = {}
        try:
            if measurement.times_launch:
                app, elapsed, cut = launch()
                shutdown(app)
                app = None
                chan.send(t="sample", i=i, s=elapsed, **({"phases": cut} if cut is not None else {}))
                continue
            if app is None:
                app, _, _ = launch()
                chan.send(t="deadline", what="setup", s=sample_timeout)
                record = measurement.after_launch(app.g, ctx)
                if record:
                    chan.send(t="setup", record=record)
            chan.send(t="deadline", what="sample", s=sample_timeout)
            measurement.prepare(app.g, ctx)
            if step is not None:  # start the timed operation together with the other guests
                chan.send(t="deadline", what="waiting for the other guests", s=step.wait_s + LOCKSTEP_MARGIN_S)
                waited = lockstep.wait(step, step_index[i])
                in_step = {"in_step": waited is not None, "waited_s": waited}
                chan.send(t="deadline", what="sample", s=sample_timeout)
            t0 = time.perf_counter()
            figures = measurement.timed_op(app.g, ctx)
            elapsed = time.perf_counter() - t0
            if verify_pending:
                record = measurement.verify(app.g, ctx)
                if record is not None:
                    chan.send(t="verification", record=record)
                    verify_pending = False
                    if (problem := verification_problem(record)) is not None:
                        raise RuntimeError(problem)
            chan.send(t="deadline", what=None)
            chan.send(t="sample", i=i, s=elapsed, **({"metrics": figures} if figures is not None else {}), **in_step)
            if measurement.kills_hypervisor:  # the runner cuts the power now: wait for it, mid-flight
                chan.send(t="deadline", what="power cut", s=POWER_CUT_WAIT_S)
                chan.send(t="powercut", i=i)
                while True:
                    time.sleep(60)
        except Unavailable as exc:  # the same on every try: say so once and stop
            chan.send(t="deadline", what=None)
            chan.send(t="unavailable", reason=str(exc))
            for a in (app, launching):
                if a is not None:
                    a.close()
            app = launching = None
            break
        except Exception as exc:  # a failed sample is data, not a crash: report it and go on
            if step is not None:
                lockstep.arrive(step, step_index[i])  # the other guests need not wait for this iteration
            chan.send(t="deadline", what=None)
            chan.send(t="failure", i=i, reason=failure_reason(exc, app or launching))
            for a in (app, launching):
                if a is not None:
                    a.close()
            app = launching = None
    if app is not None:
        shutdown(app)
    chan.send(t="done")


def main() -> int:
    chan = Channel()
    try:
        req = json.load(sys.stdin)
        os.environ[WORKDIR_ENV] = req["workdir"]  # a hypervisor program of ours puts its files there
        os.environ[INSTANCE_ENV] = str(req.get("instance") or 1)
        for k, v in (req["backend"].get("env") or {}).items():
            os.environ[k] = v
        run(req, chan)
        return 0
    except Exception:
        chan.send(t="crash", reason=traceback.format_exc(limit=5).strip().splitlines()[-1])
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
