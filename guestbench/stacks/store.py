"""Where stacks live and what each holds: <temp root>/stacks/NAME (the temp root is root's alone:
guestbench.host.owned), each a Debian root file system with `guestbench-stack.json` at its top, written last, so a
stack without it is half-built (a build that was stopped) and is never used. A stack directory another user could
write, or a link, is refused, never used or removed."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench.host import owned
from guestbench.host.paths import temp_root
from guestbench.util.errors import UserError

RECORD = "guestbench-stack.json"
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,30}")
HOST = "host"  # the machine's own stack: no directory
BUILD_PREFIX = ".build-"  # a build's directory (guestbench.host.rundirs: swept once its owner is dead)
RECORD_MAX = 2**20


@dataclass
class Stack:
    name: str
    path: Path
    suite: str = ""
    packages: str = ""  # full | lean
    built_utc: str = ""
    builder: str = ""
    versions: dict[str, str] = field(default_factory=dict)  # software -> version (guestbench.stacks.build.VERSIONS)
    sources: list[str] = field(default_factory=list)
    venv: str = ""  # the worker's Python environment inside the stack
    problem: str | None = None  # why it cannot be used (half-built, unreadable record)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "suite": self.suite, "packages": self.packages, "built_utc": self.built_utc,
                "builder": self.builder, "versions": self.versions, "sources": self.sources, "venv": self.venv}


def check_name(name: str, key: str = "NAME") -> str:
    if name == HOST or not NAME_RE.fullmatch(name):
        raise UserError(f"{name[:40]!r} is not a stack name; allowed: a lower-case letter, then up to 30 lower-case "
                        f"letters, digits or '-' (not {HOST!r}: the machine's own)", source="command line", key=key)
    return name


def stacks_dir() -> Path:
    """The stacks' directory, made and checked (root's alone, 0700: owned.ensure_dir)."""
    return owned.ensure_dir(temp_root() / "stacks", "the stacks' directory", mode=0o700)


def _checked(path: Path) -> str | None:
    """Why `path` may not be used as a stack directory (a link, not a directory, another user's or writable by
    others), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return e.strerror
    return owned.dir_problem(st, sticky_ok=False)


def load(name: str, base: Path | None = None) -> Stack:
    """Stack `name` as its record says; `problem` set when it cannot be used. UserError when there is none."""
    base = base or stacks_dir()
    path = base / check_name(name)
    if not os.path.lexists(path):
        raise UserError(f"no stack named {name!r}; make it with 'guestbench stack build {name}'")
    if why := _checked(path):
        return Stack(name, path, problem=f"{path} {why}: not used")
    try:
        fd = os.open(path / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return Stack(name, path, problem="half-built (no record): build it again, or remove it")
    except OSError as e:
        return Stack(name, path, problem=f"its record cannot be read ({e.strerror})")
    with os.fdopen(fd, "rb") as f:
        raw = f.read(RECORD_MAX + 1)
    try:
        doc = json.loads(raw) if len(raw) <= RECORD_MAX else None
    except ValueError:
        doc = None
    texts = ("suite", "packages", "built_utc", "builder", "venv")
    if not (isinstance(doc, dict) and all(isinstance(doc.get(k, ""), str) for k in texts)
            and isinstance(doc.get("versions", {}), dict)
            and all(isinstance(v, str) for v in doc.get("versions", {}).values())
            and isinstance(doc.get("sources", []), list) and all(isinstance(v, str) for v in doc.get("sources", []))):
        return Stack(name, path, problem="its record is not one guestbench writes")
    return Stack(name, path, **{k: doc.get(k, "") for k in texts}, versions=dict(doc.get("versions", {})),
                 sources=list(doc.get("sources", [])))


def all_stacks(base: Path | None = None) -> list[Stack]:
    base = base or stacks_dir()
    return [load(n, base) for n in sorted(os.listdir(base)) if NAME_RE.fullmatch(n) and n != HOST]


def write_record(stack: Stack) -> None:
    """The record, written beside and renamed into place: the stack is whole once it is there."""
    tmp = stack.path / f".{RECORD}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(stack.to_dict(), f, indent=1)
    os.replace(tmp, stack.path / RECORD)


def _mounted(path: Path) -> list[str]:
    """Mount points at or below `path` in this mount namespace (mountinfo's octal escapes decoded)."""
    inside = str(path).rstrip("/")
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f]
    return [p for p in points if p == inside or p.startswith(inside + "/")]


def hold(stack: Stack) -> int:
    """A shared lock on the stack's record for as long as this process runs cells on it (the descriptor is never
    closed): `stack rm` and a rebuild see it (in_use) and leave the stack alone."""
    fd = os.open(stack.path / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    held, now = os.fstat(fd), os.lstat(stack.path / RECORD)
    if held.st_nlink == 0 or (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):  # removed or rebuilt meanwhile
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "replaced while it was being locked", str(stack.path / RECORD))
    return fd


def in_use(path: Path) -> bool:
    """Whether a process holds the stack's record (hold)."""
    try:
        fd = os.open(path / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def set_aside(path: Path, aside: Path) -> None:
    """Take a stack directory of ours out of use: nothing may be mounted in it (a stack in use); its record goes
    first, then the directory is moved into `aside` (a directory of the caller's, in the same place), which the
    caller deletes (shutil.rmtree unlinks the links inside, never follows them). A removal stopped halfway leaves no
    stack that looks whole, and a rebuild puts the new stack in place before the old one is deleted."""
    if why := _checked(path):
        raise UserError(f"{path} {why}: not removed", source="command line", key=path.name)
    if mounted := _mounted(path):
        raise UserError(f"{path} is in use ({mounted[0]} is mounted): not removed", source="command line",
                        key=path.name)
    try:
        fd = os.open(path / RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None  # half-built: no run holds it
    try:
        if fd is not None:
            try:  # held until the stack is out of the way: no run takes it up meanwhile
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise UserError(f"{path} is in use by a run (it holds the stack's record): not removed; try again "
                                "after it", source="command line", key=path.name) from None
        try:
            os.unlink(path / RECORD)
        except FileNotFoundError:
            pass
        os.replace(path, aside / "old")
    finally:
        if fd is not None:
            os.close(fd)
