"""durability: does data the appliance wrote and fsynced survive a power cut of its host?

A power cut is simulated with a disk that has a volatile write cache, like a real drive's: the image is
served by nbdkit, whose writeback cache keeps writes from the image until its client flushes
(guestbench.storage.backing, `volatile`); a hypervisor opens it as a plain file (nbdfuse), or over NBD where it
cannot be handed a FUSE file (libvirt's qemu). Each trial is one fresh appliance: it writes
`size` bytes of a pattern unique to the trial to the disk and fsyncs (dd conv=fsync: the same block-layer
flush a filesystem's fsync ends in), the disk's cache and then the hypervisor are killed at once (the disk
first: a dying hypervisor's last close of the image would flush it, which no real power cut does), and the
host reads the image: the pattern is all there (honoured), absent (lost) or partly there (partial). The dd's
rate is kept beside it: a write figure means nothing without knowing whether it was durable (E1).
"""

from __future__ import annotations

import hashlib
from typing import Any

from guestbench.measurements.base import CACHE, CellContext, Measurement, size_param
from guestbench.storage import guest as guest_storage
from guestbench.workloads import Metric

OFFSET = 1 << 20  # past anything a partition table or a filesystem probe would write


def pattern(token: str, size: int) -> bytes:
    """The bytes a trial writes: `token` and a newline, repeated (what `yes TOKEN | head -c size` prints)."""
    line = (token + "\n").encode()
    return (line * (size // len(line) + 1))[:size]


def verdict(image: bytes, token: str, size: int) -> str:
    """What the image holds at OFFSET after the power cut: "honoured", "lost" or "partial"."""
    want = pattern(token, size)
    got = image[:size]
    if got == want:
        return "honoured"
    block = 4096  # how much of it arrived, by block: a torn write shows as partial
    same = sum(1 for i in range(0, size, block) if got[i:i + block] == want[i:i + block])
    return "lost" if same == 0 else "partial"


def token_for(workdir: str, trial: int) -> str:
    """A token no earlier trial or run could have left on the disk."""
    return "guestbench-durability-" + hashlib.sha256(f"{workdir}:{trial}".encode()).hexdigest()[:24]


class Durability(Measurement):
    name = "durability"
    summary = "write and fsync inside the appliance, cut the power at once, check the image on the host"
    timed = ("dd of size bytes of a pattern to the raw disk with conv=fsync (the write and its flush) inside the "
             "appliance; then the hypervisor and the disk's volatile write cache are killed and the host checks "
             "whether the image holds the data (honoured / lost / partial per trial)")
    params = (size_param("size", "16MiB", "bytes written and fsynced per trial"),
              size_param("disk_size", "256MiB", "size of the disk image"), CACHE)
    moves_bytes = True
    kills_hypervisor = True

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        if OFFSET + params["size"] > params["disk_size"]:
            return [("size", "does not fit the disk after its first MiB; allowed: at most disk_size - 1MiB")]
        return []

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        return (Metric("write_bw", "MB/s", True, "dd write with conv=fsync (MB = 10^6 bytes)"),
                Metric("durable", "fraction", True, "trials whose data survived the power cut (1 = all)"),
                Metric("host_writes", "requests", False, "write requests that reached the disk's server"),
                Metric("host_flushes", "requests", False, "flush requests that reached the disk's server"))

    # ---- worker side ----
    def add_drives(self, g: Any, ctx: CellContext) -> None:
        from guestbench.storage.backing import Drive

        (d,) = ctx.drives
        g.add_drive(**Drive.from_dict(d).add_drive_kwargs(), cachemode=ctx.params["cache"])

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        import time

        size, token = ctx.params["size"], ctx.params["token"]
        # dd's own exit status and byte count decide: a failed write must not pass for a lost one
        # The daemon knows which disk is ours (it leaves out the appliance's root, whatever the kernel named
        # it); the shell needs the kernel's name for it (/dev/ubda under UML). Writing to the wrong device
        # would hit the appliance itself, so its size is checked too.
        ours = g.list_devices()[0]
        if g.blockdev_getsize64(ours) != ctx.params["disk_size"]:
            raise RuntimeError(f"{ours} is not the {ctx.params['disk_size']}-byte disk this trial added")
        dev = guest_storage.kernel_name(g, ours)
        cmd = (f"test -b {dev} || {{ echo '{dev} is no block device' >&2; exit 1; }}; "
               f"yes {token} | head -c {size} | dd of={dev} bs=64K iflag=fullblock oflag=seek_bytes "
               f"seek={OFFSET} conv=fsync,notrunc 2>/tmp/dd.err; rc=$?; "
               "while IFS= read -r line; do echo \"$line\"; done </tmp/dd.err; exit $rc")
        t0 = time.perf_counter()
        out = str(g.debug("sh", [cmd]))
        elapsed = time.perf_counter() - t0
        if f"{size} bytes" not in out:
            raise RuntimeError(f"dd did not write {size} bytes: {' '.join(out.split())[-300:]}")
        return {"write_bw": size / elapsed / 1e6}
