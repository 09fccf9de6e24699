"""Roles by certificate (guestbench.run.fleet.roles): a fleet as `fleet local` makes it — its throw-away CA, a
certificate per role, the scheduler's command with the roles preload, `guestbench worker`'s Dask worker process
(guestbench.run.fleet.daskworker) — with two scripted hosts (tests/fleet_hostile_worker.py: no appliance is
launched). A hostile host, alpha, holds its own worker certificate and key. Before, Dask gave a certificate no role:
with the workers' certificate a host registered as a client, read every event (the other hosts' messages), ran code
on the scheduler and, through it or directly, on every worker, as root, and set a run's cancel event."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from helpers.cli import guestbench, write_scenario
from helpers.fleet import cluster_workers, fleet_local, fleet_wait, scheduler_address, stop
from helpers.paths import ROOT

HOSTILE = ROOT / "tests/fleet_hostile_worker.py"
REAL = ROOT / "tests/data/results/20261121T211449Z-startup.json"
JOIN_S = 120.0
ASK_S = 30.0
TLS = "DASK_DISTRIBUTED__COMM__"
SCENARIO = "name: {name}\nrepetitions: 5\nwarmup: 1\nbackends: [uml, tcg]\nmeasurements: [startup]\n"


def _security(env: dict[str, str]) -> Any:
    """A Dask client's Security with the certificate of `env`'s role."""
    from distributed.security import Security

    return Security(require_encryption=True, tls_ca_file=env[f"{TLS}TLS__CA_FILE"],
                    tls_client_cert=env[f"{TLS}TLS__CLIENT__CERT"], tls_client_key=env[f"{TLS}TLS__CLIENT__KEY"])


class RoleFleet:
    """The scheduler and two workers, alpha (uml) and beta (tcg), both honest shares of a scripted run."""

    def __init__(self, tmp: Path) -> None:
        from guestbench.run.fleet import ephemeral, local

        self.tmp, self.runs = tmp, tmp / "runs"
        keys = tmp / "keys"
        keys.mkdir(mode=0o700)
        self.runs.mkdir()
        self.tls = ephemeral.make(keys, ("alpha", "beta"))
        self.procs: list[subprocess.Popen[bytes]] = []
        clean = {k: v for k, v in os.environ.items() if not k.startswith(TLS)}
        clean["DASK_TEMPORARY_DIRECTORY"] = str(tmp)
        try:
            self._spawn("scheduler", local.scheduler_command(self.tls["scheduler"], tmp / "scheduler.json"),
                        {**clean, **self.tls["scheduler"]})
            self.address = fleet_wait("the scheduler's address", lambda: scheduler_address(tmp / "scheduler.json"),
                                      60)
            for name, backend, role in (("alpha", "uml", "hostile"), ("beta", "tcg", "honest")):
                env = {**clean, **self.tls[f"worker.{name}"],
                       "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(HOSTILE)]),
                       "GUESTBENCH_TEST_ROLE": role, "GUESTBENCH_TEST_DIR": str(self.runs),
                       "GUESTBENCH_TEST_REAL": str(REAL)}
                self._spawn(name, [sys.executable, "-m", "guestbench.run.fleet.daskworker", self.address, name,
                                   "127.0.0.1", json.dumps({"bench": 1, backend: 1}), str(tmp / name)], env)
            self.coordinator = _security(self.tls["coordinator"])
            self.workers = fleet_wait("both workers", lambda: self._joined(), JOIN_S, every=0.5)
        except BaseException:
            self.close()
            raise

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                           stderr=open(self.tmp / f"{name}.log", "wb")))

    def _joined(self) -> dict[str, dict[str, Any]] | None:
        assert all(p.poll() is None for p in self.procs), self.logs()
        workers = cluster_workers(self.address, self.coordinator)
        return workers if set(workers) == {"alpha", "beta"} else None

    def logs(self) -> str:
        return "\n".join(p.read_text()[-1500:] for p in sorted(self.tmp.glob("*.log")))

    def close(self) -> None:
        stop(self.procs)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoleFleet]:
    f = RoleFleet(tmp_path_factory.mktemp("roles"))
    try:
        yield f
    finally:
        f.close()


def _call(server: str, security: Any, op: str, /, **kwargs: Any) -> Any:
    """One RPC `op` to the Dask server at `server`, as a client showing `security`'s certificate."""
    from distributed.core import rpc

    async def ask() -> Any:
        async with rpc(server, timeout=10, connection_args=security.get_connection_args("client")) as r:
            return await r.__getattr__(op)(**kwargs)

    return asyncio.run(asyncio.wait_for(ask(), ASK_S))


def _touch(marker: Path) -> dict[str, bytes]:
    """run_function's or run's arguments: a function that creates `marker` (code run by whoever runs it)."""
    from distributed.protocol.pickle import dumps

    return {"function": dumps(pathlib.Path.touch), "args": dumps((marker,))}


def test_a_workers_certificate_registers_no_client_and_calls_no_client_handler(fleet: RoleFleet,
                                                                               tmp_path: Path) -> None:
    """With the workers' certificate: no Dask client (so no topic subscribed, no task submitted), no code run on
    the scheduler (run_function) or through it (broadcast), no event read (every host's messages), no cancel
    event set. Each is an error to the caller; the scheduler runs on, and a coordinator is still let in."""
    from distributed import Client

    hostile = _security(fleet.tls["worker.alpha"])
    with pytest.raises((OSError, TimeoutError, ValueError)):  # Dask's client retries until its time-out
        Client(fleet.address, timeout=5, set_as_default=False, security=hostile).close()
    assert "refused 'register-client' to tls://127.0.0.1:" in (fleet.tmp / "scheduler.log").read_text()
    marker = tmp_path / "scheduler-ran"
    for op, kwargs in (("run_function", _touch(marker)), ("events", {}), ("events", {"topic": "all"}),
                       ("event_set", {"name": "guestbench-fleet-cancel-x"}), ("identity", {}),
                       ("broadcast", {"msg": {"op": "run", **_touch(marker)}}), ("connection_stream", {})):
        with pytest.raises(Exception) as e:
            got = _call(fleet.address, hostile, op, **kwargs)
            print(op, "answered", str(got)[:300])
        assert "may not call" in str(e.value) and op in str(e.value), (op, e.value)
    assert not marker.exists(), "the scheduler ran code a worker's certificate sent"
    assert _call(fleet.address, fleet.coordinator, "identity")["type"] == "Scheduler"
    assert fleet.procs[0].poll() is None


class Touch:
    """Unpickled, it creates the file `marker` (pathlib.Path.touch): code run by whoever loads it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (pathlib.Path.touch, (self.marker,))


def test_the_scheduler_loads_no_pickle_a_worker_sends(fleet: RoleFleet, tmp_path: Path) -> None:
    """Dask's protocol unpickles a `__Pickled__` frame as it reads a message, before any handler, whatever the
    scheduler's `deserialize` says: a message from the workers' certificate carrying one ran code in the
    scheduler (and from there, anything: the scheduler's certificate reaches every worker). Now it is refused
    as it is read: an error to the sender; the scheduler runs on and still answers the coordinator."""
    from distributed.protocol.serialize import ToPickle

    marker = tmp_path / "scheduler-unpickled"
    with pytest.raises(Exception):  # noqa: B017 (however the refusal surfaces; the marker below is the test)
        _call(fleet.address, _security(fleet.tls["worker.alpha"]), "identity", payload=ToPickle(Touch(marker)))
    assert not marker.exists(), "the scheduler unpickled what a worker's certificate sent"
    assert fleet.procs[0].poll() is None
    assert _call(fleet.address, fleet.coordinator, "identity")["type"] == "Scheduler"


def test_no_peer_runs_code_on_a_worker(fleet: RoleFleet, tmp_path: Path) -> None:
    """A direct connection to a worker with the workers' (or the coordinator's) certificate is closed after the
    TLS handshake, before Dask reads it; `run` through the scheduler, even a coordinator's, is refused by the
    worker (guestbench's coordinator never runs code on a worker but its task)."""
    from distributed import Client

    marker = tmp_path / "worker-ran"
    worker = fleet.workers["beta"]["address"]
    for who in ("worker.alpha", "coordinator"):
        with pytest.raises((OSError, TimeoutError, asyncio.TimeoutError)):
            _call(worker, _security(fleet.tls[who]), "run", **_touch(marker))
    with Client(fleet.address, timeout=20, set_as_default=False, security=fleet.coordinator) as c:
        with pytest.raises(Exception) as e:
            c.run(pathlib.Path.touch, marker, workers=[worker])
        assert "disallowed" in str(e.value), e.value
    assert not marker.exists(), "a worker ran code a peer sent"
    assert _call(fleet.address, fleet.coordinator, "identity")["workers"].get(worker), "the worker is gone"


def test_an_honest_fleet_run_completes_with_roles(fleet: RoleFleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator (its certificate's role: coordinator) runs a scenario on both hosts, whose tasks ask
    whether the run was cancelled on their worker's own connection (a worker's certificate may not register the
    Dask client `distributed.Event` would): both complete with the cells they sent."""
    from guestbench.results import load_results

    for k, v in fleet.tls["coordinator"].items():
        monkeypatch.setenv(k, v)
    sc = write_scenario(fleet.tmp / "honest.yaml", SCENARIO.format(name="honest"))
    proc = guestbench("scenario", str(sc), "--cluster", fleet.address, "--results", str(fleet.runs / "honest"),
                      timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + fleet.logs()
    (path,) = list((fleet.runs / "honest").glob("*.json"))
    load_results(path)
    doc = json.loads(path.read_text())
    assert doc["status"] == "complete", doc["status"]
    assert {h: doc["hosts"][h]["status"] for h in ("alpha", "beta")} == {"alpha": "complete", "beta": "complete"}
    assert sorted(c["host"] for c in doc["cells"]) == ["alpha", "beta"]


def test_fleet_local_makes_a_certificate_per_role_and_its_scheduler_guards_by_role() -> None:
    """The real `guestbench fleet local 0` (a scheduler, no worker: nothing is launched): its directory holds
    the CA and a scheduler's and a coordinator's certificate, each naming its role, and no worker's (one naming no
    host registers nowhere; a worker's certificate is no client: RoleFleet's, made the same way); the exported
    settings are the coordinator's, let in; the scheduler's own certificate is turned away. Before, one certificate
    served every role, and with it anyone was a client."""
    from distributed import Client
    from distributed.security import Security

    from guestbench.run.fleet import roles

    proc, address, settings = fleet_local(0)
    private = Path(settings[f"{TLS}TLS__CA_FILE"]).parent
    try:
        found = {role: roles.role_of_file(str(private / f"{role}.pem")) for role in roles.ROLES}
        assert found == {"scheduler": "scheduler", "coordinator": "coordinator", "worker": None}, \
            sorted(os.listdir(private))
        assert not list(private.glob("worker*")), sorted(os.listdir(private))
        assert roles.role_of_file(settings[f"{TLS}TLS__CLIENT__CERT"]) == "coordinator", settings
        assert _call(address, _security(settings), "identity")["type"] == "Scheduler"
        other = Security(require_encryption=True, tls_ca_file=str(private / "ca.pem"),
                         tls_client_cert=str(private / "scheduler.pem"),
                         tls_client_key=str(private / "scheduler-key.pem"))
        with pytest.raises(Exception) as e:  # turned away after the TLS handshake: no role of a scheduler's peer
            _call(address, other, "run_function", **_touch(private / "ran"))
        assert "before comm was established" in str(e.value), e.value
        with pytest.raises((OSError, TimeoutError, ValueError)):
            Client(address, timeout=5, set_as_default=False, security=other).close()
        assert not (private / "ran").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert proc.returncode == 0 and not private.exists()


def test_a_host_sees_the_coordinators_cancel_on_its_own_connection(fleet: RoleFleet) -> None:
    """A host's task asks whether its run was cancelled on its worker's own connection (event_is_set, which a
    worker's certificate may call), as a Dask `Event` would through a client of its own, which a worker's
    certificate may no longer register: unset, then set by the coordinator, then seen set."""
    from distributed import Client, Event

    from guestbench.run.fleet import task

    with Client(fleet.address, timeout=20, set_as_default=False, security=fleet.coordinator) as c:
        ask = lambda: c.submit(task.cancel_requested, "roles-test", pure=False).result(timeout=ASK_S)  # noqa: E731
        assert ask() is False
        Event(task.cancel_event_name("roles-test"), client=c).set()
        assert ask() is True


FORGE = """
from distributed import get_worker
w = get_worker()
w.loop.add_callback(w.batched_send, {"op": "log-event", "topic": "worker-get-client", "msg": {"forged": 1},
                                     "worker": OTHER})
w.loop.add_callback(w.batched_send, {"op": "update-graph", "graph_header": {}, "graph_frames": [], "keys": []})
"""


def test_a_workers_stream_speaks_for_that_worker_only(fleet: RoleFleet) -> None:
    """Alpha's stream sends an event whose message names beta as its worker, and a client's `update-graph`.
    Before, Dask took the message's `worker` over the stream's own (the event was beta's), and handed a
    worker's stream every client handler. Now the event is alpha's, the client op is dropped, and both
    workers stay."""
    from distributed import Client

    alpha, beta = fleet.workers["alpha"]["address"], fleet.workers["beta"]["address"]
    with Client(fleet.address, timeout=20, set_as_default=False, security=fleet.coordinator) as c:
        c.submit(exec, FORGE.replace("OTHER", repr(beta)), {}, workers=[alpha], pure=False).result(timeout=ASK_S)
        events = fleet_wait("alpha's event",
                            lambda: [e for e in c.get_events("worker-get-client") if e[1].get("forged")], ASK_S)
        assert [e[1]["worker"] for e in events] == [alpha], events
        log = fleet_wait("the dropped op",
                         lambda: "refused 'update-graph'" in (fleet.tmp / "scheduler.log").read_text(), ASK_S)
        assert log and set(cluster_workers(fleet.address, fleet.coordinator)) == {"alpha", "beta"}


def test_a_workers_certificate_is_that_hosts_only(fleet: RoleFleet) -> None:
    """Alpha's certificate (common name guestbench-worker.alpha) may not register a worker named gamma (a host
    that has not joined would be impersonated: its share and key would go to alpha) nor send beta's heartbeat."""
    alpha = _security(fleet.tls["worker.alpha"])
    beta = fleet.workers["beta"]["address"]
    metrics = {"bandwidth": {"total": 1e8, "workers": {}, "types": {}}, "digests_total_since_heartbeat": {},
               "memory": 0, "spilled_bytes": {"memory": 0, "disk": 0}, "task_counts": {}}  # as a worker sends
    beats = [("heartbeat_worker", {"address": form, "metrics": metrics, "resources": {"bench": 0, "uml": 5}},
              "the worker certificate of 'alpha' may not send the heartbeat of 'beta'")
             for form in (beta, "beta", beta.replace("127.0.0.1", "localhost"))]  # Dask resolves a name, a host name
    for op, kwargs, why in (*beats,
                            ("register-worker", {"name": "gamma", "address": "tls://127.0.0.1:1"},
                             "the worker certificate of 'alpha' may not register as 'gamma'"),
                            # Dask merges `extra` over a worker's identity: its name would be beta's in every listing
                            ("register-worker", {"name": "alpha", "address": "tls://127.0.0.1:1",
                                                 "extra": {"name": "beta"}},
                             "a worker's extra information may not set name"),
                            # a non-mapping made the scheduler's identity fail for every client
                            ("register-worker", {"name": "alpha", "address": "tls://127.0.0.1:1", "extra": ["x"]},
                             "a worker's extra information must be a mapping"),
                            # a listing of the workers, which a coordinator asks for every second, made heavy
                            ("register-worker", {"name": "alpha", "address": "tls://127.0.0.1:1",
                                                 "extra": {"pad": ("",) * 100_000}},
                             "a worker's register-worker must be plain data of at most 65,536 bytes"),
                            # beta's address, taken once beta's worker left, would be handed beta's task and key
                            ("register-worker", {"name": "alpha", "address": "tls://192.0.2.7:4000"},
                             "a worker connecting from '127.0.0.1' may not register an address on another host")):
        with pytest.raises(Exception) as e:
            _call(fleet.address, alpha, op, **kwargs)
        assert why in str(e.value), (op, e.value)
    assert set(cluster_workers(fleet.address, fleet.coordinator)) == {"alpha", "beta"}


def _impostor(fleet: RoleFleet, tmp: Path) -> subprocess.Popen[bytes]:
    """A Dask scheduler showing alpha's worker certificate (signed by the fleet's CA) as its own."""
    own = fleet.tls["worker.alpha"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(TLS)}
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                             "--protocol", "tls", "--tls-ca-file", own[f"{TLS}TLS__CA_FILE"],
                             "--tls-cert", own[f"{TLS}TLS__SCHEDULER__CERT"],
                             "--tls-key", own[f"{TLS}TLS__SCHEDULER__KEY"], "--port", "0", "--no-dashboard",
                             "--scheduler-file", str(tmp / "fake.json")], env={**clean, **own}, cwd=ROOT,
                            stdin=subprocess.DEVNULL, stderr=open(tmp / "fake.log", "wb"))


def test_the_coordinator_takes_no_other_roles_certificate_for_the_scheduler(fleet: RoleFleet, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The same impostor, given to `guestbench scenario --cluster`: before, the coordinator registered with it
    and would have handed it every host's share and key. Now it is not reached: one line, exit 2."""
    fake_proc = _impostor(fleet, tmp_path)
    try:
        fake = fleet_wait("the impostor's address", lambda: scheduler_address(tmp_path / "fake.json"), 60)
        for k, v in fleet.tls["coordinator"].items():
            monkeypatch.setenv(k, v)
        sc = write_scenario(tmp_path / "s.yaml", SCENARIO.format(name="impostor"))
        proc = guestbench("scenario", str(sc), "--cluster", fake, "--results", str(tmp_path / "r"), timeout=120)
        assert proc.returncode == 2 and "cannot reach a Dask scheduler there (refused a connection with" in \
            proc.stderr and "its certificate's role is worker, not scheduler" in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "Receive client connection" not in (tmp_path / "fake.log").read_text()
    finally:
        fake_proc.terminate()
        fake_proc.wait(timeout=60)


def test_a_worker_follows_no_scheduler_that_shows_another_roles_certificate(fleet: RoleFleet, tmp_path: Path) -> None:
    """A host that can redirect another's connections (DNS, ARP) runs a Dask scheduler with its own worker
    certificate, which the CA signed: before, a worker joined it and ran whatever it sent, as root. Now the
    worker closes the connection after the TLS handshake, and the impostor never sees it register."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(TLS)}
    procs = [_impostor(fleet, tmp_path)]
    try:
        fake = fleet_wait("the impostor's address", lambda: scheduler_address(tmp_path / "fake.json"), 60)
        procs.append(subprocess.Popen([sys.executable, "-m", "guestbench.run.fleet.daskworker", fake, "beta",
                                       "127.0.0.1", json.dumps({"bench": 1}), str(tmp_path / "w")],
                                      env={**clean, **fleet.tls["worker.beta"]}, cwd=ROOT, stdin=subprocess.DEVNULL,
                                      stderr=open(tmp_path / "worker.log", "wb")))
        fleet_wait("the worker's refusal (or its registration)", lambda: "its certificate's role is worker, not "
                   "scheduler" in (tmp_path / "worker.log").read_text() or procs[1].poll() is not None or
                   "Register worker" in (tmp_path / "fake.log").read_text(), 60)
    finally:
        stop(procs)
    assert "Register worker" not in (tmp_path / "fake.log").read_text()


EVENTS = """
from distributed import get_worker
from distributed.protocol import to_serialize
w = get_worker()
def log(topic, msg):
    w.loop.add_callback(w.batched_send, {"op": "log-event", "topic": topic, "msg": msg})
log(RUN, {"host": "alpha", "data": to_serialize(b"x")})
log(RUN, {"host": "alpha", "seq": 1, "data": "text", "mac": "m"})
log(UNHEARD, {"host": "alpha", "seq": 1, "data": b"sealed", "mac": "m"})
log("print", {"args": ("\x1b]0;pwned\x07",), "kwargs": {}})
log("warn", {"message": b"N.", "category": b"N."})
log("worker-get-client", {"message": "x" * 100_000})
log("worker-get-client", {"pad": ("",) * 100_000})
log("roles-made-up", {"n": 1})
log(["all", "roles-many"], {"action": "forged"})
log(w.address, {"n": 1})
for seq in range(20):
    log(RUN, {"host": "alpha", "seq": seq, "data": b"sealed", "mac": "m"})
log("worker-get-client", {"last": 1})
"""
OUTSIDE = """
from distributed import get_worker
w = get_worker()
w.loop.add_callback(w.batched_send, {"op": "log-event", "topic": RUN,
                                     "msg": {"host": "alpha", "seq": 99, "data": b"sealed", "mac": "m"}})
"""


def test_the_scheduler_passes_on_only_sealed_bounded_plain_events_of_a_worker(fleet: RoleFleet) -> None:
    """Alpha logs events that Dask would keep (1,000 per topic, for ever) and send on to every subscriber as they
    are: objects Dask serialized; unsealed messages on a run's topic; events on a run's topic nobody listens to,
    on several topics at once, on a topic of its own making, on Dask's `print` and `warn` (the client prints the
    one and unpickles the other); a large one. Now the scheduler drops each, saying so: what reaches a coordinator
    from a worker's events is plain, bounded, and on a run's topic sealed; the scheduler keeps none of a run's
    topic, and no topic is made by a worker."""
    from distributed import Client

    from guestbench.run.fleet import admission, task

    run, unheard = task.topic("roles46"), task.topic("unheard46")
    alpha = fleet.workers["alpha"]["address"]
    got: list[Any] = []
    with Client(fleet.address, timeout=20, set_as_default=False, security=fleet.coordinator) as c:
        c.subscribe_topic(run, lambda event: got.append(event[1]))
        c.submit(exec, OUTSIDE.replace("RUN", repr(run)), {}, workers=[alpha], pure=False).result(timeout=ASK_S)
        code = EVENTS.replace("RUN", repr(run)).replace("UNHEARD", repr(unheard))
        c.submit(exec, code, {}, workers=[alpha], key=task.key("roles46", "alpha")).result(timeout=ASK_S)
        fleet_wait("alpha's last event", lambda: [e for e in c.get_events("worker-get-client") if e[1].get("last")],
                   ASK_S)
        fleet_wait("the sealed events", lambda: len(got) >= 20, ASK_S)  # one stream, in order: all before them came
        assert [m["seq"] for m in got] == list(range(20)), got[:3]
        assert all(m["data"] == b"sealed" and m["worker"] == alpha for m in got)
        assert len(c.get_events(run)) == admission.TOPIC_KEPT == 0  # none kept at the scheduler
        for topic in (unheard, "roles-many", "roles-made-up", "print", "warn", "worker-fail-hard", alpha):
            assert not [e for e in c.get_events(topic) if e[1].get("worker") == alpha], topic
        assert not [e for e in c.get_events("all") if e[1].get("action") == "forged"]
        assert not [e for e in c.get_events("worker-get-client") if {"message", "pad"} & set(e[1])]  # too large
    log = (fleet.tmp / "scheduler.log").read_text()
    for why in ("not a sealed message", "no coordinator listens to", "not plain data of at most 4,096 bytes",
                "the topic of a run whose task the worker is not running",
                "several topics at once", "a topic no worker of a fleet logs ('print')",
                "a topic no worker of a fleet logs ('warn')", "a topic no worker of a fleet logs ('roles-made-up')"):
        assert f"dropped an event of worker {alpha}: " in log and why in log, why
    assert log.count(f"dropped an event of worker {alpha}: an event on a run's topic that is not a sealed") == 2
    assert set(cluster_workers(fleet.address, fleet.coordinator)) == {"alpha", "beta"}


def _openssl_fleet(tmp: Path, who: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Certificates made as docs/fleet.md tells an admin to ('openssl'), and Dask's settings for each of `who`."""
    script = (
        'set -e; umask 077; openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=test fleet CA" '
        '-keyout ca-key.pem -out ca.pem -addext basicConstraints=critical,CA:TRUE '
        '-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null\n'
        f'for who in {" ".join(who)}; do\n'
        '  openssl req -newkey rsa:2048 -nodes -subj "/CN=guestbench-$who" -keyout "$who-key.pem" -out "$who.csr" '
        '2>/dev/null\n'
        '  openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -out "$who.pem" '
        "-extfile <(printf 'basicConstraints=CA:FALSE\\nkeyUsage=digitalSignature,keyEncipherment\\n"
        "extendedKeyUsage=serverAuth,clientAuth\\n') 2>/dev/null\n"
        "done\n")
    subprocess.run(["bash", "-c", script], cwd=tmp, check=True, timeout=120)
    return {w: {f"{TLS}REQUIRE_ENCRYPTION": "True", f"{TLS}TLS__CA_FILE": str(tmp / "ca.pem"),
                **{f"{TLS}TLS__{slot}__{part}": str(tmp / f"{w}{suffix}.pem")
                   for slot in ("SCHEDULER", "WORKER", "CLIENT") for part, suffix in (("CERT", ""), ("KEY", "-key"))}}
            for w in who}


def test_a_worker_certificate_that_names_no_host_joins_nowhere(tmp_path: Path) -> None:
    """A certificate `guestbench-worker` (no host after the role) was admitted under any name the worker gave: a
    host holding it could join as a host not yet joined and be handed that host's share and key. Now the
    scheduler's roles refuse it at registration, and `guestbench worker` says so before it starts (one line, exit
    2), as it does for a certificate naming another host than --name."""
    from guestbench.run.fleet import local

    tls = _openssl_fleet(tmp_path, ("scheduler", "worker", "worker.host1"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(TLS)}
    sched = subprocess.Popen(local.scheduler_command(tls["scheduler"], tmp_path / "s.json"), cwd=ROOT,
                             env={**clean, **tls["scheduler"], "DASK_TEMPORARY_DIRECTORY": str(tmp_path)},
                             stdin=subprocess.DEVNULL, stderr=open(tmp_path / "scheduler.log", "wb"))
    try:
        address = fleet_wait("the scheduler's address", lambda: scheduler_address(tmp_path / "s.json"), 60)
        for name in ("gamma", ""):
            with pytest.raises(Exception) as e:
                _call(address, _security(tls["worker"]), "register-worker", name=name, address="tls://127.0.0.1:1")
            assert "a worker's certificate must name its host (guestbench-worker.HOST)" in str(e.value), e.value
        for cert, name, why in (("worker", "gamma", "names no host: a worker's certificate must be "
                                                    "guestbench-worker.gamma"),
                                ("worker.host1", "gamma", "is host 'host1''s: run it as --name host1")):
            proc = guestbench("worker", address, "--name", name, env={**clean, **tls[cert]}, timeout=120)
            assert proc.returncode == 2 and why in proc.stderr, proc.stderr[-2000:]
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    finally:
        stop([sched])
