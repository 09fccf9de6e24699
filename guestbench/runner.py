"""Runs a scenario: check backends, then every measurement on every usable backend, saving each sample.

Cells run one after another (measurement-major, so backends of one measurement are measured close in
time). A signal stops the run between two instructions: the worker's process tree and any libvirt
domain are killed, the results file is closed as 'interrupted' with every sample already taken.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from guestbench import host, lockstep, probe, units
from guestbench.backends import BACKENDS, Availability
from guestbench.errors import Interrupted
from guestbench.appliance import ApplianceError
from guestbench.measurements import durability
from guestbench.measurements import get as get_measurement
from guestbench.paths import cache_dir, make_run_dir, remove_tree
from guestbench.results import ResultsFile, results_path, utc_now
from guestbench.scenario import Scenario
from guestbench.storage.host import HostStorage, Unavailable, sweep_stale
from guestbench.supervisor import Supervisor, TrapSignals, WorkerExit, stderr_reason, workdir_for

MAX_WORKER_RESTARTS = 3
KERNEL_LINE = re.compile(r"^\[\s*\d+\.\d+\]")  # the level-1 kernel's own messages: shown with --verbose only


@dataclass
class RunOptions:
    results_dir: Path
    verbose: bool = False
    reprobe: bool = False
    probe_timeout: float | None = None
    defer_probe: bool = False  # a backend's first launch in the run is its probe (probe.check(defer=True))
    command: tuple[str, ...] = ()


def iterations(sc: Scenario, times_launch: bool) -> list[str]:
    """'cold' (start-up only: the first launch, reported apart), then warm-ups, then measured reps."""
    return (["cold"] if times_launch else []) + ["warmup"] * sc.warmup + ["rep"] * sc.repetitions


class Runner:
    def __init__(self, sc: Scenario, opts: RunOptions, console: Console) -> None:
        self.sc = sc
        self.opts = opts
        self.console = console
        self.supervisor = Supervisor(verbose=opts.verbose, echo=lambda line: console.print(line, markup=False,
                                                                                           highlight=False))
        self.results: ResultsFile | None = None
        self.run_dir: Path | None = None
        self._extra: list[Supervisor] = []  # supervisors of concurrent appliances beyond the first
        self._stopping = False  # a signal arrived: threads of concurrent appliances start nothing new
        self._deferred: dict[str, Availability] = {}  # backends whose first launch is their probe, until it ends
        self._refused: dict[str, str] = {}  # backends whose first launch failed: the rest of their cells skip

    # ------------------------------------------------------------------ top level
    def run(self) -> ResultsFile:
        fp = host.fingerprint()
        path = results_path(self.opts.results_dir, self.sc.name)
        self.results = ResultsFile.create(path, scenario=self.sc.to_dict(), host=fp,
                                          command=list(self.opts.command), guestbench=fp["guestbench"])
        sweep_stale()  # what a run killed with SIGKILL left on the host (loop devices, NBD servers, mounts)
        self.run_dir = make_run_dir()
        with TrapSignals():
            try:
                if "host" in self.sc.placements:
                    self._run_cells(self._check_backends())
                if "nested" in self.sc.placements:
                    self._run_nested()
                self.results.finish("complete")
            except Interrupted:
                self._abort_all()
                self.results.finish("interrupted")
                raise
            except BaseException:
                self._abort_all()
                self.results.finish("failed")
                raise
            finally:
                remove_tree(self.run_dir)
        return self.results

    def _check_backends(self) -> list[str]:
        assert self.results is not None and self.run_dir is not None
        names = list(self.sc.backends or BACKENDS)
        usable = []
        with self.console.status("") as status:
            for name in names:
                status.update(f"checking backend {name} (a real launch under a deadline, or a cached verdict)")
                if not self.console.is_terminal:  # no live status line in a log: say what the wait is for
                    self.console.print(f"checking backend {name} (a real launch under a deadline, or a cached "
                                       "verdict)", highlight=False)
                av = probe.check(BACKENDS[name], self.supervisor, self.run_dir, refresh=self.opts.reprobe,
                                 timeout=self.opts.probe_timeout, defer=self.opts.defer_probe)
                self.results.set_backend(name, av.to_dict())
                self._say_backend(name, av)
                if av.details.get("deferred"):
                    self._deferred[name] = av
                if av.usable:
                    usable.append(name)
        return usable

    def _first_launch_ended(self, name: str, launch_s: float | None, failure: str | None = None) -> None:
        """A deferred probe's verdict, from the backend's first launch in this run (once per backend)."""
        assert self.results is not None
        with self.results.lock:
            deferred = self._deferred.pop(name, None)
            if deferred is None:
                return
            av = probe.decided(BACKENDS[name], deferred, launch_s, failure)
            self.results.set_backend(name, av.to_dict())
            if not av.usable:
                self._refused[name] = av.reason
        self._say_backend(name, av)

    def _say_backend(self, name: str, av: Availability) -> None:
        cached = " (cached verdict)" if av.details.get("cached") else ""
        if av.details.get("deferred"):
            self.console.print(f"[yellow]?[/] {name}: probe ", av.reason, sep="", highlight=False)
        elif av.usable:
            self.console.print(f"[green]✓[/] {name}: usable — ", av.reason + cached, sep="", highlight=False)
        else:
            self.console.print(f"[red]✗[/] {name}: not usable — ", av.reason + cached, sep="", highlight=False)

    def _progress(self) -> Progress:
        """One progress display for host cells and the nested part: bar, count, elapsed, ETA."""
        return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
                        transient=False)

    # ------------------------------------------------------------------ cells
    def _plan(self, usable: list[str]) -> Iterator[tuple[list[dict[str, Any]], list[str]]]:
        """Cells in run order; `concurrency: N` gives N cells (one per appliance) that run at the same time."""
        assert self.results is not None
        for spec in self.sc.measurements:
            m = get_measurement(spec.measurement)
            n = int(spec.params.get("concurrency", 1))
            for b in usable:
                yield [self._add_cell(spec, m, b, k, n) for k in range(1, n + 1)], iterations(self.sc, m.times_launch)

    def _add_cell(self, spec: Any, m: Any, b: str, k: int, n: int) -> dict[str, Any]:
        assert self.results is not None
        together = {"label": f"{spec.label}.guest{k}", "variant": {**spec.variant, "guest": k}, "instance": k,
                    "concurrency": n} if n > 1 else {"label": spec.label, "variant": dict(spec.variant)}
        return self.results.add_cell({
                    "backend": b, "placement": "host", "measurement": spec.measurement,
                    "group": spec.group, **together,
                    "params": dict(spec.params), "timed": m.timed, "cache_mode": m.cache_mode(spec.params),
                    "bytes": m.nbytes(spec.params), "what": m.describe(spec.params),
                    **({"metrics": [dataclasses.asdict(mt) for mt in metrics]} if (metrics := m.metrics(spec.params))
                       else {}),
                    **({"phases": True, "phase_markers": BACKENDS[b].phase_markers}
                       if self.sc.phases and m.times_launch else {}),
                })

    def _run_cells(self, usable: list[str]) -> None:
        plan = list(self._plan(usable))
        total = sum(len(its) * len(cells) for cells, its in plan)
        with self._progress() as progress:
            task = progress.add_task(self.sc.name, total=total)
            for cells, its in plan:
                if (name := cells[0]["backend"]) in self._refused:
                    for cell in cells:
                        self._skip(cell, list(range(len(its))), progress, task, f"not run: {name} is not usable here "
                                   f"({self._refused[name]})")
                    continue
                if len(cells) == 1:
                    self._run_cell(cells[0], its, progress, task, self.supervisor)
                else:
                    self._run_together(cells, its, progress, task)
        for name in list(self._deferred):  # no cell launched it (all unavailable, or interrupted before)
            self._first_launch_ended(name, None, "not decided: no cell of this run launched it")

    def _run_together(self, cells: list[dict[str, Any]], its: list[str], progress: Progress, task: Any) -> None:
        """N appliances with the same workload at once, each with its own images in the same host directory
        (E3's guests sharing a disk): one thread and one supervisor each; a signal stops them all."""
        assert self.run_dir is not None
        self._extra = [Supervisor(verbose=self.opts.verbose, echo=self.supervisor.echo) for _ in cells[1:]]
        supervisors = [self.supervisor, *self._extra]
        errors: list[BaseException] = []
        # every timed sample starts together (a peer may be relaunching after a failure: wait that long)
        step_dir = workdir_for(self.run_dir, f"step-{cells[0]['label']}-{cells[0]['backend']}")  # one per group
        wait_s = self.sc.timeout + 2 * self.sc.sample_timeout

        def one(cell: dict[str, Any], sup: Supervisor) -> None:
            step = lockstep.Step(str(step_dir), cell["instance"], len(cells), wait_s)
            try:
                self._run_cell(cell, its, progress, task, sup, step)
            except BaseException as e:  # handed to the main thread
                errors.append(e)
            finally:
                lockstep.leave(step_dir, cell["instance"])

        threads = [threading.Thread(target=one, args=(c, s), name=f"guest{c['instance']}", daemon=True)
                   for c, s in zip(cells, supervisors)]
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
        except BaseException:  # a signal: kill every appliance, then let the threads clean up their disks
            self._stopping = True
            for sup in supervisors:
                sup.abort()
            for t in threads:
                t.join(120)
            raise
        finally:
            self._extra = []
        if errors:
            raise errors[0]

    def _abort_all(self) -> None:
        for sup in [self.supervisor, *self._extra]:
            sup.abort()

    def _run_cell(self, cell: dict[str, Any], its: list[str], progress: Progress, task: Any,
                  supervisor: Supervisor, step: lockstep.Step | None = None) -> None:
        """One cell; a workload's host-side disks live exactly as long as the cell (removed in every case)."""
        assert self.results is not None and self.run_dir is not None
        backend = BACKENDS[cell["backend"]]
        m = get_measurement(cell["measurement"])
        workdir = workdir_for(self.run_dir, f"{cell['label']}-{cell['backend']}")
        cell["status"] = "running"
        if m.kills_hypervisor:
            self._run_trials(cell, its, workdir, progress, task, supervisor)
            return
        with contextlib.ExitStack() as resources:
            try:
                handle_config = backend.handle_config(cache_dir(), workload=m.workload).to_dict()  # once per cell
                drives: list[dict[str, Any]] = []
                if m.workload:
                    storage = resources.enter_context(HostStorage(workdir))
                    drives = m.host_drives(storage, cell["params"], backend.appliance_flavour)
            except (Unavailable, ApplianceError) as e:
                self._unavailable(cell, len(its), progress, task, str(e))
                return
            self._run_workers(cell, its, handle_config, drives, workdir, progress, task, supervisor, step)
        if cell["status"] == "running":
            cell["status"] = "done"
        self.results.save()

    def _request(self, cell: dict[str, Any], iterations: list[str], handle_config: dict[str, Any], workdir: Path,
                 drives: list[dict[str, Any]], *, verify: bool, params: dict[str, Any] | None = None,
                 payload: Path | None = None, payload_sha256: str | None = None,
                 step: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a worker is asked to do (see guestbench.worker)."""
        return {
            "measurement": cell["measurement"], "params": params if params is not None else cell["params"],
            "iterations": iterations, "backend": handle_config,
            "appliance": {"memsize": self.sc.memsize, "smp": self.sc.smp},
            "timeout": self.sc.timeout, "sample_timeout": self.sc.sample_timeout,
            "workdir": str(workdir), "verbose": self.opts.verbose,
            "phases": BACKENDS[cell["backend"]].phase_markers if cell.get("phases") else None,
            "verify": verify, "drives": drives,
            "payload": str(payload) if payload else None, "payload_sha256": payload_sha256,
            **({"step": step} if step else {}), "instance": cell.get("instance", 1),
        }

    def _run_trials(self, cell: dict[str, Any], its: list[str], workdir: Path, progress: Progress,
                    task: Any, supervisor: Supervisor) -> None:
        """Durability: every iteration is one appliance on a fresh disk with a volatile write cache; when it
        has written and fsynced, the hypervisor and the disk's cache are killed together (a power cut) and
        the image on the host is checked. Warm-up trials are checked too but kept apart."""
        assert self.results is not None
        backend = BACKENDS[cell["backend"]]
        params = cell["params"]
        handle_config = backend.handle_config(cache_dir()).to_dict()
        counters = {"warmup": 0, "rep": 0}
        for idx, kind in enumerate(its):
            if self._stopping:
                return
            counters[kind] += 1
            it = (kind, counters[kind])
            progress.update(task, description=f"{cell['backend']} · {cell['label']} · trial {idx + 1}/{len(its)}")
            token = durability.token_for(str(workdir), idx)
            outcome: dict[str, Any] = {}
            with HostStorage(workdir / f"trial{idx}") as storage:
                try:
                    # a plain file, as a disk image normally is (qemu and UML flush a file with fdatasync/fsync);
                    # libvirt cannot hand a FUSE file to its qemu user (it chowns it), so its qemu gets NBD
                    drive = storage.volatile(f"trial{idx}", params["disk_size"],
                                             as_file=handle_config["libguestfs_backend"] != "libvirt")
                    cell["disk"] = "NBD" if drive.protocol == "nbd" else "file"
                    cell["disk_describe"] = drive.describe
                except Unavailable as e:
                    self._unavailable(cell, len(its) - idx, progress, task, str(e))
                    return

                def on_message(msg: dict[str, Any]) -> None:
                    if msg["t"] == "launched":
                        outcome["launched"] = True
                        self._first_launch_ended(cell["backend"], msg["s"])
                    elif msg["t"] == "sample":
                        outcome["sample"] = msg
                    elif msg["t"] == "failure":
                        outcome["failure"] = backend.explain(msg["reason"], False)
                    elif msg["t"] == "powercut":
                        # The disk first: a hypervisor that dies first closes the image file, and that close
                        # flushes it (FUSE sends a flush on close), which no real power cut does.
                        storage.power_cut()
                        supervisor.abort()  # then the hypervisor, its worker and any libvirt domain
                        with open(storage.image_path(drive), "rb") as f:
                            f.seek(durability.OFFSET)
                            image = f.read(params["size"])
                        outcome["verdict"] = durability.verdict(image, token, params["size"])
                        outcome["requests"] = storage.requests(drive)

                request = self._request(cell, [kind], handle_config, workdir, [drive.to_dict()],
                                        params={**params, "token": token}, verify=False)
                ex = supervisor.run_worker(request, backend, on_message)
            if "verdict" in outcome and "sample" in outcome:
                seen = outcome.get("requests") or {}
                figures = {**outcome["sample"].get("metrics", {}), "verdict": outcome["verdict"],
                           "durable": 1.0 if outcome["verdict"] == "honoured" else 0.0,
                           "host_writes": float(seen.get("writes", 0)), "host_flushes": float(seen.get("flushes", 0))}
                self._record_sample(cell, it, outcome["sample"]["s"], metrics=figures)
            else:
                self._record_failure(cell, it, reason := outcome.get("failure") or self._exit_reason(ex, backend))
                if "launched" not in outcome and cell["backend"] in self._deferred and not self._stopping:
                    self._first_launch_ended(cell["backend"], None,  # the probe was this launch
                                             f"the run's first launch failed: {reason}")
            progress.advance(task)
            if cell["backend"] in self._refused:
                self._skip(cell, list(range(idx + 1, len(its))), progress, task, f"not run: {cell['backend']} is not usable here")
                return
        cell["status"] = "done"
        self.results.save()

    def _run_workers(self, cell: dict[str, Any], its: list[str], handle_config: dict[str, Any],
                     drives: list[dict[str, Any]], workdir: Path, progress: Progress, task: Any,
                     supervisor: Supervisor, step: lockstep.Step | None = None) -> None:
        """Workers for one cell until every iteration is done, failed or skipped; a killed or dead worker is
        replaced (up to MAX_WORKER_RESTARTS), a hung first launch ends the cell."""
        assert self.results is not None
        backend = BACKENDS[cell["backend"]]
        m = get_measurement(cell["measurement"])
        payload_path = payload_sum = None
        if m.needs_payload:
            progress.update(task, description=f"{cell['backend']} · {cell['label']} · generating payload")
            payload_path, payload_sum = m.make_payload(cell["params"])
        counters = {"warmup": 0, "rep": 0, "cold": 0}
        numbered: list[tuple[str, int]] = []
        for kind in its:
            counters[kind] += 1
            numbered.append((kind, counters[kind]))
        remaining = list(range(len(its)))
        launched_ok = False
        restarts = 0

        while remaining and not self._stopping:
            index_map = list(remaining)
            done_here: set[int] = set()

            def on_message(msg: dict[str, Any]) -> None:
                with self.results.lock:  # type: ignore[union-attr]  # cells of concurrent appliances share it
                    handle(msg)

            def handle(msg: dict[str, Any]) -> None:
                nonlocal launched_ok
                t = msg["t"]
                if t == "begin":
                    kind, k = numbered[index_map[msg["i"]]]
                    n = counters[kind]
                    progress.update(task, description=f"{cell['backend']} · {cell['label']} · {kind} {k}/{n}")
                elif t == "launched":
                    launched_ok = True
                    if cell["backend"] in self._deferred:
                        self._first_launch_ended(cell["backend"], msg["s"])
                    if msg.get("first") and cell["cold_s"] is None and not m.times_launch:
                        cell["cold_s"] = msg["s"]
                        self.results.save()  # type: ignore[union-attr]
                elif t == "sample":
                    gi = index_map[msg["i"]]
                    self._record_sample(cell, numbered[gi], msg["s"], msg.get("phases"), msg.get("metrics"),
                                        {k: msg[k] for k in ("in_step", "waited_s") if k in msg})
                    done_here.add(gi)
                    progress.advance(task)
                elif t == "failure":
                    gi = index_map[msg["i"]]
                    self._record_failure(cell, numbered[gi], backend.explain(msg["reason"], False))
                    done_here.add(gi)
                    progress.advance(task)
                elif t == "verification":
                    cell["verification"] = msg["record"]
                    self.results.save()  # type: ignore[union-attr]
                elif t == "setup":
                    cell.update(msg["record"])
                    self.results.save()  # type: ignore[union-attr]
                elif t == "unavailable":
                    left = [i for i in remaining if i not in done_here]
                    done_here.update(left)
                    self._unavailable(cell, len(left), progress, task, msg["reason"])

            request = self._request(cell, [its[i] for i in remaining], handle_config, workdir, drives,
                                    verify=cell["verification"] is None, payload=payload_path,
                                    payload_sha256=payload_sum,
                                    step={**step.to_dict(), "indexes": remaining} if step else None)
            ex = supervisor.run_worker(request, backend, on_message)
            remaining = [i for i in remaining if i not in done_here]
            if not launched_ok and cell["backend"] in self._deferred and not self._stopping:
                # the probe was this launch: the backend is not usable, and the cell ends here
                reason = cell["failures"][-1]["reason"] if cell["failures"] else self._exit_reason(ex, backend)
                current = None if not remaining else remaining[0] if ex.index is None else index_map[ex.index]
                if ex.kind != "done" and current is not None and current in remaining:  # died in the launch
                    self._record_failure(cell, numbered[current], reason)
                    progress.advance(task)
                    remaining.remove(current)
                self._first_launch_ended(cell["backend"], None, f"the run's first launch failed: {reason}")
                if remaining:
                    self._skip(cell, remaining, progress, task, f"not run: {cell['backend']} is not usable here")
                break
            if ex.kind == "done" or not remaining:
                break
            # The worker was killed at a deadline or died: the iteration under way failed.
            current = remaining[0] if ex.index is None else index_map[ex.index]
            if current in remaining:
                if step is not None:
                    lockstep.arrive(step, current)  # its peers need not wait for it
                self._record_failure(cell, numbered[current], self._exit_reason(ex, backend))
                progress.advance(task)
                remaining.remove(current)
            restarts += 1
            if ex.kind == "timeout" and ex.what == "launch" and not launched_ok:
                self._skip(cell, remaining, progress, task,
                           f"not run: the launch hung ({self._exit_reason(ex, backend)})")
                remaining = []
            elif restarts > MAX_WORKER_RESTARTS and remaining:
                self._skip(cell, remaining, progress, task, f"not run: the worker failed {restarts} times; "
                           f"last: {self._exit_reason(ex, backend)}")
                remaining = []

    # ------------------------------------------------------------------ nested placement
    def _kvm_usable(self) -> bool:
        """Whether the level-1 guest can have KVM: the kvm backend's verdict (this run's, else cached/probed)."""
        assert self.results is not None and self.run_dir is not None
        known = self.results.doc["backends"].get("kvm")
        if known is not None:
            return bool(known.get("usable"))
        with self.console.status("checking whether KVM works here, for the level-1 guest"):
            av = probe.check(BACKENDS["kvm"], self.supervisor, self.run_dir, refresh=self.opts.reprobe,
                             timeout=self.opts.probe_timeout)
        return av.usable

    def _run_nested(self) -> None:
        """The scenario again, inside a level-1 guest; its samples join this results file as they are taken."""
        from guestbench.nested import guest
        from guestbench.nested import image as nested_image
        from guestbench.nested import run as nested_run

        assert self.results is not None and self.run_dir is not None
        level1 = nested_run.plan(self.sc, self._kvm_usable(), self.opts.probe_timeout)
        self.console.print(level1.describe(), highlight=False)
        try:
            img = nested_image.build(lambda line: self.console.print(f"nested build: {line}", highlight=False))
            files = nested_run.job_files(self.sc, level1)
        except nested_image.ImageError as e:
            merger = nested_run.Merger(self.results, level1, None)
            merger.finish(None, f"the level-1 guest image could not be built: {e}")
            self.console.print(f"[red]✗[/] nested: {merger.info['level1']['error']}", highlight=False)
            return
        merger = nested_run.Merger(self.results, level1, img.path.name)
        verbose = self.opts.verbose
        with self._progress() as progress:
            task = progress.add_task(f"{self.sc.name} · nested · booting the level-1 guest", total=None)

            def on_console(line: str) -> None:
                if verbose or not KERNEL_LINE.match(line):
                    self.console.print(f"  level-1 │ {line}", markup=False, highlight=False, soft_wrap=True)

            def on_live(snap: Any) -> None:
                merger.take_bytes(snap.content)
                done, total = merger.progress(self.sc)
                progress.update(task, completed=done, total=total,
                                description=f"{self.sc.name} · nested · {merger.info.get('status')}")

            t0 = time.monotonic()
            try:
                result = guest.run_job(img, files, self.run_dir / "level1-out", memory_mib=level1.memory_mib,
                                       vcpus=level1.vcpus, kvm=level1.kvm, timeout_s=level1.deadline_s,
                                       on_console=on_console, on_live=on_live, silence_s=nested_run.SILENCE_S)
            except guest.GuestError as e:
                merger.finish(time.monotonic() - t0, str(e))
                self.console.print(f"[red]✗[/] nested: {e}", highlight=False)
                return
            except Interrupted:
                merger.finish(time.monotonic() - t0, "interrupted by a signal; samples taken inside until then "
                              "are kept", interrupted=True)
                raise
        final = nested_run.guest_results(result.output)
        if final is not None:
            merger.take(final)
        error = None
        if final is None:
            error = "the level-1 guest brought back no results file; its console last said: " + \
                " / ".join(result.console[-3:])
        elif result.exit_status not in (0, 1):  # 1: some cell has no samples, reported per cell
            error = f"guestbench inside the level-1 guest ended with exit status {result.exit_status}"
        merger.finish(result.seconds, error)
        if error:
            self.console.print(f"[red]✗[/] nested: {error}", highlight=False)

    # ------------------------------------------------------------------ recording
    def _record_sample(self, cell: dict[str, Any], it: tuple[str, int], seconds: float,
                       phases: list[dict[str, Any]] | None = None,
                       metrics: dict[str, float | str] | None = None, extra: dict[str, Any] | None = None) -> None:
        kind, k = it
        entry: dict[str, Any] = {"rep": k, "seconds": seconds, "utc": utc_now(), **(extra or {})}
        if phases is not None:
            entry["phases"] = phases
        if metrics is not None:
            entry["metrics"] = metrics
        if kind == "cold":
            cell["cold_s"] = seconds
        else:
            cell["samples" if kind == "rep" else "warmups"].append(entry)
        self.results.save()  # type: ignore[union-attr]
        if not self.console.is_terminal:  # no live progress bar in a log: one line per sample instead
            rate = f", {units.mb_per_s(cell['bytes'], seconds):.1f} MB/s" if cell.get("bytes") else ""
            if metrics and cell.get("metrics"):  # the workload's headline figure
                first = cell["metrics"][0]
                value = metrics.get(first["key"])
                shown = f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
                rate = f", {first['label']} {shown} {first['unit']}"
            self.console.print(f"{cell['backend']} · {cell['label']} · {kind} {k}: {seconds:.3g} s{rate}",
                               highlight=False)

    def _record_failure(self, cell: dict[str, Any], it: tuple[str, int], reason: str) -> None:
        kind, k = it
        cell["failures"].append({"kind": kind, "rep": k, "reason": reason, "utc": utc_now()})
        self.results.save()  # type: ignore[union-attr]
        self.console.print(f"[yellow]![/] {cell['backend']} · {cell['label']} · {kind} {k} failed: ", reason,
                           sep="", highlight=False)

    def _unavailable(self, cell: dict[str, Any], left: int, progress: Progress, task: Any, reason: str) -> None:
        """The cell cannot run on this machine (reported in its place in every table, never dropped)."""
        with self.results.lock:  # type: ignore[union-attr]
            cell["status"] = "unavailable"
            cell["skip_reason"] = reason
            self.results.save()  # type: ignore[union-attr]
        progress.advance(task, left)
        self.console.print(f"[yellow]–[/] {cell['backend']} · {cell['label']}: unavailable here: ", reason, sep="",
                           highlight=False)

    def _skip(self, cell: dict[str, Any], remaining: list[int], progress: Progress, task: Any, reason: str) -> None:
        with self.results.lock:  # type: ignore[union-attr]
            cell["status"] = "skipped"
            cell["skip_reason"] = reason
            self.results.save()  # type: ignore[union-attr]
        progress.advance(task, len(remaining))

    @staticmethod
    def _exit_reason(ex: WorkerExit, backend: Any) -> str:
        if ex.kind == "timeout":
            return backend.explain(f"{ex.what} did not finish within {ex.limit_s:g} s; the hypervisor was killed",
                                   True)
        detail = ex.reason or stderr_reason(ex.stderr_tail)
        return backend.explain(f"the worker died ({detail})", False)


def run_scenario(sc: Scenario, opts: RunOptions, console: Console | None = None) -> ResultsFile:
    return Runner(sc, opts, console or Console(stderr=True)).run()


def exit_status(doc: dict[str, Any]) -> int:
    """0 when every measured cell has samples; 1 when some usable backend produced none or the level-1 run failed."""
    from guestbench.nested.run import exit_problem

    if exit_problem(doc):
        return 1
    unusable = {name for name, av in doc.get("backends", {}).items() if av.get("usable") is False}
    for cell in doc.get("cells", []):
        if cell.get("backend") in unusable:  # a deferred probe's failed first launch: reported like a probe's
            continue
        if not cell.get("samples") and cell.get("status") != "unavailable":  # unavailable: reported, expected
            return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: guestbench scenario FILE")
