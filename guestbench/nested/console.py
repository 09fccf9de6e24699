"""The level-1 guest's console log, relayed line by line while the guest runs.

qemu writes the log (libvirt's `<serial type='file'>`) and the guest decides what goes in it, so nothing here
grows with it: each read takes at most READ_MAX new bytes from where the last one ended, a line is cut at
LINE_MAX bytes (saying so, once), and only the last TAIL lines are kept, for "its console last said". The file
itself is bounded by the caller (guestbench.nested.guest destroys the guest once it passes LOG_MAX).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from collections.abc import Callable

READ_MAX = 256 * 2**10  # new bytes relayed per read: half a second's worth of a busy boot, many times over
DRAIN_MAX = 2**20  # relayed once the guest is gone: its last words; what comes before them is passed over
LINE_MAX = 4096  # bytes of a line shown; the rest of a longer one (a guest writing without newlines) is dropped
TAIL = 20  # lines kept for the messages that say what the console last said
LOG_MAX = 64 * 2**20  # the log's size past which the guest is destroyed (a whole nested run writes a few KiB)


class ConsoleLog:
    """Reads `path` as it grows and passes each new non-blank line to `on_line`; `watched` turns true when a
    line is `watch` (stripped)."""

    def __init__(self, path: Path, on_line: Callable[[str], None], watch: str | None = None) -> None:
        self.path = path
        self.on_line = on_line
        self.watch = watch
        self.watched = False
        self.offset = 0  # bytes of the file read so far
        self.tail: deque[str] = deque(maxlen=TAIL)
        self._line = bytearray()  # the line being read, at most LINE_MAX bytes
        self._cut = False  # it passed LINE_MAX and was shown: the rest of it, up to its newline, is dropped

    def size(self) -> int:
        """The log's size now (0 before qemu made it)."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def read(self, limit: int = READ_MAX) -> bool:
        """Relay the lines completed by the next `limit` new bytes at most; whether there were any."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(limit)
        except FileNotFoundError:
            return False
        self.offset += len(data)
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._add(data[start:end])
            if not self._cut:
                self._pass(bytes(self._line))
            self._line.clear()
            self._cut = False
            start = end + 1
        self._add(data[start:])
        return bool(data)

    def drain(self) -> None:
        """The guest is gone: relay what it wrote since the last read, up to DRAIN_MAX bytes of its end (and
        its last line, even without a newline), saying how much was passed over."""
        skipped = self.size() - self.offset - DRAIN_MAX
        if skipped > 0:
            self.offset += skipped
            self._line.clear()
            self._cut = True  # a line's middle: dropped up to its newline
            self._pass(f"guestbench: {skipped} bytes of the level-1 guest's console not shown".encode())
        for _ in range(DRAIN_MAX // READ_MAX + 1):  # bounded even if something still wrote to it
            if not self.read():
                break
        if self._line and not self._cut:
            self._pass(bytes(self._line))
        self._line.clear()

    def last(self, n: int) -> list[str]:
        return list(self.tail)[-n:]

    def say(self, line: str) -> None:
        """A line of guestbench's own about the guest, kept and relayed as the guest's are."""
        self.tail.append(line)
        self.on_line(line)

    def _add(self, chunk: bytes) -> None:
        if self._cut:
            return
        room = LINE_MAX - len(self._line)
        self._line += chunk[:room]
        if len(chunk) > room:  # shown now, cut: a guest that never writes a newline still shows something
            self._cut = True
            self._pass(bytes(self._line), f" [... cut: the line is longer than {LINE_MAX} bytes]")

    def _pass(self, raw: bytes, note: str = "") -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line.strip():
            return
        if self.watch is not None and line.strip() == self.watch:
            self.watched = True
        line += note
        self.tail.append(line)
        self.on_line(line)
