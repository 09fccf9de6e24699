"""Fleet pieces that need no cluster: which hosts run what, how a lost host's iterations are written off, how
snapshots are read, and how show/compare read hosts. The documents are built from a real start-up run's samples
(tests/data), split across two named hosts as a fleet run records them."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from guestbench.output.export import json as json_export
from guestbench.output.tables import fleet as fleet_report
from guestbench.analysis.fleet import analyze_fleet
from guestbench.analysis import compare, machines
from guestbench.util.errors import UserError
from guestbench.results import Cell, Run, load_results
from guestbench.results.hosts import differences, names, view
from guestbench.execute import remote
from guestbench.run.fleet import cluster as fleet_cluster, coordinator
from guestbench.run.fleet import resources
from guestbench.run.fleet.inbox import Inbox
from guestbench.scenario import parse_scenario

from helpers.fleet import REAL, fleet_doc, fleet_run, stamped


def test_resources_a_worker_offers_and_a_host_share_asks_for() -> None:
    offered = resources.advertised(["uml", "tcg"])
    assert offered == {"bench": 1, "uml": 1, "tcg": 1}
    assert sorted(resources.backends_of(offered)) == ["tcg", "uml"]
    assert resources.asked(["tcg"]) == {"bench": 1, "tcg": 1}  # one measurement per host at a time


def test_choose_runs_each_host_on_what_it_offers_and_says_why_others_sit_out() -> None:
    sc = parse_scenario({"name": "x", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    cluster = {"alpha": {"address": "a", "resources": {"bench": 1, "uml": 1}},
               "beta": {"address": "b", "resources": {"bench": 1, "kvm": 1}},
               "gamma": {"address": "c", "resources": {"GPU": 1}}}
    plans, idle = fleet_cluster.choose(sc, cluster, None, "tcp://s:1")
    assert [(p.name, p.backends) for p in plans] == [("alpha", ["uml"])]
    assert "can launch kvm, none of the scenario's (uml, tcg)" in idle["beta"]
    assert "not a guestbench worker" in idle["gamma"]
    with pytest.raises(UserError, match="no worker named delta; the cluster has alpha, beta, gamma"):
        fleet_cluster.choose(sc, cluster, ["delta"], "tcp://s:1")
    with pytest.raises(UserError, match="the scheduler has no workers"):
        fleet_cluster.choose(sc, {}, None, "tcp://s:1")


def test_a_message_crosses_as_sealed_compressed_json_and_anything_else_is_dropped_or_blamed() -> None:
    import zlib

    from guestbench.run.fleet import seal

    doc = load_results(REAL).to_dict()
    keys = {"alpha": seal.new_key(), "beta": seal.new_key()}
    workers = {"alpha": "tcp://10.0.0.1:4000", "beta": "tcp://10.0.0.2:4000"}
    msg = seal.seal(keys["alpha"], "alpha", 1, {"doc": doc})
    assert isinstance(msg["data"], bytes) and len(msg["data"]) < len(json.dumps(doc)) / 2  # the scheduler keeps events
    got = seal.open_message({**msg, "worker": workers["alpha"]}, keys, workers)
    assert got == seal.Opened("alpha", 1, {"doc": doc}) and isinstance(got.body["doc"]["cells"], list)
    # no key of the run seals it, or another worker relays it: no host to blame, dropped
    for dropped in ("text", {**msg, "mac": "0" * 64}, {**msg, "seq": 2}, seal.seal(seal.new_key(), "beta", 1, {}),
                    {**msg, "worker": workers["beta"]}, {**msg, "data": msg["data"] + b"x"}):
        assert seal.open_message(dropped, keys, workers) is None, dropped
    # sealed by alpha, naming beta, sent from alpha's worker (Dask stamps its address): alpha's fault
    forged = seal.seal(keys["alpha"], "beta", 1, {"doc": doc})
    assert seal.open_message({**forged, "worker": workers["alpha"]}, keys, workers) == seal.Opened(
        "alpha", 1, None, "it sent results naming host beta, sealed with its own key")
    assert seal.open_message(forged, keys, workers) is None  # logged through a client: only beta's key is tried
    assert seal.open_message({**msg, "data": b"x" * (seal.MAX_SEALED + 1)}, keys, workers) is None  # before a key
    # sealed, but not a bounded JSON document: inflating past a results file's cap, nesting too deep, 200 digits
    for bad in (b"not zlib", zlib.compress(b"[1]"), zlib.compress(b" " * (65 * 2**20) + b"{}"),
                zlib.compress(b"[" * 100_000 + b"]" * 100_000), zlib.compress(b'{"rep": ' + b"1" * 200 + b"}")):
        sealed = {"host": "alpha", "seq": 3, "data": bad, "mac": seal._mac(keys["alpha"], "alpha", 3, bad)}
        got = seal.open_message(sealed, keys, workers)
        assert got is not None and got.host == "alpha" and got.body is None, bad[:20]
        assert got.why is not None and got.why.startswith("its results were refused: ")


def test_a_lost_host_keeps_its_samples_and_its_unfinished_iterations_become_failures(tmp_path: Path) -> None:
    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})
    real = next(c for c in doc["cells"] if c["backend"] == "tcg")  # the scenario the real run had
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "repetitions": len(real["samples"]),
                         "warmup": len(real["warmups"]), "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    beta_doc = fleet_doc({"beta": ["tcg"]})
    cell = beta_doc["cells"][0]
    planned = len(cell["samples"]) + len(cell["warmups"]) + 1  # + the cold launch
    cell["samples"] = cell["samples"][:2]
    cell["status"] = "running"
    run.merge("beta", {**beta_doc, "status": "running"})
    run.write_off(fleet_cluster.HostPlan("beta", "tcp://10.0.0.2:4000", {}, ["tcg"]),
              "its worker (tcp://10.0.0.2:4000) left the cluster mid-run")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["hosts"]["beta"]["status"] == "lost" and "left the cluster mid-run" in saved["hosts"]["beta"]["error"]
    (beta,) = [c for c in saved["cells"] if c["host"] == "beta"]
    assert len(beta["samples"]) == 2 and beta["status"] == "interrupted"
    assert remote.ended_iterations(Cell.from_dict(beta)) == remote.planned(run.sc, Cell.from_dict(beta)) == planned
    assert all(f["reason"].startswith("host beta lost") for f in beta["failures"])
    run.merge("beta", beta_doc)  # a late snapshot from a host written off changes nothing
    assert json.loads((tmp_path / "r.json").read_text()) == saved


def test_a_hosts_results_that_no_run_writes_are_refused_and_its_host_is_failed_saying_why(tmp_path: Path) -> None:
    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    beta = fleet_doc({"beta": ["tcg"]})
    assert run.merge("beta", {**beta, "status": "running"}) is None
    hostile = copy.deepcopy(beta)
    hostile["cells"][0]["samples"][0]["seconds"] = -1.0

    class Done:
        status = "finished"

    from guestbench.run.fleet import seal

    run.keys = {"alpha": seal.new_key(), "beta": seal.new_key()}
    run.addresses = {n: h["address"] for n, h in doc["hosts"].items()}
    final = {"doc": hostile, "exit": 0, "stderr": "", "final": True}
    run.inbox.put(stamped(seal.seal(run.keys["beta"], "beta", 1, final), run.addresses["beta"]))
    run.host_ended("beta", Done())  # its final message is read first
    saved = load_results(tmp_path / "r.json")  # the file stays one every reader accepts
    assert saved.hosts["beta"].status == "failed"
    assert saved.hosts["beta"].error == ("its results were refused: cells[0].samples[0].seconds: -1.0 is negative; "
                                         "allowed: a finite number of seconds >= 0"), saved.hosts["beta"].error
    (cell,) = [c for c in saved.cells if c.host == "beta"]
    assert [s.seconds for s in cell.samples] == [s["seconds"] for s in beta["cells"][0]["samples"]]


class _SilentScheduler:
    """A Dask client whose scheduler keeps its connection and answers nothing (stopped, or stuck): questions time
    out, futures never end. Only the coordinator's loop is judged here: a real scheduler that went away is the
    client's to notice (it cancels every future), a real worker that leaves is test_fleet's."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.scheduler = self

    def identity(self, **_: Any) -> None:
        raise AssertionError("asked through sync")

    def sync(self, *_: Any, **__: Any) -> None:
        raise TimeoutError("timed out after 10 s")

    def submit(self, *_: Any, key: str, **__: Any) -> Any:
        client = self

        class Future:
            def done(self) -> bool:
                return False

            def cancel(self) -> None:
                client.cancelled.append(key)

        return Future()


@pytest.mark.timeout(30)
def test_a_scheduler_that_stops_answering_costs_its_hosts_after_a_deadline_not_a_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, "SCHEDULER_SILENT_S", 0.5)
    monkeypatch.setattr(coordinator, "LIVENESS_EVERY_S", 0.1)
    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    client = _SilentScheduler()
    plans = [fleet_cluster.HostPlan(n, h["address"], {}, h["backends"]) for n, h in doc["hosts"].items()]
    run.supervise(client, plans)  # returns: both hosts written off
    saved = json.loads((tmp_path / "r.json").read_text())
    for name in ("alpha", "beta"):
        host = saved["hosts"][name]
        assert host["status"] == "lost", host
        assert "the scheduler did not answer, or answered only errors, for 0.5 s" in host["error"], host
    assert sorted(client.cancelled) == sorted(f"guestbench-{run.run_id}-{n}" for n in ("alpha", "beta"))


def test_show_names_the_fastest_combination_only_when_every_other_ratio_ci_is_above_one() -> None:
    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg", "libvirt-tcg"]})
    (t,) = fleet_report.tables(analyze_fleet(Run.from_dict(doc)))
    assert {(c.host, c.row.backend) for c in t.combos} == {("alpha", "uml"), ("beta", "tcg"), ("beta", "libvirt-tcg")}
    medians = {c.row.backend: c.row.summary.median for c in t.combos if c.row.summary}
    others = [c for c in t.combos if c is not min(t.combos, key=lambda c: c.row.summary.median)]
    if all(c.ratio_ci and c.ratio_ci[0] > 1 for c in others):
        assert t.fastest is not None and t.fastest.row.backend == min(medians, key=medians.get)
        assert "Fastest:" in t.caption
    else:
        assert t.fastest is None and "No combination is clearly fastest" in t.caption
    # the same cell on both hosts, one host's samples doubled: the ratio is about 2 and beta is not fastest
    same = fleet_doc({"alpha": ["uml"], "beta": ["uml"]})
    for c in same["cells"]:
        if c["host"] == "beta":
            for s in c["samples"]:
                s["seconds"] *= 2
    (t2,) = fleet_report.tables(analyze_fleet(Run.from_dict(same)))
    assert t2.fastest is not None and t2.fastest.host == "alpha", t2.caption
    (slow,) = [c for c in t2.combos if c.host == "beta"]
    assert slow.row.ratio == pytest.approx(2.0) and slow.ratio_ci is not None and slow.ratio_ci[0] > 1
    tables = json_export.fleet_tables(analyze_fleet(Run.from_dict(same)))
    assert tables[0]["fastest"] == {"host": "alpha", "backend": "uml"}


def test_hosts_that_differ_in_what_moves_figures_are_warned_about() -> None:
    doc = Run.from_dict(fleet_doc({"alpha": ["uml"], "beta": ["tcg"]}, cpu_model="Other CPU", cores=64))
    what = dict(differences(doc))
    assert set(what) >= {"CPU model", "cores"} and what["cores"]["beta"] == 64
    warned = fleet_report.warnings(analyze_fleet(doc))
    assert any(w.startswith("hosts differ in CPU model (alpha: ") for w in warned), warned
    assert fleet_report.warnings(analyze_fleet(Run.from_dict(fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})))) == []
    assert names(doc) == ["alpha", "beta"] and view(doc, "beta")[1].host["cores"] == 64


def test_compare_matches_two_fleet_runs_host_by_host() -> None:
    base = Run.from_dict(fleet_doc({"alpha": ["uml"], "beta": ["uml"]}))
    other = Run.from_dict(fleet_doc({"alpha": ["uml"], "beta": ["uml"]}, kernel="6.99"))
    keys = set(compare.cells_by_key(base))
    assert keys == {("uml", "host@alpha", "startup"), ("uml", "host@beta", "startup")}
    rows = compare.compare_docs(base, other)
    assert sorted(f"{r.backend}/{r.placement}/{r.measurement}" for r in rows) == ["uml/host@alpha/startup",
                                                                                 "uml/host@beta/startup"]
    assert machines.machine_differences(base, other) == []
    assert machines.software_changes(base, other) == [f"host beta: kernel: {base.host['kernel']!r} vs '6.99'"]


def test_only_each_hosts_newest_message_is_read_replays_and_superseded_ones_never(tmp_path: Path) -> None:
    """Inflating and parsing is the costly part (60 MiB of JSON from 61 KB): a replay, or a message older than
    another of the same batch, is dropped on its seal and number alone, never read (issue 46, review). Here each
    such message is sealed but unreadable: had it been read, beta would have failed."""
    import zlib

    from guestbench.run.fleet import seal

    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    run.keys, run.addresses = {"beta": seal.new_key()}, {"beta": "tcp://10.0.0.2:4000"}
    beta = {k: v for k, v in fleet_doc({"beta": ["tcg"]}).items()}
    unreadable = zlib.compress(b"[" * 100_000)

    def sealed(seq: int, data: bytes | None = None) -> dict[str, Any]:
        if data is None:
            msg = seal.seal(run.keys["beta"], "beta", seq, {"doc": beta})
        else:
            msg = {"host": "beta", "seq": seq, "data": data, "mac": seal._mac(run.keys["beta"], "beta", seq, data)}
        return stamped(msg, "tcp://10.0.0.2:4000")

    run.numbers["beta"] = 10
    run.inbox.put(sealed(4, unreadable))  # a replay
    assert run._take(timeout=0) == [] and "beta" not in run.refused
    for msg in (sealed(11, unreadable), sealed(12)):  # superseded in the inbox, as it arrives
        run.inbox.put(msg)
    assert run._take(timeout=0) == ["beta"]
    assert "beta" not in run.refused and run.numbers["beta"] == 12
    run.inbox.put(sealed(13, unreadable))  # the newest, read: beta fails saying why
    run._take(timeout=0)
    assert "beta" in run.refused


def test_the_inbox_holds_one_message_per_worker_of_the_run_however_many_arrive() -> None:
    """A host may send thousands of messages, or large ones: the coordinator holds each worker's newest only, and
    drops what comes from no worker of the run or is larger than any seal (issue 46: the inbox was unbounded)."""
    import threading
    import tracemalloc

    from guestbench.run.fleet import seal

    alpha, beta = "tcp://10.0.0.1:4000", "tcp://10.0.0.2:4000"
    inbox = Inbox([alpha, beta])
    tracemalloc.start()
    try:
        for i in range(1_000):
            inbox.put({"host": "alpha", "seq": i, "data": os.urandom(2**20), "mac": "m", "worker": alpha})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # 1 GiB arrived; two messages' worth at most was ever held
    for dropped in ({"host": "x", "data": b"x", "worker": "tcp://10.0.0.9:4000"}, {"host": "beta", "data": b"x"},
                    {"host": "beta", "data": b"x" * (seal.MAX_SEALED + 1), "worker": beta},
                    {"host": "beta", "data": "not bytes", "worker": beta}, ("a", "tuple"), None):
        inbox.put(dropped)
    assert inbox.dropped == 6
    (held,) = inbox.take(timeout=0)
    assert held["seq"] == 999 and inbox.take(timeout=0) == []
    later = threading.Timer(0.05, inbox.put, args=({"host": "beta", "data": b"b", "worker": beta},))
    later.start()
    assert [m["host"] for m in inbox.take(timeout=60)] == ["beta"]  # woken by the message, not the time-out
    later.join()


def test_every_way_of_adding_a_handler_to_a_guarded_table_guards_it() -> None:
    """Dask and its extensions add handlers by item, update, setdefault or |=: each is guarded (issue 46, review:
    only item assignment and update were)."""
    from guestbench.run.fleet import roles

    def handler() -> None:
        pass

    table = roles.Guarded({"a": handler}, lambda op, h: ("guarded", op, h))
    table["b"] = handler
    table.update(c=handler)
    table.setdefault("d", handler)
    table |= {"e": handler}
    assert table.setdefault("a", print) == ("guarded", "a", handler)  # one there already is kept
    assert sorted(table) == ["a", "b", "c", "d", "e"] and all(v[:2] == ("guarded", k) for k, v in table.items())


def test_a_dask_the_patches_were_not_made_for_is_refused_not_left_unguarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The roles and the coordinator's plain loading patch Dask's private code: a Dask without those names, of
    another release, or whose comms no longer load through the patched function, stops the fleet saying why."""
    import distributed
    import distributed.comm.utils
    from types import SimpleNamespace

    from guestbench.run.fleet import plain, roles

    roles.check_dask()  # this one: the release they were made for
    with pytest.raises(RuntimeError, match=r"without Scheduler.handle_stream, .*Scheduler._broker._topics"):
        roles.check_dask(SimpleNamespace(handlers={}, stream_handlers={"log-event": None}))
    monkeypatch.setattr(distributed, "__version__", "2027.1.0")
    with pytest.raises(RuntimeError, match=r"made for distributed 2026\.8\.x, and this is 2027\.1\.0: not started"):
        roles.check_dask()
    monkeypatch.undo()
    with plain.only():  # the comms load through the patched function: allowed
        pass
    from distributed.protocol import core

    monkeypatch.setattr(distributed.comm.utils, "protocol", SimpleNamespace(loads=core.loads))  # a moved call
    with pytest.raises(UserError, match="loads messages where guestbench cannot withhold what fleet hosts send"):
        with plain.only():
            pass
    import distributed.protocol
    assert distributed.protocol.loads is core.loads  # undone on the way out


def test_what_dask_would_still_load_or_print_from_a_worker_is_left_plain() -> None:
    """Beside the objects it withholds, the coordinator's loader makes plain what Dask's client would load or
    print from a worker without asking: an event on any topic but a run's (the client prints `print` events and
    unpickles `warn` ones), a result's pickled type, an error's exception and traceback (review)."""
    from distributed.protocol import Serialize, dumps

    from guestbench.run.fleet import plain, task

    def through(msg: Any) -> Any:
        return plain.loads(dumps(msg))

    for topic in ("print", "warn", "all", ["print"]):
        assert through({"op": "event", "topic": topic, "event": (1.0, {"args": ["\x1b]0;x\x07"]})}) == plain.NOTHING
    run = {"op": "event", "topic": task.topic("x"), "event": (1.0, {"host": "a", "data": b"d"})}
    assert through(run) == run
    assert through({"op": "key-in-memory", "key": "k", "type": b"\x80\x04N."})["type"] is None
    erred = through({"op": "task-erred", "key": "k", "exception": Serialize(b"x"), "traceback": Serialize(b"y")})
    assert erred["exception"] is plain.WITHHELD and erred["traceback"] is None
    reply = through({"status": "uncaught-error", "exception": Serialize(b"x"), "traceback": None,
                     "exception_text": "RoleRefused('may not call')", "traceback_text": ""})
    assert reply["exception"] == "RoleRefused('may not call')" and isinstance(reply["exception"], plain.Withheld)
    from distributed.core import clean_exception

    assert str(clean_exception(**reply)[1]) == "RoleRefused('may not call')"  # what Dask makes of it: an Exception


def test_a_workers_pace_on_a_runs_topic_is_bounded_and_an_honest_hosts_never_reached() -> None:
    """The scheduler drops a worker's events on a run's topic past 8 a second (bursts of 32) or one largest seal
    of bytes a second (bursts of 4): a flood would otherwise pile up in its backlog to the coordinator (review)."""
    from guestbench.run.fleet import admission

    pace = admission.Pace(seal_max=1000)
    assert all(pace.allows("w", 10, 0.0) for _ in range(32)) and not pace.allows("w", 10, 0.0)
    assert pace.allows("w", 10, 0.125) and not pace.allows("w", 10, 0.125)  # one more each 1/8 s
    assert pace.allows("v", 4000, 0.0) and not pace.allows("v", 1, 0.0) and pace.allows("v", 1000, 1.0)
    honest = [pace.allows("h", 150, t / 4) for t in range(4 * 600)]  # 10 min of snapshots, each 15 % of a seal
    assert all(honest) and pace.allows("h", 1000, 600.0)  # and its final, as large as a seal may be
