"""bonnie++ (1.98 / 2.00a): the command line, and its CSV line (format version 1.98) as metrics.

Rates keep bonnie++'s own units: K/sec, where K is 1024 bytes (unit "KiB/s"), seeks/s and files/s,
each with the %CPU bonnie++ measured; latencies (printed as e.g. "134ms" or "5672us") become ms. A test
that finished too fast to measure prints "+++++" (rate) / "+++" (%CPU): those become TOO_FAST, never a
number. Tests that were skipped (-f, -s 0, -n 0) leave their fields empty and are absent from the result.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from guestbench.workloads import TOO_FAST, Metric

CSV_VERSION = "1.98"
FILES_UNIT = 1024  # bonnie++ -n counts files in multiples of 1024
MACHINE = "guestbench"

# (key, unit, label, CSV index of the value); the %CPU field follows each rate at index + 1.
# Field order from bonnie++'s own bon_csv2txt (format 1.98): 0 format version, 1 bonnie++ version,
# 2 machine name, 3 concurrency, 4 seed, 5-8 size, chunk size, seeks, seek processes, 9-20 the I/O tests,
# 21-25 file-test parameters, 26-37 the file tests, 38-43 I/O latencies, 44-49 file-test latencies.
_IO_RATES = (
    ("per_char_output", "KiB/s", "sequential output per char (putc)", 9),
    ("block_output", "KiB/s", "sequential block output", 11),
    ("rewrite", "KiB/s", "sequential rewrite", 13),
    ("per_char_input", "KiB/s", "sequential input per char (getc)", 15),
    ("block_input", "KiB/s", "sequential block input", 17),
    ("random_seeks", "/s", "random seeks", 19),
)
_FILE_RATES = (
    ("seq_create", "files/s", "sequential create", 26),
    ("seq_read", "files/s", "sequential read (stat)", 28),
    ("seq_delete", "files/s", "sequential delete", 30),
    ("random_create", "files/s", "random create", 32),
    ("random_read", "files/s", "random read (stat)", 34),
    ("random_delete", "files/s", "random delete", 36),
)
_PER_CHAR = frozenset({"per_char_output", "per_char_input"})
_IO_LATENCY_AT = 38
_FILE_LATENCY_AT = 44
_MIN_FIELDS = 38  # a line without the latency fields (older writers) still has the 38 result fields
_LATENCY_RE = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s)$")
_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def command(directory: str, size: int, ram: int, files: int = 0, *, skip_per_char: bool = False,
            machine: str = MACHINE) -> str:
    """bonnie++ in `directory` (must exist), CSV on stdout (-q: the human table goes to stderr).

    size: MiB of the I/O test file, >= 2 × ram (bonnie++ refuses less, so the page cache cannot hold
    it), or 0 to skip the I/O tests. ram: MiB of RAM bonnie++ assumes the machine has (say the
    appliance's memsize). files: number of files for the create/read/delete tests, a multiple of 1024
    (bonnie++ -n counts in 1024s), 0 to skip them. skip_per_char: -f, skip the slow per-char tests.
    Runs as uid:gid 0:0 because the appliance has no user named root.
    """
    for name, value in (("size", size), ("ram", ram), ("files", files)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"bonnie++ {name} must be a whole number >= 0, not {value!r}")
    if size and ram < 1:
        raise ValueError(f"bonnie++ ram must be >= 1 MiB when the I/O tests run (size {size} MiB)")
    if size and size < 2 * ram:
        raise ValueError(f"bonnie++ size ({size} MiB) must be at least twice ram ({ram} MiB), "
                         f"i.e. >= {2 * ram} MiB; bonnie++ refuses less")
    if files % FILES_UNIT:
        raise ValueError(f"bonnie++ files ({files}) must be a multiple of {FILES_UNIT}")
    if not size and not files:
        raise ValueError("bonnie++ with size 0 and files 0 would run no test")
    if not machine or "," in machine or not machine.isprintable():
        raise ValueError(f"bad bonnie++ machine name {machine!r} (printable, no commas: it is a CSV field)")
    args = ["bonnie++", "-d", directory, "-s", str(size), "-n", str(files // FILES_UNIT),
            "-u", "0:0", "-m", machine, "-q"]
    if size:
        args += ["-r", str(ram)]
    if skip_per_char:
        args.append("-f")
    return " ".join(shlex.quote(a) for a in args)


def metrics(size: int, files: int = 0, *, skip_per_char: bool = False) -> tuple[Metric, ...]:
    """What `parse` returns for a run of `command(directory, size, ram, files, skip_per_char=...)`.

    A value may be TOO_FAST instead of a number; latencies are listed for every test that ran.
    """
    out: list[Metric] = []
    rates = [r for r in _IO_RATES if size and not (skip_per_char and r[0] in _PER_CHAR)]
    rates += [r for r in _FILE_RATES if files]
    for key, unit, label, _ in rates:
        native = " (bonnie++ K/sec, K = 1024 bytes)" if unit == "KiB/s" else ""
        out.append(Metric(key, unit, True, f"bonnie++ {label}{native}"))
        out.append(Metric(f"{key}_cpu", "%CPU", False, f"bonnie++ {label}: CPU used"))
    for key, _, label, _ in rates:
        out.append(Metric(f"{key}_latency", "ms", False, f"bonnie++ {label}: maximum latency"))
    return tuple(out)


def parse(csv_text: str) -> dict[str, float | str]:
    """Metrics of the one CSV result line in `csv_text` (other lines, e.g. the human table, are skipped).

    Raise ValueError when there is no result line, more than one, or a CSV format other than 1.98.
    """
    rows = []
    for line in csv_text.splitlines():
        fields = line.strip().split(",")
        # a result line starts with a format version like 1.98 (a header line starts with a name)
        if len(fields) >= 10 and re.fullmatch(r"\d+\.\d+[a-z]?", fields[0]):
            rows.append(fields)
    if not rows:
        raise ValueError(f"no bonnie++ CSV result line in the output: {_excerpt(csv_text)}")
    if len(rows) > 1:
        raise ValueError(f"{len(rows)} bonnie++ CSV result lines; expected one run (no -x)")
    f = rows[0]
    if f[0] != CSV_VERSION:
        raise ValueError(f"bonnie++ CSV format version {f[0]!r} (bonnie++ {f[1]}) is not supported; "
                         f"expected {CSV_VERSION} (bonnie++ 1.98 / 2.00a)")
    if len(f) < _MIN_FIELDS:
        raise ValueError(f"bonnie++ CSV line has {len(f)} fields; format {CSV_VERSION} has at least "
                         f"{_MIN_FIELDS}: {_excerpt(','.join(f))}")
    out: dict[str, float | str] = {}
    for (key, _, _, at), lat_at in ([(r, _IO_LATENCY_AT + i) for i, r in enumerate(_IO_RATES)]
                                    + [(r, _FILE_LATENCY_AT + i) for i, r in enumerate(_FILE_RATES)]):
        _put(out, key, f[at], _rate)
        _put(out, f"{key}_cpu", f[at + 1], _rate)
        if lat_at < len(f):
            _put(out, f"{key}_latency", f[lat_at], _latency_ms)
    return out


def _put(out: dict[str, float | str], key: str, field: str, convert: Callable[[str, str], float]) -> None:
    field = field.strip()
    if not field:
        return  # test skipped
    if set(field) == {"+"}:
        out[key] = TOO_FAST
        return
    out[key] = convert(key, field)


def _rate(key: str, field: str) -> float:
    try:
        value = float(field)
    except ValueError:
        raise ValueError(f"bonnie++ {key}: {field!r} is not a number") from None
    if value < 0:
        raise ValueError(f"bonnie++ {key}: negative value {field!r}")
    return value


def _latency_ms(key: str, field: str) -> float:
    m = _LATENCY_RE.match(field)
    if not m:
        raise ValueError(f"bonnie++ {key}: latency {field!r} is not a number with ns/us/ms/s")
    return float(m.group(1)) * _TO_MS[m.group(2)]


def _excerpt(text: str, limit: int = 600) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
