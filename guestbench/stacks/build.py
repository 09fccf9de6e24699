"""`guestbench stack build`: a Debian suite's root file system with what guestbench drives, made by mmdebstrap from
the machine's own apt sources (guestbench.stacks.sources).

mmdebstrap, not debootstrap: it resolves every package (the essential set and guestbench's) with apt in one pass
and installs them in one go, where debootstrap installs a minimal base and apt then runs a second time inside it;
here a whole trixie stack (libguestfs, qemu, UML, supermin, a kernel) took 51 s and a sid one 74 s, against 77 s for
debootstrap's minimal trixie base alone. Debian 12's mmdebstrap (1.3.5) builds both.

A build runs in its own PID and mount namespaces (unshare), under PDEATHSIG (DIE_WITH_PARENT): when guestbench dies,
even by SIGKILL, every process of the build dies with it, and the mounts mmdebstrap makes for its chroot go with its
namespace. It builds into a directory of its own (guestbench.host.rundirs) renamed into place when whole; a build
whose owner died is swept by the next. The suite's Release files are not checked for expiry (this archive is served
as a snapshot: sid's expired weeks ago); their signatures are.

The worker's Python packages (guestbench's own requirements, as its installed metadata names them) go into a venv in
the stack (/opt/guestbench/venv, seeing the stack's python3-guestfs), installed by pip with the machine's pip
configuration and local certificate authorities copied in: the machine's own way to reach the package index."""

from __future__ import annotations

import datetime
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from collections.abc import Callable

from guestbench.host import locks, os_release, procs, rundirs
from guestbench.stacks import sources as apt_sources
from guestbench.stacks import store
from guestbench.util.errors import UserError

BUILD_TIMEOUT_S = 3600.0
LOCK_WAIT_S = 60.0
VENV = "/opt/guestbench/venv"
LEAN = ("python3", "python3-venv", "ca-certificates")  # for tests: the build's path, in seconds
# gcc and python3-dev: pip builds a requirement that has no wheel for the stack's Python (ruptures on 3.14)
FULL = (*LEAN, "python3-guestfs", "libguestfs-tools", "qemu-system-x86", "qemu-utils", "user-mode-linux", "supermin",
        "linux-image-amd64", "libvirt-daemon-system", "python3-libvirt", "fio", "bonnie++", "dbench", "procps", "gcc",
        "python3-dev")
# what a uml start-up needs and no more (the suite's end-to-end test): libguestfs (which brings qemu) and UML
UML = (*LEAN, "python3-guestfs", "user-mode-linux", "supermin", "qemu-utils", "procps")
PACKAGES = {"lean": LEAN, "uml": UML, "full": FULL}
LEAN_REQUIREMENTS = ("PyYAML", "filelock")  # what guestbench's worker imports (the rest is for analysis and output)
# What each stack records (software -> Debian package); the kernel and UML also by their module directories
VERSIONS = {"python": "python3", "libguestfs": "python3-guestfs", "qemu": "qemu-system-x86",
            "libvirt": "libvirt-daemon-system", "uml": "user-mode-linux", "supermin": "supermin"}


def requirements() -> list[str]:
    """guestbench's own requirements (not its extras'), as its installed metadata names them (markers kept: pip
    judges them against the stack's Python)."""
    return [r for r in metadata.requires("guestbench") or [] if "extra ==" not in r]


def _environment() -> dict[str, str]:
    """What the build's processes see: a plain PATH, and the machine's PIP_* settings (its way to the package index;
    mmdebstrap passes its environment to its hooks, so pip in the stack gets them, never on a command line)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
    return {**env, **{k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_FIND_LINKS"}}


def versions(root: Path) -> dict[str, str]:
    """The stack's software versions, read from its dpkg database (nothing in the stack is run). Python's is the
    interpreter's own package (python3.N, which /usr/bin/python3 names), not the python3 meta-package's."""
    wanted = dict(VERSIONS)
    link = root / "usr/bin/python3"
    if link.is_symlink() and re.fullmatch(r"python3\.\d+", target := os.readlink(link)):
        wanted["python"] = target
    try:
        proc = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f",
                               r"${Package}\t${Version}\n", *wanted.values()], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = dict(line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)
    out = {name: found[pkg] for name, pkg in wanted.items() if found.get(pkg)}
    for what, where in (("kernel", root / "lib/modules"), ("uml_kernel", root / "usr/lib/uml/modules")):
        if where.is_dir() and (names := sorted(os.listdir(where))):
            out[what] = names[-1]
    return out


def _hooks(packages: str) -> list[str]:
    """mmdebstrap customize hooks (run as root with the chroot at "$1"): the machine's way to the package index,
    then the worker's venv."""
    reqs = requirements() if packages == "full" else list(LEAN_REQUIREMENTS)
    hooks = []  # mmdebstrap copies the machine's resolv.conf itself
    pip_conf = Path("/etc/pip.conf").is_file()
    if pip_conf:
        hooks.append('cp /etc/pip.conf "$1/etc/pip.conf"')
    if Path("/usr/local/share/ca-certificates").is_dir():
        hooks.append('cp -a /usr/local/share/ca-certificates/. "$1/usr/local/share/ca-certificates/" && '
                     'chroot "$1" update-ca-certificates >/dev/null')
    if "linux-image-amd64" not in PACKAGES[packages]:  # supermin reads /lib/modules even for UML's appliance
        hooks.append('mkdir -p "$1/usr/lib/modules"')
    hooks.append(f'chroot "$1" python3 -m venv --system-site-packages {VENV}')
    hooks.append(f'chroot "$1" {VENV}/bin/pip install -q --disable-pip-version-check '
                 + " ".join(shlex.quote(r) for r in reqs))
    if pip_conf:  # it may hold the index's credentials: not kept in the stack
        hooks.append('rm -f "$1/etc/pip.conf"')
    return hooks


def command(suite: str, packages: str, target: Path, lines: list[str], alive: int) -> list[str]:
    """The whole build: mmdebstrap in its own PID and mount namespaces, dying with guestbench; `alive`: the read end
    of a pipe whose write end only guestbench holds (ALIVE_AFTER_FORK)."""
    argv = ["mmdebstrap", "--variant=apt", "--mode=root", "--aptopt=Acquire::Check-Valid-Until \"false\"",
            f"--include={','.join(PACKAGES[packages])}"]
    argv += [f"--customize-hook={hook}" for hook in _hooks(packages)]
    argv += [suite, str(target), *lines]
    return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), "unshare", "--mount", "--propagation", "private",
            "--pid", "--fork", "--kill-child", "--mount-proc", "--", sys.executable, "-c", ALIVE_AFTER_FORK, str(alive),
            *argv]


# The build's first process: SIGKILL when guestbench dies (PR_SET_PDEATHSIG = 1), then the build. If guestbench died
# before that was set, its parent is no longer guestbench and it ends there (CI C8: with setpriv --pdeathsig, a
# SIGKILL in the moment between the fork and setpriv's prctl left a build running with nobody to stop it).
DIE_WITH_PARENT = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
                   "os.getppid() == int(sys.argv[1]) or os._exit(1); os.execvp(sys.argv[2], sys.argv[2:])")
# The namespace's first process, forked by unshare, which sets its PDEATHSIG (--kill-child) only after the fork:
# util-linux 2.38's unshare has that window (its upstream fix was reverted), and a guestbench SIGKILLed in it left a
# build running in the namespace (CI A9, issue 48's session; C8 had closed the window before unshare). Here its
# PDEATHSIG is set; if guestbench has died already, the pipe whose write end only guestbench held is at its end
# (guestbench's files close before its children are signalled) and the build ends before it begins.
ALIVE_AFTER_FORK = ("import os, select, sys; fd = int(sys.argv[1]); "
                    "select.select([fd], [], [], 0)[0] and os._exit(1); os.close(fd); "
                    "os.execvp(sys.argv[2], sys.argv[2:])")


def builder_version() -> str:
    try:
        out = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        raise UserError("mmdebstrap is not installed (apt-get install mmdebstrap; 'make run' installs it)",
                        source="installation", key="mmdebstrap") from None
    return out.strip() or "mmdebstrap"


def sweep(base: Path) -> list[str]:
    """Remove the build directories of builds whose owner died (their namespaces died with them: no mount)."""
    found = rundirs.claim_dead(base, store.BUILD_PREFIX)
    for d in found.claimed:
        if [p for p in procs.users(d) if procs.proc_euid(p) == os.geteuid()]:  # one of ours works in it (another
            # user's process naming the path cannot keep it: only ours could have been the build's)
            found.release(d)
            continue
        done = _rm(d)
        found.log.append(f"removed {d} (its build died)" if done else f"could not remove {d} (its build died)")
    return found.log


def _rm(d: Path) -> bool:
    try:
        return subprocess.run(["rm", "-rf", "--one-file-system", str(d)], timeout=600).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def build(name: str, suite: str, packages: str, force: bool, say: Callable[[str], None]) -> store.Stack:
    base = store.stacks_dir()
    for line in sweep(base):
        say(line)
    out = base / store.check_name(name)
    lines = [s.line() for s in apt_sources.for_suite(suite, apt_sources.machine_sources(),
                                                     os_release.codename())]
    builder = builder_version()
    try:
        with locks.exclusive(base / ".lock", "the stacks", LOCK_WAIT_S):
            _may_build(name, base, out, force)
            return _build(name, suite, packages, base, out, lines, builder, say)
    except locks.LockTimeout as e:
        raise UserError(str(e), source="command line", key=name) from None


def _may_build(name: str, base: Path, out: Path, force: bool) -> None:
    """A stack may be built where there is none, or (with `force`) over one of guestbench's own, whole or not;
    never over anything else (a link, another user's): that is said before the build, not after it."""
    if not os.path.lexists(out):
        return
    stack = store.load(name, base)
    if stack.problem and stack.problem.endswith("not used"):
        raise UserError(f"{stack.problem}: remove it yourself, or choose another name", source="command line",
                        key=name)
    if not force:
        state = "exists" if stack.problem is None else f"exists ({stack.problem})"
        raise UserError(f"stack {name!r} {state}; rebuild it with --force", source="command line", key=name)
    if store.in_use(out):  # said again when it is set aside, if a run took it up meanwhile
        raise UserError(f"stack {name!r} is in use by a run: not rebuilt; try again after it", source="command line",
                        key=name)


def _build(name: str, suite: str, packages: str, base: Path, out: Path, lines: list[str], builder: str,
           say: Callable[[str], None]) -> store.Stack:
    work = rundirs.make(base, store.BUILD_PREFIX)
    root, log = work / "root", work / "build.log"
    say(f"building {name} ({suite}, {packages}: {len(PACKAGES[packages])} packages and their dependencies) with "
        f"{builder}; its log: {log}")
    started = time.monotonic()
    kept = base / f".{name}.failed.log"  # the build's directory goes: a failed build's log is kept beside it
    alive, held = os.pipe()  # held: guestbench's alone (not inherited), open while the build may start
    try:
        with open(log, "wb") as f:
            try:
                proc = subprocess.Popen(command(suite, packages, root, lines, alive), stdin=subprocess.DEVNULL,
                                        stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                        env=_environment(), pass_fds=(alive,))
            except OSError as e:
                raise UserError(f"cannot start the build ({e.strerror}: {e.filename}; unshare is "
                                "util-linux's)", source="installation", key="util-linux") from None
            finally:
                os.close(alive)
        try:
            rc = proc.wait(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            procs.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            shutil.copyfile(log, kept)
            raise UserError(f"the build did not finish within {BUILD_TIMEOUT_S:.0f} s (its log: {kept})",
                            source="stack build", key=name) from None
        except BaseException:  # a signal to guestbench: the namespace dies with its first process
            procs.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if rc != 0:
            shutil.copyfile(log, kept)
            raise UserError(f"{_failure(suite, log.read_text(errors='replace'))} (the whole log: {kept})",
                            source="stack build", key=name)
        stack = store.Stack(name, root, suite=suite, packages=packages, builder=builder, sources=lines, venv=VENV,
                            built_utc=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            versions=versions(root))
        store.write_record(stack)
        if os.path.lexists(out):  # --force: the old one goes aside (into this build's directory, deleted with it)
            store.set_aside(out, work)
        os.replace(root, out)
        stack.path = out
        say(f"stack {name} built in {time.monotonic() - started:.0f} s: {out}")
        return stack
    finally:
        os.close(held)
        _rm(work)


def _failure(suite: str, text: str) -> str:
    """One line for a failed build: apt's or mmdebstrap's own error, the suite named when the archive has none."""
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("E: ")]
    if any(re.search(r"does not have a Release file|404\s+Not Found", e) for e in errors):
        return f"the machine's archive has no suite {suite!r} (apt: {errors[0][3:200]})"
    last = errors[0] if errors else (text.strip().splitlines() or ["no output"])[-1]
    return f"mmdebstrap failed: {last[:300]}"
