"""What a fleet host sends the coordinator, bound to that host: every message (each results snapshot, and the
final one with the child's exit status) is compressed JSON, numbered, and sealed with an HMAC under a key the
coordinator gave that host alone in its task. The coordinator believes a message's `host` only when that host's
key seals it: a message sealed with one host's key that names another is that host's fault (its placement fails
saying why); one no key of the run seals is dropped, and so are replays (a number no newer than the newest
taken from that host, or another worker's copy of a host's message).

The bytes are parsed here, by the bounded parser every untrusted JSON goes through (results.limits): nothing a
host sends is unpickled or handed over as Python objects."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

from guestbench.results import limits
from guestbench.util.errors import UserError


def new_key() -> str:
    return secrets.token_hex(32)


def pack(doc: dict[str, Any]) -> bytes:
    """A body as it crosses Dask: compressed JSON. JSON, because Dask's msgpack hands lists back as tuples;
    compressed (about 10:1), because the scheduler keeps each run's last events (1,000 by default) in memory."""
    return zlib.compress(json.dumps(doc).encode(), 6)


def read(data: Any) -> dict[str, Any]:
    """The body `pack` made, or a UserError saying why not: inflated to at most a results file's size cap and
    parsed as any untrusted JSON is (results.limits)."""
    if not isinstance(data, bytes):
        raise UserError("not compressed JSON bytes")
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(data, limits.MAX_BYTES)
    except zlib.error as e:
        raise UserError(f"not compressed JSON ({e})") from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise UserError(f"larger than {limits.MAX_BYTES:,} bytes inflated, or cut short")
    doc = limits.loads(raw, "JSON", "a guestbench results file")
    if not isinstance(doc, dict):
        raise UserError("not a JSON object")
    return doc


def _mac(key: str, host: str, seq: int, data: bytes) -> str:
    return hmac.new(bytes.fromhex(key), f"{host}\0{seq}\0".encode() + data, hashlib.sha256).hexdigest()


def seal(key: str, host: str, seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """The event message (msgpack-able) carrying `body` for host `host`, number `seq`."""
    data = pack(body)
    return {"host": host, "seq": seq, "data": data, "mac": _mac(key, host, seq, data)}


MAX_SEALED = limits.MAX_BYTES + 2**20
"""The most compressed bytes a message may carry: a results file's cap, incompressible (zlib adds ~0.03 %). Longer
is dropped before any key is tried: checking a seal costs a pass over the bytes per key."""


@dataclass
class Opened:
    host: str  # who sent it: the host whose key seals it
    seq: int
    body: dict[str, Any] | None  # None: refused, and `why` says why
    why: str | None = None


@dataclass
class Sealed:
    """A message whose seal was checked, not yet inflated or parsed (that is the costly part: done only for the
    message the coordinator will take, after replays and hosts already failed are dropped)."""

    host: str  # who sent it: the host whose key seals it
    seq: int
    data: bytes
    why: str | None = None  # set: the host sent what it may not (its body is never read)

    def open(self) -> Opened:
        if self.why is not None:
            return Opened(self.host, self.seq, None, self.why)
        try:
            return Opened(self.host, self.seq, read(self.data))
        except UserError as e:
            return Opened(self.host, self.seq, None, f"its results were refused: {e}")


def identify(msg: Any, keys: dict[str, str], workers: dict[str, str]) -> Sealed | None:
    """Who sealed the message, checked against `keys` (host -> its key) and `workers` (host -> its worker's
    address); None when no host can be blamed for it (dropped). Only a key names the sender, and at most two are
    tried: the key of the host the message names, and that of the host whose worker Dask's scheduler stamped on it
    (a worker's event carries its address as `worker`; an event logged through a client carries whatever `worker`
    it was given, so a `worker` that is not the sealer's marks a replay, dropped, never a culprit)."""
    if not isinstance(msg, dict):
        return None
    claimed, seq, data, mac = msg.get("host"), msg.get("seq"), msg.get("data"), msg.get("mac")
    if not (isinstance(claimed, str) and type(seq) is int and isinstance(data, bytes) and isinstance(mac, str)):
        return None
    if len(data) > MAX_SEALED:
        return None
    stamp = msg.get("worker")
    tried = [claimed] if claimed in keys else []
    tried += [h for h, address in workers.items() if stamp is not None and address == stamp and h not in tried]
    sealer = next((h for h in tried if h in keys and hmac.compare_digest(_mac(keys[h], claimed, seq, data), mac)),
                  None)
    if sealer is None or msg.get("worker", workers.get(sealer)) != workers.get(sealer):
        return None
    if claimed != sealer:  # a name quoted only when it is one of the run's: a host's text is not printed
        other = f"host {claimed}" if claimed in keys else "a host not in this run"
        return Sealed(sealer, seq, b"", f"it sent results naming {other}, sealed with its own key")
    return Sealed(sealer, seq, data)


def open_message(msg: Any, keys: dict[str, str], workers: dict[str, str]) -> Opened | None:
    """The message a host sent, its seal checked (identify) and its body read; None when no host can be blamed
    for it (dropped)."""
    sealed = identify(msg, keys, workers)
    return None if sealed is None else sealed.open()
