"""A Debian suite's apt sources, derived from the machine's own: the same archives, components and keys, with the
machine's suite names (bookworm, bookworm-updates, bookworm-security) replaced by the wanted suite's. Nothing is
hard-coded: a machine that reaches a mirror or a snapshot builds its stacks from it. `unstable`/`sid` has no
-updates or -security suites; those lines are dropped for it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guestbench.util.errors import UserError

APT = Path("/etc/apt")
SUITE_RE = re.compile(r"[a-z][a-z0-9]{1,30}")
ROLLING = ("sid", "unstable")  # suites without -updates and -security


@dataclass(frozen=True)
class Source:
    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None = None

    def line(self) -> str:
        """The one-line form mmdebstrap and apt take."""
        opts = f"[signed-by={self.signed_by}] " if self.signed_by else ""
        return f"deb {opts}{self.uri} {self.suite} {' '.join(self.components)}"


def host_codename(os_release: str | None = None) -> str:
    text = os_release if os_release is not None else Path("/etc/os-release").read_text()
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    if not found:
        raise UserError("/etc/os-release names no VERSION_CODENAME: cannot tell which suite the machine's apt "
                        "sources are for", source="/etc/os-release", key="VERSION_CODENAME")
    return found.group(1)


def parse_deb822(text: str) -> list[Source]:
    """The `deb` entries of a deb822 .sources file (one per URI and suite); `Enabled: no` stanzas skipped."""
    out: list[Source] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:  # a continuation line
                fields[key] += " " + raw.strip()
                continue
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        signed = fields.get("signed-by") or None
        if signed and not signed.startswith("/"):
            signed = None  # an inline key: the archive keyring is used instead
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                out.append(Source(uri, suite, tuple(fields.get("components", "").split()), signed))
    return out


def parse_list(text: str) -> list[Source]:
    """The `deb` lines of a one-line sources.list."""
    out: list[Source] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        signed = None
        if "[" in line:
            opts, _, rest = line[4:].partition("]")
            found = re.search(r"signed-by=(\S+)", opts)
            signed = found.group(1) if found and found.group(1).startswith("/") else None
            words = rest.split()
        else:
            words = line[4:].split()
        if len(words) >= 3:
            out.append(Source(words[0], words[1], tuple(words[2:]), signed))
    return out


def machine_sources(apt: Path = APT) -> list[Source]:
    found: list[Source] = []
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            found += parse_list(path.read_text(errors="replace"))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        found += parse_deb822(path.read_text(errors="replace"))
    return found


def for_suite(suite: str, sources: list[Source], codename: str) -> list[Source]:
    """The machine's sources for `codename` turned into `suite`'s (third-party archives, which name other suites,
    are left out)."""
    if not SUITE_RE.fullmatch(suite):
        raise UserError(f"{suite[:40]!r} is not a Debian suite name; allowed: lower-case letters and digits, e.g. "
                        "trixie or sid", source="command line", key="--suite")
    out: list[Source] = []
    for src in sources:
        if src.suite == codename:
            out.append(Source(src.uri, suite, src.components, src.signed_by))
        elif src.suite.startswith(codename + "-") and suite not in ROLLING:
            out.append(Source(src.uri, suite + src.suite[len(codename):], src.components, src.signed_by))
    if not any(s.suite == suite for s in out):
        raise UserError(f"none of the machine's apt sources is for its own suite ({codename}), so none can be turned "
                        f"into {suite}'s", source="/etc/apt", key="sources")
    return out
