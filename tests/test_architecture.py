"""The core stays readable: no import circle among guestbench's modules, no class over 300 lines and no
function over 90 (issue 13; the vhost-user console server, one protocol state machine, is excepted)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "guestbench"
CLASS_MAX, FUNC_MAX = 300, 90
SIZE_EXCEPTIONS = {"backends/uml/vhost_console.py"}


def _module(path: Path) -> str:
    parts = ["guestbench", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The guestbench modules this file imports, at any depth of the file (a lazy import still ties)."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in out if m in modules and m != here}


def test_no_import_circle() -> None:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {m: _imports(p, set(files)) for m, p in files.items()}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_class_over_300_lines_and_no_function_over_90() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).as_posix() in SIZE_EXCEPTIONS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (CLASS_MAX if isinstance(node, ast.ClassDef) else
                     FUNC_MAX if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines (limit {limit})")
    assert not found, found
