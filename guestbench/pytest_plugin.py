"""pytest plugin (entry point ``pytest11``): pytest-benchmark tests that launch real appliances on every backend.

pytest loads it into every run of an environment where guestbench is installed, guestbench's own test suite
included, so loading it costs nothing: libguestfs, backend probes and launches come only when a test asks
for the ``guestbench_backend`` fixture.

- ``guestbench_backend`` is parametrised over guestbench's backends, test ids being the backend names. A
  backend that is not usable here is skipped with doctor's reason (its cached verdict, or a probe launch
  under probe's time limits).
- ``guestbench_backend.bench(benchmark, "upload", size="64MiB", disk_size="160MiB")``, or the shortcuts
  ``bench_startup``, ``bench_upload``, ``bench_upload_no_write``, ``bench_write_no_upload``, run one
  measurement through ``benchmark.pedantic``: only the measurement's timed step (for start-up, the launch) is
  inside the timer; every step has a deadline past which the hypervisor is killed and the test fails saying
  which step overran (see guestbench.execute.inprocess).
- Options: ``--guestbench-backends=tcg,uml`` (or ini ``guestbench_backends``), ``--guestbench-rounds``,
  ``--guestbench-probe-timeout``, ``--guestbench-reprobe``.
- What guestbench records goes into the saved JSON: per benchmark ``extra_info`` (backend, measurement,
  params, what was timed, cache mode, bytes, verification, first launch), and a top-level ``guestbench``
  section (host fingerprint, every checked backend's verdict), which ``guestbench import`` reads back.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterator

import pytest

if TYPE_CHECKING:
    from guestbench.backends import Availability

FIXTURE = "guestbench_backend"
DEFAULT_ROUNDS = 3
TIMER_NOTE = ("pytest-benchmark's timer (benchmark.pedantic, iterations=1) around the timed step alone; set-up "
              "steps run between rounds, untimed; warm-up rounds are discarded")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    from guestbench.backends import BACKENDS  # the registry names them: a new backend is listed by itself

    group = parser.getgroup("guestbench", "guestbench: benchmarks of libguestfs appliances")
    group.addoption("--guestbench-backends", metavar="LIST", default=None,
                    help="comma-separated backends to parametrise guestbench_backend over "
                         f"(default: all: {', '.join(BACKENDS)}; unusable ones are skipped)")
    group.addoption("--guestbench-rounds", metavar="N", type=_positive_int, default=None,
                    help=f"measured rounds per benchmark when the test does not say (default {DEFAULT_ROUNDS})")
    group.addoption("--guestbench-probe-timeout", metavar="S", type=_positive_seconds, default=None,
                    help="limit for a backend's probe launch, seconds (default: guestbench probe's per backend)")
    group.addoption("--guestbench-reprobe", action="store_true", default=False,
                    help="ignore cached backend verdicts and probe again")
    parser.addini("guestbench_backends", "backends to parametrise guestbench_backend over (comma or space "
                  "separated; --guestbench-backends overrides)", default="")


class _Session:
    """Per pytest run: backend verdicts (probed at most once), one run directory, whether any test used us."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.verdicts: dict[str, Availability] = {}
        self.used = False
        self._run_dir: Path | None = None

    @property
    def rounds(self) -> int:
        return int(self.config.getoption("guestbench_rounds") or DEFAULT_ROUNDS)

    def run_dir(self) -> Path:
        if self._run_dir is None:
            from guestbench.host.paths import make_run_dir

            self._run_dir = make_run_dir()
        return self._run_dir

    def verdict(self, name: str) -> Availability:
        if name not in self.verdicts:
            from guestbench.execute import probe
            from guestbench.backends import BACKENDS
            from guestbench.execute.supervisor import Supervisor

            sup = Supervisor()
            try:
                self.verdicts[name] = probe.verdict(BACKENDS[name], sup, self.run_dir(),
                                                  refresh=bool(self.config.getoption("guestbench_reprobe")),
                                                  timeout=self.config.getoption("guestbench_probe_timeout"))
            finally:
                sup.abort()  # an interrupted probe leaves nothing running
        return self.verdicts[name]

    def close(self) -> None:
        if self._run_dir is not None:
            from guestbench.host.paths import remove_tree

            remove_tree(self._run_dir)
            self._run_dir = None


_SESSION = pytest.StashKey[_Session]()


def _selected(config: pytest.Config) -> list[str]:
    """The backends to parametrise over, validated; every backend when none was named."""
    from guestbench.backends import BACKENDS

    raw = config.getoption("guestbench_backends")
    source = "--guestbench-backends"
    if raw is None:
        raw, source = str(config.getini("guestbench_backends") or ""), "ini guestbench_backends"
    names = [n for n in raw.replace(",", " ").split() if n]
    if not names:
        return list(BACKENDS)
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise pytest.UsageError(f"{source}: unknown backend {unknown[0]!r}; allowed: {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION] = _Session(config)
    if config.getoption("guestbench_backends") is not None or config.getini("guestbench_backends"):
        _selected(config)  # a misspelt backend is a usage error at once, not a silently empty run


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if FIXTURE in metafunc.fixturenames:
        names = _selected(metafunc.config)
        metafunc.parametrize(FIXTURE, names, ids=names, indirect=True)


@pytest.fixture
def guestbench_backend(request: pytest.FixtureRequest) -> Iterator[BackendUnderTest]:
    """A usable guestbench backend (parametrised over all of them; unusable ones are skipped with the reason)."""
    name = getattr(request, "param", None)
    if name is None:
        pytest.fail(f"{FIXTURE} must be parametrised by guestbench's plugin (pytest_generate_tests)", pytrace=False)
    session = request.config.stash[_SESSION]
    session.used = True
    av = session.verdict(name)
    if not av.usable:
        cached = " (cached verdict; --guestbench-reprobe probes again)" if av.details.get("cached") else ""
        pytest.skip(f"{name} is not usable here: {av.reason}{cached}")
    yield BackendUnderTest(name, av, session)


class BackendUnderTest:
    """What ``guestbench_backend`` gives a test: the backend's name, its verdict, and the bench methods."""

    def __init__(self, name: str, availability: Availability, session: _Session) -> None:
        self.name = name
        self.availability = availability
        self._session = session

    def __repr__(self) -> str:
        return f"<guestbench backend {self.name}>"

    def bench(self, benchmark: Any, measurement: str, *, rounds: int | None = None, warmup_rounds: int = 1,
              label: str | None = None, memsize: int | None = None, smp: int | None = None,
              timeout: float | None = None, sample_timeout: float | None = None, **params: Any) -> dict[str, Any]:
        """Benchmark one guestbench measurement on this backend; returns the extra_info recorded.

        params are the measurement's (sizes as in scenario files: "64MiB"); timeout is the limit for one
        launch, sample_timeout for any other step (defaults as in scenario files).
        """
        from guestbench import __version__
        from guestbench.execute.inprocess import InProcessCell
        from guestbench.scenario import DEFAULT_SAMPLE_TIMEOUT_S, DEFAULT_TIMEOUT_S

        m, values = _measurement_params(measurement, params, memsize)
        rounds = self._session.rounds if rounds is None else rounds
        label = label or m.name
        timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
        sample_timeout = DEFAULT_SAMPLE_TIMEOUT_S if sample_timeout is None else sample_timeout
        benchmark.group = label  # pytest-benchmark's table compares the backends of one measurement
        info = benchmark.extra_info
        info.update({
            "backend": self.name, "placement": "host", "measurement": m.name, "label": label, "params": values,
            "what": m.describe(values), "timed": m.timed, "timer": TIMER_NOTE,
            "cache_mode": m.cache_mode(values), "bytes": m.nbytes(values),
            "appliance": {"memsize": memsize, "smp": smp}, "warmup_rounds": warmup_rounds,
            "timeout_s": timeout, "sample_timeout_s": sample_timeout, "backend_reason": self.availability.reason,
            "guestbench_version": __version__, "verification": None, "cold_s": None,
        })
        with InProcessCell(self.name, m.name, values, self._session.run_dir(), memsize=memsize, smp=smp,
                           timeout=timeout, sample_timeout=sample_timeout) as cell, contextlib.ExitStack() as stack:
            metered = _Metered(cell)
            stack.callback(metered.close)  # a failed round never reaches its teardown: stop the meter all the same
            if m.times_launch:
                benchmark.pedantic(cell.launch, setup=metered.setup(lambda: ((cell.new_handle(),), {})),
                                   teardown=metered.teardown(cell.shutdown),
                                   rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
            else:
                app = cell.new_handle()
                t0 = time.perf_counter()
                cell.launch(app)
                info["cold_s"] = time.perf_counter() - t0  # the cell's one launch, untimed by the benchmark

                cell.after_launch(app)
                verify_pending = [True]

                def prepare() -> tuple[tuple[Any, ...], dict[str, Any]]:
                    cell.prepare(app)
                    return (app,), {}

                def verify_once(a: Any) -> None:  # after the first round, as guestbench's worker does
                    if verify_pending:
                        verify_pending.clear()
                        info["verification"] = cell.verify(a)

                benchmark.pedantic(cell.timed_op, setup=metered.setup(prepare), teardown=metered.teardown(verify_once),
                                   rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
                cell.shutdown(app)
            info.update(metered.extra_info(warmup_rounds, rounds))
        stats = getattr(getattr(benchmark, "stats", None), "stats", None)
        nbytes = info["bytes"]
        if nbytes and stats and stats.median > 0:
            from guestbench.util.units import mb_per_s

            info["mb_per_s"] = mb_per_s(nbytes, stats.median)  # from the median, as guestbench reports it
        return dict(info)

    def bench_startup(self, benchmark: Any, **kw: Any) -> dict[str, Any]:
        return self.bench(benchmark, "startup", **kw)

    def bench_upload(self, benchmark: Any, **kw: Any) -> dict[str, Any]:
        return self.bench(benchmark, "upload", **kw)

    def bench_upload_no_write(self, benchmark: Any, **kw: Any) -> dict[str, Any]:
        return self.bench(benchmark, "upload-no-write", **kw)

    def bench_write_no_upload(self, benchmark: Any, **kw: Any) -> dict[str, Any]:
        return self.bench(benchmark, "write-no-upload", **kw)


class _Metered:
    """What each round's timed call used (instruments/usage.py): the meter starts as the round's setup ends and stops
    as its teardown begins, so pytest-benchmark's timer wraps the call alone. The cell's processes here are this
    pytest process (libguestfs's library runs in it), its children and those naming the cell's work dir, read
    from /proc: this process is not moved into a control group."""

    def __init__(self, cell: Any) -> None:
        from guestbench.instruments import usage

        self.meter = usage.UsageMeter(marker=str(cell.workdir), daemons=cell.backend.daemons)
        self.rounds: list[dict[str, Any] | None] = []

    def setup(self, inner: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            got = inner()
            self.meter.start()
            return got
        return run

    def teardown(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self.rounds.append(self.meter.stop())
            return inner(*args)
        return run

    def close(self) -> None:
        self.meter.stop()

    def extra_info(self, warmup_rounds: int, rounds: int) -> dict[str, Any]:
        """`sample_meta` (each measured round's resources, as `guestbench import` reads it back) and medians."""
        from guestbench.results import figures

        measured = self.rounds[warmup_rounds:warmup_rounds + rounds]
        meta = [{"rep": i + 1, **({"resources": r} if r else {})} for i, r in enumerate(measured)]
        used = {f.key: statistics.median(f.values) for f in figures.used(measured)}
        return {"sample_meta": meta, "median_cpu_s": used.get("cpu_s"), "median_peak_mib": used.get("peak_mib")}


def _measurement_params(name: str, given: dict[str, Any], memsize: int | None) -> tuple[Any, dict[str, Any]]:
    """The measurement and its full, normalised parameters; bad ones are a ValueError saying what is allowed."""
    from guestbench.measurements import MEASUREMENTS

    m = MEASUREMENTS.get(name)
    if m is None:
        raise ValueError(f"unknown measurement {name!r}; allowed: {', '.join(MEASUREMENTS)}")
    if not m.launches:
        allowed = ", ".join(n for n, x in MEASUREMENTS.items() if x.launches)
        raise ValueError(f"measurement {name!r} runs programs that launch their own appliances, which this plugin "
                         f"does not time; use it in a scenario (guestbench scenario); allowed here: {allowed}")
    values = m.defaults()
    for key, value in given.items():
        try:
            param = m.param(key)
        except KeyError:
            allowed = ", ".join(p.name for p in m.params) or "none"
            raise ValueError(f"{name}: no parameter {key!r}; allowed: {allowed}") from None
        try:
            values[key] = param.parse(value)
        except ValueError as e:
            raise ValueError(f"{name}: {key}: {e}") from None
    problems = m.check(values, memsize)
    if problems:
        raise ValueError("; ".join(f"{name}: {key}: {msg}" for key, msg in problems))
    return m, values


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """A ``guestbench`` section, as in guestbench's results files: the host and every backend's verdict."""
    session = config.stash.get(_SESSION, None)
    if session is None or not session.used:
        return
    from guestbench.host import fingerprint

    fp = fingerprint.fingerprint()
    output_json["guestbench"] = {
        "guestbench": fp["guestbench"], "host": fp,
        "command": ["pytest", *config.invocation_params.args],
        "backends": {name: av.to_dict() for name, av in session.verdicts.items()},
    }
