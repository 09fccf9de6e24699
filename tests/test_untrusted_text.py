"""Text from outside reaches root's terminal and reports inert (issue 46): a level-1 guest's console, a fleet host's
or a guest's refused results, a results file's labels. Escape sequences, bidi overrides and rich markup are shown,
never obeyed; "[/]" ends nothing; the console is read in bounded memory however the guest writes; CSV, Markdown and
chart file names hold for their readers.

The console tests read a real file written as qemu's chardev writes one (a scripted guest: launching a level-1
guest takes minutes, and what is tested is how its bytes are read and shown). Rendering is rich's own, on a
Console that believes it is a terminal; Markdown is rendered by markdown-it (rich's own dependency).
"""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
import tracemalloc
from pathlib import Path
from typing import Any


from guestbench.run.record import progress_display
from guestbench.scenario import parse_scenario
from guestbench.util.errors import one_line, printable

from helpers.cli import guestbench
from helpers.fleet import fleet_doc, fleet_run, stamped
from helpers.nested import guest_doc
from helpers.paths import ROOT
from helpers.terminal import OBEYED, terminal

SHIPPED = ROOT / "tests" / "data" / "results" / "20261121T211449Z-startup.json"
HOSTILE = ["title\x1b]0;pwned\x07", "\x1b[2Jcleared", "\x1b[31mred\x1b[0m", "admin\u202eexe.txt", "\u2066iso\u2069",
           "c1\x9b31m", "del\x7f", "[/]", "[link=http://evil.example]click[/link]", "[bold]loud"]


_guestbench = functools.partial(guestbench, timeout=90)


# ------------------------------------------------------------------------------------------------ the sanitiser


def test_printable_shows_control_characters_and_bidi_marks_as_escapes() -> None:
    text = "a\x1b[2Jb\x9bc\x7fd\u202ee\u202af\u2066g\u2069h\u200ei\u200fj\u061ck\tl\nm\ud800"
    assert printable(text) == ("a\\x1b[2Jb\\x9bc\\x7fd\\u202ee\\u202af\\u2066g\\u2069h\\u200ei\\u200fj\\u061ck\tl m"
                               "\\ud800")
    assert one_line("x\u202ey\nz") == "x\\u202ey\\nz"
    assert printable("plain text, ünïcode, 日本, p<0.05 [x]") == "plain text, ünïcode, 日本, p<0.05 [x]"


def test_printable_shows_invisible_format_characters_so_no_name_can_pose_as_another() -> None:
    """A zero-width space, joiner, soft hyphen, BOM or tag character would make "beta\u200b" look like "beta"."""
    for hidden in ("\u200b", "\u200d", "\u2060", "\ufeff", "\xad", "\U000e0041", "\u2028", "\u180e"):
        shown = printable(f"beta{hidden}")
        assert shown != "beta" + hidden and shown.startswith("beta\\") and shown.isascii(), repr(shown)
    import unicodedata
    assert not [c for c in map(chr, range(0x110000)) if unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
                and c != "\t" and printable(c) in (c, "")]


def test_inert_text_is_never_markup() -> None:
    from guestbench.util.errors import inert

    console, out = terminal()
    console.print("[green]✓[/] ", inert("[/] [bold]x [link=http://evil.example]y[/link]"), sep="")
    assert out.getvalue().rstrip().endswith("[/] [bold]x [link=http://evil.example]y[/link]")
    assert "\x1b]8;" not in out.getvalue()  # no hyperlink made


# ------------------------------------------------------------------------------------------------ nested


def test_the_level1_console_reaches_the_terminal_shown_not_obeyed(placement: Any, tmp_path: Path) -> None:
    """run_job passes each line of the guest's console.log to NestedPlacement.show_console: the same here, on a
    console.log as the guest's serial port writes it (CR LF, sequences, markup, bidi)."""
    from guestbench.nested.console import ConsoleLog

    nested, out, _ = placement
    log = tmp_path / "console.log"
    log.write_bytes("".join(f"{line}\r\n" for line in HOSTILE).encode())
    ConsoleLog(log, nested.show_console).read()
    shown = out.getvalue()
    for seq in OBEYED:
        assert seq not in shown, repr(seq)
    for visible in ("title\\x1b]0;pwned\\x07", "\\x1b[2Jcleared", "admin\\u202eexe.txt", "[/]",
                    "[link=http://evil.example]click[/link]", "[bold]loud"):
        assert f"level-1 │ {visible}" in shown, visible


def test_a_refused_level1_document_that_quotes_markup_is_said_not_parsed(placement: Any) -> None:
    """A cell status of "[/]" is refused by the model, and the refusal quotes it: printed as markup, rich raised
    MarkupError and the nested run ended there (as NestedPlacement.run reports a refused document)."""
    nested, out, merger = placement
    doc = guest_doc(1, status="complete")
    doc["cells"][0]["status"] = "[/]"
    assert not merger.take(doc)
    nested._failed(merger, 1.0, f"the level-1 guest's results file was refused: {merger.refused}")
    assert 'nested: the level-1 guest\'s results file was refused: cells[0].status: "[/]" is not a cell status' \
        in out.getvalue()
    assert merger.results.doc["placements"]["nested"]["status"] == "failed"


def test_a_progress_description_is_text() -> None:
    """The nested part's and a fleet host's bars show the status the remote run sent; a cell's, its label."""
    console, out = terminal()
    with progress_display(console) as progress:
        progress.add_task("n · nested · [/] \x1b]0;x\x07 [link=http://evil.example]y", total=3)
        progress.refresh()
    assert "[/] \\x1b]0;x\\x07 [link=http://evil.example]y" in out.getvalue()
    assert "\x1b]" not in out.getvalue()


# ------------------------------------------------------------------------------------------------ fleet


def test_a_hosts_refused_results_quoting_markup_fail_that_host_and_print(tmp_path: Path) -> None:
    """As NestedPlacement: the host's refusal quotes "[/]"; printed as markup it raised MarkupError in the
    coordinator, which cancelled every host."""
    doc = fleet_doc({"alpha": ["uml"], "beta": ["tcg"]})
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    run.console, out = terminal()
    hostile = copy.deepcopy(fleet_doc({"beta": ["tcg"]}))
    hostile["cells"][0]["status"] = "[/]"
    hostile["cells"][0]["label"] = "x\x1b]0;pwned\x07\u202e"

    from guestbench.run.fleet import seal

    run.keys, run.addresses = {"beta": seal.new_key()}, {"beta": "tcp://10.0.0.2:4000"}
    run.inbox.put(stamped(seal.seal(run.keys["beta"], "beta", 1, {"doc": hostile, "exit": 0, "stderr": "",
                                                                   "final": True}), "tcp://10.0.0.2:4000"))

    class Ended:
        status = "finished"

    run.host_ended("beta", Ended())
    assert 'host beta: its results were refused: cells[0].status: "[/]" is not a cell status' in out.getvalue()
    assert json.loads((tmp_path / "r.json").read_text())["hosts"]["beta"]["status"] == "failed"


# ------------------------------------------------------------------------------------------------ the console log


def test_a_guest_writing_50_mb_without_a_newline_is_read_in_bounded_memory(tmp_path: Path) -> None:
    from guestbench.nested.console import LINE_MAX, READ_MAX, TAIL, ConsoleLog

    log = tmp_path / "console.log"
    with open(log, "wb") as f:
        for _ in range(50):
            f.write(b"x" * 2**20)  # 50 MiB, no newline
    lines: list[str] = []
    relay = ConsoleLog(log, lines.append)
    tracemalloc.start()
    try:
        assert relay.read() and relay.offset == READ_MAX  # the new bytes only, a bounded amount of them per read
        reads = 1
        while relay.read():
            reads += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert relay.offset == 50 * 2**20 and reads == 50 * 2**20 // READ_MAX
    assert peak < 4 * READ_MAX, peak  # the whole file was 50 MiB: it was never held
    assert lines == ["x" * LINE_MAX + f" [... cut: the line is longer than {LINE_MAX} bytes]"]  # said once
    with open(log, "ab") as f:
        f.write(b"\r\nnext\r\n" + b"".join(b"line %d\n" % i for i in range(1000)))
    relay.read()
    assert lines[1:3] == ["next", "line 0"] and len(lines) == 1002
    assert list(relay.tail) == [f"line {i}" for i in range(1000 - TAIL, 1000)]  # all that is kept


def test_the_last_words_of_a_flood_are_shown_and_the_rest_passed_over(tmp_path: Path) -> None:
    from guestbench.nested.console import ConsoleLog

    log = tmp_path / "console.log"
    log.write_bytes(b"".join(b"flood %d\n" % i for i in range(1_000_000)) + b"powered off")
    lines: list[str] = []
    relay = ConsoleLog(log, lines.append, watch="powered off")
    relay.drain()
    assert lines[0].startswith("guestbench: ") and lines[0].endswith("bytes of the level-1 guest's console not shown")
    assert lines[-2:] == ["flood 999999", "powered off"] and relay.watched
    assert len(lines) < 200_000


# ------------------------------------------------------------------------------------------------ reports


def _labelled(tmp_path: Path, *labels: str) -> Path:
    """The shipped run, its first cell once per label."""
    doc = json.loads(SHIPPED.read_text())
    first = doc["cells"][0]
    doc["cells"] = [{**copy.deepcopy(first), "label": label} for label in labels]
    path = tmp_path / "labelled.json"
    path.write_text(json.dumps(doc))
    return path


FORMULAS = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(1)", "\tx=1", " =1"]


def test_csv_text_that_a_spreadsheet_would_run_is_quoted_and_figures_are_not(tmp_path: Path) -> None:
    done = _guestbench("show", "--csv", str(_labelled(tmp_path, *FORMULAS)))
    assert done.returncode in (0, 1), done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["measurement"] for r in rows] == ["'" + f for f in FORMULAS]
    for r in rows:
        float(r["median_s"])  # a figure stays a number
    done = _guestbench("compare", "--csv", str(_labelled(tmp_path, "-x")), str(_labelled(tmp_path, "-x")))
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert rows and all(r["measurement"] == "'-x" and float(r["ratio"]) == 1.0 for r in rows), done.stdout


def test_markdown_labels_make_no_link_no_emphasis_and_no_broken_table(tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    labels = ["[click](http://evil.example)", "a|b", "`code` *em* _em_ kvm_pvm", "<http://evil.example>",
              "&#x202e;x", "back\\slash"]
    done = _guestbench("show", "--markdown", str(_labelled(tmp_path, *labels)))
    assert done.returncode in (0, 1), done.stderr
    page = MarkdownIt("commonmark").enable("table").render(done.stdout)
    assert "<a " not in page and "<em>" not in page and "<code>" not in page and "\u202e" not in page
    for label in labels:  # each shown as written, in its heading and in its table's label column
        assert page.count(label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")) >= 1, label
    for row in (r for r in page.split("<tr>") if "<td>" in r):
        assert row.count("<td>") == row.count("</td>") and "</th>" not in row


def test_two_labels_that_differ_only_in_punctuation_get_two_charts(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _guestbench("report", "-o", str(out), str(_labelled(tmp_path, "boot a/b", "boot a b", "boot a-b")))
    assert done.returncode == 0, done.stderr
    md = (out / "report.md").read_text()
    charts = [line.split("](", 1)[1].rstrip(")") for line in md.splitlines() if line.startswith("![")]
    measured = [c for c in charts if "boot" in c]
    assert len(measured) == 3 == len(set(measured)), charts
    assert all((out / c).is_file() for c in charts)


def test_a_bidi_override_in_a_label_reaches_no_report_file(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _guestbench("report", "-o", str(out), str(_labelled(tmp_path, "exe.\u202etxt", "\u2067iso")))
    assert done.returncode == 0, done.stderr
    for path in (out / "report.md", out / "index.html"):
        text = path.read_text()
        assert "\u202e" not in text and "\u2067" not in text and "exe.\\u202etxt" in text.replace("\\\\", "\\")


def test_a_host_named_with_markup_or_escapes_is_printed_as_text_when_lost_or_idle(tmp_path: Path) -> None:
    """A worker picks its own name: "[/]" raised MarkupError where a host was written off or left idle, ending the
    fleet run with every other host's later samples lost; ESC reached root's terminal (issue 46, review)."""
    from guestbench.run.fleet import cluster

    name = "[/]\x1b]0;owned\x07"
    doc = fleet_doc({name: ["tcg"], "beta": ["uml"]})
    sc = parse_scenario({"name": "t", "backends": ["uml", "tcg"], "measurements": ["startup"]}, "t")
    run = fleet_run(tmp_path, sc, doc)
    run.console, out = terminal()
    run.write_off(cluster.HostPlan(name, "tcp://10.0.0.1:4000", {"bench": 1, "tcg": 1}, ["tcg"]), "gone")
    assert "host [/]\\x1b]0;owned\\x07 lost: gone" in out.getvalue() and "\x1b]0;" not in out.getvalue()
    assert json.loads((tmp_path / "r.json").read_text())["hosts"][name]["status"] == "lost"


def test_a_workers_resources_are_kept_only_as_guestbench_reads_them() -> None:
    """Dask passes on whatever a worker advertises: a NaN resource was written into the fleet's results file, which
    every reader then refused (issue 46, review)."""
    from guestbench.run.fleet import resources

    assert resources.known({"bench": float("nan"), "uml": 1, "tcg": "1", "x" * 99: 1, "kvm": True}) == {"uml": 1.0}
    assert resources.known(["bench"]) == {} and resources.known(None) == {}
