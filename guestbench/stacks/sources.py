"""A Debian suite's apt sources, derived from the machine's own: the same archives, components and keys, with the
machine's suite names (bookworm, bookworm-updates, bookworm-security) replaced by the wanted suite's. Nothing is
hard-coded: a machine that reaches a mirror or a snapshot builds its stacks from it. Only Debian's own archives are
taken (apt's copy of each source's Release file says `Origin: Debian`): a vendor's archive that names the machine's
suite (Docker's `bookworm stable`) has no trixie or sid. `unstable`/`sid` has no -updates or -security suites; those
lines are dropped for it, and -backports lines for every suite (a stack is its suite's own software)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guestbench.util.errors import UserError

APT = Path("/etc/apt")
LISTS = Path("/var/lib/apt/lists")
SUFFIXES = ("-updates", "-security")
SUITE_RE = re.compile(r"[a-z][a-z0-9]{1,30}")
ROLLING = ("sid", "unstable")  # suites without -updates and -security


@dataclass(frozen=True)
class Source:
    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None = None
    trusted: bool = False  # [trusted=yes]: a local archive without signatures, as the machine's own source says

    def line(self) -> str:
        """The one-line form mmdebstrap and apt take."""
        opts = [f"signed-by={self.signed_by}"] if self.signed_by else []
        opts += ["trusted=yes"] if self.trusted else []
        return f"deb {'[' + ' '.join(opts) + '] ' if opts else ''}{self.uri} {self.suite} {' '.join(self.components)}"

    def origin(self, lists: Path = LISTS) -> str | None:
        """The archive's Origin, from apt's copy of this source's Release file (None: apt has none)."""
        stem = re.sub(r"^[a-z+]+://", "", self.uri).rstrip("/").replace("/", "_")
        for name in (f"{stem}_dists_{self.suite}_InRelease", f"{stem}_dists_{self.suite}_Release"):
            try:
                with open(lists / name, "rb") as f:
                    head = f.read(65536).decode("utf-8", "replace")
            except OSError:
                continue
            found = re.search(r"^Origin:\s*(.+)$", head, re.M)
            return found.group(1).strip() if found else None
        return None


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
        trusted = fields.get("trusted", "no").lower() == "yes"
        for uri in fields.get("uris", "").split():
            if not re.match(r"[a-z+]+://|file:", uri):
                continue
            for suite in fields.get("suites", "").split():
                out.append(Source(uri, suite, tuple(fields.get("components", "").split()), signed, trusted))
    return out


def parse_list(text: str) -> list[Source]:
    """The `deb` lines of a one-line sources.list."""
    out: list[Source] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not re.match(r"deb\s", line):
            continue
        signed, trusted, rest = None, False, line[4:].strip()
        if rest.startswith("["):
            opts, _, rest = rest[1:].partition("]")
            found = re.search(r"signed-by=(\S+)", opts)
            signed = found.group(1) if found and found.group(1).startswith("/") else None
            trusted = bool(re.search(r"\btrusted=yes\b", opts))
        words = rest.split()
        if len(words) >= 3 and re.match(r"[a-z+]+://|file:", words[0]):  # not cdrom: (a disc is no archive)
            out.append(Source(words[0], words[1], tuple(words[2:]), signed, trusted))
    return out


def machine_sources(apt: Path = APT) -> list[Source]:
    found: list[Source] = []
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            found += parse_list(path.read_text(errors="replace"))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        found += parse_deb822(path.read_text(errors="replace"))
    return found


def for_suite(suite: str, sources: list[Source], codename: str, lists: Path = LISTS) -> list[Source]:
    """The machine's Debian sources for `codename` turned into `suite`'s."""
    if not SUITE_RE.fullmatch(suite):
        raise UserError(f"{suite[:40]!r} is not a Debian suite name; allowed: lower-case letters and digits, e.g. "
                        "trixie or sid", source="command line", key="--suite")
    out: list[Source] = []
    for src in sources:
        tail = src.suite[len(codename):] if src.suite.startswith(codename) else None
        if tail is None or (tail and (tail not in SUFFIXES or suite in ROLLING)) or src.origin(lists) != "Debian":
            continue
        out.append(Source(src.uri, suite + tail, src.components, src.signed_by, src.trusted))
    if not any(s.suite == suite for s in out):
        raise UserError(f"none of the machine's apt sources is Debian's own archive for its suite ({codename}) as apt "
                        f"last read it (run apt-get update), so none can be turned into {suite}'s",
                        source="/etc/apt", key="sources")
    return out
