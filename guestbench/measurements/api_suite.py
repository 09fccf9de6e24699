"""api-suite: E1's fifth row, "the C API test suite", as guestbench's own syscall-heavy libguestfs workload.

libguestfs's tests/c-api suite is not installed by any package, and the published figure timed it as a whole.
This is a fixed sequence of several hundred API calls in one launch, across the kinds of call that suite
exercises, on two scratch disks: partition tables, mkfs on several filesystems, LVM, mount and umount,
small-file create/read/stat/rename/delete, directories and links, tar-in/tar-out, checksums, find and grep,
extended attributes. Nearly every call is a small request over the daemon channel and a few system calls in
the appliance, so it weighs what E1 found decisive: the cost of a round trip and of a guest system call.
The sample is the whole sequence; the seconds of each kind and the number of calls are kept beside it.
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Callable

from guestbench.measurements.base import CellContext, Measurement, int_param
from guestbench.workloads import Metric

DISK_MIB = 256
FILESYSTEMS = ("ext2", "ext3", "ext4")  # on every backend's appliance (UML's kernel has no xfs or btrfs)
KINDS = ("partitions", "mkfs", "lvm", "mount", "files", "dirs-links", "tar", "checksums", "find-grep", "xattrs")


class Calls:
    """Counts the API calls a kind makes, through a handle proxy: the count is what the suite did, not a
    number written down beside it."""

    def __init__(self, g: Any) -> None:
        self._g = g
        self.n = 0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._g, name)

        def call(*args: Any, **kw: Any) -> Any:
            self.n += 1
            return fn(*args, **kw)
        return call


def _partitions(g: Calls, ctx: CellContext) -> None:
    sda = ctx.state["disks"][0]
    for table in ("mbr", "gpt"):  # the last one stays
        g.part_init(sda, "msdos" if table == "mbr" else table)
        start = 2048
        for n in range(4):
            end = start + (60 * 2**20) // 512 - 1
            g.part_add(sda, "p", start, end if n < 3 else -2048)
            start = end + 1
        g.part_list(sda)
        g.part_get_parttype(sda)
        if table == "gpt":
            for n in range(1, 5):
                g.part_set_name(sda, n, f"gb{n}")
                g.part_get_name(sda, n)
                g.part_to_dev(f"{sda}{n}")
    g.list_partitions()


def _mkfs(g: Calls, ctx: CellContext) -> None:
    sda = ctx.state["disks"][0]
    for n, fs in zip(range(1, 5), (*FILESYSTEMS, "ext4")):
        dev = f"{sda}{n}"
        g.mkfs(fs, dev)
        g.vfs_type(dev)
        g.vfs_uuid(dev)
        g.set_label(dev, f"gb{n}")
        g.vfs_label(dev)
    g.list_filesystems()


def _lvm(g: Calls, ctx: CellContext) -> None:
    sdb = ctx.state["disks"][1]
    g.pvcreate(sdb)
    g.vgcreate("gbvg", [sdb])
    for n in range(1, 5):
        g.lvcreate(f"lv{n}", "gbvg", 32)
    g.lvs()
    g.vgs()
    g.pvs()
    g.lvresize("/dev/gbvg/lv1", 48)
    g.lvrename("/dev/gbvg/lv4", "/dev/gbvg/lvlast")
    g.lvremove("/dev/gbvg/lvlast")
    for n in range(1, 4):
        g.mkfs("ext4", f"/dev/gbvg/lv{n}")
    g.vg_activate(False, ["gbvg"])
    g.vg_activate(True, ["gbvg"])
    g.lvs_full()


def _mount(g: Calls, ctx: CellContext) -> None:
    sda = ctx.state["disks"][0]
    g.mount(f"{sda}4", "/")
    points = [(f"{sda}{n}", f"/m{n}") for n in range(1, 4)] + [(f"/dev/gbvg/lv{n}", f"/lv{n}") for n in range(1, 4)]
    for _, mp in points:
        g.mkdir(mp)
    for _ in range(4):
        for dev, mp in points:
            g.mount(dev, mp)
        g.mounts()
        g.mountpoints()
        for _, mp in reversed(points):
            g.umount(mp)
    for dev, mp in points:  # mounted for the kinds that follow
        g.mount(dev, mp)


def _files(g: Calls, ctx: CellContext) -> None:
    n = ctx.params["files"]
    for root in ("/m1", "/m3", "/lv1"):  # ext2, ext4 on a partition, ext4 on LVM
        for i in range(n):
            g.write(f"{root}/f{i}", f"guestbench {i}\n" * (1 + i % 8))
        for i in range(n):
            g.cat(f"{root}/f{i}")
            g.lstatns(f"{root}/f{i}")
        for i in range(n):
            g.mv(f"{root}/f{i}", f"{root}/g{i}")
        g.ls(root)
        for i in range(0, n, 2):
            g.rm(f"{root}/g{i}")
    g.sync()


def _dirs_links(g: Calls, ctx: CellContext) -> None:
    n = ctx.params["files"] // 2
    g.mkdir_p("/m2/a/b/c/d/e")
    for i in range(n):
        g.mkdir(f"/m2/d{i}")
        g.touch(f"/m2/d{i}/file")
        g.ln_s(f"d{i}/file", f"/m2/sym{i}")
        g.ln(f"/m2/d{i}/file", f"/m2/hard{i}")
        g.readlink(f"/m2/sym{i}")
    g.ll("/m2")
    for i in range(n):
        g.rm(f"/m2/sym{i}")
        g.rm(f"/m2/hard{i}")
        g.rm_rf(f"/m2/d{i}")
    g.rm_rf("/m2/a")


def _tar(g: Calls, ctx: CellContext) -> None:
    archive = str(ctx.workdir / "api-suite.tar")
    for compress in ("", "gzip"):
        kw = {"compress": compress} if compress else {}
        g.tar_out("/m3", archive, **kw)
        g.mkdir_p("/lv2/from-tar")
        g.tar_in(archive, "/lv2/from-tar", **kw)
        g.ls("/lv2/from-tar")
        g.rm_rf("/lv2/from-tar")
    (ctx.workdir / "api-suite.tar").unlink(missing_ok=True)


def _checksums(g: Calls, ctx: CellContext) -> None:
    names = [name for name in g.ls("/lv1") if name.startswith("g")]  # the files left by the file kind
    for algo in ("md5", "sha1", "sha256"):
        for name in names:
            g.checksum(algo, f"/lv1/{name}")
    g.checksums_out("sha256", "/lv1", str(ctx.workdir / "api-suite.sums"))
    (ctx.workdir / "api-suite.sums").unlink(missing_ok=True)


def _find_grep(g: Calls, ctx: CellContext) -> None:
    for root in ("/m1", "/m3", "/lv1", "/"):
        g.find(root)
    for i in range(1, ctx.params["files"], 2):
        g.grep("guestbench", f"/m3/g{i}")
        g.grep_opts(f"guestbench {i}$", f"/m3/g{i}", extended=True)


def _xattrs(g: Calls, ctx: CellContext) -> None:
    names = [f"/lv1/{name}" for name in g.ls("/lv1") if name.startswith("g")]
    for path in names:
        g.setxattr("user.guestbench", "value", 5, path)
        g.setxattr("user.other", "x", 1, path)
        g.getxattrs(path)
        g.lgetxattr(path, "user.guestbench")
        g.removexattr("user.other", path)
    g.lxattrlist("/lv1", [p.rsplit("/", 1)[1] for p in names])


STEPS: dict[str, Callable[[Calls, CellContext], None]] = {
    "partitions": _partitions, "mkfs": _mkfs, "lvm": _lvm, "mount": _mount, "files": _files,
    "dirs-links": _dirs_links, "tar": _tar, "checksums": _checksums, "find-grep": _find_grep, "xattrs": _xattrs}
assert tuple(STEPS) == KINDS


class ApiSuite(Measurement):
    name = "api-suite"
    summary = "E1's C API test suite row: several hundred libguestfs API calls of ten kinds in one launch"
    timed = ("wall time of a fixed sequence of libguestfs API calls in one launched appliance (partition tables, "
             "mkfs ext2/ext3/ext4, LVM, mount/umount, small-file create/read/stat/rename/delete, directories "
             "and links, tar-in/tar-out, checksums, find/grep, extended attributes) on two fresh 256 MiB scratch "
             "disks; the launch and the wipe before each sample are not timed")
    params = (int_param("files", 20, "small files per filesystem in the file kinds (the call count grows with it)",
                        minimum=2, maximum=2000),)

    def cache_mode(self, params: dict[str, Any]) -> str | None:
        return "unsafe"  # libguestfs's add_drive_scratch always adds its disks with cachemode unsafe

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        return (Metric("calls", "calls", False, "API calls made (the same on every backend)"),
                *(Metric(f"{kind}_s", "s", False, f"seconds in the {kind} calls") for kind in KINDS))

    def add_drives(self, g: Any, ctx: CellContext) -> None:
        for _ in range(2):
            g.add_drive_scratch(DISK_MIB * 2**20)

    def after_launch(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        ctx.state["disks"] = g.list_devices()[:2]
        if not g.feature_available(["linuxxattrs"]):
            from guestbench.util.errors import Unavailable

            raise Unavailable("this appliance has no extended attribute calls (libguestfs feature linuxxattrs)")
        return None

    def prepare(self, g: Any, ctx: CellContext) -> None:
        """Back to two blank disks, whatever the last sample (or a failed one) left."""
        g.umount_all()
        g.lvm_remove_all()
        for dev in ctx.state["disks"]:
            g.wipefs(dev)
            g.zero(dev)  # the first blocks: no old partition table or filesystem is found again
        g.sync()
        g.drop_caches(3)

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        calls = Calls(g)
        figures: dict[str, float | str] = {}
        for kind, step in STEPS.items():
            t0 = time.perf_counter()
            step(calls, ctx)
            figures[f"{kind}_s"] = time.perf_counter() - t0
        calls.umount_all()
        figures["calls"] = calls.n
        return figures

    def before_shutdown(self, g: Any, ctx: CellContext) -> None:
        try:
            g.umount_all()
            g.lvm_remove_all()
        except RuntimeError:
            pass
