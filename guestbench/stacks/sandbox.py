"""A stack's sandbox: the command that runs a program of guestbench's on a stack's software (issue 47).

bubblewrap, not systemd-nspawn or a hand-made unshare: it is one process that sets up the mount, PID, IPC, UTS and
network namespaces and the bind mounts in one exec, dies with guestbench (`--die-with-parent`, SIGKILL included) and,
with its own PID namespace, takes every process of the sandbox with it; nspawn wants a running systemd (none here)
and registers machines, and unshare plus mount calls would be guestbench's own code doing what bwrap already does.

Inside: the stack's /usr, /etc, /opt (the worker's venv) and /boot read-only, its dpkg database read-only (supermin
reads it), a private /run, /tmp, /root and /var (a tmpfs each; libvirt's state lives there and goes with the
sandbox), /proc of its own, /sys read-only, a /dev of its own with /dev/kvm and a sized /dev/shm, guestbench's own
package read-only, no network but loopback, and a clean environment. What persists between sandboxes is the
stack's own state directory (its appliances, libguestfs's cache: STATE below), inside the stack's directory.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import guestbench
from guestbench.host import owned
from guestbench.stacks.store import Stack
from guestbench.util.errors import UserError

BWRAP = "bwrap"
SOURCE = "/.guestbench"  # inside: the directory holding guestbench's package (PYTHONPATH)
# inside: guestbench's temp root and cache, and libguestfs's (its appliance and qemu's probe answers); on the host
# under the stack's own directory, so that they persist between cells and go with `stack rm`
STATE = {"/var/lib/guestbench-stack": "var/lib/guestbench-stack", "/var/cache/guestbench-stack":
         "var/cache/guestbench-stack", "/var/tmp": "var/tmp"}
READ_ONLY = ("usr", "etc", "opt", "boot", "srv")  # the stack's own directories, as they are
PRIVATE = ("run", "tmp", "root", "var", "home", "mnt", "media")  # an empty tmpfs each
DEVICES = ("/dev/kvm",)  # bound when the host has them
STACK_ENV = "GUESTBENCH_STACK"  # inside: the stack's name (a sandbox starts the daemons a host has running)
# Root keeps its capabilities in bwrap (no user namespace), and none is dropped: with any --cap-drop (tried in
# three groups: CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_MKNOD, CAP_BPF, ...) UML 7.2's seccomp mode hung at boot here, and
# libvirtd needs CAP_SYS_ADMIN for the trusted.* attributes it marks qemu's files with. So a sandbox is isolation for
# a stack's own Debian software (its namespaces, what it sees, that it dies with guestbench), not a wall against
# hostile code running as root in it (docs/stacks.md).
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


def problem() -> str | None:
    """Why no sandbox can be made here, or None."""
    if shutil.which(BWRAP) is None:
        return "bubblewrap is not installed (apt-get install bubblewrap; make run installs it)"
    return None


def shm_bytes() -> int:
    """The sandbox's /dev/shm: half the RAM, as a tmpfs's default (qemu and UML may map guest memory there)."""
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return max(256 * 2**20, pages * size // 2)


def state_dirs(stack: Stack) -> dict[str, Path]:
    """The stack's writable state directories (inside path -> host path), made and checked: root's alone."""
    out = {}
    for inside, rel in STATE.items():
        path = stack.path / rel
        mode = 0o1777 if inside == "/var/tmp" else 0o755  # libvirt's qemu user reads appliances there
        if inside == "/var/tmp":
            path.mkdir(exist_ok=True)  # the stack's own /var/tmp, as debootstrap made it
            owned.check_dir_shared(path, f"stack {stack.name}'s /var/tmp")
        else:
            owned.ensure_dir(path, f"stack {stack.name}'s state directory", mode=mode)
        out[inside] = path
    return out


# libvirt's qemu driver in a sandbox: no control groups for its domains (the host's /sys/fs/cgroup is read-only in
# it) and no mount namespace of their own (the sandbox is one already); the rest as the stack ships it (all comments)
QEMU_CONF = "# guestbench: a stack's sandbox (guestbench.stacks.sandbox)\ncgroup_controllers = [ ]\nnamespaces = [ ]\n"


def generated(stack: Stack) -> dict[str, Path]:
    """Files of the stack's the sandbox sees changed (inside path -> the changed copy, beside the stack's state)."""
    out = {}
    if (group := group_text(stack)) is not None:
        out["/etc/group"] = _write(stack, "sandbox-group", group)
    if (stack.path / "etc/libvirt/qemu.conf").is_file():
        out["/etc/libvirt/qemu.conf"] = _write(stack, "sandbox-qemu.conf", QEMU_CONF)
    return out


def _write(stack: Stack, name: str, text: str) -> Path:
    """`text` as file `name` in the stack's state directory (root's alone), replaced only when it changed."""
    path = state_dirs(stack)["/var/lib/guestbench-stack"] / name
    try:
        same = not path.is_symlink() and path.read_text() == text
    except OSError:
        same = False
    if not same:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=path.parent)  # one of its own per writer (threads)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


def group_text(stack: Stack) -> str | None:
    """The stack's /etc/group with its kvm group given /dev/kvm's group id (a group of the stack's that had that id
    takes kvm's old one); None when they agree or there is no /dev/kvm. The host's /dev/kvm is bound in as it is,
    and libvirt's qemu user (in the stack's kvm group) must be able to open it."""
    try:
        gid = os.stat("/dev/kvm").st_gid
        lines = (stack.path / "etc/group").read_text().splitlines()
    except OSError:
        return None
    entries = [ln.split(":") for ln in lines]
    kvm = next((e for e in entries if len(e) >= 4 and e[0] == "kvm"), None)
    if kvm is None or kvm[2] == str(gid):
        return None
    old = kvm[2]
    for e in entries:
        if len(e) >= 4 and e[2] == str(gid) and e is not kvm:
            e[2] = old
    kvm[2] = str(gid)
    return "".join(":".join(e) + "\n" for e in entries)


def environment(extra: dict[str, str]) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the host's but what is named here and in `extra`."""
    return {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "PYTHONPATH": SOURCE, "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1", "GUESTBENCH_TMPDIR": "/var/lib/guestbench-stack",
            "GUESTBENCH_CACHE": "/var/cache/guestbench-stack", **extra}


def command(stack: Stack, argv: list[str], *, rw: list[str] = (), ro: list[str] = (),  # type: ignore[assignment]
            env: dict[str, str] | None = None) -> list[str]:
    """bwrap's command line for `argv` inside `stack`; `rw`/`ro`: host paths bound at the same path (a run's
    directory, a payload), writable or not."""
    root = stack.path
    args = [BWRAP, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-net", "--hostname", f"stack-{stack.name}"]
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        name = entry.name
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/{name}"]
        elif name in READ_ONLY and entry.is_dir(follow_symlinks=False):
            args += ["--ro-bind", entry.path, f"/{name}"]
    for name in PRIVATE:
        args += ["--tmpfs", f"/{name}"]
    # the directories above what is bound in, made traversable (bwrap makes them 0700): libvirt's qemu user must
    # reach a cell's disks in its work dir, as it does on the host
    for p in (*rw, *ro):
        if (top := Path(p).parts[1] if len(Path(p).parts) > 1 else "") in READ_ONLY:
            raise UserError(f"{p} is under /{top}, which a stack's sandbox shows as the stack's own: give guestbench a "
                            "temp root elsewhere (GUESTBENCH_TMPDIR) to run cells on stacks", key="stacks")
    inner = ["/var/lib/dpkg", "/var/log/libvirt", *STATE, *rw, *ro]
    for d in sorted({str(a) for p in inner for a in Path(p).parents if len(a.parts) > 2
                     and a.parts[1] not in ("sys", "proc", "dev")}):
        args += ["--perms", "0755", "--dir", d]
    for entry in sorted(os.scandir(root / "var"), key=lambda e: e.name):  # /var/run -> /run, /var/lock
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/var/{entry.name}"]
    args += ["--ro-bind", str(root / "var/lib/dpkg"), "/var/lib/dpkg", "--dir", "/var/log/libvirt"]
    if (root / "etc/libvirt").is_dir():  # libvirtd writes its configuration (its default network, secrets)
        args += ["--bind", str(root / "etc/libvirt"), "/etc/libvirt"]
    for inside, path in state_dirs(stack).items():
        args += ["--bind", str(path), inside]
    args += ["--proc", "/proc", "--ro-bind", "/sys", "/sys", "--dev", "/dev"]
    args += [a for d in DEVICES if os.path.exists(d) for a in ("--dev-bind", d, d)]
    for inside, path in generated(stack).items():
        args += ["--ro-bind", str(path), inside]
    args += ["--size", str(shm_bytes()), "--tmpfs", "/dev/shm"]
    args += ["--ro-bind", str(Path(guestbench.__file__).parent), f"{SOURCE}/guestbench"]
    for p in rw:
        args += ["--dev-bind" if _is_block(p) else "--bind", p, p]
    for p in ro:
        args += ["--ro-bind", p, p]
    variables = environment({**(env or {}), STACK_ENV: stack.name})
    args += ["--clearenv", *[a for k, v in variables.items() for a in ("--setenv", k, v)]]
    args += ["--chdir", "/", "--", *argv]
    return args


def _is_block(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def python(stack: Stack) -> str:
    """The stack's Python for guestbench: its venv's (which sees the stack's python3-guestfs)."""
    return f"{stack.venv or '/opt/guestbench/venv'}/bin/python"
