"""Is a backend usable here? Preconditions first, then one real launch under a deadline; verdicts cached.

The cache key is what the verdict depends on (versions, kernel, /dev/kvm flavour), so a qemu or kernel
update re-probes by itself; `--reprobe` forces it. Preconditions (daemons, devices) are always live.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.host import locks
from guestbench.backends import Availability, Backend
from guestbench.util.errors import Interrupted
from guestbench.measurements import get as get_measurement
from guestbench.host.paths import cache_dir, workdir_for
from guestbench.results import atomic_write_json, utc_now
from guestbench.execute.executor import Executor
from guestbench.execute.protocol import Message, Msg, Request, stderr_reason
from guestbench.stacks.backend import named

CACHE_FILE = "probes.json"
CACHE_TTL_S = 7 * 24 * 3600


def _load_cache() -> dict[str, Any]:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cached_verdict(backend: Backend, key: dict[str, Any]) -> Availability | None:
    entry = _load_cache().get(backend.name)
    if not entry or entry.get("key") != key or time.time() - entry.get("when", 0) > CACHE_TTL_S:
        return None
    details = dict(entry.get("details") or {})
    details["cached"] = True
    details["probed_utc"] = entry.get("probed_utc")
    reason = entry["reason"]
    if not entry["usable"] and "failure" in details:
        # explained now, not when cached, so that a better explanation applies to old verdicts too
        reason = backend.explain(details["failure"], bool(details.get("timed_out")))
    return Availability(bool(entry["usable"]), reason, details)


def store_verdict(backend: Backend, key: dict[str, Any], av: Availability) -> None:
    """Add one backend's verdict to the cache file; locked, so that two runs probing different backends at once
    both keep theirs (read, change, write)."""
    with locks.exclusive(cache_dir() / "locks" / f"{CACHE_FILE}.lock", "the probe verdicts", 60.0):
        data = _load_cache()
        data[backend.name] = {"key": key, "usable": av.usable, "reason": av.reason, "details": av.details,
                              "when": time.time(), "probed_utc": utc_now()}
        atomic_write_json(cache_dir() / CACHE_FILE, data)


def launch_probe(backend: Backend, executor: Executor, run_dir: Path, timeout: float) -> Availability:
    """Launch the stock appliance once on this backend, killing it if it overruns `timeout`."""
    workdir = workdir_for(run_dir, f"probe-{backend.name}")
    request = Request(measurement="startup", params=get_measurement("startup").defaults(), iterations=["cold"],
                      backend=backend.handle_config(cache_dir()).to_dict(), workdir=str(workdir),
                      timeout=timeout, sample_timeout=timeout, verify=False,
                      verbose=True)  # the console is the evidence when a probe launch fails (see worker.failure_reason)
    got: dict[str, Any] = {}

    def on_message(msg: Message) -> None:
        if msg["t"] == Msg.SAMPLE:
            got["launch_s"] = msg["s"]
        elif msg["t"] == Msg.FAILURE:
            got["failure"] = msg["reason"]

    ex = executor.run_worker(request, backend, on_message)
    if "launch_s" in got:
        return Availability(True, f"launched in {got['launch_s']:.1f} s (probe)",
                            {"probe_launch_s": got["launch_s"]})
    if ex.kind == "timeout":
        why = f"probe launch did not finish within {timeout:g} s and was killed"
        return Availability(False, backend.explain(why, True), {"failure": why, "timed_out": True,
                                                                 "last_output": last_output(ex.stderr_tail)})
    if "failure" not in got and ex.kind == "crash":  # guestbench's own worker broke: says nothing of the backend
        why = f"probe launch failed: guestbench's worker crashed: {ex.reason or stderr_reason(ex.stderr_tail)}"
        return Availability(False, why, {"failure": why, "timed_out": False, "worker_crash": True})
    reason = got.get("failure") or ex.reason or stderr_reason(ex.stderr_tail) or "launch failed"
    why = f"probe launch failed: {reason}"
    return Availability(False, backend.explain(why, False), {"failure": why, "timed_out": False})


def last_output(tail: list[str], keep: int = 12) -> list[str]:
    """Where a hung launch stopped: the last lines its (verbose) worker printed, without libguestfs's call
    trace, which says only that the launch was waiting."""
    return [ln for ln in tail if ln.strip() and not ln.startswith("libguestfs: trace")][-keep:]


DEFERRED = "deferred: its first launch in this run is its probe"


def verdict(backend: Backend, executor: Executor, run_dir: Path, *, refresh: bool = False,
          timeout: float | None = None, defer: bool = False) -> Availability:
    """Full verdict for one backend: live preconditions, then a cached or fresh launch probe.

    `defer`: no probe launch; the verdict says 'deferred' and the run's first launch decides (see decided()),
    which saves a launch where launches are slow (nested: a UML launch in an emulated guest takes minutes).
    """
    pre = backend.preconditions()
    if not pre.usable:
        return pre
    key = backend.probe_key()

    def from_cache(**said: Any) -> Availability | None:
        cached = None if refresh else cached_verdict(backend, key)
        if cached is not None:
            cached.details = {**cached.details, **pre.details, **said}  # this host's facts now (its appliance's path)
        return cached

    if (cached := from_cache()) is not None:
        return cached
    if defer:
        return Availability(True, DEFERRED, {**pre.details, "deferred": True})
    limit = timeout or backend.probe_timeout()
    with contextlib.ExitStack() as one_at_a_time:
        # runs that start together (suite workers, a fleet's hosts on one machine, a user's two runs) would each
        # launch the same probe: one does, the others wait for it and take its verdict from the cache
        try:
            one_at_a_time.enter_context(locks.exclusive(cache_dir() / "locks" / f"probe-{backend.name}.lock",
                                                        f"the {backend.name} probe",
                                                        limit * backend.probe_attempts() + 60))
        except locks.LockTimeout:  # the other run's probe overran its own deadlines: probe without it
            pass
        return from_cache(waited_for_another_probe=True) or _probe(backend, executor, run_dir, limit, key, pre)


def _probe(backend: Backend, executor: Executor, run_dir: Path, limit: float, key: dict[str, Any],
           pre: Availability) -> Availability:
    """Launch probes (as many as the backend allows to fail) and store the verdict."""
    av = launch_probe(backend, executor, run_dir, limit)
    earlier: list[str] = []  # why the attempts before `av` did not launch
    earlier_output: list[list[str]] = []  # and where those that hung stopped
    while not av.usable and not av.details.get("worker_crash") and len(earlier) + 1 < backend.probe_attempts():
        earlier.append(av.details.get("failure", av.reason))
        earlier_output.append(av.details.get("last_output", []))
        av = launch_probe(backend, executor, run_dir, limit)
    if earlier:
        av.details["attempts"] = len(earlier) + 1
        av.details["earlier_attempts"] = earlier
        if any(earlier_output):
            av.details["earlier_last_output"] = earlier_output
        if av.usable:
            av.reason += f"; {len(earlier)} earlier attempt(s) did not launch ({earlier[-1]})"
    av.details = {**pre.details, **av.details, "probe_timeout_s": limit}
    if not av.details.get("worker_crash"):  # a crash of guestbench's own is not the backend's verdict
        store_verdict(backend, key, av)
    return av


def decided(backend: Backend, deferred: Availability, launch_s: float | None, failure: str | None) -> Availability:
    """A deferred verdict once the backend's first launch in the run has ended: launched in `launch_s`, or
    failed with `failure`. A launch is cached like a probe's (it is the same test: one launch under a
    deadline); a failure is not, as the next run's own probe will say more."""
    details = {k: v for k, v in deferred.details.items() if k != "deferred"}
    details["probe"] = "first launch of the run"
    if launch_s is not None:
        av = Availability(True, f"launched in {launch_s:.1f} s (the run's first launch, as its probe)",
                          {**details, "probe_launch_s": launch_s})
    else:
        why = failure or "the run's first launch failed"  # explained by the runner
        return Availability(False, why, {**details, "failure": why})
    store_verdict(backend, backend.probe_key(), av)
    return av


def verdicts(names: list[str], *, refresh: bool = False, timeout: float | None = None, verbose: bool = False,
              on_checking: Callable[[str], None] | None = None) -> dict[str, Availability]:
    """Each named backend's verdict, one after another, as `doctor` and a fleet worker ask for them; a signal
    kills the probe under way (and raises Interrupted)."""
    from guestbench.host.paths import make_run_dir, remove_tree
    from guestbench.execute.supervisor import Supervisor, TrapSignals

    found: dict[str, Availability] = {}
    run_dir = make_run_dir()
    sup = Supervisor(verbose=verbose)
    try:
        with TrapSignals():
            for name in names:
                if on_checking is not None:
                    on_checking(name)
                found[name] = verdict(named(name), sup, run_dir, refresh=refresh, timeout=timeout)
    except Interrupted:
        sup.abort()
        raise
    finally:
        remove_tree(run_dir)
    return found
