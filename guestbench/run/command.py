"""libguestfs's own programs (virt-*, guestfish, libguestfs-test-tool) on a guestbench backend, from the command
line: `guestbench env` prints the configuration (HandleConfig.environment) and `guestbench exec` runs one command
with it and cleans up after it. `exec` and the `command` measurement give a program
HandleConfig.process_environment, so it sees exactly what a guestbench worker's handle is given.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from guestbench.backends import BACKENDS, Backend, HandleConfig
from guestbench.backends.base import LIBGUESTFS_OVERRIDES
from guestbench.backends.uml.channel import CHANNEL_ENV, refusals
from guestbench.util.errors import Interrupted, UserError, printable
from guestbench.host.paths import cache_dir
from guestbench.execute.supervisor import TRAPPED, end_tree

# every variable some backend's configuration sets (guestbench.backends: HandleConfig.environment)
ENV_KEYS = (*LIBGUESTFS_OVERRIDES, "LIBGUESTFS_PATH", CHANNEL_ENV)
EXIT_UNUSABLE = 1  # the backend cannot run here: said in one line, as doctor says it
EXIT_TIMEOUT = 124  # as timeout(1)


class BackendUnusable(UserError):
    """The backend cannot run appliances here: doctor's one-line reason, said as every user error is, exit 1."""

    exit_status = EXIT_UNUSABLE


def ready(name: str, run_dir: Path, workload: bool = False) -> tuple[Backend, HandleConfig]:
    """The backend and its handle configuration, with what it needs built (the UML appliance, wrappers), once
    doctor's verdict says it runs here: live preconditions, then the cached probe verdict or, when there is
    none, a probe launch under the backend's deadline (in `run_dir`), so that a user's command is never left
    to hang on a backend that cannot launch (KVM on PVM)."""
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}", source="command line")
    backend = BACKENDS[name]
    from guestbench.execute import probe
    from guestbench.execute.supervisor import Supervisor, TrapSignals

    sup = Supervisor()
    if probe.cached_verdict(backend, backend.probe_key()) is None:
        sys.stderr.write(f"guestbench: checking {name} first: one probe launch (at most {backend.probe_timeout():g} "
                         "s), its verdict then cached for a week\n")
    try:
        with TrapSignals():
            av = probe.verdict(backend, sup, run_dir)
            if not av.usable:
                when = f" (probe of {av.details['probed_utc']}; 'guestbench doctor --refresh' probes again)" \
                    if av.details.get("cached") else ""
                raise BackendUnusable(f"{name} cannot run here: {av.reason}{when}")
            return backend, backend.handle_config(cache_dir(), workload=workload)  # may build an appliance
    except Interrupted:
        sup.abort()
        raise


def exports(config: HandleConfig) -> str:
    """Shell lines that give an interactive shell the configuration (`eval "$(guestbench env uml)"`), with an
    `unset` for what another backend's lines set and this one does not (after `env uml`, `env tcg` must not
    leave the UML hypervisor program in place)."""
    import shlex

    env = config.environment()
    unset = [k for k in ENV_KEYS if k not in env]
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + \
        (f"unset {' '.join(unset)}\n" if unset else "")


def exit_status(rc: int) -> int:
    """A shell's exit status for a child's return code: 128 + N when signal N ended it."""
    return rc if rc >= 0 else 128 - rc


@dataclass
class Finished:
    status: int  # the command's exit status; 128 + N when a signal N ended it or guestbench
    elapsed_s: float
    timed_out: bool


def run(argv: list[str], backend: Backend, config: HandleConfig, workdir: Path, timeout_s: float) -> Finished:
    """Run argv in its own session on the backend, with the terminal's stdin/stdout/stderr, until it exits or
    `timeout_s` passes; SIGINT, SIGTERM and SIGHUP end it too. However it ends, its process tree is killed and
    its libguestfs leftovers (socket dirs, libvirt domains) are removed; the caller removes `workdir`."""
    ended_by: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        ended_by.append(signum)  # a flag, not TrapSignals' exception: raised inside Popen it could lose the child

    old = {s: signal.signal(s, on_signal) for s in TRAPPED}
    proc: subprocess.Popen[bytes] | None = None
    t0 = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(argv, env=config.process_environment(workdir), start_new_session=True)
        except OSError as exc:
            raise UserError(f"cannot run {argv[0]}: {exc.strerror or exc}", source="command line") from None
        deadline = t0 + timeout_s
        while proc.poll() is None and not ended_by and time.monotonic() < deadline:
            try:
                proc.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        elapsed = time.monotonic() - t0
        rc = proc.poll()
        for reason in refusals(workdir):
            sys.stderr.write(f"guestbench: the {backend.name} hypervisor program {printable(reason)}\n")
        if ended_by:
            return Finished(128 + ended_by[0], elapsed, False)
        if rc is None:
            return Finished(EXIT_TIMEOUT, elapsed, True)
        return Finished(exit_status(rc), elapsed, False)
    finally:
        end_tree(proc, (backend, workdir))
        for s, h in old.items():
            signal.signal(s, h)
