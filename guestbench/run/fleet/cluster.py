"""The Dask cluster as a fleet run's coordinator sees it: the client (guestbench.run.fleet.plain, .nopickle and
.roles set up around it), the workers the scheduler lists, which of them run the scenario, and whether the client
still reads the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from guestbench.backends import BACKENDS
from guestbench.run.fleet import address as fleet_address
from guestbench.run.fleet import plain, resources, roles, tls
from guestbench.scenario import Scenario
from guestbench.util.errors import UserError

CONNECT_TIMEOUT_S = 20.0
ASK_TIMEOUT_S = 10.0  # one question to the scheduler
DEAF = ("the coordinator's Dask client stopped reading the scheduler: a message failed to load (the coordinator "
        "loads no pickle; a host may have sent one)")


@dataclass
class HostPlan:
    name: str
    address: str
    resources: dict[str, Any]
    backends: list[str]  # what it will launch: the scenario's backends it can launch


def connect(address: str, insecure: bool = False, warn: Callable[[str], None] = print) -> Any:
    """A Dask client, or one line saying why there is none (a plain address is refused before any connection
    unless `insecure`). It takes data from Dask only as msgpack (`deserializers`: no "pickle", nor "dask", whose
    loader unpickles the type), and drops Dask's default `print` and `warn` topics (the latter unpickles what a
    worker logs); the rest of Dask's unpickling is refused by guestbench.run.fleet.nopickle during a run."""
    from distributed import Client

    fleet_address.refuse_plain(address, insecure, "command line", f"--cluster {address}", warn)
    tls.require(address, "client", "command line", f"--cluster {address}")
    try:
        roles.coordinator_setup(address)
    except RuntimeError as e:  # a Dask the roles were not made for
        raise UserError(str(e), source="installation", key="distributed") from None
    roles.LAST_REFUSAL[0] = ""  # an earlier connection's refusal is no reason for this one's
    start = "start one with 'dask scheduler' (or 'guestbench fleet local N') and give its address"
    if fleet_address.nobody_there(address):
        raise UserError(f"cannot reach a Dask scheduler there (nothing listens on that port of this host); {start}",
                        source="command line", key=f"--cluster {address}")
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False, deserializers=["msgpack"])
    except (OSError, TimeoutError, TypeError, ValueError) as e:  # TypeError, ValueError: Dask's TLS settings
        why = roles.LAST_REFUSAL[0] or f"{type(e).__name__}: {e}"
        raise UserError(f"cannot reach a Dask scheduler there ({why}); {start}",
                        source="command line", key=f"--cluster {address}") from None
    for default_topic in ("print", "warn"):
        client.unsubscribe_topic(default_topic)
    return client


def workers(client: Any) -> dict[str, dict[str, Any]]:
    """The cluster's workers by name: {"address", "resources"}, asked of the scheduler each time.

    Not `client.scheduler_info()`: it returns the client's cached identity, which the client's own refresh
    (every 2 s) replaces with one that lists no workers; read at the wrong instant, every host looked lost
    (seen beside two CPU hogs). A name two workers give is neither's: it is kept with `"claimed"` (their count),
    never an address. Raises OSError when the scheduler does not answer, or answers with an error."""
    out: dict[str, dict[str, Any]] = {}
    for name, addr, w in _listed(client):
        if name in out:  # a worker may say another's name (Dask lets what it registers override it)
            out[name] = {"address": None, "resources": {}, "claimed": out[name].get("claimed", 1) + 1}
        else:
            out[name] = {"address": addr, "resources": resources.known(w.get("resources"))}
    return out


def addresses(client: Any) -> set[str]:
    """The addresses of the workers the scheduler lists now (raises as `workers`)."""
    return {addr for _, addr, _ in _listed(client)}


def _listed(client: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, address, Dask's record) of each worker the scheduler lists; OSError when it does not answer, or
    answers with an error (a worker can make its identity fail)."""
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=ASK_TIMEOUT_S)
        return [(str(w.get("name", addr)), str(addr), w) for addr, w in info["workers"].items()]
    except Exception as e:  # a time-out, a connection gone, or the scheduler's error
        raise OSError(f"{type(e).__name__}: {e}"[:300]) from None


def choose(sc: Scenario, cluster: dict[str, dict[str, Any]], wanted: list[str] | None,
           address: str) -> tuple[list[HostPlan], dict[str, str]]:
    """The hosts that will run, and those that will not with why."""
    if not cluster:
        raise UserError("the scheduler has no workers; start 'guestbench worker ADDRESS' on each host",
                        source="command line", key=f"--cluster {address}")
    names = list(cluster) if wanted is None else wanted
    unknown = [n for n in names if n not in cluster]
    if unknown:
        raise UserError(f"no worker named {', '.join(unknown)}; the cluster has {', '.join(sorted(cluster))}",
                        source="command line", key="--hosts")
    plans: list[HostPlan] = []
    idle: dict[str, str] = {}
    for name in sorted(names):
        w = cluster[name]
        offers = resources.backends_of(w["resources"])
        if w.get("claimed"):
            idle[name] = f"{w['claimed']} workers give that name: none of them is taken for it"
            continue
        if resources.BENCH not in w["resources"]:
            idle[name] = "it is not a guestbench worker (no 'bench' resource)"
            continue
        selected = [b for b in (sc.backends or list(BACKENDS)) if b in offers]
        if not selected:
            idle[name] = (f"it can launch {', '.join(offers) or 'no backend'}, none of the scenario's "
                          f"({', '.join(sc.backends or BACKENDS)})")
            continue
        plans.append(HostPlan(name, w["address"], w["resources"], selected))
    return plans, idle


def deaf(client: Any) -> bool:
    """Whether Dask's client stopped reading what the scheduler sends: it does so for good when one message fails
    to load (a message a host made for it, which held a pickle). Its futures would never end."""
    listener = getattr(client, "_handle_report_task", None)  # Dask's own; absent: no verdict
    return bool(listener is not None and listener.done())


def close(client: Any) -> None:
    """Close Dask's client; a deaf one (`deaf`) would raise its listener's failure, already reported as the
    hosts' (and again, for 40 s, when it is collected), so it is closed as if its listener had ended."""
    if deaf(client):
        client._handle_report_task.exception()  # retrieved: asyncio would log it, traceback and all
        client._handle_report_task = None
    try:
        client.close()
    except Exception:  # closing is not the run: what it found is in the results file already
        pass
    if client.status != "closed":  # its thread may read on: what it reads stays plain for the process's life
        plain.keep()
