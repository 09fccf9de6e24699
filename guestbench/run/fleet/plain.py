"""The coordinator loads nothing from Dask but msgpack's plain values while it speaks to a fleet.

Dask's protocol carries objects beside a message's msgpack: a `__Serialized__` part (its frames possibly
compressed, its loader named by the sender) and a `__Pickled__` one. Dask's client loads both as it reads a
message, before any handler sees it: inflating a compressed part in full (a 407 KB frame became 400 MB), then
unpickling or decoding it. A fleet host's message reaches the client through the scheduler with such parts as the
host made them; one that fails to load stops the client reading the scheduler for good, and every host with it.
guestbench needs none of them (a host's messages are sealed bytes, guestbench.run.fleet.seal; no task result is
fetched), so while `only()` is in force every such part is left as WITHHELD, unread: its frames are neither
inflated nor decoded, and one host's message can no longer cost the run the others. Patches
distributed.protocol.loads, which Dask's comms call for every message read (private; checked on entry)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import Any
from collections.abc import Iterator

from guestbench.run.fleet.task import TOPIC_PREFIX
from guestbench.util.errors import UserError


class Withheld(str):
    """A part of a message the coordinator does not load (a serialized object or a pickle). A string, so that
    where Dask's client expects an error it makes an Exception of it (a task that failed still ends)."""


WITHHELD = Withheld("withheld by guestbench (an object Dask serialized or pickled)")
# What an event on a topic no fleet run uses becomes: a message Dask's client handles by doing nothing (it cancels
# the futures of no keys). An event on an unknown topic would make the client unsubscribe and log a traceback.
NOTHING = {"op": "cancelled-keys", "keys": ()}
TEXT_MAX = 2000  # characters of an error's text kept
_lock = threading.Lock()
_state: dict[str, Any] = {"depth": 0, "base": None, "kept": False}


def _plain(obj: dict[Any, Any]) -> Any:
    """msgpack's hook for each map it reads: Dask's markers of objects become WITHHELD, a set of plain values a
    set. And what Dask's client would still load or print from a worker, without asking: a result's pickled type
    (`key-in-memory`) is dropped, an error's exception and traceback are its text only (task-erred reports,
    error replies), and an event on any topic but a fleet run's (Dask's own `print` and `warn` among them: the
    client subscribes to both as it starts) becomes NOTHING."""
    if "__Serialized__" in obj or "__Pickled__" in obj or "__Enum__" in obj:
        return WITHHELD
    if "__Set__" in obj:
        try:
            return set(obj.get("as-list") or ())
        except TypeError:  # an unhashable member: no set Dask makes
            return WITHHELD
    op = obj.get("op")
    if op == "event" and not (isinstance(obj.get("topic"), str) and obj["topic"].startswith(TOPIC_PREFIX)):
        return dict(NOTHING)
    if op == "key-in-memory" and "type" in obj:
        return {**obj, "type": None}
    if "exception" in obj or "traceback" in obj:
        text = obj.get("exception_text")
        return {**obj, "exception": Withheld(text[:TEXT_MAX]) if isinstance(text, str) and text else WITHHELD,
                "traceback": None}
    return obj


def loads(frames: Any, deserialize: bool = True, deserializers: Any = None) -> Any:
    """distributed.protocol.loads for the coordinator: the message's own msgpack frame only."""
    import msgpack

    return msgpack.loads(frames[0], object_hook=_plain, use_list=False, strict_map_key=False, raw=False)


def _check() -> None:
    """Dask's comms load a message through this module's `loads` now, or the fleet run does not start: a Dask whose
    internals moved would otherwise load what hosts send (fail closed)."""
    import distributed
    from distributed.comm.utils import from_frames
    from distributed.protocol import Serialize, ToPickle, dumps

    frames = dumps({"s": Serialize(b"x"), "p": ToPickle(1), "v": 1})
    got = asyncio.run(from_frames(frames, deserialize=True, allow_offload=False))
    if not (isinstance(got, dict) and got.get("s") is WITHHELD and got.get("p") is WITHHELD and got.get("v") == 1):
        raise UserError(f"this Dask (distributed {distributed.__version__}) loads messages where guestbench cannot "
                        "withhold what fleet hosts send; the fleet needs the distributed release setup.cfg names",
                        source="installation", key="distributed")


def keep() -> None:
    """Leave `loads` in place for the rest of this process: a Dask client that did not close may read on."""
    with _lock:
        _state["kept"] = True


@contextmanager
def only() -> Iterator[None]:
    """While inside (and after, once `keep` was called), every message this process reads from Dask is loaded by
    `loads` (every thread)."""
    from distributed import protocol

    with _lock:
        if _state["depth"] == 0:
            _state["base"] = protocol.loads
            protocol.loads = loads
        _state["depth"] += 1
    try:
        _check()
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and not _state["kept"]:
                protocol.loads = _state["base"]
