"""A virtio-console device served over vhost-user, for User-Mode Linux's `virtio_uml` front end.

Why: UML 6.1's serial-line driver stops reading its host fd for good once the guest tty throttles, so
the libguestfs daemon channel cannot be a UML serial line. A virtio-console port has no tty layer (no
throttling) and shows up in the guest as `/dev/virtio-ports/<name>`, which is where guestfsd looks.

What UML 6.1's front end (arch/um/drivers/virtio_uml.c) does, and therefore what is served here:
- at probe: SET_OWNER, GET_FEATURES, then (bit 30 offered) GET/SET_PROTOCOL_FEATURES, our offer masked
  with REPLY_ACK | SLAVE_REQ | CONFIG | INBAND_NOTIFICATIONS, then SET_SLAVE_REQ_FD if SLAVE_REQ.
  * REPLY_ACK: every message without a reply of its own then carries NEED_REPLY and UML waits for a
    u64 status (non-zero -> "slave reports error: N", -EIO).
  * SLAVE_REQ must be offered: UML allocates the IRQ number that all the queues' call fds share only
    while setting up the slave channel; without it the call fds ask for IRQ 0 (the timer) and the
    driver fails with -EBUSY ("genirq: Flags mismatch irq 0", "Error -16 initializing vqs"). The
    slave fd must stay open: UML treats EOF on it as a broken connection.
  * CONFIG: GET_CONFIG reads the console config space, always from offset 0 with size offset+len;
    the reply must echo the same sizes.
  * INBAND_NOTIFICATIONS (time-travel mode) would replace the kick/call fds: not offered.
- SET_FEATURES carries the driver's features plus bit 30.
- find_vqs: SET_MEM_TABLE first. Its payload is UML's fixed struct with room for 2 regions (72 bytes)
  even when it says num=1: a back end that insists on size == 8 + num*32 rejects it (the Rust vhost
  crate does: "invalid message", acked as error 1, so the driver fails with "Error -5 initializing
  vqs"). Regions are guest-physical with user_addr == guest_addr, so ring addresses (SET_VRING_ADDR,
  "user" addresses) and descriptor addresses translate the same way.
- then per queue: SET_VRING_CALL (the write end of a pipe, not an eventfd), SET_VRING_NUM (256),
  SET_VRING_BASE (0), SET_VRING_ADDR; then per queue SET_VRING_KICK (an eventfd), SET_VRING_ENABLE 1.
- teardown: SET_VRING_ENABLE 0 for every queue, then GET_FEATURES as a barrier. Power-off tears down too
  (UML's exitcall unregisters the device), and before that the console driver takes back every transmit
  buffer not used yet (virtqueue_detach_unused_buf, which also rolls the avail index back): what a guest
  wrote just before powering off is lost unless it was served first. A guest's write(2) returns once its
  data is in the ring, so a guest must not power off before its peer has said that it has everything.

Speed: the guest driver returns at most one 4 KiB buffer per read(2), and a guest syscall costs tens
of microseconds under UML, so the guest reader is the bottleneck. What the server can spare the guest
is interrupts and kicks: VIRTIO_RING_F_EVENT_IDX lets it interrupt only when the guest has drained
everything it was given, and ask for a kick only after several buffers came back. (On a machine
that is itself a VM, UML's guest syscalls get several times cheaper when UML runs on one CPU.)
"""

from __future__ import annotations

import array
import mmap
import os
import select
import socket
import struct
import threading
import time

# vhost-user front-end requests
GET_FEATURES = 1
SET_FEATURES = 2
SET_OWNER = 3
RESET_OWNER = 4
SET_MEM_TABLE = 5
SET_VRING_NUM = 8
SET_VRING_ADDR = 9
SET_VRING_BASE = 10
GET_VRING_BASE = 11
SET_VRING_KICK = 12
SET_VRING_CALL = 13
SET_VRING_ERR = 14
GET_PROTOCOL_FEATURES = 15
SET_PROTOCOL_FEATURES = 16
GET_QUEUE_NUM = 17
SET_VRING_ENABLE = 18
SET_SLAVE_REQ_FD = 21
GET_CONFIG = 24
SET_CONFIG = 25

VERSION = 0x1
FLAG_REPLY = 0x4
FLAG_NEED_REPLY = 0x8
VRING_NOFD = 0x100

F_PROTOCOL_FEATURES = 1 << 30
PROTOCOL_F_REPLY_ACK = 1 << 3
PROTOCOL_F_SLAVE_REQ = 1 << 5
PROTOCOL_F_CONFIG = 1 << 9

# virtio
VIRTIO_F_VERSION_1 = 1 << 32
RING_F_EVENT_IDX = 1 << 29
CONSOLE_F_MULTIPORT = 1 << 1
DEVICE_FEATURES = VIRTIO_F_VERSION_1 | RING_F_EVENT_IDX | CONSOLE_F_MULTIPORT | F_PROTOCOL_FEATURES
DESC_F_NEXT = 1
DESC_F_WRITE = 2
AVAIL_F_NO_INTERRUPT = 1

# virtio-console control events
DEVICE_READY = 0
PORT_ADD = 1
PORT_READY = 3
PORT_OPEN = 6
PORT_NAME = 7

MAX_NR_PORTS = 2
PORT_ID = 1  # port 0 has console history in the driver; a named port at id 1 is a plain char device
NUM_QUEUES = 2 * (MAX_NR_PORTS + 1)
CTRL_RX, CTRL_TX = 2, 3
PORT_RX, PORT_TX = 2 + 2 * PORT_ID, 3 + 2 * PORT_ID

CHUNK = 256 * 1024  # bytes read from the peer at a time
OUT_LIMIT = 1024 * 1024  # stop taking guest tx buffers while this much is waiting for the peer
KICK_BATCH = 16  # when out of guest rx buffers, ask to be kicked after this many come back
POLL_S = 0.2  # how often `stop` is looked at (and lost notifications are made up for)
DRAIN_S = 5.0  # once UML has gone, how long what it wrote may still wait for the peer to read it
CALL = struct.pack("<Q", 1)

_HDR = struct.Struct("<III")
_U64 = struct.Struct("<Q")
_STATE = struct.Struct("<II")
_DESC = struct.Struct("<QIHH")
_U16 = struct.Struct("<H")
_USED = struct.Struct("<II")
_CTRL = struct.Struct("<IHH")


_FENCE = threading.Lock()


def _fence() -> None:
    """A full memory barrier between a store to a ring and the load that follows it.

    The event-index handshake is store-then-load on both sides; x86 may reorder those. Taking a lock
    runs a locked instruction, which x86 orders as a full barrier (UML exists only on x86).
    """
    _FENCE.acquire()
    _FENCE.release()


def _need_event(event: int, new: int, old: int) -> bool:
    """virtio's vring_need_event: did the index pass `event` when it moved from `old` to `new`?"""
    return (new - event - 1) & 0xFFFF < (new - old) & 0xFFFF


class _Region:
    """One shared-memory region of guest RAM, mapped once."""

    __slots__ = ("guest", "user", "size", "mm", "view", "delta")

    def __init__(self, guest: int, size: int, user: int, offset: int, fd: int) -> None:
        aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
        self.guest, self.user, self.size = guest, user, size
        self.delta = offset - aligned  # where `guest` sits inside the mapping
        self.mm = mmap.mmap(fd, size + self.delta, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                            offset=aligned)
        self.view = memoryview(self.mm)

    def close(self) -> None:
        self.view.release()
        try:
            self.mm.close()
        except BufferError:  # a slice is still alive somewhere: the GC unmaps it later
            pass


class _Queue:
    """A split virtqueue: raw addresses from the front end, offsets into one region once translated."""

    __slots__ = ("index", "num", "addrs", "mm", "desc", "avail", "used", "used_event", "avail_event",
                 "last_avail", "used_idx", "signalled", "nudged", "kick", "call", "enabled")

    def __init__(self, index: int) -> None:
        self.index = index
        self.num = 256
        self.addrs: tuple[int, int, int] | None = None  # desc, avail, used (front-end addresses)
        self.mm: memoryview | None = None
        self.desc = self.avail = self.used = self.used_event = self.avail_event = 0
        self.last_avail = self.used_idx = 0
        self.signalled = 0  # used_idx when a call was last considered (event-index mode)
        self.nudged = -1  # the guest's used_event when a make-up call was last sent
        self.kick = self.call = -1
        self.enabled = False


class VhostConsole:
    """A virtio-console device with multiport and ONE named port, served over vhost-user to UML."""

    def __init__(self, socket_path: str, port_name: str, peer: socket.socket) -> None:
        """Listen on `socket_path` now, so that UML can be started (and connect) right after."""
        self.socket_path = socket_path
        self.port_name = port_name.encode()
        self.peer = peer
        self.stats: dict[str, int] = {"bytes_to_guest": 0, "bytes_from_guest": 0, "kicks": 0, "calls": 0}
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
        self._listener.bind(socket_path)
        self._listener.listen(1)
        self._conn: socket.socket | None = None
        self._ep = select.epoll()
        self._kick_of: dict[int, _Queue] = {}
        self._slave_fd = -1
        self._regions: list[_Region] = []
        self._queues = [_Queue(i) for i in range(NUM_QUEUES)]
        self._features = 0
        self._event_idx = False
        self._ctrl_out: list[bytes] = []  # control messages waiting for a guest control buffer
        self._guest_open = False
        self._inbuf = bytearray(CHUNK)
        self._in = memoryview(self._inbuf)
        self._in_pos = self._in_end = 0  # peer -> guest bytes not yet delivered: _in[_in_pos:_in_end]
        self._peer_eof = False  # nothing more will come from the peer
        self._peer_dead = False  # nothing more can go to the peer: guest bytes are dropped
        self._eof_sent = False  # the guest was told that the host end closed
        self._out = bytearray()  # guest -> peer bytes not yet sent
        self._closed = False

    # ---------------------------------------------------------------- public

    def serve(self, stop: threading.Event | None = None) -> None:
        """Accept UML, then relay until UML disconnects, the peer closes, or `stop` is set.

        When the peer closes, what it sent is still delivered, then the guest is told the host end
        closed (its reads return EOF), and serve returns once the guest closes the port: returning any
        earlier would make UML tear the device down and drop what the guest has not read yet.
        """
        stop = stop or threading.Event()
        try:
            while self._conn is None:
                if stop.is_set():
                    return
                r, _, _ = select.select([self._listener], [], [], POLL_S)
                if r:
                    self._conn, _ = self._listener.accept()
            self._loop(stop)
        finally:
            self.close()

    @property
    def connected(self) -> bool:
        """Whether UML has connected (a server still waiting for it ends only when told to stop)."""
        return self._conn is not None

    def close(self) -> None:
        """Release sockets, fds and mappings (serve does it on return; needed only if serve never ran)."""
        if self._closed:
            return
        self._closed = True
        for q in self._queues:
            for fd in (q.kick, q.call):
                if fd >= 0:
                    os.close(fd)
            q.kick = q.call = -1
            q.mm = None
        self._ep.close()
        if self._slave_fd >= 0:
            os.close(self._slave_fd)
            self._slave_fd = -1
        for r in self._regions:
            r.close()
        self._regions = []
        if self._conn is not None:
            self._conn.close()
        self._listener.close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass

    # ---------------------------------------------------------------- event loop

    def _loop(self, stop: threading.Event) -> None:
        assert self._conn is not None
        ep = self._ep
        conn_fd = self._conn.fileno()
        peer_fd = self.peer.fileno()
        if peer_fd < 0:
            return
        ep.register(conn_fd, select.EPOLLIN)
        peer_mask = 0
        while not stop.is_set():
            want = 0
            if self._in_pos == self._in_end and not self._peer_eof:
                want |= select.EPOLLIN
            if self._out and not self._peer_dead:
                want |= select.EPOLLOUT
            if want != peer_mask:
                try:
                    if peer_mask == 0:
                        ep.register(peer_fd, want)
                    elif want == 0:
                        ep.unregister(peer_fd)
                    else:
                        ep.modify(peer_fd, want)
                except OSError:  # the peer was closed under us
                    return
                peer_mask = want
            events = ep.poll(POLL_S)
            for fd, ev in events:
                if fd == conn_fd:
                    if not self._handle_message():
                        self._drain_out(stop)
                        return
                elif fd == peer_fd:
                    hup = ev & (select.EPOLLHUP | select.EPOLLERR)
                    if ev & select.EPOLLOUT or hup:
                        self._flush_out()
                    if ev & select.EPOLLIN or hup:
                        self._read_peer()
                elif fd in self._kick_of:
                    try:
                        self.stats["kicks"] += _U64.unpack(os.read(fd, 8))[0]
                    except BlockingIOError:
                        pass
            if not self._pump():
                return
            if not events:
                self._nudge()

    def _read_peer(self) -> None:
        """Refill the host->guest buffer from the peer, if it is empty."""
        if self._in_pos != self._in_end or self._peer_eof:
            return
        try:
            n = self.peer.recv_into(self._in, CHUNK, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n == 0:
            self._peer_eof = True
        self._in_pos, self._in_end = 0, n

    def _flush_out(self) -> None:
        """Send what the guest wrote to the peer, without blocking (dropped once the peer is gone)."""
        while self._out and not self._peer_dead:
            try:
                n = self.peer.send(self._out, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._peer_dead = self._peer_eof = True
                break
            del self._out[:n]
        if self._peer_dead:
            self._out.clear()

    def _drain_out(self, stop: threading.Event) -> None:
        """UML has gone (a guest may power off right after a write): what the server already took from the guest
        still goes to the peer, for as long as the peer reads it within DRAIN_S."""
        deadline = time.monotonic() + DRAIN_S
        while self._out and not self._peer_dead and not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            select.select([], [self.peer], [], min(left, POLL_S))
            self._flush_out()

    def _pump(self) -> bool:
        """Move everything that can move now, on every queue; signal each queue at most once."""
        qs = self._queues
        ctrl_tx = qs[CTRL_TX]
        if self._ready(ctrl_tx):
            self._handle_ctrl_tx(ctrl_tx)
        if self._ctrl_out and self._ready(qs[CTRL_RX]):
            self._flush_ctrl(qs[CTRL_RX])
        tx = qs[PORT_TX]
        if self._ready(tx):
            while len(self._out) < OUT_LIMIT and self._drain_tx(tx):
                self._flush_out()
            self._flush_out()
        rx = qs[PORT_RX]
        if self._guest_open and self._ready(rx):
            self._pump_rx(rx)
        if self._peer_eof and self._in_pos == self._in_end and not self._eof_sent:
            # everything the peer sent has reached the guest: its reads return EOF once it has read it
            self._eof_sent = True
            self._ctrl_out.append(_CTRL.pack(PORT_ID, PORT_OPEN, 0))
            if self._ready(qs[CTRL_RX]):
                self._flush_ctrl(qs[CTRL_RX])
        # done once the guest knows and has closed the port (or never opened it)
        return not (self._eof_sent and not self._ctrl_out and not self._guest_open)

    def _pump_rx(self, rx: _Queue) -> None:
        """Host -> guest: fill guest buffers while there is data, then choose when to be kicked."""
        moved = rearmed = False
        while True:
            if self._in_pos == self._in_end:
                self._read_peer()
                if self._in_pos == self._in_end:
                    break
            before = self._in_pos
            self._fill_rx(rx)
            if self._in_pos != before:
                moved = True
                continue
            # out of guest buffers with data pending: be kicked once a batch of them has come back
            if not self._event_idx or rearmed:
                break
            assert rx.mm is not None
            pending = (rx.used_idx - _U16.unpack_from(rx.mm, rx.used_event)[0]) & 0xFFFF
            batch = max(1, min(KICK_BATCH, pending // 2))
            self._kick_me_at(rx, rx.last_avail + batch - 1)
            rearmed = True  # and look once more, in case buffers came back meanwhile
        if moved:
            self._notify(rx)
        if self._event_idx and self._in_pos == self._in_end:
            self._kick_me_at(rx, rx.last_avail + 0x8000)  # nothing to send: no kicks wanted

    @staticmethod
    def _ready(q: _Queue) -> bool:
        return q.enabled and q.mm is not None and q.kick >= 0

    def _kick_me_at(self, q: _Queue, index: int) -> None:
        """Event-index mode: ask the guest to kick when its avail index passes `index`."""
        assert q.mm is not None
        _U16.pack_into(q.mm, q.avail_event, index & 0xFFFF)
        _fence()

    def _notify(self, q: _Queue) -> None:
        """Signal the call fd after used entries were added, unless the guest asked not to be."""
        mm = q.mm
        if q.call < 0 or mm is None:
            return
        if self._event_idx:
            _fence()
            old, q.signalled = q.signalled, q.used_idx
            if not _need_event(_U16.unpack_from(mm, q.used_event)[0], q.used_idx, old):
                return
        elif _U16.unpack_from(mm, q.avail)[0] & AVAIL_F_NO_INTERRUPT:
            return
        self._call(q)

    def _call(self, q: _Queue) -> None:
        try:
            os.write(q.call, CALL)
        except BlockingIOError:
            pass  # the pipe is full: UML has an interrupt pending anyway
        except BrokenPipeError:  # UML has gone, and the end of its connection ends the loop, not a traceback here
            return
        self.stats["calls"] += 1

    def _nudge(self) -> None:
        """On an idle tick, make up for a call the event-index race could have cost (once per stall)."""
        if not self._event_idx:
            return
        for q in (self._queues[PORT_RX], self._queues[PORT_TX], self._queues[CTRL_RX]):  # the ones waited on
            if q.mm is None or q.call < 0:
                continue
            event = _U16.unpack_from(q.mm, q.used_event)[0]
            if event != q.used_idx and event != q.nudged:
                q.nudged = event
                self._call(q)

    # ---------------------------------------------------------------- virtqueues

    def _xlate(self, addr: int, length: int) -> tuple[memoryview, int]:
        for r in self._regions:
            off = addr - r.guest
            if 0 <= off and off + length <= r.size:
                return r.view, off + r.delta
        raise ValueError(f"guest address {addr:#x}+{length} is outside the memory table")

    def _fill_rx(self, q: _Queue) -> None:
        """Copy pending peer bytes into the guest's receive buffers (host -> guest)."""
        mm = q.mm
        assert mm is not None
        num, desc, avail, used = q.num, q.desc, q.avail, q.used
        src, pos, end = self._in, self._in_pos, self._in_end
        last, used_idx = q.last_avail, q.used_idx
        avail_idx = _U16.unpack_from(mm, avail + 2)[0]
        regions = self._regions
        r0 = regions[0]
        g0, s0, v0, d0 = r0.guest, r0.size, r0.view, r0.delta
        one = len(regions) == 1
        while pos < end:
            if last == avail_idx:
                avail_idx = _U16.unpack_from(mm, avail + 2)[0]
                if last == avail_idx:
                    break
            head = _U16.unpack_from(mm, avail + 4 + 2 * (last % num))[0]
            i, written = head, 0
            while True:
                addr, ln, flags, nxt = _DESC.unpack_from(mm, desc + 16 * i)
                if flags & DESC_F_WRITE:
                    n = min(ln, end - pos)
                    off = addr - g0
                    if one and 0 <= off and off + n <= s0:
                        v0[off + d0:off + d0 + n] = src[pos:pos + n]
                    else:
                        view, o = self._xlate(addr, n)
                        view[o:o + n] = src[pos:pos + n]
                    pos += n
                    written += n
                if not flags & DESC_F_NEXT or pos >= end:
                    break
                i = nxt
            _USED.pack_into(mm, used + 4 + 8 * (used_idx % num), head, written)
            used_idx = (used_idx + 1) & 0xFFFF
            last = (last + 1) & 0xFFFF
        _U16.pack_into(mm, used + 2, used_idx)  # after the elements: the guest reads idx first
        self.stats["bytes_to_guest"] += pos - self._in_pos
        self._in_pos = pos
        q.last_avail, q.used_idx = last, used_idx

    def _pop_chains(self, q: _Queue, limit: int) -> list[tuple[int, list[memoryview]]]:
        """Take up to `limit` available chains: (head, readable buffers). Caller marks them used."""
        mm = q.mm
        assert mm is not None
        out: list[tuple[int, list[memoryview]]] = []
        for again in (False, True):
            avail_idx = _U16.unpack_from(mm, q.avail + 2)[0]
            while q.last_avail != avail_idx and len(out) < limit:
                head = _U16.unpack_from(mm, q.avail + 4 + 2 * (q.last_avail % q.num))[0]
                bufs: list[memoryview] = []
                i = head
                while True:
                    addr, ln, flags, nxt = _DESC.unpack_from(mm, q.desc + 16 * i)
                    if not flags & DESC_F_WRITE:
                        view, o = self._xlate(addr, ln)
                        bufs.append(view[o:o + ln])
                    if not flags & DESC_F_NEXT:
                        break
                    i = nxt
                out.append((head, bufs))
                q.last_avail = (q.last_avail + 1) & 0xFFFF
            if again or len(out) >= limit or not self._event_idx:
                break
            self._kick_me_at(q, q.last_avail)  # kick on the next one; then look once more
        return out

    def _push_used(self, q: _Queue, entries: list[tuple[int, int]]) -> None:
        mm = q.mm
        assert mm is not None
        for head, ln in entries:
            _USED.pack_into(mm, q.used + 4 + 8 * (q.used_idx % q.num), head, ln)
            q.used_idx = (q.used_idx + 1) & 0xFFFF
        _U16.pack_into(mm, q.used + 2, q.used_idx)  # after the elements: the guest reads idx first
        self._notify(q)

    def _drain_tx(self, q: _Queue) -> bool:
        """Take what the guest wrote (guest -> host) into the out buffer; False if nothing was there."""
        chains = self._pop_chains(q, 64)
        if not chains:
            return False
        out = self._out
        n0 = len(out)
        for _, bufs in chains:
            for b in bufs:
                out += b
        self.stats["bytes_from_guest"] += len(out) - n0
        self._push_used(q, [(head, 0) for head, _ in chains])
        return True

    def _handle_ctrl_tx(self, q: _Queue) -> None:
        """The driver's control messages: answer DEVICE_READY and PORT_READY, track PORT_OPEN."""
        chains = self._pop_chains(q, q.num)
        if not chains:
            return
        for _, bufs in chains:
            data = b"".join(bytes(b) for b in bufs)
            if len(data) < _CTRL.size:
                continue
            pid, event, value = _CTRL.unpack_from(data)
            if event == DEVICE_READY and value == 1:
                self._ctrl_out.append(_CTRL.pack(PORT_ID, PORT_ADD, 0))
            elif event == PORT_READY and pid == PORT_ID and value == 1:
                self._ctrl_out.append(_CTRL.pack(PORT_ID, PORT_NAME, 1) + self.port_name)
                self._ctrl_out.append(_CTRL.pack(PORT_ID, PORT_OPEN, 1))
            elif event == PORT_OPEN and pid == PORT_ID:
                self._guest_open = bool(value)
        self._push_used(q, [(head, 0) for head, _ in chains])

    def _flush_ctrl(self, q: _Queue) -> None:
        """Put queued control messages into the driver's control receive buffers."""
        mm = q.mm
        assert mm is not None
        done = []
        avail_idx = _U16.unpack_from(mm, q.avail + 2)[0]
        while self._ctrl_out and q.last_avail != avail_idx:
            msg = self._ctrl_out.pop(0)
            head = _U16.unpack_from(mm, q.avail + 4 + 2 * (q.last_avail % q.num))[0]
            addr, ln, _, _ = _DESC.unpack_from(mm, q.desc + 16 * head)
            n = min(ln, len(msg))
            view, o = self._xlate(addr, n)
            view[o:o + n] = msg[:n]
            done.append((head, n))
            q.last_avail = (q.last_avail + 1) & 0xFFFF
        if done:
            self._push_used(q, done)
        if self._event_idx:
            self._kick_me_at(q, q.last_avail)

    # ---------------------------------------------------------------- vhost-user messages

    def _recv_exact(self, n: int) -> bytes:
        assert self._conn is not None
        data = b""
        while len(data) < n:
            chunk = self._conn.recv(n - len(data))
            if not chunk:
                raise ConnectionResetError("vhost-user front end closed the connection")
            data += chunk
        return data

    def _handle_message(self) -> bool:
        """Read and answer one front-end message; False when UML has gone."""
        conn = self._conn
        assert conn is not None
        fds = array.array("i")
        try:
            data, anc, _, _ = conn.recvmsg(_HDR.size, socket.CMSG_SPACE(8 * fds.itemsize))
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(raw[:len(raw) - len(raw) % fds.itemsize])
            if not data:
                raise ConnectionResetError("vhost-user front end closed the connection")
            if len(data) < _HDR.size:
                data += self._recv_exact(_HDR.size - len(data))
            req, flags, size = _HDR.unpack(data)
            payload = self._recv_exact(size) if size else b""
        except OSError:
            for fd in fds:
                os.close(fd)
            return False
        fd_list = list(fds)
        try:
            reply, status = self._dispatch(req, payload, fd_list)
        except (struct.error, ValueError, OSError):  # a malformed request fails alone
            reply, status = None, 1
        finally:
            for fd in fd_list:  # whatever _dispatch did not keep
                os.close(fd)
        try:
            if reply is not None:
                conn.sendall(_HDR.pack(req, VERSION | FLAG_REPLY, len(reply)) + reply)
            elif flags & FLAG_NEED_REPLY:
                conn.sendall(_HDR.pack(req, VERSION | FLAG_REPLY, 8) + _U64.pack(status))
        except OSError:
            return False
        return True

    def _dispatch(self, req: int, p: bytes, fds: list[int]) -> tuple[bytes | None, int]:
        """Act on one request: (reply payload or None, status for a REPLY_ACK). Keeps fds it pops."""
        if req == GET_FEATURES:
            return _U64.pack(DEVICE_FEATURES), 0
        if req == GET_PROTOCOL_FEATURES:
            return _U64.pack(PROTOCOL_F_REPLY_ACK | PROTOCOL_F_SLAVE_REQ | PROTOCOL_F_CONFIG), 0
        if req == GET_QUEUE_NUM:
            return _U64.pack(NUM_QUEUES), 0
        if req == GET_CONFIG:
            offset, size, cflags = struct.unpack_from("<III", p)
            space = struct.pack("<HHII", 0, 0, MAX_NR_PORTS, 0)  # cols, rows, max_nr_ports, emerg_wr
            return struct.pack("<III", offset, size, cflags) + space[offset:offset + size].ljust(size, b"\0"), 0
        if req == SET_FEATURES:
            self._features = _U64.unpack_from(p)[0]
            self._event_idx = bool(self._features & RING_F_EVENT_IDX)
            return None, 0
        if req in (SET_OWNER, RESET_OWNER, SET_PROTOCOL_FEATURES, SET_CONFIG):
            return None, 0
        if req == SET_SLAVE_REQ_FD:
            if fds:
                if self._slave_fd >= 0:
                    os.close(self._slave_fd)
                self._slave_fd = fds.pop(0)  # never written to, but kept open (see the module doc)
            return None, 0
        if req == SET_MEM_TABLE:
            return None, self._set_mem_table(p, fds)
        if req in (SET_VRING_NUM, SET_VRING_BASE, SET_VRING_ENABLE, GET_VRING_BASE):
            index, num = _STATE.unpack_from(p)
            if index >= NUM_QUEUES:
                return (_STATE.pack(index, 0) if req == GET_VRING_BASE else None), 1
            q = self._queues[index]
            if req == SET_VRING_NUM:
                q.num = num
            elif req == SET_VRING_BASE:
                q.last_avail = q.used_idx = q.signalled = num & 0xFFFF
            elif req == SET_VRING_ENABLE:
                q.enabled = bool(num)
            else:  # GET_VRING_BASE stops the ring
                q.enabled = False
                return _STATE.pack(index, q.last_avail), 0
            return None, 0
        if req == SET_VRING_ADDR:
            index, _aflags, desc, used, avail, _log = struct.unpack_from("<IIQQQQ", p)
            if index >= NUM_QUEUES:
                return None, 1
            q = self._queues[index]
            q.addrs = (desc, avail, used)
            return None, 0 if self._map_queue(q) else 1
        if req in (SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR):
            value = _U64.unpack_from(p)[0]
            index = value & 0xFF
            if index >= NUM_QUEUES or value & VRING_NOFD or not fds:
                return None, 1  # polling mode (no fd) is not supported
            fd = fds.pop(0)
            q = self._queues[index]
            if req == SET_VRING_ERR:
                os.close(fd)
            elif req == SET_VRING_CALL:
                if q.call >= 0:
                    os.close(q.call)
                os.set_blocking(fd, False)  # a pipe whose reader is UML: never stall on a full pipe
                q.call = fd
            else:
                if q.kick >= 0:
                    self._ep.unregister(q.kick)
                    del self._kick_of[q.kick]
                    os.close(q.kick)
                q.kick = fd
                self._kick_of[fd] = q
                self._ep.register(fd, select.EPOLLIN)
                if not self._features & F_PROTOCOL_FEATURES:
                    q.enabled = True  # without protocol features a ring starts once it is kicked
            return None, 0
        return None, 1

    def _set_mem_table(self, p: bytes, fds: list[int]) -> int:
        num = struct.unpack_from("<I", p)[0]
        # UML sends its fixed 2-slot struct: accept any payload that holds `num` regions
        if num == 0 or len(p) < 8 + 32 * num or len(fds) < num:
            return 1
        new = []
        try:
            for k in range(num):
                guest, size, user, offset = struct.unpack_from("<QQQQ", p, 8 + 32 * k)
                new.append(_Region(guest, size, user, offset, fds[k]))
        except (OSError, ValueError):
            for r in new:
                r.close()
            return 1
        for fd in fds[:num]:
            os.close(fd)  # the mappings stay valid without them
        del fds[:num]
        old, self._regions = self._regions, new
        for q in self._queues:
            q.mm = None
            if q.addrs is not None:
                self._map_queue(q)
        for r in old:
            r.close()
        return 0

    def _map_queue(self, q: _Queue) -> bool:
        """Translate a ring's front-end addresses (UML: user_addr == guest-physical) into one mapping."""
        assert q.addrs is not None
        desc, avail, used = q.addrs
        spans = ((desc, 16 * q.num), (avail, 6 + 2 * q.num), (used, 6 + 8 * q.num))
        for r in self._regions:
            base = r.user
            if all(base <= a and a + n <= base + r.size for a, n in spans):
                q.mm = r.view
                q.desc, q.avail, q.used = (a - base + r.delta for a in (desc, avail, used))
                q.used_event = q.avail + 4 + 2 * q.num  # avail ring's trailing field
                q.avail_event = q.used + 4 + 8 * q.num  # used ring's trailing field
                return True
        q.mm = None
        return False


__all__ = ["VhostConsole"]
