"""A page as a reader sees it: headless Chromium (Debian's package) renders a report, and its text is read back from
the DOM it dumps."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Text(HTMLParser):
    """The text a reader sees: every text node outside <script> and <style>."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with its profile in `args[0]` (a directory of the test's), given the rest of `args`."""
    assert CHROMIUM, "chromium is not installed (tools/setup.sh installs it)"
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--no-first-run", "--user-data-dir=" + args[0], *args[1:]],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
