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
from pathlib import Path
from collections.abc import Iterator

import pytest

from guestbench.backends import appliance
from guestbench.host import locks
from guestbench.host import neighbours
from guestbench.host import owned
from guestbench.host import paths
from guestbench.backends.uml import write_hv_wrapper
from guestbench.nested import image

from helpers.cli import guestbench, write_scenario
from helpers.dirs import tree
from helpers.paths import ROOT
from helpers.session import host_path_lock, run_dirs, session_tmp_path
from helpers.users import as_nobody, planted

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root (CI is root)")

OLD_APPLIANCES, OLD_NESTED, OLD_RUNS = (Path("/var/tmp/guestbench-appliances"), Path("/var/tmp/guestbench-nested"),
                                        Path("/tmp/guestbench-runs"))


@pytest.fixture
def drop(shared: Path) -> Path:
    """The sticky directory anyone may write in (conftest's `shared`, on the session's filesystem): nobody makes
    things there that a test then moves where guestbench keeps its own (where nobody could not write himself)."""
    return shared


@pytest.fixture
def home(drop: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp root of this test's (GUESTBENCH_TMPDIR), root's and 0755 as guestbench makes it."""
    d = drop / "home"
    d.mkdir(mode=0o755)
    monkeypatch.setenv(owned.STATE_ENV, str(d))
    return d


def test_a_home_another_user_made_is_refused_in_one_line_and_left_alone(drop: Path, tmp_path: Path) -> None:
    marker = drop / "ran"
    home = planted(drop, "home")
    as_nobody("mkdir", "-p", f"{home}/guestbench-appliances/uml-standard")
    planted(home / "guestbench-appliances" / "uml-standard", appliance.inputs_key(appliance.inputs("uml")), marker)
    before = tree(home)
    sc = write_scenario(tmp_path / "s.yaml", "name: t\nrepetitions: 1\nwarmup: 0\nmeasurements: [startup]\n")
    proc = guestbench("scenario", str(sc), "--backend", "uml", "--results", str(tmp_path / "r"), timeout=120,
                      env={**os.environ, owned.STATE_ENV: str(home)})
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


ACTIVE = "import json; from guestbench.host import neighbours; print(json.dumps([e.pid for e in neighbours.active()]))"


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


def test_registry_entries_are_0600_in_a_checked_directory(drop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(drop))  # shared: every user's runs in one place no more
    with pytest.raises(owned.UnsafePath, match=f"^the registry of active runs \\(GUESTBENCH_RUNS_DIR\\) {drop} is "
                                               "writable by others"):
        neighbours.runs_dir()
    monkeypatch.setenv(neighbours.RUNS_DIR_ENV, str(drop / "runs"))
    old = os.umask(0)
    try:
        with neighbours.Registration("a test") as me:
            assert stat.S_IMODE(os.lstat(me.path).st_mode) == 0o600  # was 0644: anyone could hold it
            assert stat.S_IMODE(os.lstat(drop / "runs").st_mode) == 0o755
    finally:
        os.umask(old)


def test_lock_files_are_0600_and_a_planted_one_is_refused(drop: Path) -> None:
    d = drop / "locks"
    with locks.exclusive(d / "a.lock", "a test's thing", 5):
        pass
    assert stat.S_IMODE(os.lstat(d / "a.lock").st_mode) == 0o600  # was 0666, then 0644: anyone could hold it
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


# Run inside a mount namespace of its own with a private /tmp (so that the FIFO planted in /tmp/guestbench-runs
# cannot stop the runs of anyone else on this machine whose guestbench still uses it), the other mount points
# given hidden under empty tmpfs: nobody makes the old registry with a FIFO and a symlink in it, the commands run,
# and what is in that registry before and after is printed as JSON.
IN_NAMESPACE = r"""
import json, os, subprocess, sys
def listing(d):
    return sorted((p, os.lstat(os.path.join(d, p)).st_uid, os.lstat(os.path.join(d, p)).st_mode) for p in os.listdir(d))
req = json.loads(sys.argv[1])
# a /tmp of this namespace's own, where nobody plants the old registry; what must stay reachable in the real /tmp
# (the checkout and its venv, when it lives there as a CI clone may) is bound back from it
subprocess.run(["mount", "--bind", "/tmp", req["stash"]], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,size=512m", "tmpfs", "/tmp"], check=True)
for keep in req["keep"]:
    if keep.startswith("/tmp/"):
        os.makedirs(keep, exist_ok=True)
        subprocess.run(["mount", "--bind", req["stash"] + keep[len("/tmp"):], keep], check=True)
subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", "mkdir -m 1777 /tmp/guestbench-runs && "
                "mkfifo -m 666 /tmp/guestbench-runs/zzz.run && ln -s /etc/shadow /tmp/guestbench-runs/s.run"],
               check=True, stdin=subprocess.DEVNULL)
before = listing("/tmp/guestbench-runs")
for d in req["hide"]:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=64m", "tmpfs", d], check=True)
results = []
for argv in req["commands"]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=req["timeout"], stdin=subprocess.DEVNULL)
        results.append([p.returncode, p.stdout, p.stderr])
    except subprocess.TimeoutExpired:
        results.append([None, "", "timed out"])
print(json.dumps({"results": results, "before": before, "after": listing("/tmp/guestbench-runs")}))
"""


def in_namespace(commands: list[list[str]], hide: list[str], timeout: float) -> list[list]:
    """Run `commands` one after another in a private mount namespace (IN_NAMESPACE); their [status, out, err]."""
    env = {k: v for k, v in os.environ.items() if k != neighbours.RUNS_DIR_ENV}
    stash = Path(tempfile.mkdtemp(prefix="realtmp-", dir=session_tmp_path()))
    keep = [str(ROOT), os.path.realpath(sys.prefix)]
    try:
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c",
                               IN_NAMESPACE, json.dumps({"commands": commands, "hide": hide, "timeout": timeout,
                                                         "stash": str(stash), "keep": keep})],
                              capture_output=True, text=True, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                              timeout=timeout * len(commands) + 60)
    finally:
        stash.rmdir()
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["before"] == out["after"] and [n for n, *_ in out["after"]] == ["s.run", "zzz.run"], out
    return out["results"]


@pytest.fixture
def old_paths(drop: Path) -> Iterator[Path]:
    """The appliance cache and level-1 images where guestbench kept them before, made by nobody, with a whole uml
    appliance (for the current inputs) and image whose kernel would leave the marker (yielded) if anyone ran it;
    checked unchanged and removed after the test."""
    with host_path_lock("old-paths"):  # test_nested plants the same path
        yield from _planted_old_paths(drop)


def _planted_old_paths(drop: Path) -> Iterator[Path]:
    if OLD_APPLIANCES.exists() or OLD_NESTED.exists():
        pytest.skip(f"{OLD_APPLIANCES} or {OLD_NESTED} exists already: not this test's to plant or remove")
    marker = drop / "kernel-ran"
    key = appliance.inputs_key(appliance.inputs("uml"))
    try:
        as_nobody("mkdir", "-p", str(OLD_APPLIANCES / "uml-standard"), str(OLD_NESTED))
        planted(OLD_APPLIANCES / "uml-standard", key, marker)
        planted(OLD_NESTED, "0123456789abcdef", marker)
        before = tree(OLD_APPLIANCES), tree(OLD_NESTED)
        yield marker
        assert (tree(OLD_APPLIANCES), tree(OLD_NESTED)) == before
        assert not marker.exists(), "a planted kernel was run"
    finally:
        shutil.rmtree(OLD_APPLIANCES, ignore_errors=True)
        shutil.rmtree(OLD_NESTED, ignore_errors=True)


HOMES = """
import json
from guestbench.backends import appliance
from guestbench.host import locks
from guestbench.host import neighbours
from guestbench.host import owned
from guestbench.host import paths
from guestbench.backends.uml import write_hv_wrapper
from guestbench.nested import image
homes = {"temp root": paths.temp_root(), "appliances": appliance.variant_dir("uml", "standard"),
         "level-1 images": image.images_dir(), "registry": neighbours.runs_dir(), "cache": paths.cache_dir(),
         "hv wrapper": write_hv_wrapper(paths.cache_dir())}
lock = appliance.appliances_root() / ".locks" / "t.lock"
with neighbours.Registration("a test") as me, locks.exclusive(lock, "t", 5):
    homes["entry"] = me.path
    assert [e.id for e in neighbours.active()] == [me.id]
print(json.dumps({k: str(v) for k, v in homes.items()}))
"""


def test_the_old_shared_paths_are_never_used_or_touched(old_paths: Path) -> None:
    env = ["env", "-u", owned.STATE_ENV, "-u", paths.CACHE_ENV, "-u", "XDG_CACHE_HOME"]
    ((status, out, err),) = in_namespace([[*env, sys.executable, "-c", HOMES]],
                                         hide=["/var/lib", "/var/cache", "/run"], timeout=60)
    assert status == 0, err[-3000:]
    homes = {k: Path(v) for k, v in json.loads(out).items()}
    assert homes["temp root"] == owned.ROOT_HOME and homes["cache"] == paths.ROOT_CACHE
    assert homes["appliances"] == owned.ROOT_HOME / appliance.APPLIANCES_DIR / "uml-standard"
    assert homes["level-1 images"] == owned.ROOT_HOME / "guestbench-nested"
    assert homes["registry"] == Path("/run/guestbench/runs") and homes["entry"].parent == homes["registry"]
    for p in homes.values():
        assert not any(p.is_relative_to(d) for d in (Path("/tmp"), Path("/var/tmp"))), p


# `guestbench fleet local 1` until its worker has joined (seen through its own TLS settings), then Ctrl-C: its exit
# status
FLEET_LOCAL = """
import shlex, signal, subprocess, sys, time
from distributed import Client
from distributed.security import Security
proc = subprocess.Popen([sys.executable, "-m", "guestbench", "fleet", "local", "1", "--backend", "uml"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    address = proc.stdout.readline().strip()
    lines = [proc.stderr.readline() for _ in range(2)]
    settings = dict(w.split("=", 1) for w in shlex.split(lines[1].split(": export ")[1]))
    tls = "DASK_DISTRIBUTED__COMM__TLS__"
    security = Security(require_encryption=True, tls_ca_file=settings[tls + "CA_FILE"],
                        tls_client_cert=settings[tls + "CLIENT__CERT"], tls_client_key=settings[tls + "CLIENT__KEY"])
    deadline = time.monotonic() + 180
    with Client(address, security=security, timeout=60) as client:
        while not client.scheduler_info()["workers"]:
            assert time.monotonic() < deadline and proc.poll() is None, "no worker joined"
            time.sleep(0.5)
finally:
    proc.send_signal(signal.SIGINT)
    status = proc.wait(timeout=300)
    print(proc.stderr.read()[-2000:], file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.launch
@pytest.mark.timeout(1200)
def test_a_run_doctor_exec_and_fleet_local_work_beside_every_old_path_another_user_made(old_paths: Path,
                                                                                        drop: Path) -> None:
    # the scenario and results live in the session's directory: /tmp is the namespace's own
    sc = write_scenario(drop / "s.yaml",
                        "name: beside\nrepetitions: 1\nwarmup: 0\ncold: false\nmeasurements: [startup]\n")
    gb = [sys.executable, "-m", "guestbench"]
    commands = [[*gb, "scenario", str(sc), "--backend", "uml", "--results", str(drop / "r")],
                [*gb, "doctor", "--backend", "uml", "--json"],
                [*gb, "exec", "uml", "--", "guestfish", "-a", "/dev/null", "run"],
                [sys.executable, "-c", FLEET_LOCAL]]
    run, doctor, exec_, fleet = in_namespace(commands, hide=[], timeout=600)
    assert run[0] == 0, run[2][-3000:]
    assert exec_[0] == 0, exec_[2][-3000:]
    assert fleet[0] == 0, fleet[2][-3000:]
    (results,) = (drop / "r").glob("*.json")
    (cell,) = json.loads(results.read_text())["cells"]
    assert cell["failures"] == [] and len(cell["samples"]) == 1, cell
    assert doctor[0] == 0, doctor[2][-3000:]
    doc = json.loads(doctor[1])
    assert doc["backends"]["uml"]["usable"] is True
    assert doc["appliances"]["uml-standard"]["built"] is True
    assert not doc["appliances"]["uml-standard"]["path"].startswith("/var/tmp/guestbench-appliances")
    assert run_dirs() == [], "the run left its directory behind"
