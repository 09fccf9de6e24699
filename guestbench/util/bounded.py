"""Reading untrusted files with limits: what a small hostile file could otherwise cost (docs/safety.md).

A scenario or results file may come from anyone: a FIFO or a device where a file was expected would block or
never end, /dev/zero would fill memory, and a few hundred bytes of YAML aliases expand to billions of nodes.
So a file is read only when it is a regular file under a size cap (refused at once otherwise, before any read:
it is stat'ed before it is opened and fstat'ed after, and opened non-blocking, so a FIFO swapped in between
cannot block), and YAML is composed with bounds on aliases, nodes (counting what each alias expands to) and
depth, from libyaml's events where PyYAML has it (fast enough that a 1 MiB file takes about a second).
Symbolic links are followed: the path is named by the user running guestbench, reading it changes nothing,
and the file finally read is checked as above. The files of a directory someone else may write are another
matter: guestbench.util.walk opens those without following links. Every refusal is a UserError (exit 2, one line).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import Node

from guestbench.util.errors import CLIP, UserError, clip, clip_text
from guestbench.util.units import approx_size

__all__ = ["MAX_FILE_BYTES", "MAX_ALIASES", "MAX_NODES", "MAX_DEPTH", "MAX_NUMBER_CHARS", "read_bytes", "read_fd",
           "check_size", "read_text", "safe_yaml", "clip"]

MAX_FILE_BYTES = 2**20  # a scenario file; a hand-written one is a few KiB
MAX_ALIASES = 100  # `<<: *defaults` and a few shared lists
MAX_NODES = 100_000  # scalars, lists and mappings, each alias counted as the nodes it stands for: what stops a bomb
MAX_DEPTH = 50  # nesting levels; a scenario needs about six
MAX_NUMBER_CHARS = 100  # a YAML integer or float literal; int() of thousands of digits is refused or slow
# A syntax error in a file this small is said in PyYAML's words (where libyaml's are vaguer: 'line 2, column 1'
# for the end of a one-line file); a longer file keeps libyaml's rather than being parsed a second, slow time.
PRECISE_SYNTAX_CHARS = 64 * 1024

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_bytes(path: str | Path, what: str, cap: int = MAX_FILE_BYTES, hint: str = "") -> bytes:
    """The contents of the regular file at `path` (a `what`, e.g. "scenario file"), at most `cap` bytes; a
    UserError naming the path otherwise. `hint` says what to give instead when the file is missing."""
    source = str(path)
    fd = _open_regular(path, what, hint)
    try:
        return read_fd(fd, what, cap, source)
    finally:
        os.close(fd)


def read_fd(fd: int, what: str, cap: int, source: str, limit: int | None = None) -> bytes:
    """The contents of the regular file open at `fd`, at most `cap` bytes (its size checked first, then the bytes
    actually read: a file that grows while read, or /proc's, of size 0); a UserError naming `source` otherwise.
    With `limit` (what a caller's budget has left), reading stops after limit + 1 bytes, for the caller to refuse.
    guestbench.util.walk reads each file of a directory through this too."""
    stop = cap if limit is None else min(cap, limit)
    try:
        check_size(os.fstat(fd).st_size, what, cap, source)
        chunks, got = [], 0
        while chunk := os.read(fd, min(1 << 16, stop + 1 - got)):
            chunks.append(chunk)
            got += len(chunk)
            check_size(got, what, cap, source)
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror or e}", source=source) from None


def _open_regular(path: str | Path, what: str, hint: str) -> int:
    """A descriptor open for reading on `path` once it is known to be a regular file. The path is first opened
    with O_PATH, which opens nothing (no wait on a FIFO, no device's open side effects) and checked with fstat;
    only then is the very file checked opened for reading, through /proc/self/fd."""
    source = str(path)
    try:
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"no such {what}" + (f"; {hint}" if hint else ""), source=source) from None
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror or e}", source=source) from None
    try:
        mode = os.fstat(handle).st_mode
        if stat.S_ISDIR(mode):
            raise UserError(f"is a directory; give the path of a {what}", source=source)
        if not stat.S_ISREG(mode):
            raise UserError(f"is {_kind(mode)}, not a regular file; allowed: a {what} (a regular file)",
                            source=source)
        return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror or e}", source=source) from None
    finally:
        os.close(handle)


def check_size(size: int, what: str, cap: int, source: str) -> None:
    """A UserError when `size` bytes are more than a `what` may be."""
    if size > cap:
        raise UserError(f"is {approx_size(size) if size < 2**62 else 'huge'}, more than a {what} may be; allowed: "
                        f"at most {approx_size(cap)}", source=source)


def read_text(path: str | Path, what: str, cap: int = MAX_FILE_BYTES, hint: str = "") -> str:
    """read_bytes as UTF-8 text; bytes that are not UTF-8 are a UserError saying where."""
    data = read_bytes(path, what, cap, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"cannot read {what}: byte {e.start} ({data[e.start:e.start + 1]!r}) is not UTF-8; allowed: "
                        "UTF-8 text", source=str(path)) from None


class _Limit(yaml.YAMLError):
    """A bound of safe_yaml exceeded: said as a syntax error is, with where it happened."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _BoundedComposer(Composer):
    """PyYAML's composer, counting as it goes: aliases, nodes (an alias counts as all the nodes of what it
    names, so the document's fully expanded size is bounded, not just the text's) and nesting depth (an alias
    adds its node's height). An alias to a node still being composed (a structure that contains itself) is
    refused: nothing downstream expects a cycle."""

    def __init__(self, aliases: int, nodes: int, depth: int) -> None:
        super().__init__()
        self.limits = (aliases, nodes, depth)
        self.counted = [0, 0]  # aliases, nodes so far
        self.depth = self.deepest = 0
        self.sizes: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height) once composed

    def _count(self, nodes: int, reached: int, mark: Any) -> None:
        self.counted[1] += nodes
        self.deepest = max(self.deepest, reached)
        if self.counted[1] > self.limits[1]:
            raise _Limit(f"more than {self.limits[1]} values (aliases counted as what they repeat); allowed: at "
                         f"most {self.limits[1]}", mark)
        if reached > self.limits[2]:
            raise _Limit(f"nested more than {self.limits[2]} levels deep; allowed: at most {self.limits[2]}", mark)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        depth = self.depth + 1
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self.counted[0] += 1
            if self.counted[0] > self.limits[0]:
                raise _Limit(f"more than {self.limits[0]} aliases (*name); allowed: at most {self.limits[0]}",
                             event.start_mark)
            if event.anchor in self.anchors and event.anchor not in self.sizes:
                raise _Limit(f"alias *{clip_text(event.anchor, CLIP)} is inside the node it names; allowed: an alias "
                             "to a node defined before it", event.start_mark)
            size, height = self.sizes.get(event.anchor, (1, 1))
            self._count(size, depth + height - 1, event.start_mark)
            return super().compose_node(parent, index)
        before, outer = self.counted[1], self.deepest
        self.deepest = 0  # this node's own subtree, for its height
        self._count(1, depth, event.start_mark)
        self.depth = depth
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth = depth - 1
        if event.anchor is not None:
            self.sizes[event.anchor] = (self.counted[1] - before, self.deepest - depth + 1)
        self.deepest = max(outer, self.deepest)
        return node


class _BoundedConstructor(SafeConstructor):
    """SafeConstructor, refusing number literals too long to be meant (int() of thousands of digits is refused
    by Python past 4300 and slow in base 60 long before)."""

    def _short(self, node: Any) -> None:
        if isinstance(node.value, str) and len(node.value) > MAX_NUMBER_CHARS:
            raise ConstructorError(None, None, f"a number of {len(node.value)} characters; allowed: at most "
                                   f"{MAX_NUMBER_CHARS}", node.start_mark)

    def construct_yaml_int(self, node: Any) -> Any:
        self._short(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Any) -> Any:
        self._short(node)
        return super().construct_yaml_float(node)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _construct_str(self: _BoundedConstructor, node: Any) -> Any:
    """A string, which a "\\uD800" escape would make a lone surrogate: not text, refused where it stands."""
    value = SafeConstructor.construct_yaml_str(self, node)
    if isinstance(value, str) and _SURROGATE.search(value):
        raise yaml.constructor.ConstructorError(None, None, "a lone surrogate (a \\uD8xx escape) is not text; "
                                                "allowed: UTF-8 text", node.start_mark)
    return value


_BoundedConstructor.add_constructor("tag:yaml.org,2002:str", _construct_str)
_BoundedConstructor.add_constructor("tag:yaml.org,2002:int", _BoundedConstructor.construct_yaml_int)
_BoundedConstructor.add_constructor("tag:yaml.org,2002:float", _BoundedConstructor.construct_yaml_float)


try:  # libyaml's parser: events six times as fast as PyYAML's own, which a 1 MiB file would take seconds in
    from yaml.cyaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml
    _Parser = None


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _BoundedComposer,
                _BoundedConstructor, yaml.resolver.Resolver):
    """yaml.SafeLoader with the bounded composer and constructor."""

    def __init__(self, text: str, aliases: int, nodes: int, depth: int) -> None:
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _BoundedComposer.__init__(self, aliases, nodes, depth)
        _BoundedConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


def _loader(text: str, aliases: int, nodes: int, depth: int, fast: bool) -> Any:
    """A bounded loader: with `fast`, libyaml's events composed (and so counted) in Python."""
    if _Parser is None or not fast:
        return _PyLoader(text, aliases, nodes, depth)

    class _CLoader(_BoundedComposer, _Parser, _BoundedConstructor, yaml.resolver.Resolver):
        def __init__(self) -> None:
            _Parser.__init__(self, text)
            _BoundedComposer.__init__(self, aliases, nodes, depth)
            _BoundedConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return _CLoader()


def _load(text: str, aliases: int, nodes: int, depth: int, fast: bool) -> Any:
    loader = _loader(text, aliases, nodes, depth, fast)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def safe_yaml(text: str, source: str, *, aliases: int = MAX_ALIASES, nodes: int = MAX_NODES,
              depth: int = MAX_DEPTH) -> Any:
    """yaml.safe_load of one document, within the bounds; a UserError naming `source`, the line and column and
    the problem (its quoted parts clipped) when the text is not YAML or goes past a bound."""
    try:
        try:
            return _load(text, aliases, nodes, depth, fast=True)
        except (yaml.scanner.ScannerError, yaml.parser.ParserError):
            if len(text) > PRECISE_SYNTAX_CHARS:
                raise
            return _load(text, aliases, nodes, depth, fast=False)  # PyYAML's own words for the same error
    except yaml.reader.ReaderError as e:  # libyaml gives the character's code, PyYAML the character
        code = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "\0")
        raise UserError(f"not valid YAML: {e.reason} (#x{code:x} at character {e.position}); allowed: printable "
                        "text", source=source) from None
    except UnicodeEncodeError as e:  # a lone surrogate: a command-line word that was not UTF-8
        raise UserError(f"not valid YAML: character {e.start} is not UTF-8; allowed: UTF-8 text", source=source) \
            from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = clip_text(str(getattr(e, "problem", None) or "syntax error"), 2 * CLIP)
        raise UserError(f"not valid YAML{where}: {problem}", source=source) from None
    except RecursionError:  # a bound above the interpreter's own would still end here
        raise UserError("not valid YAML: nested too deeply", source=source) from None
