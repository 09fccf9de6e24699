"""`guestbench fleet local N`: a Dask scheduler and N guestbench workers on this machine, as subprocesses, until a
signal. For trying fleet runs on one machine (and for the tests): the workers share this host, so their samples
are taken on a busy host whenever two measure at once, and the results say so (busy check).

The fleet speaks mutual TLS with throw-away certificates (ephemeral.py) kept in its private directory, so only
root, who can read them, can reach the scheduler or a worker: not any local user, as a plain tcp:// loopback
address would let. Each process gets its own role's certificate only, and the scheduler checks roles
(guestbench.run.fleet.roles): a worker's certificate is no client. The directory, keys included, goes when
the fleet stops."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable

from guestbench.host import owned
from guestbench.host import rundirs
from guestbench.util.errors import UserError
from guestbench.host.paths import remove_tree
from guestbench.host.procs import users
from guestbench.run.fleet import ephemeral

PREFIX = "fleet-local-"
START_S = 60.0  # how long the scheduler may take to write its address
STOP_S = 200.0  # how long the workers may take to stop (their keeper waits for host runs to clean up)


class LocalCluster:
    """The scheduler and workers as child processes; `close` stops them all and waits for them."""

    def __init__(self, workers: int, backends: str | None, say: Callable[[str], None]) -> None:
        self.say = say
        for line in sweep_dead(owned.runtime_dir()):
            say(f"fleet local: swept: {line}")
        self.dir = rundirs.make(owned.runtime_dir(), PREFIX)
        os.chmod(self.dir, 0o700)  # root's alone: it holds the fleet's keys
        self.procs: list[subprocess.Popen[bytes]] = []
        host = _hostname()
        names = [f"{host}-{i}" for i in range(1, workers + 1)]
        try:
            tls = ephemeral.make(self.dir, names)
        except BaseException:
            remove_tree(self.dir)
            raise
        self.client_settings = ephemeral.client_settings(tls)
        sched_file = self.dir / "scheduler.json"
        self.scheduler = self._start(scheduler_command(tls["scheduler"], sched_file), tls["scheduler"])
        self.address = self._address(sched_file)
        for name in names:  # each with a certificate of its own, which the scheduler admits under its name only
            cmd = [sys.executable, "-m", "guestbench", "worker", self.address, "--name", name]
            if backends:
                cmd += ["--backend", backends]
            self._start(cmd, tls[f"worker.{name}"])

    def _start(self, cmd: list[str], tls: dict[str, str]) -> subprocess.Popen[bytes]:
        """`cmd` with Dask's TLS settings of its role only (a worker holds no key but the workers')."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(ephemeral.ENV)}
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env={**env, **tls},
                                stderr=open(self.dir / f"{len(self.procs)}.log", "wb"))
        self.procs.append(proc)
        return proc

    def _address(self, sched_file: Path) -> str:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.scheduler.poll() is not None:
                self.close()
                raise UserError(f"the Dask scheduler ended at start (exit status {self.scheduler.returncode})",
                                source="guestbench fleet local")
            try:
                return str(json.loads(sched_file.read_text())["address"])
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        self.close()
        raise UserError(f"the Dask scheduler did not start within {START_S:g} s", source="guestbench fleet local")

    def exports(self) -> str:
        """The shell line that lets root's `guestbench scenario --cluster ADDRESS` in: Dask's client settings."""
        return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.client_settings.items())

    def wait(self) -> None:
        """Until a signal, or until the scheduler ends."""
        stop = {"now": False}

        def on_signal(signum: int, frame: object) -> None:
            stop["now"] = True

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            while not stop["now"] and self.scheduler.poll() is None:
                time.sleep(0.2)
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def close(self) -> None:
        """Workers first (each keeper cleans up after its worker), then the scheduler."""
        workers = [p for p in self.procs if p is not self.scheduler]
        for group in (workers, [self.scheduler]):
            for p in group:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_S
            for p in group:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        remove_tree(self.dir)


def scheduler_command(tls: dict[str, str], sched_file: Path) -> list[str]:
    """The scheduler of a fleet: TLS with the scheduler's certificate, on loopback (its HTTP server too), its
    handlers guarded by the role in each peer's certificate (guestbench.run.fleet.roles, as Dask's preload)."""
    return [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--protocol", "tls",
            "--tls-ca-file", tls[f"{ephemeral.ENV}TLS__CA_FILE"],
            "--tls-cert", tls[f"{ephemeral.ENV}TLS__SCHEDULER__CERT"],
            "--tls-key", tls[f"{ephemeral.ENV}TLS__SCHEDULER__KEY"],
            "--port", "0", "--no-dashboard", "--dashboard-address", "127.0.0.1:0",
            "--preload", "guestbench.run.fleet.roles", "--scheduler-file", str(sched_file)]


def _hostname() -> str:
    import socket

    return socket.gethostname().split(".")[0] or "local"


def sweep_dead(root: Path) -> list[str]:
    """The directories of this user's earlier `fleet local`s that died without cleaning up (SIGKILL): keys,
    logs. One is kept while a process still names it (its scheduler or a worker, still running)."""
    found = rundirs.claim_dead(root, PREFIX)
    done = list(found.log)
    for d in found.claimed:
        if using := users(d):
            done.append(f"kept {d}: process {using[0]} still uses it")
            found.release(d)
        else:
            remove_tree(d)
            done.append(f"removed {d} (its fleet local died)")
    return done
