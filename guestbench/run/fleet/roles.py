"""Roles by certificate: a fleet host's certificate makes it a worker, never a client of the scheduler.

Dask gives a TLS certificate no role: any certificate the fleet's CA signed lets its holder register as a
client, read every task's arguments (the other hosts' keys among them), have code run on every worker
(`run_function`, `broadcast`), set the run's cancel event, or connect to another worker and call its `run`.
guestbench puts the role in the certificate's subject (common name `guestbench-ROLE`, or `guestbench-ROLE.`
followed by anything, e.g. the host's name) and checks it where Dask does not:

- the scheduler, with this module as its preload (`dask scheduler --preload guestbench.run.fleet.roles`):
  only a coordinator's certificate may call its handlers; a worker's may call those a worker needs
  (WORKER_CALLS) and, on the stream its registration opens, send what a worker sends (WORKER_STREAM);
  other peers (no certificate, another role) are turned away after the TLS handshake;
- each `guestbench worker` whose own certificate is a worker's (`worker_setup`): only the scheduler's
  certificate may connect to it, and its code-running handlers are refused to everyone (BLOCKED_ON_WORKER).

A refused call is an error to its caller (Dask's error reply, as for a handler that raised), logged by the
scheduler in one line.
What else a worker sends (its events, its registration's extra information) is held to what a guestbench worker
sends by guestbench.run.fleet.admission, which the preload sets up too. Relies on Dask's private code: `check_dask`
refuses any release but the one it was made for (TESTED, pinned in setup.cfg), and one without the names it
replaces."""

from __future__ import annotations

import inspect
import logging
from typing import Any
from collections.abc import Callable

from guestbench.run.fleet import admission

PREFIX = "guestbench-"
ROLES = ("scheduler", "worker", "coordinator")
# What a worker calls on the scheduler: its registration, its heartbeat, and whether its run was cancelled
WORKER_CALLS = frozenset({"register-worker", "heartbeat_worker", "event_is_set"})
# What a worker sends on its stream (distributed.scheduler.Scheduler: worker_handlers)
WORKER_STREAM = frozenset({"task-finished", "task-erred", "release-worker-data", "add-keys", "long-running",
                           "reschedule", "keep-alive", "log-event", "worker-status-change",
                           "request-refresh-who-has", "steal-response"})  # the last: distributed/stealing.py
# A worker's handlers that run code or take files or data a peer sends; guestbench's coordinator uses none
BLOCKED_ON_WORKER = ("run", "run_coroutine", "plugin-add", "plugin-remove", "upload_file", "actor_execute",
                     "actor_attribute", "update_data", "benchmark_disk", "benchmark_memory", "benchmark_network")

TESTED = "2026.8."  # the distributed releases whose private code the patches below were read against and tested

log = logging.getLogger("guestbench.fleet.roles")
LAST_REFUSAL = [""]  # the newest connection only_roles closed, for a caller to say why it has none


class RoleRefused(PermissionError):
    """A peer asked for what its certificate's role may not do."""


def common_name(role: str, host: str = "") -> str:
    """The subject common name of a certificate for `role`, e.g. guestbench-worker.host1."""
    return f"{PREFIX}{role}" + (f".{host}" if host else "")


def identity(peercert: Any) -> tuple[str | None, str]:
    """The role and the name (what follows the role's dot; "" for none) of a certificate as
    ssl.SSLSocket.getpeercert() gives it; (None, "") for no certificate, or none of guestbench's roles."""
    if not isinstance(peercert, dict):
        return None, ""
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    if len(names) != 1:
        return None, ""
    for role in ROLES:
        if names[0] == common_name(role):
            return role, ""
        if names[0].startswith(common_name(role) + "."):
            return role, names[0][len(common_name(role)) + 1:]
    return None, ""


def role_of(peercert: Any) -> str | None:
    """The role named by a certificate as ssl.SSLSocket.getpeercert() gives it."""
    return identity(peercert)[0]


def role_of_file(path: str | None) -> str | None:
    """The role named by the PEM certificate at `path` (this process's own)."""
    return identity_of_file(path)[0]


def identity_of_file(path: str | None) -> tuple[str | None, str]:
    """The role and name (`identity`) of the PEM certificate at `path` (this process's own)."""
    if not path:
        return None, ""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        with open(path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):  # Dask says what is wrong with it when it loads it
        return None, ""
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return identity({"subject": tuple((("commonName", n),) for n in names)})


def worker_problem(cert_file: str | None, name: str) -> str | None:
    """Why `guestbench worker --name NAME` cannot join with the certificate at `cert_file` under the roles
    preload, if it cannot: a worker's certificate registers under the host it names, and one naming none nowhere."""
    role, named = identity_of_file(cert_file)
    if role != "worker":
        return None  # no roles in force (Dask's plain TLS): the scheduler decides
    if not named:
        return (f"its certificate ({cert_file}) names no host: a worker's certificate must be "
                f"{common_name('worker', name)}, or the scheduler's roles refuse it")
    if named != name:
        return f"its certificate ({cert_file}) is host {named!r}'s: run it as --name {named}, or use {name!r}'s"
    return None


def _refusal(comm: Any, op: str, kwargs: dict[str, Any], scheduler: Any) -> str | None:
    """Why the peer of `comm` may not call `op` with `kwargs` (None: it may). A worker's certificate that
    names a host is that host's only: it registers under that name and sends heartbeats for it alone."""
    role, name = identity(getattr(comm, "extra_info", {}).get("peercert"))
    if role == "coordinator":
        return None
    if role != "worker" or op not in WORKER_CALLS:
        return f"a peer whose certificate's role is {role or 'none'} may not call {op!r}"
    if not name and op == "register-worker":
        return ("a worker's certificate must name its host (guestbench-worker.HOST): one that names none could join "
                "as any")
    if (why := admission.call_refusal(op, kwargs, str(getattr(comm, "peer_address", "")))) is not None:
        return why
    if name and op == "register-worker" and str(kwargs.get("name")) != name:
        return f"the worker certificate of {name!r} may not register as {str(kwargs.get('name'))[:100]!r}"
    if name and op == "heartbeat_worker":
        from distributed.comm.addressing import normalize_address

        try:  # the worker the handler will take it for: Dask resolves names (aliases), host names and IP forms
            address = normalize_address(scheduler.coerce_address(kwargs.get("address"),
                                                                 kwargs.get("resolve_address", True)))
        except Exception:
            return f"the worker certificate of {name!r} sent a heartbeat for an address Dask cannot read"
        ws = getattr(scheduler, "workers", {}).get(address)
        if ws is not None and str(ws.name) != name:
            return f"the worker certificate of {name!r} may not send the heartbeat of {str(ws.name)[:100]!r}"
    return None


def guard_call(op: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` of the scheduler's, called only for a peer whose certificate's role may call `op`. Dask passes
    the comm to a handler whose first parameter is `comm` and `serializers` to one that names it: the guard's
    signature says both, so Dask calls it as it would `handler`."""
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):  # not introspectable: called with the message's fields only
        params = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    wants_comm = bool(params) and params[0].name == "comm"

    def guarded(comm: Any, **kwargs: Any) -> Any:
        why = _refusal(comm, op, kwargs, getattr(handler, "__self__", None))
        if why is not None:
            if admission.logged(str(getattr(comm, "peer_address", "?"))):
                log.warning("refused %r to %s: %s", op, getattr(comm, "peer_address", "?"), why)
            from distributed.core import error_message  # Dask's error reply, as a handler's exception makes it

            return error_message(RoleRefused(f"guestbench fleet: {why} (guestbench.run.fleet.roles)"),
                                 status="uncaught-error")
        return handler(comm, **kwargs) if wants_comm else handler(**kwargs)

    rest = [p for p in params[1 if wants_comm else 0:] if p.kind is not p.VAR_POSITIONAL]
    comm_param = inspect.Parameter("comm", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    guarded.__signature__ = inspect.Signature([comm_param, *rest])  # type: ignore[attr-defined]
    guarded.__name__ = getattr(handler, "__name__", op)
    guarded.guarded = True  # type: ignore[attr-defined]
    return guarded


def guard_stream(op: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """A stream handler of the scheduler's that a worker's stream may reach only for what a worker sends (a
    worker's messages always carry `worker`; a client's stream is a coordinator's, its registration checked)."""
    def refused(kwargs: dict[str, Any]) -> bool:
        if "worker" in kwargs and op not in WORKER_STREAM:
            if admission.logged(str(kwargs["worker"])):
                log.warning("refused %r on the stream of worker %s", op, str(kwargs["worker"])[:200])
            return True
        return False

    if inspect.iscoroutinefunction(handler):
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            return None if refused(kwargs) else await handler(*args, **kwargs)
        return guarded_async

    def guarded(*args: Any, **kwargs: Any) -> Any:
        return None if refused(kwargs) else handler(*args, **kwargs)
    return guarded


class Guarded(dict[str, Any]):
    """A handler table whose every entry, those added later (extensions, plugins) too, is guarded."""

    def __init__(self, table: dict[str, Any], guard: Callable[[str, Any], Any]) -> None:
        super().__init__()
        self.guard = guard
        self.update(table)

    def __setitem__(self, op: str, handler: Any) -> None:
        super().__setitem__(op, self.guard(op, handler))

    def update(self, other: Any = (), **kwargs: Any) -> None:  # type: ignore[override]
        for op, handler in dict(other, **kwargs).items():
            self[op] = handler

    def setdefault(self, op: str, handler: Any = None) -> Any:
        if op not in self:
            self[op] = handler
        return self[op]

    def __ior__(self, other: Any) -> Guarded:  # type: ignore[override,misc]
        self.update(other)
        return self


def only_roles(allowed: frozenset[str], quiet: bool = False) -> None:
    """From now on, every TLS connection of this process, accepted or made, whose peer's certificate has none
    of `allowed` roles is closed as soon as its TLS handshake is done, before Dask's own handshake reads a byte
    (a worker's Dask unpickles what it reads): a worker then neither lets a peer in nor follows a "scheduler"
    that shows another role's certificate. Each refusal is logged, or, `quiet`, only kept in LAST_REFUSAL. Patches
    distributed.comm.tcp.TLS._read_extra (private, called as each TLS comm is made) for the whole process."""
    from distributed.comm import tcp

    base = getattr(tcp.TLS._read_extra, "base", tcp.TLS._read_extra)

    def _read_extra(self: Any) -> None:
        base(self)
        role = role_of(self._extra.get("peercert"))
        if role not in allowed:
            LAST_REFUSAL[0] = (f"refused a connection with {str(self._peer_addr)[:200]}: its certificate's role is "
                               f"{role}, not {' or '.join(sorted(allowed))}")
            if not quiet:
                log.warning("%s", LAST_REFUSAL[0])
            self.abort()

    _read_extra.base = base  # type: ignore[attr-defined]
    tcp.TLS._read_extra = _read_extra  # type: ignore[method-assign]


def no_pickle_but_from(role: str) -> None:
    """From now on, what this process reads from a TLS peer whose certificate's role is not `role` is loaded
    without unpickling (guestbench.run.fleet.nopickle, for the reading task only): Dask's protocol unpickles
    a `__Pickled__` frame whatever the server's `deserialize` says, so a worker could otherwise run code in
    the scheduler. Patches distributed.comm.tcp.TLS.read (private) for the whole process."""
    from distributed.comm import tcp

    from guestbench.run.fleet import nopickle

    base = getattr(tcp.TLS.read, "base", tcp.TLS.read)

    async def read(self: Any, deserializers: Any = None) -> Any:
        if role_of(self.extra_info.get("peercert")) == role:
            return await base(self, deserializers)
        with nopickle.refusing_in_task():
            return await base(self, deserializers)

    read.base = base  # type: ignore[attr-defined]
    tcp.TLS.read = read  # type: ignore[method-assign]


def own_worker_only(scheduler: Any) -> None:
    """A worker's stream speaks for that worker alone. Dask calls a stream's handler with the stream's own
    `worker` overridden by any `worker` field of the message; such a field is dropped as each message is read
    (no message of a worker's names one). Wraps the scheduler's handle_stream (called by handle_worker)."""
    base = scheduler.handle_stream

    async def handle_stream(comm: Any, extra: dict[str, Any] | None = None) -> None:
        if extra and "worker" in extra:
            read = comm.read

            async def own_read(deserializers: Any = None) -> Any:
                msgs = await read(deserializers)
                for msg in msgs if isinstance(msgs, (list, tuple)) else (msgs,):
                    if isinstance(msg, dict) and msg.pop("worker", None) is not None:
                        log.warning("dropped the 'worker' field of a message on the stream of %s",
                                    str(extra["worker"])[:200])
                return msgs

            comm.read = own_read
        await base(comm, extra)

    scheduler.handle_stream = handle_stream


def check_dask(scheduler: Any = None) -> None:
    """Raise RuntimeError unless this process's Dask is a release the patches were made for and has the private
    names they replace (fail closed: a Dask whose internals moved would be left unguarded, silently)."""
    from collections import defaultdict

    import distributed
    from distributed.comm import tcp

    needed = [("distributed.comm.tcp.TLS._read_extra", hasattr(tcp.TLS, "_read_extra")),
              ("distributed.comm.tcp.TLS.read", hasattr(tcp.TLS, "read"))]
    if scheduler is not None:
        broker = getattr(scheduler, "_broker", None)
        needed += [("Scheduler.handle_stream", hasattr(scheduler, "handle_stream")),
                   ("Scheduler.coerce_address", hasattr(scheduler, "coerce_address")),
                   ("Scheduler.handlers", isinstance(getattr(scheduler, "handlers", None), dict)),
                   ("Scheduler.stream_handlers['log-event']", "log-event" in getattr(scheduler, "stream_handlers", {})),
                   ("Scheduler._broker._topics", isinstance(getattr(broker, "_topics", None), defaultdict))]
    missing = [name for name, there in needed if not there]
    version = str(getattr(distributed, "__version__", "?"))
    if missing or not version.startswith(TESTED):
        raise RuntimeError(f"guestbench's fleet roles were made for distributed {TESTED}x, and this is {version}"
                           + (f" without {', '.join(missing)}" if missing else "")
                           + ": not started (install guestbench's own pin: pip install 'guestbench[fleet]')")


def dask_setup(scheduler: Any) -> None:
    """Dask's preload hook: the scheduler's handlers guarded by role, peers without a role turned away, no
    pickle loaded but a coordinator's (whose graphs Dask sends pickled)."""
    check_dask(scheduler)
    no_pickle_but_from("coordinator")
    if getattr(scheduler.handlers, "guard", None) is None:
        scheduler.handlers = Guarded(dict(scheduler.handlers), guard_call)
        scheduler.stream_handlers = Guarded(dict(scheduler.stream_handlers), guard_stream)
        own_worker_only(scheduler)
        admission.events_checked(scheduler)
    only_roles(frozenset({"coordinator", "worker"}))
    log.info("guestbench fleet roles: clients need a coordinator's certificate")


def worker_setup(cert_file: str | None) -> bool:
    """Before a `guestbench worker` starts: its code-running handlers refused to everyone (Dask's
    blocked-handlers), and, when its own certificate is a worker's, connections only from the scheduler's
    certificate. True when roles are in force."""
    import dask.config

    check_dask()
    blocked = set(dask.config.get("distributed.worker.blocked-handlers", []) or [])
    dask.config.set({"distributed.worker.blocked-handlers": sorted(blocked | set(BLOCKED_ON_WORKER))})
    if role_of_file(cert_file) != "worker":
        return False
    only_roles(frozenset({"scheduler"}))
    return True


def coordinator_setup(address: str) -> None:
    """Before a coordinator connects to a tls:// scheduler with a coordinator's certificate: no peer showing
    another role's certificate is taken for the scheduler (why is kept in LAST_REFUSAL for its one line)."""
    if not address.startswith("tls://"):
        return
    from guestbench.run.fleet import tls

    if role_of_file(tls.configured("client_cert")) == "coordinator":  # certificates that name their roles
        check_dask()
        only_roles(frozenset({"scheduler"}), quiet=True)
