"""A terminal as the tests see one: a rich Console that believes it is a terminal, writing into a string, and what
a terminal would act on if text from outside reached it unescaped."""

from __future__ import annotations

import io

from rich.console import Console

# what a terminal acts on
OBEYED = ("\x1b]", "\x1b[2J", "\x1b[31m", "\u202e", "\u2066", "\x9b", "\x7f", "\x07", "\x1b]8;")


def terminal() -> tuple[Console, io.StringIO]:
    """A Console that renders as on a truecolor terminal 240 columns wide, and the text it wrote."""
    out = io.StringIO()
    return Console(file=out, force_terminal=True, color_system="truecolor", width=240), out
