"""The worker: runs one cell (backend × measurement) in its own process and reports as JSON lines.

Why a separate process: libguestfs has no launch timeout of its own, and a hung hypervisor (KVM on
these machines) never returns. The worker runs in its own session, so the supervisor can kill it
together with its qemu and libguestfs's recovery process, as a process group, when a deadline passes.

The request and the messages are described, and built, in guestbench.execute.protocol.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from guestbench.instruments import markers
from guestbench.host import cgroups
from guestbench.instruments import load as noise
from guestbench.host import space
from guestbench.instruments import usage
from guestbench.backends import libvirt
from guestbench.backends.uml.channel import DRIVE_PATHS_FILE
from guestbench.backends.watch import Watch
from guestbench.measurements import get as get_measurement
from guestbench.util.errors import Unavailable
from guestbench.measurements.base import CellContext, Measurement, verification_problem
from guestbench.host.paths import INSTANCE_ENV, WORKDIR_ENV, scratch_env
from guestbench.execute import lockstep, turns
from guestbench.execute.protocol import Msg, Request
from guestbench.execute.supervisor import socket_dirs_of
from guestbench.stacks.sandbox import STACK_ENV

# What the appliance's kernel logs when a disk write or read failed: a sample that saw one is not a sample (UML
# turns a full host disk into exactly this, and a guest's sync() reports nothing)
GUEST_IO_ERROR = re.compile(r"I/O error|-fs error|EXT[234]-fs warning.*I/O")
SHUTDOWN_TIMEOUT_S = 120.0
POWER_CUT_WAIT_S = 120.0
LOCKSTEP_MARGIN_S = 60.0  # the supervisor's deadline over the rendezvous's own bound (and a turn's)


class Channel:
    """Writes protocol lines on a private fd, so stray prints to stdout cannot corrupt it."""

    def __init__(self) -> None:
        self.fd = os.dup(1)
        os.dup2(2, 1)  # anything printed to stdout from now on goes to stderr

    def send(self, t: str, **fields: Any) -> None:
        """One message of kind `t` (a protocol.Msg)."""
        data = (json.dumps({"t": t, **fields}) + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


class Handle:
    """One libguestfs handle, configured for the backend, with its console captured."""

    def __init__(self, req: Request, measurement: Measurement, ctx: CellContext) -> None:
        import guestfs  # imported here so that the supervisor never needs the bindings

        self.verbose = req.verbose
        self.console: collections.deque[str] = collections.deque(maxlen=200)
        self.io_errors_seen = 0  # of the kernel log's I/O error lines, those already blamed on a sample
        self.phase_markers: str | None = req.phases
        self.lines = markers.LineClock()
        self.events: list[markers.Line] = []  # stamped with perf_counter at arrival; kept when recording phases
        cfg = req.backend
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
        if self.phase_markers:  # the markers are in the verbose console; see guestbench.instruments.markers
            g.set_verbose(True)
            g.set_append(markers.APPEND)
        if req.appliance.get("memsize"):
            g.set_memsize(int(req.appliance["memsize"]))
        if req.appliance.get("smp"):
            g.set_smp(int(req.appliance["smp"]))
        g.set_tmpdir(req.workdir)
        measurement.add_drives(g, ctx)

    def _on_event(self, ev: int, eh: int, buf: bytes | str, array: Any) -> None:
        now = time.perf_counter()  # the clock that times the launch
        text = buf.decode("utf-8", "replace") if isinstance(buf, bytes) else str(buf)
        source = self.sources.get(ev, "event")
        if ev != self.console_event:
            text += "\n"  # library, warning and trace events are whole messages; console output is chunks
        self._lines(self.lines.feed(now, source, text))

    def _lines(self, lines: list[markers.Line]) -> None:
        for ln in lines:
            if self.phase_markers:
                self.events.append(ln)
            source, line = ln.source, ln.text
            if line.strip() and source != "trace":  # the call trace is no evidence of what the hypervisor did
                self.console.append(line)
                if self.verbose:
                    sys.stderr.write(f"[{source}] {line}\n")
                    sys.stderr.flush()

    def cut_phases(self, t0: float, elapsed: float) -> list[dict[str, Any]] | None:
        """The launch that started at perf_counter() == t0, cut into phases (None: not recording)."""
        if not self.phase_markers:
            return None
        self._lines(self.lines.flush())
        return markers.split(self.events, elapsed, self.phase_markers, origin=t0)

    def console_tail(self, n: int = 8) -> list[str]:
        return list(self.console)[-n:]

    def close(self) -> None:
        try:
            self.g.close()
        except Exception:  # closing a handle whose hypervisor died can raise; the process is gone anyway
            pass


def failure_reason(exc: BaseException, appliance: Handle | None) -> str:
    """One readable reason: libguestfs's error without its generic advice, plus what the hypervisor said."""
    msg = " ".join(str(exc).split())
    advice = msg.find(" This usually means")
    if advice > 0:
        msg = msg[:advice]
    if appliance is not None:
        # the hypervisor's command line as libguestfs prints it ("-append ... panic=1 ...") says nothing of what
        # went wrong
        tail = [" ".join(ln.split()) for ln in appliance.console_tail(40) if not ln.lstrip().startswith("-")]
        telling = [ln for ln in tail if any(k in ln.lower() for k in
                                            ("error", "fail", "assert", "abort", "panic", "killed", "crash"))]
        shown = (telling or tail)[-3:]
        if shown:
            msg += " | hypervisor/console said: " + " / ".join(shown)
    return msg


class WorkerTask:
    """One request's iterations on one backend: launches, samples and failures, each step under a deadline
    that the supervisor enforces (the worker announces it; the supervisor kills the tree when it passes)."""

    def __init__(self, req: Request, chan: Channel) -> None:
        self.req = req
        self.chan = chan
        self.m = get_measurement(req.measurement)
        self.ctx = CellContext(params=req.params, workdir=Path(req.workdir),
                               payload=Path(req.payload) if req.payload else None, payload_sha256=req.payload_sha256,
                               memsize_mib=req.appliance.get("memsize"), drives=list(req.drives),
                               backend=dict(req.backend))
        self.verify_every = req.params.get("verify") == "every"  # a soak checks every sample's data, not the first
        self.verify_pending = req.verify or self.verify_every
        self.app: Handle | None = None
        self.launching: Handle | None = None  # the handle being launched, so a failed launch's console is kept
        self.first_launch = True
        self.set_up = False  # after_launch has run for the current appliance (or, without one, for the cell)
        self.rendezvous = lockstep.Rendezvous.from_dict(req.rendezvous) if req.rendezvous else None
        # the run's iteration numbers
        self.rendezvous_index: list[int] = list((req.rendezvous or {}).get("indexes") or [])
        # what the rest of the machine did in each timed step (concurrent guests: the rest beyond the group)
        group = cgroups.of_this_worker()
        peers = self.rendezvous.peers if self.rendezvous else ""
        self.meter = noise.LoadMeter(marker=peers or req.workdir, group=group)
        self.in_step: dict[str, Any] = {}  # the last timed launch's rendezvous (concurrent guests)
        # and what the cell's processes used: counted by the kernel where the supervisor made the worker a group
        self.usage = usage.UsageMeter(marker=req.workdir, daemons=req.daemons, group=group)
        self.turn = turns.Turn.from_dict(req.turn) if req.turn else None
        self.turn_index: list[int] = list((req.turn or {}).get("indexes") or [])  # the cell's iteration numbers
        # the hypervisor, asked whether its guest was paused on a full disk (guestbench.backends.watch)
        self.watch = Watch(Path(req.workdir), libvirt=req.backend.get("libguestfs_backend") == "libvirt")

    def deadline(self, what: str | None, s: float | None = None) -> None:
        self.chan.send(Msg.DEADLINE, what=what, **({"s": s} if what is not None else {}))

    def run(self) -> None:
        if self.m.launches:
            self.watch.start()
        try:
            self.iterations()
        finally:
            # however it ends: a runner that died (SIGKILL) breaks the channel at the next message, and a handle not
            # closed (close_on_exit is off) leaves its socket directory, /tmp/libguestfsXXXXXX, behind for good
            self.drop_handles()
            if self.watch.is_alive():
                self.watch.stop()

    def why(self, exc: BaseException) -> str:
        """A failed iteration's reason: what the watch saw first (it ended the guest for it); else libguestfs's and
        the console's words, led by the full filesystem when the cell's files are on one (UML's write errors)."""
        if self.watch.reason is not None:
            reason, self.watch.reason = self.watch.reason, None
            return reason
        said = failure_reason(exc, self.app or self.launching)
        full = space.full_among([Path(self.req.workdir)])
        return f"{full}: {said}" if full else said

    def iterations(self) -> None:
        for i, _it in enumerate(self.req.iterations):
            self.chan.send(Msg.BEGIN, i=i)
            if not self.take_turn(i):
                break
            try:
                self.iteration(i)
            # The handle is closed before the failure is reported: a failed or shut-down launch's socket directory
            # (/tmp/libguestfsXXXXXX) holds no live socket of ours until libguestfs removes it at close, so a kill
            # that the report may bring would leave it (issue 45).
            except Unavailable as exc:  # the same on every try: say so once and stop
                self.deadline(None)
                reason = str(exc)
                self.drop_handles()
                self.chan.send(Msg.UNAVAILABLE, reason=reason)
                break
            except Exception as exc:  # a failed sample is data, not a crash: report it and go on
                if self.rendezvous is not None:
                    # the others need not wait for this iteration
                    lockstep.arrive(self.rendezvous, self.rendezvous_index[i])
                self.deadline(None)
                reason = self.why(exc)
                self.drop_handles()
                self.chan.send(Msg.FAILURE, i=i, reason=reason)
        if self.app is not None:
            self.shutdown(self.app)
        elif self.set_up:  # no appliance of its own: its set-up is undone all the same
            self.deadline("shutdown", SHUTDOWN_TIMEOUT_S)
            self.m.before_shutdown(None, self.ctx)
            self.deadline(None)
        self.chan.send(Msg.DONE)

    def iteration(self, i: int) -> None:
        if self.m.times_launch:
            self.app, elapsed, cut = self.launch(timed=i)
            meters = self.stop_meters()
            self.shutdown(self.app)
            self.chan.send(Msg.SAMPLE, i=i, s=elapsed, **({"phases": cut} if cut is not None else {}), **meters,
                           **self.in_step)
            return
        if not self.set_up:
            if self.m.launches:
                self.app, _, _ = self.launch()
            self.deadline("setup", self.req.sample_timeout)
            if record := self.m.after_launch(self.app.g if self.app else None, self.ctx):
                self.chan.send(Msg.SETUP, record=record)
            self.set_up = True
        g = self.app.g if self.app else None
        self.deadline("sample", self.req.sample_timeout)
        self.m.prepare(g, self.ctx)
        in_step = self.meet(i)
        self.start_meters()
        t0 = time.perf_counter()
        figures = self.m.timed_op(g, self.ctx)
        elapsed = time.perf_counter() - t0
        meters = self.stop_meters()
        if self.app is not None and self.m.image_bytes(self.ctx.params) and not self.m.kills_hypervisor:
            self.check_guest_io(self.app)
        if self.verify_pending and (record := self.m.verify(g, self.ctx)) is not None:
            self.chan.send(Msg.VERIFICATION, record=record)
            self.verify_pending = self.verify_every
            if (problem := verification_problem(record)) is not None:
                raise RuntimeError(problem)
        self.deadline(None)
        self.chan.send(Msg.SAMPLE, i=i, s=elapsed, **({"metrics": figures} if figures is not None else {}), **in_step,
                       **meters)
        if self.m.kills_hypervisor:  # the runner cuts the power now: wait for it, mid-flight
            self.deadline("power cut", POWER_CUT_WAIT_S)
            self.chan.send(Msg.POWERCUT, i=i)
            while True:
                time.sleep(60)

    def check_guest_io(self, a: Handle) -> None:
        """Fail the sample when the appliance's kernel logged a disk I/O error during it (not timed: one dmesg)."""
        lines = [ln for ln in str(a.g.dmesg()).splitlines() if GUEST_IO_ERROR.search(ln)]
        new, a.io_errors_seen = lines[a.io_errors_seen:], len(lines)
        if new:
            raise RuntimeError(f"the appliance's kernel logged {len(new)} disk I/O error line(s) during the "
                               f"sample, first: {' '.join(new[0].split())}")

    def start_meters(self) -> None:
        self.usage.start()
        self.meter.start()

    def stop_meters(self) -> dict[str, Any]:
        """The sample's "load" (the rest of the machine) and "resources" (the cell's processes), where readable."""
        load = self.meter.stop()
        resources = self.usage.stop()
        return {**({"load": load} if load else {}), **({"resources": resources} if resources else {})}

    def take_turn(self, i: int) -> bool:
        """Cells that take turns (guestbench.execute.turns): wait until the runner grants iteration i (True) or tells
        this cell to stop (False). Everything until the next wait, or the worker's end, is inside the turn."""
        if self.turn is None:
            return True
        self.deadline("waiting for its turn", self.turn.wait_s + LOCKSTEP_MARGIN_S)
        self.chan.send(Msg.WAITING, i=i)
        got = turns.wait(self.turn, self.turn_index[i])
        self.deadline(None)
        if got is None:  # the runner is gone, or kept it waiting past every bound: take nothing more
            self.chan.send(Msg.FAILURE, i=i, reason=f"no turn was granted within {self.turn.wait_s:g} s "
                           "(the runner stopped granting turns)")
            return False
        return got == turns.GO

    def meet(self, i: int) -> dict[str, Any]:
        """Concurrent guests start the timed operation together; what the sample says about that."""
        if self.rendezvous is None:
            return {}
        self.deadline("waiting for the other guests", self.rendezvous.wait_s + LOCKSTEP_MARGIN_S)
        waited = lockstep.wait(self.rendezvous, self.rendezvous_index[i])
        self.deadline("sample", self.req.sample_timeout)
        return {"in_step": waited is not None, "waited_s": waited}

    def launch(self, timed: int | None = None) -> tuple[Handle, float, list[dict[str, Any]] | None]:
        """A fresh appliance; `timed`: the launch is iteration `timed`'s sample, so concurrent guests start it
        together (self.in_step) and the meters cover exactly the launch."""
        self.deadline("prepare", self.req.sample_timeout)  # handle and disk images (host side)
        a = self.launching = Handle(self.req, self.m, self.ctx)
        if timed is not None:
            self.in_step = self.meet(timed)
            self.start_meters()
        self.deadline("launch", self.req.timeout)
        t0 = time.perf_counter()
        a.g.launch()
        a.g.ping_daemon()
        elapsed = time.perf_counter() - t0
        self.deadline(None)
        # where libguestfs made this launch's socket directory, found by our own socket in it: the supervisor removes
        # it if it must kill us after the socket is gone (between shutdown and close), which it cannot find then
        sockdirs = [str(d) for d in socket_dirs_of([os.getpid()])]
        paths = drive_paths(Path(self.req.workdir))
        self.chan.send(Msg.LAUNCHED, s=elapsed, first=self.first_launch, sockdirs=sockdirs,
                       **({"drive_paths": paths} if paths else {}))
        self.first_launch = False
        self.launching = None
        return a, elapsed, a.cut_phases(t0, elapsed)

    def shutdown(self, a: Handle) -> None:
        self.deadline("shutdown", SHUTDOWN_TIMEOUT_S)
        try:
            self.m.before_shutdown(a.g, self.ctx)
            a.g.shutdown()
        finally:
            a.close()
            self.app = None
            self.set_up = False
            self.deadline(None)

    def drop_handles(self) -> None:
        for a in (self.app, self.launching):
            if a is not None:
                a.close()
        self.app = self.launching = None
        if self.m.launches:  # a new appliance is set up afresh; a measurement without one keeps its set-up
            self.set_up = False


def drive_paths(workdir: Path) -> list[str] | None:
    """How the launch's drives reached the guest, where the hypervisor program said (UML's: ubd or vhost-user-blk
    each, guestbench.backends.uml.drives); the note is taken, so that the next launch's is its own."""
    note = workdir / DRIVE_PATHS_FILE
    try:
        with open(note, "rb") as f:
            said = json.loads(f.read(65536))
        note.unlink()
    except (OSError, ValueError):
        return None
    return [str(p) for p in said][:64] if isinstance(said, list) else None


def main() -> int:
    chan = Channel()
    try:
        req = Request.from_dict(json.load(sys.stdin))
        os.environ[WORKDIR_ENV] = req.workdir  # a hypervisor program of ours puts its files there
        os.environ.update(scratch_env(req.workdir))  # and qemu's, supermin's: removed with it, however it ends
        os.environ[INSTANCE_ENV] = str(req.instance)
        os.environ.update(req.backend.get("env") or {})
        if os.environ.get(STACK_ENV) and req.backend.get("libguestfs_backend") == "libvirt":
            # a stack's own libvirtd, in this worker's sandbox: it goes with the sandbox, never the host's
            if (why := libvirt.ensure_daemons()) is not None:
                raise RuntimeError(f"stack {os.environ[STACK_ENV]}'s libvirtd: {why}")
        WorkerTask(req, chan).run()
        return 0
    except Exception:
        with contextlib.suppress(OSError):  # the runner may be gone: the channel with it
            chan.send(Msg.CRASH, reason=traceback.format_exc(limit=5).strip().splitlines()[-1])
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
