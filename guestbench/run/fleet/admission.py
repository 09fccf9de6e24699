"""What the scheduler takes from a worker beyond its calls (guestbench.run.fleet.roles guards those): the events it
logs and the extra information it registers with. A fleet host is not trusted, and both reach every coordinator:
Dask passes a worker's events on to each subscriber as they are, keeps 1,000 of every topic for ever, and merges a
worker's extra information over its identity (its name among it) in every listing. Here each is held to what a
guestbench worker sends: plain data, bounded, on topics a worker cannot multiply, naming no one else."""

from __future__ import annotations

import logging
import time
from typing import Any
from collections.abc import Callable

TOPIC_KEPT = 0  # events the scheduler keeps of a run's topic: none (Dask keeps 1,000 of every topic, for ever);
# each goes to the coordinator as it comes, which needs none of the past
EVENT_MAX = 4 * 2**10  # bytes of plain data a worker's event on any other topic may carry (Dask's: a few dozen)
# The other topics a worker's events may have (Dask's own: distributed/worker.py, worker_state_machine.py): a fixed
# few, so the scheduler keeps at most 4 x 1,000 x EVENT_MAX of them whatever the workers send. Not among them: a
# worker's address (a worker that registers again elsewhere would make a new topic each time), Dask's `print` and
# `warn` (its client prints the one and unpickles the other), and `worker-fail-hard` (its message is never plain).
DASK_WORKER_TOPICS = frozenset({"worker-get-client", "invalid-worker-transition", "invalid-worker-task-state",
                                "transition-counter-max-exceeded"})
CALL_MAX = 64 * 2**10  # bytes of plain data a worker's registration or heartbeat may carry (Dask's: a few KiB);
# both reach every coordinator in Dask's listing of the workers, asked for each second
# What Dask's identity of a worker sets; a worker's `extra` at registration, which Dask merges over it, may hold none
IDENTITY_KEYS = frozenset({"type", "id", "host", "resources", "local_directory", "name", "nthreads", "memory_limit",
                           "last_seen", "services", "metrics", "status", "nanny"})
# A worker's pace on a run's topic: a host sends a snapshot when its results file changes (looked at 4 times a
# second) and one final message; more is dropped, so that no worker fills the scheduler's backlog to a coordinator
RUN_EVENTS_PER_S, RUN_EVENTS_BURST = 8.0, 32.0
RUN_BYTES_PER_S_SEALS, RUN_BYTES_BURST_SEALS = 1.0, 4.0  # in largest seals (seal.MAX_SEALED)
LOGGED_PER_PEER = 20  # refusals logged per peer in full; after that, every 1,000th (a peer may send thousands)

log = logging.getLogger("guestbench.fleet.roles")


def extra_refusal(extra: Any) -> str | None:
    """Why a worker's `extra` (startup information, merged by Dask over its identity) is refused, if it is: not a
    mapping of plain data (a non-mapping made the scheduler's identity fail for every client), or naming one of
    the identity's own keys (`name` would make the worker another's in every listing)."""
    if extra is None:
        return None
    if not isinstance(extra, dict) or _plain_size(extra, CALL_MAX) is None:
        return f"a worker's extra information must be a mapping of plain data of at most {CALL_MAX:,} bytes"
    if clash := sorted(str(k)[:40] for k in extra if not isinstance(k, str) or k in IDENTITY_KEYS):
        return f"a worker's extra information may not set {', '.join(clash[:5])} (Dask's identity of it)"
    return None


_REFUSALS: dict[str, int] = {}  # refusals so far, per peer (only for `logged`)


def logged(peer: str) -> bool:
    """Whether a refusal for `peer` is logged: the first LOGGED_PER_PEER, then every 1,000th."""
    n = _REFUSALS[peer] = _REFUSALS.get(peer, 0) + 1
    if len(_REFUSALS) > 10_000:  # peers come and go: the counts are a courtesy, not a record
        _REFUSALS.clear()
    return n <= LOGGED_PER_PEER or n % 1000 == 0


def call_refusal(op: str, kwargs: dict[str, Any], peer: str) -> str | None:
    """Why a worker's registration or heartbeat is refused, if it is: more than CALL_MAX of plain data, or (a
    registration) an address on another host than the one it connects from: a host that registered at another's
    address would be handed that host's task (and key) once the other's worker left."""
    if op not in ("register-worker", "heartbeat_worker"):
        return None
    if _plain_size(kwargs, CALL_MAX) is None:
        return f"a worker's {op} must be plain data of at most {CALL_MAX:,} bytes"
    if op == "register-worker":
        from distributed.comm.addressing import get_address_host

        try:
            here, there = get_address_host(str(kwargs.get("address"))), get_address_host(peer)
        except Exception:
            return "a worker's registration gave an address Dask cannot read"
        if here != there:
            return (f"a worker connecting from {there[:100]!r} may not register an address on another host "
                    f"({here[:100]!r})")
    return extra_refusal(kwargs.get("extra")) if op == "register-worker" else None


def _plain_size(obj: Any, budget: int) -> int | None:
    """The size of `obj` counted over its items (8 bytes each, whatever they hold, as in memory) and the length of
    its strings and bytes, if it is plain data (what msgpack makes) of at most `budget`; None otherwise (an object
    Dask serialized, or too much). Without recursion."""
    size, stack = 0, [obj]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (bool, int, float)):
            size += 8
        elif isinstance(item, (str, bytes)):
            size += 8 + len(item)
        elif isinstance(item, (list, tuple)):
            size += 8
            stack.extend(item)
        elif isinstance(item, dict):
            size += 8
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            return None
        if size > budget:
            return None
    return size


def event_refusal(worker: str, topic: Any, msg: Any, listened: Callable[[str], bool],
                  running: Callable[[str, str], bool]) -> str | None:
    """Why the scheduler drops an event that `worker` logged (None: it keeps it). On a run's topic only a sealed
    message as guestbench.run.fleet.seal makes it, for a run a coordinator listens to, kept by the scheduler not at
    all; elsewhere only Dask's own topics of a worker's (DASK_WORKER_TOPICS, the worker's address) and plain data
    of at most EVENT_MAX bytes. So nothing but msgpack's plain values, in bounded amounts and on topics a worker
    cannot multiply, reaches a coordinator or stays in the scheduler's memory from a worker's events."""
    from guestbench.run.fleet import seal, task

    if not isinstance(topic, str):
        return "an event on several topics at once"
    if not topic.startswith(task.TOPIC_PREFIX):
        if topic not in DASK_WORKER_TOPICS:
            return f"an event on a topic no worker of a fleet logs ({topic[:60]!r})"
        return None if _plain_size(msg, EVENT_MAX) is not None else \
            f"an event that is not plain data of at most {EVENT_MAX:,} bytes"
    if not listened(topic):
        return "an event on a run's topic that no coordinator listens to"
    if not running(worker, topic):
        return "an event on the topic of a run whose task the worker is not running"
    if not (isinstance(msg, dict) and set(msg) == {"host", "seq", "data", "mac"} and isinstance(msg["host"], str)
            and len(msg["host"]) <= 256 and type(msg["seq"]) is int and isinstance(msg["data"], bytes)
            and len(msg["data"]) <= seal.MAX_SEALED and isinstance(msg["mac"], str) and len(msg["mac"]) <= 128):
        return "an event on a run's topic that is not a sealed message (guestbench.run.fleet.seal)"
    return None


class Pace:
    """Token buckets per worker (events and bytes): whether a worker's next event on a run's topic is within
    RUN_EVENTS_PER_S and RUN_BYTES_PER_S_SEALS, with bursts; an honest host never reaches either."""

    def __init__(self, seal_max: int) -> None:
        self.rates = (RUN_EVENTS_PER_S, RUN_BYTES_PER_S_SEALS * seal_max)
        self.bursts = (RUN_EVENTS_BURST, RUN_BYTES_BURST_SEALS * seal_max)
        self.buckets: dict[str, tuple[float, float, float]] = {}  # worker -> events, bytes left, when

    def allows(self, worker: str, size: int, now: float) -> bool:
        events, left, then = self.buckets.get(worker, (*self.bursts, now))
        events = min(self.bursts[0], events + (now - then) * self.rates[0])
        left = min(self.bursts[1], left + (now - then) * self.rates[1])
        ok = events >= 1 and left >= size
        if len(self.buckets) > 10_000:  # workers come and go: forgetting one gives it a full bucket, no more
            self.buckets.clear()
        self.buckets[worker] = (events - 1, left - size, now) if ok else (events, left, now)
        return ok


def events_checked(scheduler: Any) -> None:
    """A worker's events pass `event_refusal` before Dask logs them, and the scheduler keeps TOPIC_KEPT events of
    a run's topic, each worker's at no more than its Pace. Replaces the scheduler's "log-event" stream handler and
    its broker's topic table."""
    from guestbench.run.fleet import seal, task

    broker = scheduler._broker
    make = broker._topics.default_factory  # Topic, with Dask's length

    class Topics(type(broker._topics)):  # type: ignore[misc]
        def __missing__(self, name: Any) -> Any:
            run = isinstance(name, str) and name.startswith(task.TOPIC_PREFIX)
            self[name] = topic = make(maxlen=TOPIC_KEPT) if run else make()
            return topic

    topics = Topics(make)
    topics.update(broker._topics)
    broker._topics = topics

    def listened(topic: str) -> bool:
        return bool(getattr(broker._topics.get(topic), "subscribers", None))

    pace = Pace(seal.MAX_SEALED)

    def running(worker: str, topic: str) -> bool:  # a host's task is running there: its key names the run
        ws = scheduler.workers.get(worker)
        prefix = task.key_prefix(topic)
        return ws is not None and any(str(ts.key).startswith(prefix) for ts in ws.processing)

    def log_worker_event(worker: str, topic: Any, msg: Any) -> None:
        why = event_refusal(worker, topic, msg, listened, running)
        if why is None and topic.startswith(task.TOPIC_PREFIX) and \
                not pace.allows(str(worker), len(msg["data"]), time.monotonic()):
            why = (f"more events on a run's topic than {RUN_EVENTS_PER_S:g} a second (bursts of "
                   f"{RUN_EVENTS_BURST:g}) or {RUN_BYTES_PER_S_SEALS:g} largest seal a second")
        if why is not None:
            if logged(str(worker)):
                log.warning("dropped an event of worker %s: %s", str(worker)[:200], why)
            return
        scheduler.log_worker_event(worker, topic, msg)

    scheduler.stream_handlers["log-event"] = log_worker_event
