"""guestbench's caches, registry and locks are the effective user's alone: what another user (the real user
nobody, through runuser) made where guestbench keeps things — a home, an appliance, a level-1 image, a cache, an
entry in the registry of active runs, a lock — is refused in one line or ignored, and never run, followed,
waited on or deleted. The old shared paths (/var/tmp/guestbench-*, /tmp/guestbench-runs) are no longer used."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from guestbench import appliance, locks, neighbours, owned, paths
from guestbench.backends.uml import write_hv_wrapper
from guestbench.nested import image

from conftest import ROOT, guestbench, session_tmp_path, write_scenario

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root (CI is root)")

NOBODY = "nobody"
OLD_APPLIANCES, OLD_NESTED, OLD_RUNS = (Path("/var/tmp/guestbench-appliances"), Path("/var/tmp/guestbench-nested"),
                                        Path("/tmp/guestbench-runs"))


def as_nobody(*argv: str) -> None:
    subprocess.run(["runuser", "-u", NOBODY, "--", *argv], check=True, timeout=30, stdin=subprocess.DEVNULL)


def tree(path: Path) -> dict[str, tuple[int, int, int, bytes | str | None]]:
    """What is at and below `path` (never following links): {relative name: (uid, mode, mtime_ns, content)}."""
    out: dict[str, tuple[int, int, int, bytes | str | None]] = {}
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() and not path.is_symlink() else [path]:
        st = os.lstat(p)
        content: bytes | str | None = None
        if stat.S_ISREG(st.st_mode):
            content = p.read_bytes()
        elif stat.S_ISLNK(st.st_mode):
            content = os.readlink(p)
        out[str(p.relative_to(path))] = (st.st_uid, st.st_mode, st.st_mtime_ns, content)
    return out


@pytest.fixture
def drop() -> Iterator[Path]:
    """A sticky directory anyone may write in (as /tmp) on the session's filesystem: nobody makes things there that
    a test then moves where guestbench keeps its own (where nobody could not write himself)."""
    d = Path(tempfile.mkdtemp(prefix="drop-", dir=session_tmp_path()))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def home(drop: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp root of this test's (GUESTBENCH_TMPDIR), root's and 0755 as guestbench makes it."""
    d = drop / "home"
    d.mkdir(mode=0o755)
    monkeypatch.setenv(owned.STATE_ENV, str(d))
    return d


def planted(drop: Path, name: str, kernel_marker: Path | None = None) -> Path:
    """A directory made by nobody in `drop`, holding a whole 'appliance' whose kernel would leave
    `kernel_marker` if anyone ran it."""
    d = drop / name
    as_nobody("mkdir", "-p", str(d))
    if kernel_marker is not None:
        as_nobody("sh", "-c", f"printf '#!/bin/sh\\ntouch {kernel_marker}\\n' > {d}/kernel && chmod 755 {d}/kernel"
                  f" && for f in initrd root README.fixed uuid data.img inputs.json; do echo x > {d}/$f; done")
    return d


def test_a_home_another_user_made_is_refused_in_one_line_and_left_alone(drop: Path, tmp_path: Path) -> None:
    marker = drop / "ran"
    home = planted(drop, "home")
    as_nobody("mkdir", "-p", f"{home}/guestbench-appliances/uml-standard")
    planted(home / "guestbench-appliances" / "uml-standard", appliance.inputs_key(appliance.inputs("uml")), marker)
    before = tree(home)
    sc = write_scenario(tmp_path / "s.yaml", "name: t\nrepetitions: 1\nwarmup: 0\nmeasurements: [startup]\n")
    proc = subprocess.run([sys.executable, "-m", "guestbench", "scenario", str(sc), "--backend", "uml", "--results",
                           str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, owned.STATE_ENV: str(home)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"guestbench: the temp root (GUESTBENCH_TMPDIR) {home} is owned by nobody, not root; use a directory of your "
        "own or a sticky one such as /tmp")
    assert "Traceback" not in proc.stderr
    assert not marker.exists() and tree(home) == before


@pytest.mark.parametrize("kind", ["nobody's", "0777", "symlink"])
def test_a_home_that_is_not_private_is_refused(drop: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    target = drop / "home"
    if kind == "nobody's":
        as_nobody("mkdir", str(target))
        why = "is owned by nobody, not root"
    elif kind == "0777":
        target.mkdir()
        os.chmod(target, 0o777)  # not sticky: anyone may rename what guestbench makes in it
        why = "is writable by others (mode 777)"
    else:
        (drop / "real").mkdir()
        as_nobody("ln", "-s", str(drop / "real"), str(target))
        why = "is a symbolic link"
    monkeypatch.setenv(owned.STATE_ENV, str(target))
    expected = f"the temp root (GUESTBENCH_TMPDIR) {target} {why}; "
    with pytest.raises(owned.UnsafePath, match="^" + re.escape(expected)):
        paths.temp_root()
    assert list((drop / "real").iterdir() if kind == "symlink" else []) == []


def _plant_appliance(kind: str, home: Path, drop: Path, marker: Path) -> tuple[Path, str]:
    """Plant the uml standard appliance the way `kind` says; (what the refusal names, why)."""
    key = appliance.inputs_key(appliance.inputs("uml"))
    root = home / appliance.APPLIANCES_DIR
    variant = root / "uml-standard"
    if kind == "appliance cache nobody's":
        os.rename(planted(drop, "x"), root)
        planted(drop, "k", marker).rename(root / "k")
        return root, "is owned by nobody, not root"
    if kind == "variant dir 0777":
        variant.mkdir(parents=True)
        os.chmod(variant, 0o777)
        os.rename(planted(drop, "k", marker), variant / key)
        return variant, "is writable by others (mode 777)"
    if kind == "variant dir a symlink":
        root.mkdir()
        planted(drop, "v")
        os.rename(planted(drop, "k", marker), drop / "v" / key)
        os.symlink(drop / "v", variant)
        return variant, "is a symbolic link"
    variant.mkdir(parents=True)
    if kind == "key dir nobody's":
        os.rename(planted(drop, "k", marker), variant / key)
        return variant / key, "is owned by nobody, not root"
    (variant / key).mkdir()  # kernel nobody's, in a directory of root's
    for name in appliance.FILES:
        (variant / key / name).write_text("x")
    os.unlink(variant / key / "kernel")
    os.rename(planted(drop, "k", marker) / "kernel", variant / key / "kernel")
    return variant / key / "kernel", "is owned by nobody, not root"


@pytest.mark.parametrize("kind", ["appliance cache nobody's", "variant dir 0777", "variant dir a symlink",
                                  "key dir nobody's", "kernel nobody's"])
def test_a_planted_appliance_is_refused_and_never_run(home: Path, drop: Path, kind: str) -> None:
    marker = drop / "ran"
    named, why = _plant_appliance(kind, home, drop, marker)
    before = tree(home), tree(drop)
    with pytest.raises(owned.UnsafePath, match=re.escape(f" {named} {why}; ")) as e:
        appliance.appliance_dir("uml")
    assert "\n" not in str(e.value) and len(str(e.value)) < 400
    st = appliance.state("uml")  # doctor: says so, builds nothing
    assert not st["built"] and f"{named} {why}" in st["error"]
    assert not marker.exists() and (tree(home), tree(drop)) == before


def test_appliance_directories_are_made_0755_and_checked(home: Path) -> None:
    d = appliance.variant_dir("uml", "standard")
    for p in (d, d.parent):
        st = os.lstat(p)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755), p
    assert d == home / appliance.APPLIANCES_DIR / "uml-standard"


@pytest.mark.parametrize("kind", ["images dir nobody's", "image dir nobody's"])
def test_a_planted_level1_image_is_refused(home: Path, drop: Path, kind: str) -> None:
    marker = drop / "ran"
    if kind == "images dir nobody's":
        os.rename(planted(drop, "n"), home / "guestbench-nested")
        planted(drop, "k", marker).rename(home / "guestbench-nested" / "0123456789abcdef")
        named = home / "guestbench-nested"
        with pytest.raises(owned.UnsafePath, match=f"^the level-1 images {named} is owned by nobody, not root; "):
            image.images_dir()
    else:
        base = image.images_dir()
        assert stat.S_IMODE(os.lstat(base).st_mode) == 0o755
        os.rename(planted(drop, "k", marker), base / "0123456789abcdef")
        with pytest.raises(owned.UnsafePath, match=f"^a level-1 image {base}/0123456789abcdef is owned by nobody"):
            image.built(base / "0123456789abcdef")
    assert not marker.exists()


def test_the_cache_is_checked_and_a_shared_one_gets_a_directory_of_the_users_own(
        drop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_ENV, str(drop))  # sticky, root's, anyone writes: as a tmpfs's root or /tmp
    assert paths.cache_dir() == drop / "guestbench-0" == paths.cache_path()
    assert (os.lstat(drop / "guestbench-0").st_uid, stat.S_IMODE(os.lstat(drop / "guestbench-0").st_mode)) == \
        (0, 0o755)
    theirs = planted(drop, "theirs")
    monkeypatch.setenv(paths.CACHE_ENV, str(theirs))
    with pytest.raises(owned.UnsafePath, match=f"^the cache \\(GUESTBENCH_CACHE\\) {theirs} is owned by nobody, not "
                                               "root; .*point GUESTBENCH_CACHE elsewhere"):
        paths.cache_dir()
    os.symlink(drop / "guestbench-0", drop / "link")
    monkeypatch.setenv(paths.CACHE_ENV, str(drop / "link"))
    with pytest.raises(owned.UnsafePath, match="is a symbolic link"):
        paths.cache_dir()


def test_a_planted_hypervisor_wrapper_is_refused_not_run_or_replaced(drop: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = drop / "cache"
    cache.mkdir(mode=0o755)
    (cache / "hv").mkdir(mode=0o755)
    marker = drop / "ran"
    os.rename(planted(drop, "k", marker) / "kernel", cache / "hv" / "uml")
    before = tree(cache)
    with pytest.raises(owned.UnsafePath, match=f"^a hypervisor wrapper {cache}/hv/uml is owned by nobody"):
        write_hv_wrapper(cache)
    assert tree(cache) == before and not marker.exists()


ACTIVE = "import json; from guestbench import neighbours; print(json.dumps([e.pid for e in neighbours.active()]))"


def test_a_fifo_a_symlink_or_another_users_file_in_the_registry_is_ignored_and_never_blocks(drop: Path) -> None:
    runs = drop / "runs"
    runs.mkdir(mode=0o755)
    as_nobody("mkfifo", str(drop / "zzz.run"))
    os.rename(drop / "zzz.run", runs / "zzz.run")
    victim = drop / "victim"
    victim.write_text("root's file\n")
    os.symlink(victim, runs / "link.run")
    as_nobody("sh", "-c", f"echo '{{\"id\": \"x\", \"pid\": 1, \"started_utc\": \"\", \"what\": \"\"}}' > {drop}/n.run")
    os.rename(drop / "n.run", runs / "n.run")
    before = tree(runs)
    env = {**os.environ, neighbours.RUNS_DIR_ENV: str(runs)}
    try:  # the old code opened the FIFO for reading and waited for a writer forever
        proc = subprocess.run([sys.executable, "-c", ACTIVE], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=20, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("neighbours.active() blocked on the FIFO")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []
    assert tree(runs) == before and victim.read_text() == "root's file\n"


def test_registry_entries_are_0644_in_a_checked_directory(drop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(drop))  # shared: every user's runs in one place no more
    with pytest.raises(owned.UnsafePath, match=f"^the registry of active runs \\(GUESTBENCH_RUNS_DIR\\) {drop} is "
                                               "writable by others"):
        neighbours.runs_dir()
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(drop / "runs"))
    old = os.umask(0)
    try:
        with neighbours.Registration("a test") as me:
            assert stat.S_IMODE(os.lstat(me.path).st_mode) == 0o644
            assert stat.S_IMODE(os.lstat(drop / "runs").st_mode) == 0o755
    finally:
        os.umask(old)


def test_lock_files_are_0644_and_a_planted_one_is_refused(drop: Path) -> None:
    d = drop / "locks"
    with locks.exclusive(d / "a.lock", "a test's thing", 5):
        pass
    assert stat.S_IMODE(os.lstat(d / "a.lock").st_mode) == 0o644  # was 0666: anyone could open and hold it
    victim = drop / "victim"
    victim.write_text("root's file\n")
    os.symlink(victim, d / "b.lock")
    with pytest.raises(owned.UnsafePath, match=f"^the lock file for a test's thing {d}/b.lock is a symbolic link"):
        with locks.exclusive(d / "b.lock", "a test's thing", 5):
            pass
    as_nobody("touch", str(drop / "c.lock"))
    os.rename(drop / "c.lock", d / "c.lock")
    with pytest.raises(owned.UnsafePath, match="c.lock is owned by nobody"):
        with locks.exclusive(d / "c.lock", "a test's thing", 5):
            pass
    assert victim.read_text() == "root's file\n"
    shared = planted(drop, "shared")
    with pytest.raises(owned.UnsafePath, match=f"^the lock directory for a test's thing {shared} is owned by nobody"):
        with locks.exclusive(shared / "d.lock", "a test's thing", 5):
            pass
    assert list(shared.iterdir()) == []
