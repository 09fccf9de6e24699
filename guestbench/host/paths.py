"""Where guestbench keeps things on the host: a cache (payloads, probe verdicts, wrappers) and run temp dirs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from guestbench.host import owned

RUN_PREFIX = "guestbench-run-"
WORKER_PREFIX = "gbw-"  # a fleet worker's directory (short: sockets live below it)
# A cell's work dir, for guestbench's own hypervisor programs (UML's overlay and vhost socket go there).
WORKDIR_ENV = "GUESTBENCH_WORKDIR"
# which of N concurrent appliances a worker runs (1-based): a UML guest takes its own host CPU by it
INSTANCE_ENV = "GUESTBENCH_INSTANCE"
CACHE_ENV = "GUESTBENCH_CACHE"
ROOT_CACHE = Path("/var/cache/guestbench")  # root's: only root can make it, whatever $HOME sudo passed on


def scratch_env(workdir: str | Path, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The temporary files of a cell's programs, in its work dir, where its clean-up removes them even when the
    programs are killed: qemu's temporary overlay of a `snapshot=on` drive (libguestfs's appliance root:
    /var/tmp/vl.XXXXXX otherwise), supermin's build directory, libguestfs's overlays. libguestfs takes its cache
    (the appliance it builds, qemu's probe answers) from TMPDIR too: that stays where `env` has it. A scenario's own
    `env:` is applied over these."""
    cachedir = env.get("LIBGUESTFS_CACHEDIR") or env.get("TMPDIR") or "/var/tmp"
    return {"TMPDIR": str(workdir), "LIBGUESTFS_TMPDIR": str(workdir), "LIBGUESTFS_CACHEDIR": cachedir}


def cache_path() -> Path:
    """Where the cache is (not made): $GUESTBENCH_CACHE (or, when that is a sticky directory others share such as
    a tmpfs's root, guestbench-<euid> inside it: owned.own_path); else /var/cache/guestbench for root, and
    $XDG_CACHE_HOME/guestbench or ~/.cache/guestbench for anyone else."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return owned.own_path(Path(env))
    if os.geteuid() == 0:
        return ROOT_CACHE
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "guestbench"


def cache_dir() -> Path:
    """The cache directory (cache_path), made if missing and checked at each call: it holds the hypervisor
    wrappers root runs, so it must be the effective user's alone (owned.ensure_dir)."""
    return owned.ensure_dir(cache_path(), f"the cache ({CACHE_ENV})", env=CACHE_ENV)


def temp_root() -> Path:
    """guestbench's own directory on the host disk (not a tmpfs), made and checked at each call (owned.home):
    run directories with their disk images, appliances, level-1 images. Never a directory another user shares."""
    return owned.home()


def make_run_dir() -> Path:
    """A private directory for one run, owned by this process (guestbench.host.rundirs: swept once it is dead);
    traversable so that libvirt's qemu user can reach images in it."""
    from guestbench.host import rundirs

    return rundirs.make(temp_root(), RUN_PREFIX)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def workdir_for(run_dir: Path, name: str) -> Path:
    """A cell's (or a probe's) own directory in the run's; traversable like the run directory."""
    d = run_dir / name
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    return d
