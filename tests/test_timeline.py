"""The suite's timeline (tests/timeline.py): a leftover names the tests that ran when it appeared, and the
timeline never costs a test (a path that is a link or a FIFO stops it, quietly)."""

from __future__ import annotations

import os
from pathlib import Path

from timeline import Timeline, running_between, who_made, _events


def test_a_leftover_names_the_tests_that_ran_when_it_appeared(tmp_path: Path) -> None:
    path = tmp_path / "timeline.log"
    path.write_text("100.0 gw0 start t::a\n"
                    "101.0 gw1 start t::b\n"
                    "102.0 gw0 end t::a\n"
                    "103.0 gw0 start t::c\n"
                    "104.0 gw2 + loop:loop7=/var/tmp/x.img\n"
                    "105.0 gw1 end t::b\n"
                    "106.0 gw0 end t::c\n"
                    "garbage line\n")
    said = who_made(path, "loop:loop7=/var/tmp/x.img")
    # seen first at 104 by gw2; the last look before it was at 103: t::b and t::c ran then, t::a had ended
    assert said.startswith("loop:loop7=/var/tmp/x.img: appeared between "), said
    assert "first seen by gw2; running then: gw1 t::b; gw0 t::c" in said, said
    assert running_between(_events(path), 100.5, 100.6) == ["gw0 t::a"]
    assert who_made(path, "domain:none").endswith("never seen by the timeline's looks")
    assert who_made(tmp_path / "absent", "x") == "no suite timeline to say who made it"


def test_the_timeline_stops_quietly_on_a_path_it_must_not_write(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "link"
    link.symlink_to(target)
    t = Timeline(link, "gw9")
    t.start("t::x")  # no exception: the test goes on
    assert t.broken and target.read_text() == ""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = Timeline(fifo, "gw9")
    t.end("t::x")  # no reader: a blocking open would hang here
    assert t.broken
    ok = Timeline(tmp_path / "ok.log", "gw9")
    ok.start("t::y")
    assert ok.broken is None and " gw9 start t::y" in (tmp_path / "ok.log").read_text()
