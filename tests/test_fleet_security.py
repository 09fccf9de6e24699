"""Fleet workers take work only from who may send it: a real `fleet local` (scheduler and worker) listens on
loopback only, read from the kernel with `ss`, and speaks mutual TLS only to its own throw-away certificates; a
worker allowed a plain scheduler on this host's own network address listens on that address, not on every
interface; a plain tcp:// address is refused (loopback too: test_fleet_hostile)
in one line before any connection (strace says none is tried), for `guestbench worker` and `scenario --cluster`."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest

from helpers.cli import guestbench, write_scenario
from helpers.fleet import (START_S, cluster_workers, fleet_local, fleet_wait, scheduler_address, tls_security,
                           tls_settings, worker_homes)
from helpers.leaks import process_tree, processes_mentioning
from helpers.paths import ROOT
from helpers.users import as_nobody

TEST_NET = "192.0.2.1"  # TEST-NET-1 (RFC 5737): no scheduler there; a connection attempt would hang or fail
REFUSE_S = 30.0  # the refusal comes before any connection: the CLI's start-up only
REACH_S = 20.0  # a client without the fleet's certificate is turned away at the handshake: seconds
SCENARIO = "name: fleet-security\nrepetitions: 1\nwarmup: 0\nbackends: [uml]\nmeasurements: [startup]\n"


def _own_address() -> str | None:
    """This machine's first non-loopback IPv4 address (`hostname -I`), if it has one."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    found = [a for a in out if ipaddress.ip_address(a).version == 4 and not ipaddress.ip_address(a).is_loopback]
    return found[0] if found else None


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """The TCP sockets the processes `pids` listen on, as the kernel lists them: (local address, port)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if any(f"pid={p}," in line for p in pids):
            local = line.split()[3]
            host, port = local.rsplit(":", 1)
            found.append((host.strip("[]").split("%")[0], int(port)))
    return found


def _refused_before_connecting(tmp_path: Path, *args: str) -> str:
    """Run the CLI under strace: exit 2 with one line, quickly, and no connect() to TEST-NET's address."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "connects"
    t0 = time.monotonic()
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), sys.executable, "-m",
                           "guestbench", *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert proc.returncode == 2, (args, proc.stderr[-2000:])
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert took < REFUSE_S, f"the refusal took {took:.1f} s"
    tried = [ln for ln in trace.read_text().splitlines() if TEST_NET in ln or "sin_port=htons(8786)" in ln]
    assert tried == [], tried
    return proc.stderr


@pytest.mark.parametrize("address", [f"tcp://{TEST_NET}:8786", f"{TEST_NET}:8786"])
def test_a_plain_scheduler_address_off_loopback_is_refused_before_any_connection(tmp_path: Path,
                                                                                 address: str) -> None:
    sc = write_scenario(tmp_path / "s.yaml", SCENARIO)
    for args in (("worker", address, "--backend", "uml"),
                 ("scenario", str(sc), "--cluster", address, "--results", str(tmp_path / "r"))):
        err = _refused_before_connecting(tmp_path, *args)
        assert "plain tcp:// to a scheduler lets anyone who reaches its port" in err and "run code as root" in err, err
        assert "tls://" in err and "docs/fleet.md" in err and "--insecure" in err, err
        assert "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before a results file was made


def test_the_machines_own_network_address_is_not_loopback_either(tmp_path: Path) -> None:
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    proc = guestbench("worker", f"tcp://{own}:8786", "--backend", "uml", timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "plain tcp:// to a scheduler lets anyone" in proc.stderr


def test_insecure_needs_a_cluster_and_a_bad_address_is_one_line(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.yaml", SCENARIO)
    proc = guestbench("scenario", str(sc), "--insecure", "--results", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == "guestbench: command line: --insecure: needs --cluster " \
        "ADDRESS", proc.stderr
    proc = guestbench("worker", "tcp://[::1", timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "is not a scheduler address" in proc.stderr


def test_a_worker_listens_on_loopback_for_a_loopback_scheduler_else_on_the_address_that_routes_to_it() -> None:
    from guestbench.run.fleet import address

    for given, expect in (("tcp://127.0.0.1:8786", "127.0.0.1"), ("tcp://localhost:8786", "127.0.0.1"),
                          ("tls://[::1]:8786", "::1"), ("127.0.0.2:8786", "127.0.0.1")):
        assert address.listen_host(given, "test", given) == expect, given
    own = _own_address()
    if own is not None:  # the route to this host's own address (or to a peer on its network) starts there
        assert address.listen_host(f"tls://{own}:8786", "test", "x") == own
        mine = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
        assert address.listen_host(f"tls://{TEST_NET}:8786", "test", "x") in mine  # no packet is sent
    assert not address.is_loopback(TEST_NET) and not address.is_loopback("no-such-host.invalid")


def test_a_loopback_port_nothing_listens_on_is_known_at_once_and_a_listener_is_never_connected_to() -> None:
    """Dask's client retries a refused connection for its whole time-out (20 s) before saying so. For a loopback
    scheduler: no listener in the kernel's socket tables and a refused connect say it at once; a listener is left to
    Dask without a connection (a TLS scheduler would log the failed handshake); so is an address without a port
    (Dask names what is missing) and one off loopback."""
    from guestbench.run.fleet import address

    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, 0))
            except OSError:
                assert family == socket.AF_INET6, host  # a machine without IPv6
                continue
            port = s.getsockname()[1]
            given = f"tcp://{host}:{port}" if family == socket.AF_INET else f"tls://[{host}]:{port}"
            assert not address.listening_here(port) and address.nobody_there(given)  # bound, not listening
            s.listen()
            s.setblocking(False)
            assert address.listening_here(port) and not address.nobody_there(given)
            with pytest.raises(BlockingIOError):
                s.accept()  # nothing connected to the listener
            with socket.socket(family, socket.SOCK_STREAM) as peer:  # an accepted connection's port is no listener
                peer.connect((host, port))
                s.setblocking(True)
                conn, _ = s.accept()
                with conn:
                    assert not address.listening_here(peer.getsockname()[1])
    assert not address.nobody_there("tcp://127.0.0.1") and not address.nobody_there(f"tcp://{TEST_NET}:1")


@pytest.mark.launch
def test_fleet_local_listens_on_loopback_only_and_its_worker_is_unreachable_from_the_network() -> None:
    """Every listening socket of `fleet local` (its scheduler, the worker's keeper, the Dask worker), read with
    ss: on 127.0.0.1 or ::1 only. Before, the worker listened on 0.0.0.0 and [::] and ran a direct `run` RPC
    as root; the scheduler's HTTP server listened on 0.0.0.0. Also `fleet local N` itself: N workers join with
    their resources, and Ctrl-C stops them all and removes their homes."""
    homes = worker_homes()
    proc, address, settings = fleet_local(2)
    try:
        assert address.startswith("tls://127.0.0.1:"), address
        sec = tls_security(settings)
        workers = fleet_wait("two workers", lambda: (w := cluster_workers(address, sec)) and len(w) == 2 and w,
                             START_S, every=1.0)
        assert all(w["resources"] == {"bench": 1, "uml": 1} for w in workers.values()), workers
        worker_port = int(next(iter(workers.values()))["address"].rsplit(":", 1)[1])
        # the scheduler's two and each worker's two (its server and its HTTP server, which may start just after
        # it registers): all of them are judged
        sockets = fleet_wait("the workers' sockets",
                             lambda: (s := _listening(process_tree(proc.pid))) and len(s) >= 6 and s, 60)
        assert all(ipaddress.ip_address(host).is_loopback for host, _ in sockets), sockets
        assert worker_port in {port for _, port in sockets}, (worker_port, sockets)
        own = _own_address()
        if own is not None:  # from the network, the worker's port is closed
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((own, worker_port), timeout=10).close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert processes_mentioning(address) == [] and worker_homes() == homes  # other fleets may be up


def _identity(address: str, security: Any) -> dict[str, Any]:
    """The `identity` RPC of the Dask server at `address`, asked as a client with `security` (None: none)."""
    from distributed.core import rpc

    async def ask() -> dict[str, Any]:
        args = security.get_connection_args("client") if security is not None else {}
        async with rpc(address, timeout=5, connection_args=args) as r:
            return dict(await r.identity())

    return asyncio.run(asyncio.wait_for(ask(), REACH_S))


def _refused(what: str, attempt: Callable[[], object]) -> None:
    """`attempt` fails (Dask: refused, closed or timed out at the handshake), within REACH_S."""
    t0 = time.monotonic()
    with pytest.raises((OSError, TimeoutError, asyncio.TimeoutError)):
        attempt()
    assert time.monotonic() - t0 < REACH_S, f"{what} took {time.monotonic() - t0:.1f} s to fail"


@pytest.mark.launch
def test_fleet_local_speaks_tls_only_to_its_own_certificate_kept_private_and_removed_at_ctrl_c(tmp_path: Path) -> None:
    """Any local user could submit work to the scheduler of `fleet local` (plain tcp:// on loopback), or ask a
    worker directly, and have it run as root. Now: without a certificate from the fleet's own CA (plain tcp://,
    or TLS with another CA) neither the scheduler nor the worker lets a client in; the certificates are in a
    0700 directory of root's (keys 0600, unreadable by nobody), gone after Ctrl-C."""
    from distributed import Client
    from distributed.security import Security

    proc, address, settings = fleet_local(1)
    private = Path(settings["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"]).parent
    try:
        assert address.startswith("tls://127.0.0.1:"), address
        ours = tls_security(settings)
        worker = next(iter(fleet_wait("the worker", lambda: cluster_workers(address, ours), START_S,
                                      every=1.0).values()))
        # a worker lets in the scheduler's certificate only (guestbench.run.fleet.roles), not the coordinator's
        scheduler = Security(require_encryption=True, tls_ca_file=str(private / "ca.pem"),
                             tls_client_cert=str(private / "scheduler.pem"),
                             tls_client_key=str(private / "scheduler-key.pem"))
        assert _identity(worker["address"], scheduler)["type"] == "Worker"
        _refused("the coordinator's certificate at a worker", lambda: _identity(worker["address"], ours))
        st = os.lstat(private)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, stat.S_ISDIR(st.st_mode)) == (0o700, 0, True), private
        pems = sorted(private.glob("*.pem"))
        assert len(pems) == 7 and all(stat.S_IMODE(os.lstat(p).st_mode) == 0o600 for p in pems), pems
        key = settings["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"]  # the coordinator's
        assert as_nobody("cat", key, check=False, capture=True).returncode != 0
        other = Security(require_encryption=True, **{f"tls_{k}": v for k, v in zip(
            ("ca_file", "client_cert", "client_key"), _other_ca(tmp_path))})
        plain = {"tcp": address.replace("tls://", "tcp://"), "tls": address}
        for scheme, sec in (("tcp", None), ("tls", other)):
            _refused(f"a {scheme} client of the scheduler", lambda scheme=scheme, sec=sec: Client(
                plain[scheme], timeout=5, set_as_default=False, security=sec).close())
            _refused(f"a {scheme} client of the worker", lambda scheme=scheme, sec=sec: _identity(
                worker["address"].replace("tls://", f"{scheme}://"), sec))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    assert proc.returncode == 0
    assert not os.path.lexists(private), sorted(os.listdir(private))


def _other_ca(tmp: Path) -> tuple[str, str, str]:
    """A CA of another's, self-made: its certificate, doubling as the client's, and key."""
    env = tls_settings(tmp)
    return (env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"], env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"],
            env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"])


@pytest.mark.launch
def test_an_insecure_worker_listens_on_the_address_that_reaches_its_scheduler(tmp_path: Path) -> None:
    """A plain scheduler on this machine's own network address, a worker allowed it with --insecure: a warning
    line, and the worker listens on that address (its HTTP server on loopback), never on every interface."""
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    sched_file = tmp_path / "scheduler.json"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", own, "--port", "0",
                              "--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--scheduler-file",
                              str(sched_file)], stdin=subprocess.DEVNULL, stderr=open(tmp_path / "s.log", "wb"))
    worker = None
    try:
        address = fleet_wait("the scheduler's address", lambda: scheduler_address(sched_file), 60)
        worker = subprocess.Popen([sys.executable, "-m", "guestbench", "worker", address, "--insecure", "--backend",
                                   "uml", "--name", "insecure"], cwd=ROOT, stdin=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "w.log", "wb"))
        fleet_wait("the worker", lambda: "insecure" in cluster_workers(address) or worker.poll() is not None, START_S,
                   every=1.0)
        log = (tmp_path / "w.log").read_text()
        assert worker.poll() is None, log
        assert "warning: --insecure" in log and "run code as root on every worker" in log, log
        sockets = fleet_wait("the worker's sockets", lambda: len(s := _listening(process_tree(worker.pid))) >= 2 and s,
                             60)
        assert {host for host, _ in sockets} == {own, "127.0.0.1"}, sockets
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=300)
        sched.terminate()
        sched.wait(timeout=30)


def test_the_directory_of_a_killed_fleet_local_is_swept_at_the_next_start_and_no_one_elses(tmp_path: Path) -> None:
    """What a SIGKILLed `fleet local` leaves (its keys) goes when the next one starts; a live one's directory, and
    one another user made, stay. Real processes: an owner that exits, one that lives, and the user nobody."""
    from guestbench.host import rundirs
    from guestbench.run.fleet import local

    root = tmp_path / "run"
    root.mkdir(mode=0o755)
    make = ("from guestbench.host import rundirs; from pathlib import Path; "
            f"print(rundirs.make(Path({str(root)!r}), 'fleet-local-'))")
    dead = Path(subprocess.run([sys.executable, "-c", make], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip())
    (dead / "key.pem").write_text("secret")
    live_proc = subprocess.Popen([sys.executable, "-c", make + "; import sys; sys.stdout.flush(); sys.stdin.read()"],
                                 cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live_proc.stdout is not None
        live = Path(live_proc.stdout.readline().strip())
        strangers = root / "fleet-local-nobody"
        strangers.mkdir(mode=0o755)
        (strangers / rundirs.OWNER_FILE).write_text('{"pid": 1, "start": 0}')
        shutil.chown(strangers, "nobody")
        shutil.chown(strangers / rundirs.OWNER_FILE, "nobody")
        log = local.sweep_dead(root)
        assert not dead.exists() and live.is_dir() and strangers.is_dir(), log
        assert any("removed" in line and str(dead) in line for line in log), log
        assert any("left alone" in line and "fleet-local-nobody" in line for line in log), log
    finally:
        live_proc.communicate(timeout=30)
