"""A test cluster's parts, as the fleet tests start them: what a Dask scheduler says about itself and which workers
it has, Dask's TLS settings, `guestbench fleet local`, the end of a cluster's processes; and a fleet run's
documents and coordinator without a cluster (a real start-up run's cells split across named hosts)."""

from __future__ import annotations

import copy
import functools
import json
import shlex
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guestbench.results import load_results
from helpers.cli import start_guestbench
from helpers.paths import ROOT
from helpers.session import session_tmp_path
from helpers.waits import wait_for

if TYPE_CHECKING:
    from guestbench.run.fleet import coordinator

TMP = session_tmp_path() / "tmp"  # where a worker makes its directory (gbw-*)
START_S = 300.0  # a worker probes its backends first (cached verdicts make that quick)
REAL = ROOT / "tests/data/results/20261121T211449Z-startup.json"  # the real run fleet_doc splits across hosts

fleet_wait = functools.partial(wait_for, every=0.2)  # a cluster's state is asked over RPC: no more often than this


def scheduler_address(path: Path) -> str | None:
    """The address in a Dask scheduler's --scheduler-file, or None while it has not written it (whole) yet: a test
    waits for it (helpers.waits) before it starts workers or a client."""
    try:
        return str(json.loads(path.read_text())["address"])
    except (OSError, ValueError, KeyError):
        return None


def cluster_workers(address: str, security: Any = None) -> dict[str, dict[str, Any]]:
    """`security`: a distributed.Security (else Dask's settings from the environment)."""
    from distributed import Client

    with Client(address, timeout=20, set_as_default=False, security=security) as c:
        info = c.sync(c.scheduler.identity, n_workers=-1, callback_timeout=20)  # not the client's cache
        return {str(w["name"]): {"address": a, "resources": w["resources"], "pid": w.get("pid")}
                for a, w in info["workers"].items()}


def worker_homes() -> list[Path]:
    """The workers' directories in the session's temp root: other fleets' too, so a test compares before and after."""
    return sorted(TMP.glob("gbw-*"))


def tls_settings(tmp: Path) -> dict[str, str]:
    """Dask's TLS settings as environment variables, with a certificate made here that is its own CA (as
    docs/fleet.md says to set them; tcp:// connections ignore them)."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=guestbench-test"], check=True, capture_output=True)
    env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(cert)}
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] = str(cert)
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] = str(key)
    return env


def tls_security(settings: dict[str, str]) -> Any:
    """A distributed.Security from Dask's client settings as environment variables."""
    from distributed.security import Security

    prefix = "DASK_DISTRIBUTED__COMM__TLS__"
    return Security(require_encryption=True, tls_ca_file=settings[f"{prefix}CA_FILE"],
                    tls_client_cert=settings[f"{prefix}CLIENT__CERT"], tls_client_key=settings[f"{prefix}CLIENT__KEY"])


def fleet_local(workers: int) -> tuple[subprocess.Popen[str], str, dict[str, str]]:
    """`guestbench fleet local N --backend uml`: the process, its address (stdout's first line) and the client
    settings its stderr gives in an `export` line."""
    proc = start_guestbench("fleet", "local", str(workers), "--backend", "uml")
    assert proc.stdout is not None and proc.stderr is not None
    try:
        address = proc.stdout.readline().strip()
        lines = [proc.stderr.readline() for _ in range(2)]
        assert len(lines[1].split(": export ")) == 2, lines
        settings = dict(word.split("=", 1) for word in shlex.split(lines[1].split(": export ")[1]))
    except BaseException:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
        raise
    return proc, address, settings


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """End a test cluster's processes, the workers first, then the scheduler: SIGTERM, then SIGKILL after 60 s."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fleet_doc(split: dict[str, list[str]], **fingerprint: Any) -> dict[str, Any]:
    """The real run's cells, each host keeping those of its backends; `fingerprint` changes host beta's."""
    one = load_results(REAL).to_dict()
    doc = {k: v for k, v in one.items() if k != "cells"}
    doc["hosts"], doc["cells"] = {}, []
    for name, backends in split.items():
        fp = copy.deepcopy(one["host"])
        if name == "beta":
            fp.update(fingerprint)
        doc["hosts"][name] = {"address": f"tcp://10.0.0.{len(doc['hosts']) + 1}:4000", "host": fp,
                              "backends": {b: one["backends"][b] for b in backends}, "status": "complete"}
        doc["cells"] += [{**copy.deepcopy(c), "host": name} for c in one["cells"] if c["backend"] in backends]
    return doc


def fleet_run(tmp_path: Path, sc: Any, doc: dict[str, Any]) -> coordinator.FleetRun:
    """A coordinator of `doc`'s hosts, each starting, with its results file in `tmp_path` (nothing submitted)."""
    from rich.console import Console

    from guestbench.results import ResultsFile
    from guestbench.run.fleet import coordinator
    from guestbench.run.fleet.inbox import Inbox

    run = coordinator.FleetRun(sc, coordinator.FleetOptions(address="tcp://s:1"), Console(file=open("/dev/null", "w")))
    run.results = ResultsFile.create(tmp_path / "r.json", scenario=doc["scenario"], host=doc["host"],
                                     command=["t"], guestbench=doc["guestbench"])
    run.results.doc["hosts"] = {n: {"address": h["address"], "status": "starting"} for n, h in doc["hosts"].items()}
    run.inbox = Inbox(h["address"] for h in doc["hosts"].values())
    return run


def stamped(msg: dict[str, Any], address: str) -> dict[str, Any]:
    """`msg` as the scheduler delivers a worker's event: stamped with the address of the worker that logged it."""
    return {**msg, "worker": address}
