"""Software stacks (issue 47; guestbench.stacks): a Debian suite's root file system built by mmdebstrap from this
machine's own apt sources, listed with its versions, removed; a build killed by SIGKILL leaves no process and no
mount, and the next build sweeps its directory. The real builds are lean (Python and a venv with one package from
the package index: 18 s here); the full set is the same path with more packages (docs/stacks.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guestbench.host import os_release
from guestbench.stacks import sandbox, sources, store
from guestbench.util.errors import UserError

from helpers.cli import guestbench
from helpers.paths import ROOT
from helpers.session import session_tmp_path

STACKS = session_tmp_path() / "tmp" / "stacks"  # the session's temp root (GUESTBENCH_TMPDIR), as the CLI's

HOST_DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://example.org/vendor
Suites: stable
Components: main
Enabled: yes
"""


# ------------------------------------------------------------------------------------------------ sources


def _lists(tmp: Path) -> Path:
    """apt's copies of the Release files: Debian's archives and a mirror of them, and two vendors' (review: a
    vendor's archive that names the machine's suite has no trixie; it was taken and the build failed)."""
    origins = {"deb.debian.org_debian_dists_bookworm": "Debian",
               "deb.debian.org_debian_dists_bookworm-updates": "Debian",
               "deb.debian.org_debian_dists_bookworm-backports": "Debian",
               "deb.debian.org_debian-security_dists_bookworm-security": "Debian",
               "mirror.example_debian_dists_bookworm": "Debian", "local.example_debian_dists_bookworm": "Debian",
               "download.docker.com_linux_debian_dists_bookworm": "Docker",
               "apt.postgresql.org_pub_repos_apt_dists_bookworm-pgdg": "apt.postgresql.org"}
    for stem, origin in origins.items():
        (tmp / f"{stem}_InRelease").write_text(f"-----BEGIN PGP SIGNED MESSAGE-----\nOrigin: {origin}\nLabel: x\n")
    return tmp


def test_a_suites_sources_are_the_machines_debian_ones_with_the_suite_replaced(tmp_path: Path) -> None:
    found = sources.parse_deb822(HOST_DEB822) + sources.parse_list(
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main non-free  # a mirror\n"
        "deb\t[trusted=yes] http://local.example/debian bookworm main\n"
        "# deb http://old.example/debian bookworm main\ndeb-src http://mirror.example/debian bookworm main\n"
        "deb cdrom:[Debian GNU/Linux 12 _Bookworm_ - Official amd64 DVD Binary-1]/ bookworm contrib main\n"
        "deb https://download.docker.com/linux/debian bookworm stable\n"
        "deb http://apt.postgresql.org/pub/repos/apt bookworm-pgdg main\n"
        "deb http://deb.debian.org/debian bookworm-backports main\n")
    lists = _lists(tmp_path)
    trixie = [s.line() for s in sources.for_suite("trixie", found, "bookworm", lists)]
    assert trixie == [
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian "
        "trixie-updates main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security "
        "trixie-security main contrib",
        "deb [signed-by=/k.gpg] http://mirror.example/debian trixie main non-free",
        "deb [trusted=yes] http://local.example/debian trixie main"]  # no vendor's, no disc, no backports
    sid = [s.suite for s in sources.for_suite("sid", found, "bookworm", lists)]
    assert sid == ["sid", "sid", "sid"]  # unstable has no -updates or -security
    assert os_release.codename('PRETTY_NAME="Debian GNU/Linux 12"\nVERSION_CODENAME=bookworm\n') == "bookworm"


@pytest.mark.parametrize("suite, why", [("tri xie", "is not a Debian suite name"), ("../x", "is not a Debian suite"),
                                        ("trixie", "none of the machine's apt sources is Debian's own archive")])
def test_a_suite_that_cannot_be_derived_is_one_line(suite: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=why):
        sources.for_suite(suite, sources.parse_list("deb http://example.org/vendor stable main\n"), "bookworm",
                          tmp_path)


# ------------------------------------------------------------------------------------------------ the store


def test_names_and_stacks_that_cannot_be_used_are_one_line_and_never_touched(tmp_path: Path) -> None:
    """A bad name, a missing stack, a half-built one, and one whose directory another user owns: each one line,
    exit 2 where a command acts on it; nothing of another user's is removed."""
    for bad in ("Trixie", "host", "9x", "a" * 40, "x/y"):
        proc = guestbench("stack", "rm", bad)
        assert proc.returncode == 2 and "is not a stack name" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = guestbench("stack", "rm", "nosuchstack")
    assert proc.returncode == 2 and "no stack named 'nosuchstack'" in proc.stderr
    STACKS.mkdir(mode=0o700, parents=True, exist_ok=True)
    half, other, odd = STACKS / "half", STACKS / "other", STACKS / "odd"
    for d in (half, other, odd):
        d.mkdir(exist_ok=True)
    (other / "guestbench-stack.json").write_text("{}")
    (odd / "guestbench-stack.json").write_text('{"versions": [1], "sources": "abc"}')  # review: it crashed `list`
    os.chown(other, 65534, 65534)  # nobody's
    try:
        listed = json.loads(guestbench("stack", "list", "--json").stdout)
        problems = {s["name"]: s["problem"] for s in listed}
        assert problems["half"] == "half-built (no record): build it again, or remove it"
        assert problems["odd"] == "its record is not one guestbench writes"
        assert "nobody" in problems["other"] and problems["other"].endswith("not used"), problems
        proc = guestbench("stack", "rm", "other")
        assert proc.returncode == 2 and "not removed" in proc.stderr and other.exists()
        # a build over it is refused before it starts, --force or not (review: it was after a whole build)
        proc = guestbench("stack", "build", "other", "--suite", "trixie", "--packages", "lean", "--force")
        assert proc.returncode == 2 and "remove it yourself, or choose another name" in proc.stderr, proc.stderr
        proc = guestbench("stack", "build", "half", "--suite", "trixie", "--packages", "lean")
        assert proc.returncode == 2 and "exists (half-built (no record)" in proc.stderr and "--force" in proc.stderr
        assert not list(STACKS.glob(".build-*"))
        for name in ("half", "odd"):
            assert guestbench("stack", "rm", name).returncode == 0 and not (STACKS / name).exists()
        assert not list(STACKS.glob(".build-*"))
    finally:
        subprocess.run(["rm", "-rf", str(other)], check=True)


# ------------------------------------------------------------------------------------------------ real builds


def _left(under: Path) -> tuple[list[str], list[str]]:
    """Processes whose command line names `under`, and mounts below it."""
    procs = subprocess.run(["pgrep", "-af", str(under)], capture_output=True, text=True).stdout.splitlines()
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if line.split()[4].startswith(str(under))]
    return [p for p in procs if "pgrep" not in p], mounts


@pytest.mark.launch
def test_a_lean_stack_is_built_listed_used_and_removed_and_a_killed_build_leaves_nothing() -> None:
    name = f"lean{os.getpid()}"
    # SIGKILL mid-build (once apt works in the stack's namespaces): no process, no mount; the next build sweeps it
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", "stack", "build", name, "--suite", "trixie",
                             "--packages", "lean"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not _left(STACKS)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left(STACKS)[0], "the build never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while _left(STACKS) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left(STACKS) == ([], []), _left(STACKS)
    (killed,) = STACKS.glob(".build-*")
    # the real build
    t0 = time.monotonic()
    built = guestbench("stack", "build", name, "--suite", "trixie", "--packages", "lean", timeout=900)
    assert built.returncode == 0, built.stderr[-2000:]
    assert f"removed {killed} (its build died)" in built.stderr and not killed.exists()
    path = Path(built.stdout.strip())
    assert path == STACKS / name and not list(STACKS.glob(".build-*"))
    (stack,) = [s for s in json.loads(guestbench("stack", "list", "--json").stdout) if s["name"] == name]
    assert stack["suite"] == "trixie" and stack["problem"] is None and stack["versions"]["python"].startswith("3.13")
    assert any(" trixie main" in line for line in stack["sources"])
    used = subprocess.run(["chroot", str(path), f"{stack['venv']}/bin/python", "-c",
                           "import sys, yaml; print(sys.version_info[:2], yaml.__file__)"],
                          capture_output=True, text=True, timeout=60)
    assert used.returncode == 0 and "(3, 13)" in used.stdout and stack["venv"] in used.stdout, used.stderr
    # guestbench's worker and its set-up program run on the stack's Python 3.13, in its sandbox (guestbench's tree
    # read-only: nothing written beside it); without libguestfs there, the set-up says so
    st = store.load(name)
    py = sandbox.python(st)
    script = (f"{py} -c 'import guestbench.execute.worker, guestbench.backends.uml.hv' && "
              f"{py} -m guestbench.stacks.inside uml")
    inside = subprocess.run(sandbox.command(st, ["sh", "-c", script]), capture_output=True, text=True, timeout=120)
    answer = json.loads(inside.stdout.splitlines()[-1]) if inside.stdout.strip() else {}
    assert answer.get("python", "").startswith("3.13."), inside.stderr[-2000:]
    assert not answer["availability"]["usable"] and "bindings do not import" in answer["availability"]["reason"]
    again = guestbench("stack", "build", name, "--suite", "trixie", "--packages", "lean")
    assert again.returncode == 2 and "exists; rebuild it with --force" in again.stderr
    missing = guestbench("stack", "build", "nosuite", "--packages", "lean", timeout=300)
    assert missing.returncode == 2 and "the machine's archive has no suite 'nosuite'" in missing.stderr, missing.stderr
    assert guestbench("stack", "rm", name).returncode == 0 and not path.exists()
    assert _left(STACKS) == ([], []) and not list(STACKS.glob(".build-*"))
    print(f"lean trixie stack built in {time.monotonic() - t0:.0f} s")
