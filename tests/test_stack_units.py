"""Stacks without a launch (issue 47): the sandbox's command line binds only what it names, a stack's /etc/group
gets /dev/kvm's group, versions read as upstream's, cells are named and planned per stack and UML mode, a scenario's
stacks and modes are checked in one line, the software table says what differs, a dry run says which stack is
missing. The real runs are in test_stack_runs.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guestbench.analysis import history, machines, software
from guestbench.results.model import Cell, Run, system_name
from guestbench.plan import dryrun, cells as plan
from guestbench.execute import supervisor
from guestbench.execute.protocol import Request
from guestbench.scenario import load
from guestbench.stacks import backend as stack_backend
from guestbench.stacks import sandbox, store
from guestbench.stacks.backend import upstream
from guestbench.stacks.store import Stack
from guestbench.util.errors import UserError

from helpers.cli import guestbench


def _root(tmp_path: Path) -> Stack:
    """A stack directory as mmdebstrap leaves one (merged /usr, /var/run a link), no software in it."""
    root = tmp_path / "stacks" / "fake"
    for d in ("usr/bin", "etc/libvirt", "opt/guestbench/venv", "boot", "var/lib/dpkg", "var/tmp", "root", "tmp"):
        (root / d).mkdir(parents=True)
    (root / "var/tmp").chmod(0o1777)
    (root / "etc/libvirt/qemu.conf").write_text("# all comments\n")
    (root / "etc/group").write_text("root:x:0:\nkvm:x:990:libvirt-qemu\nsomething:x:107:\n")
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("var/run", "/run")):
        (root / link).symlink_to(target)
    return Stack("fake", root, suite="trixie", venv="/opt/guestbench/venv")


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def test_the_sandbox_binds_the_stack_read_only_and_of_the_host_only_what_it_is_given(tmp_path: Path) -> None:
    st = _root(tmp_path)
    work, payload = tmp_path / "run" / "cell-uml@fake", tmp_path / "payload"
    args = sandbox.command(st, ["python", "-m", "x"], rw=[str(work)], ro=[str(payload)], env={"A": "1"})
    assert args[0] == "bwrap" and args[-3:] == ["python", "-m", "x"]
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--clearenv"):
        assert flag in args
    ro, rw = _pairs(args, "--ro-bind"), _pairs(args, "--bind")
    assert (str(st.path / "usr"), "/usr") in ro and (str(st.path / "etc"), "/etc") in ro
    assert (str(st.path / "var/lib/dpkg"), "/var/lib/dpkg") in ro and (str(payload), str(payload)) in ro
    assert (str(work), str(work)) in rw and (str(st.path / "var/tmp"), "/var/tmp") in rw
    host = [src for src, _ in ro + rw if not src.startswith(str(st.path)) and src != "/sys"]
    assert sorted(host) == sorted([str(payload), str(work), str(Path(sandbox.__file__).parents[1])])
    assert ("usr/bin", "/bin") in _pairs(args, "--symlink") and ("/run", "/var/run") in _pairs(args, "--symlink")
    tmpfs = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert {"/run", "/tmp", "/var", "/root", "/dev/shm"} <= set(tmpfs)
    env = dict(_pairs(args, "--setenv"))
    assert env["GUESTBENCH_STACK"] == "fake" and env["A"] == "1" and env["PYTHONPATH"] == sandbox.SOURCE
    assert "VIRTUAL_ENV" not in env and env["PATH"] == sandbox.PATH
    made = [args[i + 3] for i, a in enumerate(args) if a == "--perms" and args[i + 2] == "--dir"]
    assert str(work.parent) in made  # traversable for libvirt's qemu user (bwrap makes parents 0700)
    state = st.path / "var/lib/guestbench-stack"  # traversable for libvirt's qemu user (appliances); the stacks'
    assert state.is_dir() and (state.stat().st_mode & 0o777) == 0o755  # directory above is root's alone
    with pytest.raises(UserError, match="is under /usr, which a stack's sandbox shows as the stack's own"):
        sandbox.command(st, ["true"], rw=["/usr/local/guestbench-run-x"])


def test_a_workers_paths_are_its_work_dir_turns_drives_and_sockets_and_its_payload_read_only() -> None:
    request = Request("startup", {}, ["rep"], {}, "/r/cell", 1.0, 1.0, payload="/c/payload",
                      turn={"dir": "/r/turns-1", "slot": 0, "wait_s": 1.0, "granter": 42},
                      drives=[{"filename": "/r/cell/disk.img", "format": "raw"},
                              {"filename": "/dev/loop7", "format": "raw", "protocol": "file"},
                              {"filename": "", "format": "raw", "protocol": "nbd", "server": ["unix:/r/nbd.sock"]}])
    rw, ro = supervisor.request_paths(request)
    assert rw == ["/dev/loop7", "/r/cell", "/r/nbd.sock", "/r/turns-1"] and ro == ["/c/payload"]  # disk.img: in /r/cell
    assert supervisor.inside_sandbox(request).turn["granter"] == 1  # the sandbox's first process grants its turns
    assert request.turn["granter"] == 42


def test_a_stack_a_run_holds_is_not_removed(tmp_path: Path) -> None:
    st = _root(tmp_path)
    (st.path / store.RECORD).write_text("{}")
    fd = store.hold(st)
    try:
        assert store.in_use(st.path)
        with pytest.raises(UserError, match="in use by a run"):
            store.set_aside(st.path, tmp_path)
    finally:
        os.close(fd)
    assert not store.in_use(st.path)


@pytest.mark.parametrize("answer, why", [
    ({"availability": {"usable": "yes", "reason": "x"}}, "availability"),
    ({"availability": {"usable": True, "reason": "x", "details": []}}, "details"),
    ({"availability": {"usable": True, "reason": "x"}, "handle": {"libguestfs_backend": 1}}, "handle"),
    ({"availability": {"usable": True, "reason": "x"}, "handle": {"libguestfs_backend": "direct", "env": {"A": 1}}},
     "handle"),
    ({"availability": {"usable": True, "reason": "x"}, "probe_key": [1]}, "probe_key"),
])
def test_an_answer_from_inside_a_stack_of_the_wrong_shape_is_refused(answer: dict, why: str) -> None:
    assert stack_backend._shape(answer) == why
    assert stack_backend._shape({"availability": {"usable": True, "reason": "x", "details": {}}, "python": "3.13.5",
                                 "handle": {"libguestfs_backend": "direct", "settings": [], "env": {"A": "1"}},
                                 "probe_key": {}}) is None


@pytest.mark.skipif(not os.path.exists("/dev/kvm"), reason="no /dev/kvm here")
def test_the_stacks_kvm_group_takes_dev_kvms_group_id(tmp_path: Path) -> None:
    st = _root(tmp_path)
    gid = os.stat("/dev/kvm").st_gid
    (st.path / "etc/group").write_text(f"root:x:0:\nkvm:x:990:libvirt-qemu\nother:x:{gid}:\n")
    text = sandbox.group_text(st)
    assert text is not None
    assert f"kvm:x:{gid}:libvirt-qemu" in text.splitlines() and "other:x:990:" in text.splitlines()
    (st.path / "etc/group").write_text(f"kvm:x:{gid}:\n")
    assert sandbox.group_text(st) is None
    files = sandbox.generated(_root(tmp_path / "again"))
    assert files["/etc/libvirt/qemu.conf"].read_text() == sandbox.QEMU_CONF


@pytest.mark.parametrize("debian, up", [("1:11.1.3+ds-1", "11.1.3"), ("1:1.60.1-2+b1", "1.60.1"), ("5.2.2-8", "5.2.2"),
                                        ("12.8.0-1", "12.8.0"), ("3.13.5-1", "3.13.5"), ("7.2", "7.2")])
def test_a_stacks_versions_read_as_upstreams(debian: str, up: str) -> None:
    assert upstream(debian) == up


def test_a_cell_is_named_by_its_backend_mode_and_stack() -> None:
    assert system_name("uml") == "uml" and system_name("tcg", "sid") == "tcg@sid"
    assert system_name("uml", "host", "seccomp") == "uml+seccomp" and system_name("uml", "sid", "ptrace") == \
        "uml+ptrace@sid"
    old = Cell.from_dict({"backend": "uml", "label": "startup"})  # a cell from before stacks
    assert old.system == "uml" and old.stack_name == "host"
    cell = Cell.from_dict({"backend": "uml", "label": "s", "software": {"stack": "sid"}, "uml_mode": "seccomp"})
    assert cell.system == "uml+seccomp@sid"


def _sc(tmp_path: Path, text: str) -> object:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load.load_scenario(path)


def test_cells_are_planned_per_stack_and_per_uml_mode_the_item_names(tmp_path: Path) -> None:
    sc = _sc(tmp_path, "name: s\nstacks: [host, sid]\nmeasurements:\n - measurement: startup\n   uml_mode: "
                       "[seccomp, ptrace]\n - upload-no-write\n")
    usable = plan.verdict_names(sc)
    assert usable == [n for b in ("tcg", "kvm", "libvirt-tcg", "libvirt-kvm", "uml") for n in (b, f"{b}@sid")]
    groups = plan.plan(sc, ["tcg", "tcg@sid", "uml", "uml@sid"])
    names = [plan.system_of(g.cells[0]) + " " + g.cells[0].label for g in groups]
    assert names == ["tcg startup", "tcg@sid startup", "uml+seccomp startup", "uml+ptrace startup",
                     "uml+seccomp@sid startup", "uml+ptrace@sid startup", "tcg upload-no-write",
                     "tcg@sid upload-no-write", "uml upload-no-write", "uml@sid upload-no-write"]
    assert groups[4].backend == "uml@sid"  # the verdict it goes by
    seccomp = groups[2].cells[0]
    assert "has no seccomp mode; it offers ptrace" in str(plan.mode_lacking(seccomp, ["ptrace"]))
    assert plan.mode_lacking(seccomp, ["seccomp", "ptrace"]) is None and plan.mode_lacking(seccomp, None) is None
    again = load.parse_scenario(sc.to_file(), "again")  # what a nested or fleet run hands on
    assert again.stacks == sc.stacks and again.measurements[0].uml_modes == ("seccomp", "ptrace")
    over = load.apply_overrides(sc, stack="sid", uml_mode="ptrace")
    assert over.stacks == ("sid",) and {m.uml_modes for m in over.measurements} == {("ptrace",)}


@pytest.mark.parametrize("text, where, what", [
    ("stacks: [host, Sid]", "stacks[1]", "is not a stack name"),
    ("stacks: [host, host]", "stacks[1]", "is listed twice"),
    ("stacks: []", "stacks", "is not a non-empty list"),
    ("measurements: [{measurement: startup, uml_mode: fast}]", "measurements[0].uml_mode[0]", "unknown UML mode"),
])
def test_stacks_and_modes_that_are_not_allowed_are_one_line(tmp_path: Path, text: str, where: str,
                                                            what: str) -> None:
    body = text if text.startswith("measurements") else f"{text}\nmeasurements: [startup]"
    with pytest.raises(UserError) as e:
        _sc(tmp_path, f"name: s\n{body}\n")
    assert f": {where}: " in str(e.value) and what in str(e.value) and "\n" not in str(e.value)


def test_the_software_table_names_each_system_and_what_differs() -> None:
    cells = [Cell.from_dict({"backend": "uml", "label": "s", "software": {"stack": "host", "suite": "bookworm",
                                                                          "python": "3.11.2", "uml": "6.1.176",
                                                                          "uml_mode": "ptrace"}}),
             Cell.from_dict({"backend": "uml", "label": "s", "software": {"stack": "sid", "suite": "sid",
                                                                          "python": "3.14.10", "uml": "7.2.7",
                                                                          "uml_mode": "seccomp"}}),
             Cell.from_dict({"backend": "uml", "label": "u", "software": {"stack": "sid", "python": "3.14.10"}})]
    rows = software.per_system(cells)
    assert [(r.system, r.stack) for r in rows] == [("uml", "host"), ("uml@sid", "sid")]
    assert software.differing(rows) == ["suite", "python", "uml"]
    assert software.per_system([cells[0]]) == []  # the machine's own stack alone: the fingerprint says it


def test_a_dry_run_says_which_stack_is_not_built(tmp_path: Path) -> None:
    verdict = dryrun.verdict("uml@nosuchstack")
    assert verdict.state == "not usable" and "no stack named 'nosuchstack'" in verdict.reason
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbackends: [uml]\nstacks: [host, nosuchstack]\nmeasurements: [startup]\n")
    out = guestbench("scenario", str(path), "--dry-run", "--results", str(tmp_path / "r"))
    assert out.returncode == 0 and "uml@nosuchstack" in out.stdout and "no stack named" in out.stdout


def _run(libguestfs: str, host_mode: str) -> Run:
    cells = [{"backend": "uml", "label": "s", "software": {"stack": "sid", "libguestfs": libguestfs,
                                                           "uml_mode": "seccomp"}},
             {"backend": "uml", "label": "s", "software": {"stack": "host", "uml_mode": host_mode}},
             {"backend": "uml", "label": "s", "uml_mode": "ptrace", "software": {"stack": "sid", "uml_mode": "ptrace",
                                                                                 "libguestfs": libguestfs}},
             {"backend": "uml", "label": "s", "software": {"stack": "sid"}}]  # planned, never ran: not compared
    return Run.from_dict({"schema": "guestbench-results", "schema_version": 3, "cells": cells})


def test_compare_and_history_name_a_stacks_software_and_umls_own_mode_that_changed() -> None:
    was, now = _run("1.60.1", "ptrace"), _run("1.62.0", "seccomp")
    lines = machines.software_changes(was, now)
    assert "stack sid: libguestfs: '1.60.1' vs '1.62.0'" in lines and "uml: UML's mode 'ptrace' vs 'seccomp'" in lines
    assert len([ln for ln in lines if "libguestfs" in ln]) == 1 and not [ln for ln in lines if "uml+ptrace" in ln]
    machine = history.Machine({}, "m", [history.RunEntry("a", None, history._software(was, {}), None),
                                        history.RunEntry("b", None, history._software(now, {}), None)])
    changes = machine.changes(1)
    assert "libguestfs on stack sid 1.60.1 → 1.62.0" in changes and "UML's mode of uml ptrace → seccomp" in changes


def test_a_builds_namespace_ends_before_it_begins_when_guestbench_died_in_unshares_fork() -> None:
    """util-linux 2.38's unshare sets --kill-child's PDEATHSIG only after its fork (CI A9): the namespace's first
    process looks at a pipe whose write end only guestbench holds, and ends if guestbench is gone (the pipe at its
    end); while guestbench lives, it runs the build, without the pipe."""
    import subprocess
    import sys

    from guestbench.stacks.build import ALIVE_AFTER_FORK

    for guestbench_alive in (True, False):
        alive, held = os.pipe()
        if not guestbench_alive:
            os.close(held)
        try:
            proc = subprocess.run([sys.executable, "-c", ALIVE_AFTER_FORK, str(alive), "sh", "-c",
                                   f"[ ! -e /proc/self/fd/{alive} ] && echo built"], pass_fds=(alive,),
                                  capture_output=True, text=True, timeout=60)
        finally:
            os.close(alive)
            if guestbench_alive:
                os.close(held)
        assert (proc.returncode, proc.stdout) == ((0, "built\n") if guestbench_alive else (1, "")), proc.stderr
