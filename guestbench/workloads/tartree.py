"""A deterministic tree of many small files, as a tar archive made on the host, and the tar commands
that extract it into / archive it from the filesystem under test inside the appliance.

The tree looks like a source tree: most files 1-16 KiB, some 16-128 KiB, a few 128 KiB-1 MiB, spread
over nested directories. The same (files, seed) always gives the same archive, byte for byte, so its
sha256 identifies it and it is cached on the host keyed by those parameters.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import random
import re
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Bump when the generator changes what it makes: it is part of the cache key.
GENERATOR_VERSION = 1
FILES_PER_DIR = 16  # average; like a source tree
FANOUT = 6  # sub-directories per directory
_MTIME = 1_700_000_000  # fixed, so the archive does not depend on when it was made
_EXTENSIONS = ("c", "h", "py", "txt", "md", "json", "S", "rs")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class TarTree:
    """The archive on the host and what it holds (sizes in bytes)."""

    path: Path
    files: int
    directories: int
    total_bytes: int  # sum of the files' sizes
    archive_bytes: int
    sha256: str  # of the archive file
    manifest_sha256: str  # what verify_command(..., contents=True) prints for a correct tree
    seed: int


def _layout(files: int, seed: int) -> tuple[list[str], list[tuple[str, int]]]:
    """Directories (parents first) and (path, size) of every file; pure function of (files, seed)."""
    rng = random.Random(seed)
    ndirs = max(1, -(-files // FILES_PER_DIR))
    dirs: list[str] = []
    for k in range(ndirs):
        # directory k's parent is (k - 1) // FANOUT: a tree FANOUT wide, filled breadth first
        name = f"dir{k:04d}"
        dirs.append(name if k == 0 else f"{dirs[(k - 1) // FANOUT]}/{name}")
    entries = []
    for i in range(files):
        r = rng.random()
        if r < 0.90:
            size = rng.randint(1024, 16 * 1024)
        elif r < 0.99:
            size = rng.randint(16 * 1024, 128 * 1024)
        else:
            size = rng.randint(128 * 1024, 1024 * 1024)
        ext = _EXTENSIONS[rng.randrange(len(_EXTENSIONS))]
        entries.append((f"{dirs[rng.randrange(ndirs)]}/file{i:06d}.{ext}", size))
    return dirs, entries


def _content(seed: int, index: int, size: int) -> bytes:
    """A file's bytes: incompressible, and independent of the other files (seeded per file)."""
    return random.Random(seed * 1_000_003 + index).randbytes(size)


def _build(target: Path, files: int, seed: int) -> TarTree:
    dirs, entries = _layout(files, seed)
    manifest = hashlib.sha256()  # sha256sum's output for `find . -type f | LC_ALL=C sort`
    lines = []
    total = 0
    with tarfile.open(target, "w", format=tarfile.USTAR_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
            info.uname = info.gname = ""  # numeric owner 0:0 (the appliance has no user names)
            tar.addfile(info)
        for index, (path, size) in enumerate(entries):
            data = _content(seed, index, size)
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = size, 0o644, _MTIME
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
            lines.append(f"{hashlib.sha256(data).hexdigest()}  ./{path}\n")
            total += size
    for line in sorted(lines, key=lambda ln: ln[66:].encode()):
        manifest.update(line.encode())
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return TarTree(target, files, len(dirs), total, target.stat().st_size, digest.hexdigest(),
                   manifest.hexdigest(), seed)


def ensure_tree(cache: Path, files: int = 4000, seed: int = 1) -> TarTree:
    """The archive for (files, seed) in `cache` (made when missing), with its description.

    Written to a temp file and renamed into place, so a killed run or a concurrent one never leaves
    or sees a partial archive.
    """
    if isinstance(files, bool) or not isinstance(files, int) or files < 1:
        raise ValueError(f"tar tree files must be a whole number >= 1, not {files!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"tar tree seed must be a whole number >= 0, not {seed!r}")
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"tartree-v{GENERATOR_VERSION}-{files}files-seed{seed}"
    archive, meta = cache / f"{stem}.tar", cache / f"{stem}.json"
    cached = _read_meta(archive, meta)
    if cached is not None:
        return cached
    fd, tmp_name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=cache)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp_meta = tmp.with_suffix(".json.tmp")
    try:
        built = _build(tmp, files, seed)
        os.replace(tmp, archive)
        tree = TarTree(archive, built.files, built.directories, built.total_bytes, built.archive_bytes,
                       built.sha256, built.manifest_sha256, seed)
        record = {k: v for k, v in tree.__dict__.items() if k != "path"}
        tmp_meta.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(tmp_meta, meta)  # last: the description exists only beside a complete archive
        return tree
    finally:
        tmp.unlink(missing_ok=True)
        tmp_meta.unlink(missing_ok=True)


def _read_meta(archive: Path, meta: Path) -> TarTree | None:
    try:
        record = json.loads(meta.read_text())
        tree = TarTree(path=archive, **record)
        if archive.stat().st_size != tree.archive_bytes:
            return None
        return tree
    except (OSError, ValueError, TypeError):
        return None


def extract_command(archive: str, directory: str, *, sync: bool = True) -> str:
    """Extract `archive` into `directory` (made if missing); then sync, so the time includes the data
    reaching the disk rather than only the page cache."""
    cmd = f"mkdir -p {shlex.quote(directory)} && tar -x -f {shlex.quote(archive)} -C {shlex.quote(directory)}"
    return cmd + (" && sync" if sync else "")


def create_command(directory: str, archive_out: str, *, sync: bool = True) -> str:
    """Archive the tree in `directory` into `archive_out` (on the filesystem under test, outside the
    tree: tar must not read its own output); then sync."""
    tree = posixpath.normpath(directory)
    out = posixpath.normpath(archive_out)
    if out == tree or out.startswith(tree.rstrip("/") + "/"):
        raise ValueError(f"tar archive {archive_out!r} must not be inside the tree it archives ({directory!r})")
    cmd = f"tar -c -f {shlex.quote(archive_out)} -C {shlex.quote(directory)} ."
    return cmd + (" && sync" if sync else "")


def verify_command(directory: str, *, contents: bool = False) -> str:
    """Print "files N bytes M" for the regular files under `directory`; with contents=True also
    "manifest H", the sha256 of sha256sum's lines for every file (compare with TarTree.manifest_sha256;
    this reads every file)."""
    d = shlex.quote(directory)
    count = (f"find {d} -type f -printf '%s\\n' | "
             "{ n=0; b=0; while read s; do n=$((n+1)); b=$((b+s)); done; echo \"files $n bytes $b\"; }")
    if not contents:
        return count
    manifest = (f"cd {d} && find . -type f | LC_ALL=C sort | xargs -r -d '\\n' sha256sum | sha256sum"
                " | { read h rest; echo \"manifest $h\"; }")
    return f"{count} && ( {manifest} )"


_VERIFY_RE = re.compile(r"^files (\d+) bytes (\d+)$", re.MULTILINE)
_MANIFEST_RE = re.compile(r"^manifest ([0-9a-f]{64})$", re.MULTILINE)


@dataclass(frozen=True)
class TreeCount:
    """What verify_command printed."""

    files: int
    total_bytes: int
    manifest_sha256: str | None


def parse_verify(text: str) -> TreeCount:
    """Parse verify_command's output; ValueError when it is not there."""
    m = _VERIFY_RE.search(text)
    if not m:
        raise ValueError(f"no 'files N bytes M' line in the tree check's output: {text.strip()[:400]!r}")
    h = _MANIFEST_RE.search(text)
    return TreeCount(int(m.group(1)), int(m.group(2)), h.group(1) if h else None)


def confirm(tree: TarTree, count: TreeCount) -> None:
    """Raise ValueError when the extracted tree (as verify_command saw it) is not `tree`."""
    problems = []
    if count.files != tree.files:
        problems.append(f"{count.files} files, expected {tree.files}")
    if count.total_bytes != tree.total_bytes:
        problems.append(f"{count.total_bytes} bytes, expected {tree.total_bytes}")
    if count.manifest_sha256 is not None and count.manifest_sha256 != tree.manifest_sha256:
        problems.append("file contents differ (manifest sha256 mismatch)")
    if problems:
        raise ValueError("extracted tree is wrong: " + "; ".join(problems))
