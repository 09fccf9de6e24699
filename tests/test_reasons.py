"""Short reasons: the real verdicts of this machine's kvm and libvirt-kvm fit a terminal, and the full text stays."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from guestbench.util import reasons
from guestbench.output.tables.doctor import doctor_table
from guestbench.output.render import terminal
from guestbench.output.results_doc import show_document
from guestbench.results import Run

DATA = Path(__file__).parent / "data" / "results" / "20261121T211449Z-startup.json"


def _verdicts() -> dict[str, dict]:
    return json.loads(DATA.read_text())["backends"]


def _console(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=False, color_system=None), out


def _render(renderable: object, width: int = 80) -> str:
    con, out = _console(width)
    con.print(renderable)
    return out.getvalue()


def test_this_machines_kvm_verdicts_become_one_sentence_with_what_to_do() -> None:
    v = _verdicts()
    kvm, libvirt_kvm = v["kvm"]["reason"], v["libvirt-kvm"]["reason"]
    assert len(libvirt_kvm) > 500 and "MSR 0x10a" in libvirt_kvm  # the real, quoted libvirt + qemu error
    short_kvm, short_lk = reasons.short_reason(kvm), reasons.short_reason(libvirt_kvm)
    assert short_kvm.startswith("probe hung, killed at 60 s: PVM /dev/kvm") and "placement: nested" in short_kvm
    assert short_lk.startswith("qemu aborts: this PVM /dev/kvm rejects MSR 0x10a") and "placement: nested" in short_lk
    for s in (short_kvm, short_lk):
        assert len(s) <= 2 * reasons.LIMIT and "\n" not in s


def test_an_unknown_reason_keeps_its_first_sentence_and_a_short_one_is_untouched() -> None:
    assert reasons.short_reason("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)") == \
        "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    assert reasons.short_reason("could not create appliance through libvirt. Try running qemu directly") == \
        "could not create appliance through libvirt"
    long = "x " * 200
    cut = reasons.short_reason(long)
    assert cut.endswith("…") and len(cut) <= reasons.LIMIT
    assert reasons.short_reason("UML 6.1.176 launched in 6.3 s") == "UML 6.1.176 launched in 6.3 s"


def test_doctor_table_in_80_columns_is_short_and_verbose_keeps_the_full_error() -> None:
    v = _verdicts()
    brief = _render(doctor_table(v, verbose=False))
    full = _render(doctor_table(v, verbose=True))
    assert len(brief.splitlines()) <= 3 * len(v) + 5, brief  # title, header and rules, ≤ 3 lines a backend
    assert "kvm_buf_set_msrs" not in brief and "kvm_buf_set_msrs" in full.replace("\n", "").replace(" ", "")
    assert len(full.splitlines()) > len(brief.splitlines()) + 10


def test_show_leads_with_the_short_reason_and_the_report_keeps_the_full_one() -> None:
    from guestbench.output.render import markdown
    from guestbench.output.results_doc import report_document

    doc = json.loads(DATA.read_text())
    con, out = _console(100)
    terminal.render(show_document(Run.from_dict(doc), brief=True), con)
    shown = out.getvalue()
    assert "placement: nested" in shown and "kvm_buf_set_msrs" not in shown
    md = markdown.to_markdown(report_document([(DATA.name, Run.from_dict(doc))], charts=False))
    assert "kvm_buf_set_msrs" in md
