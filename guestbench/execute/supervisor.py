"""Runs workers, enforces their deadlines, and kills the whole process tree when one passes.

The supervisor is the only place that waits on a hypervisor, so it is the only place that needs to
know how to give up: a deadline passes → every process of the worker (qemu, libguestfs's recovery
process) is killed, then the backend's out-of-tree leftovers (libvirt domains) are removed.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any
from collections.abc import Callable

from guestbench.host import procs
from guestbench.host import cgroups
from guestbench.backends.base import LIBGUESTFS_OVERRIDES, Backend
from guestbench.util.errors import Interrupted, printable
from guestbench.execute.protocol import Message, Msg, Request, WorkerExit

KILL_GRACE_S = 3.0
STDERR_LINE_MAX = 64 * 1024  # a worker's stderr line kept at most (under -v it carries the appliance's console)
# the signals that end a run (or an exec) with its cleanup: Ctrl-C, kill, a closed terminal
TRAPPED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def descendants(pid: int) -> list[int]:
    """Every process below pid, found before anything is killed (orphans lose their parent link)."""
    kids = procs.children()
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


# libguestfs makes its sockets in <base>/libguestfsXXXXXX (base: /tmp for root, else $XDG_RUNTIME_DIR or /tmp).
_SOCKDIR_RE = re.compile(r"^(/.+)?/libguestfs[A-Za-z0-9]{6}$")


def socket_dirs_of(pids: list[int]) -> list[Path]:
    """libguestfs socket directories that these processes have sockets bound in.

    Matched through the processes' own open unix sockets (/proc/PID/fd inodes against /proc/net/unix),
    so a directory of another libguestfs user on the same machine is never touched.
    """
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    dirs: set[Path] = set()
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split(None, 7)
                if len(parts) == 8 and parts[6] in inodes:
                    parent = os.path.dirname(parts[7].strip())
                    if _SOCKDIR_RE.match(parent) and os.path.isdir(parent) and not os.path.islink(parent):
                        dirs.add(Path(parent))
    except OSError:
        pass
    return sorted(dirs)


def reported_socket_dirs(paths: object) -> list[Path]:
    """The socket directories a worker reported (its LAUNCHED message), as far as they are still libguestfs's: named
    so, directly under /tmp, a directory of this user's and no link (a worker's word is checked before anything is
    removed on it)."""
    found = []
    for p in paths if isinstance(paths, list) else []:
        if not (isinstance(p, str) and _SOCKDIR_RE.match(p) and os.path.dirname(p) == "/tmp"):
            continue
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            found.append(Path(p))
    return found


def kill_tree(proc: subprocess.Popen[bytes], frozen: list[int] | None = None) -> None:
    """Kill the worker's process group and any descendant that left it; reap the worker. `frozen`: the pids
    end_tree stopped, killed too even if they are no longer the worker's descendants (it exited meanwhile).

    Also when the process itself has exited: what it left running in its group (a forked daemon whose parent
    exited, such as `guestfish --listen`) is no longer its descendant, but still in its group."""
    if proc.poll() is not None and not descendants(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _signal_all([p for p in frozen or [] if p != proc.pid], signal.SIGKILL)  # the worker is reaped: its pid is free
        return
    pids = sorted(set(descendants(proc.pid)) | set(frozen or []) - {proc.pid})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for s in (sig, signal.SIGCONT):  # a tree end_tree froze acts on its SIGTERM once continued
            try:
                os.killpg(proc.pid, s)
            except (ProcessLookupError, PermissionError):
                pass
            _signal_all(pids, s)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(alive(p) for p in pids):
                return
            time.sleep(0.05)
    proc.wait()


def end_tree(proc: subprocess.Popen[bytes] | None, cleanup: tuple[Backend, Path] | None,
             reported: list[Path] | None = None) -> None:
    """Kill what is left of a process tree that runs appliances (a worker, a command under `guestbench exec`)
    and remove what it leaves outside it: libguestfs's socket directories and the backend's leftovers of
    launches that kept their files in the work dir (libvirt domains). `reported`: socket directories the worker
    said were its launches' (reported_socket_dirs): removed even when no socket of the tree is left in them."""
    if proc is not None:
        # Found before the kill: libguestfs removes its socket directory itself on a clean close, but a killed
        # process cannot. The tree is frozen first: a launch under way could otherwise make its directory and bind
        # in it between the listing and the kill (seen: an abort as a launch began, on a busy machine).
        tree = [proc.pid, *descendants(proc.pid)]
        frozen = tree if proc.poll() is None else []
        _signal_all(frozen, signal.SIGSTOP)
        _until_stopped(frozen)
        sockdirs = set(socket_dirs_of(tree))
        kill_tree(proc, frozen)
        # and those it reported: between libguestfs's shutdown (its socket closed and unlinked) and its close (the
        # directory removed), a killed process leaves an empty /tmp/libguestfsXXXXXX that no socket points to
        for d in sorted(sockdirs | set(reported_socket_dirs([str(p) for p in reported or []]))):
            shutil.rmtree(d, ignore_errors=True)
    if cleanup is not None:
        backend, workdir = cleanup
        backend.cleanup(workdir)


def _until_stopped(pids: list[int], limit_s: float = 0.5) -> None:
    """Wait (briefly) until each process has stopped: a SIGSTOP takes effect on the way back to user mode, so a
    process inside a system call (a bind) is not stopped yet when kill() returns."""
    deadline = time.monotonic() + limit_s
    for pid in pids:
        while time.monotonic() < deadline:
            if _state(pid) in (None, "T", "t", "Z", "X"):  # None: gone
                break
            time.sleep(0.005)


def kill_processes(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL what is still alive after the grace time: for processes that are not a worker's
    group (an in-process hypervisor). Zombies count as gone; their parent reaps them."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_all(pids, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        if not any(alive(p) for p in pids):
            return


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _state(pid: int) -> str | None:
    """The process's state letter, None when it is gone."""
    st = procs.stat(pid)
    return None if st is None else st.state


def alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


class Supervisor:
    """The local executor (guestbench.execute.executor): one worker process at a time on this machine, under the
    deadlines it announces; `current` is what a signal handler must kill."""

    def __init__(self, verbose: bool = False, echo: Callable[[str], None] | None = None) -> None:
        self.verbose = verbose
        self.echo = echo or (lambda line: print(printable(line), file=sys.stderr))  # an appliance's console
        self.current: subprocess.Popen[bytes] | None = None
        self._cleanup: tuple[Backend, Path] | None = None  # backend and work dir while a worker runs
        self._group: cgroups.Group | None = None  # the worker's control group, where one could be made
        self._sockdirs: list[Path] = []  # the socket directories the current worker's last launch reported
        # After abort() no worker starts: a thread between its stop check and its Popen would otherwise start
        # one that nobody kills. The lock makes "started" and "aborted" one or the other, never both unseen.
        self.aborted = False
        self._lock = threading.Lock()

    def spawn(self) -> Supervisor:
        """Another local executor, for an appliance that runs at the same time as this one's."""
        return Supervisor(verbose=self.verbose, echo=self.echo)

    def run_worker(self, request: Request, backend: Backend, on_message: Callable[[Message], None]) -> WorkerExit:
        """Start a worker for `request`, pass its messages to `on_message`, and enforce deadlines."""
        env = dict(os.environ)
        for name in LIBGUESTFS_OVERRIDES:
            env.pop(name, None)
        env["PYTHONUNBUFFERED"] = "1"
        with self._lock:
            if self.aborted:
                return WorkerExit("crash", reason="not started: the run was stopped")
            group = cgroups.create()  # the kernel's count of what the worker's tree uses, where the host allows
            counted = group.env() if group is not None else {}
            env.update(counted)
            try:
                command = backend.worker_command(*request_paths(request), counted)
                if backend.sandboxed:
                    request = inside_sandbox(request)
                    if group is not None:  # in its group before bwrap forks the sandbox (it does at once)
                        command = group.entered(command)
                proc = subprocess.Popen(command, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                        env=env, cwd=request.workdir)
            except OSError as e:  # a stack's directory gone or unreadable, the work dir gone
                if group is not None:
                    group.remove()
                return WorkerExit("crash", reason=f"the worker could not be started: {e.strerror or e}"
                                  + (f": {e.filename}" if e.filename else ""))
            except BaseException:
                if group is not None:
                    group.remove()
                raise
            # before the request is written: until it reads it, the worker has started nothing (a sandboxed one
            # entered the group itself: its group's dirs are bound into the sandbox and must stay)
            self._group = group if group is not None and (backend.sandboxed or group.add(proc.pid)) else None
            self.current = proc
            self._cleanup = (backend, Path(request.workdir))
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(request.to_dict()).encode())
                proc.stdin.close()
            except BrokenPipeError:  # killed by an abort before it read its request
                pass
            return self._pump(proc, on_message, backend.sandboxed)
        finally:
            self.kill()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()

    def kill(self) -> None:
        """Kill whatever worker is still running and remove its leftovers; later workers may start (the end of
        every worker, a power-cut trial). Safe to call at any time, also twice."""
        with self._lock:
            proc, cleanup, group, reported = self.current, self._cleanup, self._group, list(self._sockdirs)
        end_tree(proc, cleanup, reported)
        if group is not None:  # and whatever of the worker's left its tree and group (a daemonised helper)
            group.end()
        with self._lock:
            if self.current is proc:  # only now: a signal during the kill makes its handler kill again
                self.current = self._cleanup = self._group = None
                self._sockdirs = []

    def abort(self) -> None:
        """What a signal handler calls: kill what is running, remove its leftovers, and start no worker after
        this (run_worker then returns at once). Safe to call at any time, also twice."""
        with self._lock:
            self.aborted = True
        self.kill()

    def _pump(self, proc: subprocess.Popen[bytes], on_message: Callable[[Message], None],
              sandboxed: bool = False) -> WorkerExit:
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        buffers = {"out": b"", "err": b""}
        tail: collections.deque[str] = collections.deque(maxlen=30)
        deadline: float | None = None
        what: str | None = None
        limit: float | None = None
        index: int | None = None
        crash_reason: str | None = None
        done = False
        open_streams = 2
        while open_streams and not (done and proc.poll() is not None):
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = sel.select(timeout=timeout if timeout is not None else 1.0)
            if deadline is not None and time.monotonic() >= deadline:
                return WorkerExit("timeout", what, limit, index, None, list(tail))
            for key, _ in events:
                chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                buffers[key.data] += chunk
                *lines, buffers[key.data] = buffers[key.data].split(b"\n")
                if key.data == "err" and len(buffers["err"]) > STDERR_LINE_MAX:  # an appliance writing no newline
                    long, buffers["err"] = buffers["err"], b""  # shown in pieces, none of it dropped
                    lines += [long[i:i + STDERR_LINE_MAX] + b" [line cut]"
                              for i in range(0, len(long), STDERR_LINE_MAX)]
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    if key.data == "err":
                        tail.append(line)
                        if self.verbose:
                            self.echo(line)
                        continue
                    try:
                        msg = json.loads(line)
                    except json.JSONDecodeError:
                        tail.append(line)
                        continue
                    t = msg.get("t")
                    if t == Msg.DEADLINE:
                        what = msg.get("what")
                        limit = msg.get("s")
                        deadline = None if what is None else time.monotonic() + float(msg["s"])
                    elif t == Msg.BEGIN:
                        index = msg["i"]
                    elif t == Msg.DONE:
                        done = True
                    elif t == Msg.CRASH:
                        crash_reason = msg.get("reason")
                    elif t == Msg.LAUNCHED and not sandboxed:  # a sandbox's /tmp is its own, gone with it
                        with self._lock:  # every directory the worker's sockets are in now: the latest report
                            self._sockdirs = reported_socket_dirs(msg.get("sockdirs"))[:8]
                    on_message(msg)
        rc = proc.wait()
        if done and rc == 0:
            return WorkerExit("done", index=index, stderr_tail=list(tail))
        reason = crash_reason or f"worker exited with status {rc}" + (
            f" while in step '{what}'" if what else "")
        return WorkerExit("crash", what, limit, index, reason, list(tail))


def request_paths(request: Request) -> tuple[list[str], list[str]]:
    """The host paths a worker's request names: written (its work dir, its block's turns, its concurrent guests'
    step directory, its drives: files, block devices, an NBD server's socket) and read (its payload)."""
    drives = [str(d.get("filename") or "") if d.get("protocol", "file") == "file" else
              next((s[5:] for s in d.get("server") or [] if str(s).startswith("unix:")), "") for d in request.drives]
    rw = {request.workdir, *(str(d["dir"]) for d in (request.turn, request.rendezvous) if d and d.get("dir")),
          *(p for p in drives if p)}
    ro = {request.payload} if request.payload else set()
    rw = {p for p in rw if not any(p.startswith(q.rstrip("/") + "/") for q in rw)}  # under another: bound with it
    return sorted(rw), sorted(ro - rw)


def inside_sandbox(request: Request) -> Request:
    """The request as a sandboxed worker sees it: the runner that grants its turns is, inside, the sandbox's first
    process (pid 1, which dies with the runner)."""
    return dataclasses.replace(request, turn={**request.turn, "granter": 1}) if request.turn else request


class TrapSignals:
    """Turn SIGINT/SIGTERM/SIGHUP into Interrupted once; later signals are ignored while cleaning up."""

    def __init__(self) -> None:
        self.old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        for s in self.old:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    def __enter__(self) -> TrapSignals:
        for s in TRAPPED:
            self.old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)
