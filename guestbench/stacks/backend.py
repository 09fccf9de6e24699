"""A backend on a stack's software (issue 47): what the run sees of `tcg` or `uml` in stack `sid`.

Everything that depends on the software — the preconditions, the appliance (the stack's supermin, kernel and
packages), the hypervisor wrappers, the probe key, the worker itself — is asked for or run inside the stack's
sandbox (guestbench.stacks.sandbox, guestbench.stacks.inside); the run only routes: a probe, a cell and its
verdict name it `uml@sid` (results.model.system_name). What a killed worker leaves inside (processes, libvirt's
daemon and domains, libguestfs's sockets) goes with the sandbox's namespaces, so there is nothing to clean outside.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from guestbench.backends import BACKENDS
from guestbench.backends.base import Availability, Backend, HandleConfig
from guestbench.host import cgroups
from guestbench.results.model import system_name
from guestbench.stacks import sandbox
from guestbench.stacks.store import HOST, Stack, hold, load
from guestbench.util.errors import UserError

ASK_TIMEOUT_S = 900.0  # the first answer builds the stack's appliance (supermin; a workload appliance: longer)
ANSWER_MAX = 2**20
WORKER = ["-m", "guestbench.execute.worker"]


class StackBackend(Backend):
    """`base` as the stack `stack` runs it."""

    sandboxed = True

    def __init__(self, base: Backend, stack: Stack) -> None:
        self.base = base
        self.stack = stack
        self.name = system_name(base.name, stack.name)
        for attr in ("summary", "phase_markers", "appliance_flavour", "colour", "probe_timeout_s", "opens_nbd",
                     "volatile_disk_as_file", "daemons"):
            setattr(self, attr, getattr(base, attr))
        self._answers: dict[bool, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def ask(self, workload: bool = False) -> dict[str, Any]:
        """The backend's answer inside the stack (guestbench.stacks.inside), once per run and kind of appliance."""
        with self._lock:
            if workload not in self._answers:
                self._answers[workload] = self._ask(workload)
            return self._answers[workload]

    def _ask(self, workload: bool) -> dict[str, Any]:
        argv = [sandbox.python(self.stack), "-m", "guestbench.stacks.inside", self.base.name,
                *(["--workload"] if workload else [])]
        try:
            done = subprocess.run(sandbox.command(self.stack, argv), capture_output=True, timeout=ASK_TIMEOUT_S,
                                  check=False, start_new_session=True)
        except subprocess.TimeoutExpired:
            return _refused(f"its set-up inside stack {self.stack.name} took over {ASK_TIMEOUT_S:g} s")
        except OSError as e:
            return _refused(f"stack {self.stack.name}'s sandbox did not start: {e.strerror}")
        lines = done.stdout[-ANSWER_MAX:].decode("utf-8", "replace").strip().splitlines()
        try:
            got = json.loads(lines[-1]) if lines else None
        except ValueError:
            got = None
        if done.returncode == 0 and isinstance(got, dict) and (why := _shape(got)) is not None:
            return _refused(f"guestbench inside stack {self.stack.name} answered what it does not write ({why})")
        if done.returncode != 0 or not isinstance(got, dict) or not isinstance(got.get("availability"), dict):
            err = done.stderr.decode("utf-8", "replace").strip().splitlines()
            return _refused(f"guestbench inside stack {self.stack.name} failed (status {done.returncode}): "
                            f"{err[-1][:300] if err else 'no output'}")
        return got

    def preconditions(self) -> Availability:
        if (why := sandbox.problem()) is not None:
            return Availability(False, why)
        got = self.ask()
        av = got["availability"]
        details = dict(av.get("details") or {}) if isinstance(av.get("details"), dict) else {}
        details["stack"] = self.stack.name
        return Availability(bool(av.get("usable")), f"{av.get('reason')} (stack {self.stack.name}, {self.stack.suite})",
                            details)

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        got = self.ask(workload)
        if not isinstance(got.get("handle"), dict):
            from guestbench.backends.appliance import ApplianceError  # a cell's set-up failure: unavailable

            raise ApplianceError(str(got["availability"].get("reason")))
        return HandleConfig.from_dict(got["handle"])

    def probe_key(self) -> dict[str, Any]:
        return {**(self.ask().get("probe_key") or {}), "stack": self.stack.name, "built": self.stack.built_utc}

    def probe_timeout(self) -> float:
        return self.base.probe_timeout()

    def probe_attempts(self) -> int:
        return self.base.probe_attempts()

    def explain(self, reason: str, timed_out: bool) -> str:
        return self.base.explain(reason, timed_out)

    def cleanup(self, workdir: Path) -> list[str]:
        return []  # the sandbox's namespaces took everything of the worker's with them

    def software(self) -> dict[str, Any]:
        """What its cells record: the stack, its suite, its packages' versions (as its dpkg database has them) and
        the worker's Python."""
        got = self.ask()
        python = got.get("python")
        modes = ((got["availability"].get("details") or {}).get("modes") if self.base.name == "uml" else None)
        versions = {k: v if k == "kernel" else upstream(v) for k, v in self.stack.versions.items()
                    if k not in ("uml", "uml_kernel")}
        if self.stack.versions.get("uml_kernel"):
            versions["uml"] = self.stack.versions["uml_kernel"]  # the kernel's own version, as the host's is given
        return {"stack": self.stack.name, "suite": self.stack.suite, **versions,
                **({"python": python} if isinstance(python, str) else {}),
                **({"uml_modes": [m for m in modes if isinstance(m, str)]} if isinstance(modes, list) else {})}

    def worker_command(self, writable: list[str], readable: list[str], env: dict[str, str]) -> list[str]:
        """The worker in the stack's sandbox, seeing of the host only the paths its request names; `env`: its
        control group (the host's cgroup tree is seen as it is: no cgroup namespace)."""
        counted = list(dict.fromkeys(v for k, v in env.items() if k in (cgroups.ENV_CPU, cgroups.ENV_MEMORY) and v))
        return sandbox.command(self.stack, [sandbox.python(self.stack), *WORKER], rw=[*writable, *counted],
                               ro=readable, env=env)


def upstream(version: str) -> str:
    """A Debian package's version as its upstream names it (`1:11.1.3+ds-1` -> `11.1.3`), so that a stack's
    versions read like the machine's own (the fingerprint's, from the programs)."""
    v = re.sub(r"^\d+:", "", version)
    v = v.rsplit("-", 1)[0] if "-" in v else v
    return re.sub(r"\+(ds|dfsg)\d*$", "", v)


def _shape(got: dict[str, Any]) -> str | None:
    """What is wrong with an answer's shape (guestbench.stacks.inside writes it), or None."""
    av = got.get("availability")
    if not isinstance(av, dict) or not isinstance(av.get("usable"), bool) or not isinstance(av.get("reason"), str):
        return "availability"
    if not isinstance(av.get("details", {}), dict) or not isinstance(got.get("python", ""), str):
        return "details"
    handle = got.get("handle")
    if handle is not None and not (isinstance(handle, dict) and isinstance(handle.get("libguestfs_backend"), str)
                                   and isinstance(handle.get("settings", []), list)
                                   and isinstance(handle.get("env", {}), dict)
                                   and all(isinstance(v, str) for v in (handle.get("env") or {}).values())):
        return "handle"
    if not isinstance(got.get("probe_key", {}), dict):
        return "probe_key"
    return None


def _refused(reason: str) -> dict[str, Any]:
    return {"availability": {"usable": False, "reason": reason, "details": {}}}


_BACKENDS: dict[str, Backend] = {}
_LOCK = threading.Lock()


def resolve(backend: str, stack: str = HOST) -> Backend:
    """The backend `backend` on stack `stack` (the machine's own: the registered backend itself); one object per
    pair in a process, so that its answers are asked for once. A stack that is missing or half-built: one line."""
    if stack == HOST:
        return BACKENDS[backend]
    key = system_name(backend, stack)
    with _LOCK:
        if key not in _BACKENDS:
            st = load(stack)
            if st.problem:
                raise UserError(f"stack {stack!r}: {st.problem}", key="stacks")
            try:
                hold(st)  # for this process's life: the stack is not removed or replaced under its cells
            except OSError as e:
                raise UserError(f"stack {stack!r}: its record cannot be read ({e.strerror})", key="stacks") from None
            st = load(stack)  # read again under the lock: a rebuild may have replaced it meanwhile
            _BACKENDS[key] = StackBackend(BACKENDS[backend], st)
        return _BACKENDS[key]


def named(name: str) -> Backend:
    """The backend a verdict name names: `tcg` (the machine's own), `uml@sid` (stack sid's uml)."""
    backend, _, stack = name.partition("@")
    return resolve(backend, stack or HOST)
