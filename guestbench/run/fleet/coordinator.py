"""`guestbench scenario FILE --cluster ADDRESS`: the scenario on every selected host of a Dask cluster, one
results file on this machine, each cell naming its host.

Each host gets one task (guestbench.run.fleet.task.host_share) pinned to its worker, asking for `bench` and the
backends it will launch, and a key of its own. Snapshots of each host's own results file, then its final one,
arrive as Dask events sealed with that key (guestbench.run.fleet.seal) and are merged here as they come (every
sample is on disk here within a second of being taken there); a host whose message names another host, or that
sends what the bounded parser refuses, fails saying why, and the other hosts' cells stay as they are. Nothing a
host sends is loaded here but msgpack's plain values (guestbench.run.fleet.plain, .nopickle), what waits to be
read is bounded (guestbench.run.fleet.inbox), and no task result is fetched. A worker that leaves the
cluster mid-run makes its host 'lost': what it sent is kept, its unfinished iterations become failures with the
reason, and the others go on. A signal sets the run's cancel event: each host stops as on Ctrl-C and sends its
last snapshot, and the file is closed as 'interrupted'.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from guestbench.host import fingerprint as host_info
from guestbench.util.errors import Interrupted, UserError, inert
from guestbench.results import Failure, FleetHost, ResultsWriter, utc_now
from guestbench.run.fleet import nopickle, plain, resources, seal, task
from guestbench.run.fleet.cluster import ASK_TIMEOUT_S, DEAF, HostPlan, addresses, choose, close, connect, deaf, workers
from guestbench.run.fleet.inbox import Inbox
from guestbench.execute import remote
from guestbench.execute.remote import Remote
from guestbench.run.record import progress_display
from guestbench.execute.supervisor import TrapSignals
from guestbench.scenario import Scenario

CANCEL_WAIT_S = 180.0  # after a signal, how long the hosts may take to stop and send their last samples
LIVENESS_EVERY_S = 1.0
# A scheduler that went away cancels every future (the client does that); one that is stopped or stuck keeps its
# connection open and answers nothing: past this, its hosts are written off as lost.
SCHEDULER_SILENT_S = 60.0
HOST_FIELDS = ("host", "backends", "placements", "order", "status", "started_utc", "finished_utc", "guestbench")
ENDED = ("done", "skipped", "unavailable")


@dataclass
class FleetOptions:
    address: str
    hosts: list[str] | None = None  # names; None: every worker
    child_options: list[str] = field(default_factory=list)  # passed to each host's `guestbench scenario`
    command: tuple[str, ...] = ()
    insecure: bool = False  # a plain tcp:// scheduler not on loopback is allowed (guestbench.run.fleet.address)


class FleetRun:
    """One scenario across the chosen hosts; the results file here, rewritten on every snapshot."""

    def __init__(self, sc: Scenario, opts: FleetOptions, console: Console) -> None:
        self.sc = sc
        self.opts = opts
        self.console = console
        self.run_id = uuid.uuid4().hex[:12]
        self.inbox = Inbox(())  # what the hosts sent, newest per worker, opened by `_take` (made for the plans)
        self.results: ResultsWriter | None = None
        self.futures: dict[str, Any] = {}  # host name -> its task's future
        self.keys: dict[str, str] = {}  # host name -> the key its messages are sealed with (its alone)
        self.addresses: dict[str, str] = {}  # host name -> its worker's address
        self.numbers: dict[str, int] = {}  # host name -> the number of the newest message taken from it
        self.finals: dict[str, dict[str, Any]] = {}  # host name -> its final message
        self.refusals: dict[str, str | None] = {}  # host name -> why the model refused its newest document
        self.refused: set[str] = set()  # hosts failed for what they sent: nothing more of theirs is taken

    def run(self, results_dir: Any) -> ResultsWriter:
        with nopickle.refusing(), plain.only():
            return self._run(results_dir)

    def _run(self, results_dir: Any) -> ResultsWriter:
        from distributed import Event

        client = connect(self.opts.address, self.opts.insecure,
                         lambda line: self.console.print(inert(line, "yellow"), highlight=False))
        try:
            try:
                cluster = workers(client)
            except OSError as e:
                raise UserError(f"the scheduler did not tell its workers ({e})",
                                source="command line", key=f"--cluster {self.opts.address}") from None
            plans, idle = choose(self.sc, cluster, self.opts.hosts, self.opts.address)
            if not plans:
                raise UserError("no selected host can launch any of the scenario's backends: "
                                + "; ".join(f"{n}: {why}" for n, why in idle.items()),
                                source="command line", key=f"--cluster {self.opts.address}")
            fp = host_info.fingerprint()
            self.results = rf = ResultsWriter.create(
                results_dir, scenario=self.sc.to_dict(), host=fp, command=list(self.opts.command),
                guestbench=fp["guestbench"], new=True)
            rf.add_hosts({**{p.name: FleetHost.laid_out(address=p.address, resources=p.resources, status="starting")
                             for p in plans},
                          **{name: FleetHost.laid_out(address=None, status=None, error=f"not run: {why}")
                             for name, why in idle.items()}})
            for name, why in idle.items():
                self.console.print("[yellow]–[/] ", inert(f"host {name}: not run: {why}"), sep="", highlight=False)
            cancel = Event(task.cancel_event_name(self.run_id), client=client)
            self.inbox = Inbox(p.address for p in plans)
            client.subscribe_topic(task.topic(self.run_id), lambda event: self.inbox.put(event[1]))
            with TrapSignals():
                try:
                    self.supervise(client, plans)
                    rf.finish("complete")
                except Interrupted:
                    self._cancel(cancel)
                    rf.finish("interrupted")
                    raise
                except BaseException:
                    self._cancel(cancel)
                    rf.finish("failed")
                    raise
            return rf
        finally:
            try:
                client.unsubscribe_topic(task.topic(self.run_id))
            except Exception:
                pass
            close(client)

    # ------------------------------------------------------------------ the run
    def supervise(self, client: Any, plans: list[HostPlan]) -> None:
        self.keys = {p.name: seal.new_key() for p in plans}
        self.addresses = {p.name: p.address for p in plans}
        self.futures = {p.name: self._submit(client, p) for p in plans}
        pending = dict(self.futures)
        with progress_display(self.console, open_ended=True) as progress:
            bars = {p.name: progress.add_task(f"{p.name} · starting", total=None) for p in plans}
            next_check = 0.0
            answered = time.monotonic()
            while pending:
                self._drain(progress, bars, timeout=0.2)
                for name, fut in list(pending.items()):
                    if name in self.refused:  # failed, saying why, for what it sent: its task is not waited for
                        pending.pop(name).cancel()
                    elif fut.done():
                        self.host_ended(name, fut)
                        del pending[name]
                if pending and time.monotonic() >= next_check:
                    next_check = time.monotonic() + LIVENESS_EVERY_S
                    try:
                        alive = addresses(client)  # not by name: a worker may give another's (cluster.workers)
                        answered = time.monotonic()
                    except OSError:
                        if time.monotonic() - answered < SCHEDULER_SILENT_S:
                            continue  # no verdict yet: a scheduler that went away cancels every future
                        alive, why = set(), (f"the scheduler did not answer, or answered only errors, for "
                                             f"{SCHEDULER_SILENT_S:g} s (the host was not told: its run there may "
                                             "go on)")
                    else:
                        why = "its worker ({}) left the cluster mid-run"
                        if deaf(client):
                            alive, why = set(), DEAF
                    for p in plans:
                        if p.name in pending and p.address not in alive:
                            if p.name in self.finals:  # it said how its run ended before it went
                                self.host_ended(p.name, pending.pop(p.name))
                                continue
                            pending.pop(p.name).cancel()
                            self.write_off(p, why.format(p.address))
            self._drain(progress, bars, timeout=0)

    def _submit(self, client: Any, p: HostPlan) -> Any:
        scenario_file = self.sc.to_file(backends=p.backends)
        return client.submit(task.host_share, self.run_id, p.name, self.keys[p.name], scenario_file,
                             self.opts.child_options,
                             key=task.key(self.run_id, p.name), workers=[p.address],
                             allow_other_workers=False, resources=resources.asked(p.backends), pure=False,
                             retries=0)

    def _drain(self, progress: Any, bars: dict[str, Any], timeout: float) -> None:
        for name in self._take(timeout):
            if name in bars:
                done, total = self._progress(name)
                progress.update(bars[name], completed=done, total=total,
                                description=f"{name} · {self._status(name)}")

    def _take(self, timeout: float) -> list[str]:
        """Merge what the inbox holds (waiting up to `timeout` for a first message): only each host's newest
        snapshot, and the file rewritten once for the batch. Returns the hosts merged. Each message is opened
        here (guestbench.run.fleet.seal): one its sender may not send fails that host, saying why."""
        batch = self.inbox.take(timeout)
        newest: dict[str, seal.Sealed] = {}  # per host, the one message of the batch worth reading
        for msg in batch:
            sealed = seal.identify(msg, self.keys, self.addresses)  # the seal only: nothing inflated or parsed yet
            if sealed is None or sealed.host in self.refused:
                continue  # no host to blame, or one already failed
            if sealed.why is None and sealed.seq <= max(self.numbers.get(sealed.host, 0),
                                                         newest[sealed.host].seq if sealed.host in newest else 0):
                continue  # a replay, or older than one of this batch: never read
            if sealed.why is not None:
                newest.pop(sealed.host, None)
                self.refuse(sealed.host, sealed.why)
                continue
            newest[sealed.host] = sealed
        latest: dict[str, dict[str, Any]] = {}
        for host, sealed in newest.items():
            got = sealed.open()
            why = got.why or _unfit(got.body)
            if why is not None:
                self.refuse(host, why)
                continue
            assert got.body is not None
            self.numbers[host] = got.seq
            if got.body.get("final"):
                self.finals[host] = got.body
            if isinstance(got.body.get("doc"), dict):
                latest[host] = got.body["doc"]
        with self._rf().batch():  # one rewrite for the batch: with many hosts, that is the coordinator's cost
            for name, doc in latest.items():
                self.merge(name, doc)
        return list(latest)

    def refuse(self, name: str, why: str) -> None:
        """Host `name` sent what it may not: it fails with `why`; what it sent before is kept, its unfinished
        iterations become failures, and nothing more of its is taken."""
        self.refused.add(name)
        self._unfinished_fail(name, why, "failed")

    def merge(self, name: str, doc: dict[str, Any]) -> str | None:
        """The host's newest results document replaces what it sent before (the file rewritten, once for several
        hosts in the writer's batch); why it was refused, if the model refused it."""
        if self._rf().host(name) is not None:
            remote = self._remote(name)
            remote.take(doc)
            self.refusals[name] = remote.refused
            return remote.refused
        return None

    def _remote(self, name: str) -> Remote:
        return Remote(self._rf(), ("host", name), HOST_FIELDS)

    def host_ended(self, name: str, fut: Any) -> None:
        """A host's task ended: its final message (sent before the task ended, so in the inbox by now) says how
        its run ended. Its task's result is not fetched: it would cross as pickle."""
        self._take(timeout=0)
        if name in self.refused:
            return  # failed already, saying why
        out = self.finals.get(name)
        if out is None:
            how = {"error": "failed on the worker", "cancelled": "was cancelled"}.get(fut.status, "ended")
            self._host_error(name, f"its task {how} without sending its final results")
            return
        refused = self.refusals.get(name) if isinstance(out.get("doc"), dict) else None
        status = self._status(name)
        if refused:
            self._host_error(name, f"its results were refused: {refused}")
        elif out.get("doc") is None:
            last = " / ".join((out.get("stderr") or "").strip().splitlines()[-2:])
            self._host_error(name, f"its run wrote no results (exit status {out.get('exit')}): {last}")
        elif out.get("exit") not in (0, 1):
            last = " / ".join((out.get("stderr") or "").strip().splitlines()[-1:])
            self._host_error(name, f"its run ended with exit status {out.get('exit')} ({status}): {last}")
        else:
            self.console.print("[green]✓[/] ", inert(f"host {name}: {status}"), sep="", highlight=False)

    def _host_error(self, name: str, error: str) -> None:
        rf = self._rf()
        with rf.lock:
            ended = {"status": "failed"} if self._status(name) in (None, "starting", "running") else {}
            rf.set_host_state(name, error=error, **ended)
        self.console.print("[red]✗[/] ", inert(f"host {name}: {error}"), sep="", highlight=False)  # quotes the host

    def write_off(self, p: HostPlan, cause: str) -> None:
        """The host's worker left mid-run (or the scheduler stopped answering): its unfinished iterations are
        failures with the reason."""
        self._unfinished_fail(p.name, cause, "lost")

    def _unfinished_fail(self, name: str, cause: str, status: str) -> None:
        """Host `name` is written off ("lost", or "failed" for what it sent): its unfinished iterations become
        failures with the reason; what it sent until then is kept."""
        rf = self._rf()
        why = f"host {name} {status}: {cause} at {utc_now()}"
        with rf.batch():
            rf.set_host_state(name, status=status, error=why)
            for cell in rf.cells_where("host", name):
                if cell.status in ENDED:
                    continue
                left = remote.planned(self.sc, cell) - remote.ended_iterations(cell)
                reps = len(cell.samples) + sum(1 for f in cell.failures if f.kind in (None, "rep"))
                for k in range(left):
                    rf.add_failure(cell, Failure(kind="rep", rep=reps + k + 1, reason=why, utc=utc_now()))
                rf.set_status(cell, "interrupted")
        self.console.print("[red]✗[/] ", inert(f"{why}; its samples until then are kept"), sep="", highlight=False)

    def _cancel(self, cancel: Any) -> None:
        """Ask every host to stop; wait (bounded) for their last snapshots and final documents."""
        try:  # Event.set() as a question with a deadline: a scheduler that answers nothing costs ASK_TIMEOUT_S
            cancel.client.sync(cancel.client.scheduler.event_set, name=cancel.name, callback_timeout=ASK_TIMEOUT_S)
        except Exception:  # the scheduler is gone or silent: the hosts stop on their own (task.host_share)
            return
        deadline = time.monotonic() + CANCEL_WAIT_S
        running = {n: f for n, f in self.futures.items() if self._status(n) != "lost"}
        while running and time.monotonic() < deadline:
            self._take(timeout=0.2)  # the final documents come as messages too
            for name, fut in list(running.items()):
                if fut.done() or name in self.refused:
                    del running[name]
        self._take(timeout=0)

    # ------------------------------------------------------------------ helpers
    def _rf(self) -> ResultsWriter:
        assert self.results is not None
        return self.results

    def _status(self, name: str) -> str | None:
        """Host `name`'s status in the results file (None: not yet known, or no such host)."""
        host = self._rf().host(name)
        return host.status if host is not None else None

    def _progress(self, name: str) -> tuple[int, int | None]:
        return self._remote(name).progress(self.sc)


def _unfit(body: dict[str, Any] | None) -> str | None:
    """Why a message's body is none that `host_share` sends (a snapshot {"doc"}, or the final {"doc", "exit",
    "stderr", "final": true}), if it is not."""
    if body is None or not (body.get("doc") is None or isinstance(body.get("doc"), dict)):
        return "it sent a message without a results document"
    if body.get("final") and not ((body.get("exit") is None or type(body.get("exit")) is int)
                                  and isinstance(body.get("stderr") or "", str)):
        return "its final message has no exit status and stderr as guestbench sends them"
    return None


def run_fleet(sc: Scenario, opts: FleetOptions, results_dir: Any, console: Console) -> ResultsWriter:
    return FleetRun(sc, opts, console).run(results_dir)
