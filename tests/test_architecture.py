"""The core stays readable: no import circle among guestbench's modules, no module over 450 lines, no class over 300
and no function over 90, tools/ and the tests' helpers included (issues 13 and 49; the vhost-user console server,
one protocol state machine, is excepted)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "guestbench"
MODULE_MAX, CLASS_MAX, FUNC_MAX = 450, 300, 90
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
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
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


def _sized() -> list[Path]:
    """Every module the size rules hold: guestbench's, the tools' and the tests' shared helpers."""
    top = ROOT.parent
    return sorted([*ROOT.rglob("*.py"), *(top / "tools").glob("*.py"), *(top / "tests" / "helpers").glob("*.py")])


def test_no_module_over_450_lines_no_class_over_300_and_no_function_over_90() -> None:
    found = []
    for path in _sized():
        name = path.relative_to(ROOT.parent).as_posix()
        if name.removeprefix("guestbench/") in SIZE_EXCEPTIONS:
            continue
        text = path.read_text()
        if (lines := len(text.splitlines())) > MODULE_MAX:
            found.append(f"{name}: {lines} lines (limit {MODULE_MAX})")
        for node in ast.walk(ast.parse(text)):
            limit = (CLASS_MAX if isinstance(node, ast.ClassDef) else
                     FUNC_MAX if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit:
                found.append(f"{name}:{node.lineno} {node.name}: {n} lines (limit {limit})")
    assert not found, found


# The layers, lowest first: a package imports only packages of its own layer or below (and the package's face,
# guestbench/__init__.py, for the version). docs/architecture.md draws them.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("util",),  # errors, units, reasons, bounded YAML: nothing of guestbench's
    ("host",),  # host facts: fingerprint, /proc, cgroups, space, locks, neighbours, paths, owned files
    ("results", "instruments"),  # the results file's model and io; what a worker measures per sample
    ("backends", "workloads", "storage", "stacks"),  # the domain: hypervisors, workload tools, disks, software stacks
    ("measurements",),
    ("scenario",),
    ("analysis",),  # figures of a results file: statistics, comparisons, cost, phases
    ("nested",),
    ("execute",),  # how a cell runs: the request, the worker, executors, probes, turns from the worker's side
    ("plan",),  # what runs when: cells in order, backend verdicts, the turnstile, dry runs
    ("run",),  # a run from start to file: runner, cells and blocks, record; fleet and nested placements
    ("output",),  # tables, renderers, exporters, charts
    ("cli", "pytest_plugin", "__main__"),  # entry points
)


def _layer(module: str) -> int | None:
    top = module.split(".")[1] if "." in module else None
    return next((i for i, names in enumerate(LAYERS) if top in names), None)


def test_every_package_has_a_layer_and_imports_none_above_it() -> None:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    unplaced = sorted({m.split(".")[1] for m in files if "." in m and _layer(m) is None})
    assert not unplaced, f"packages without a layer in LAYERS: {unplaced}"
    upward = [f"{m} -> {n}" for m, p in files.items() if "." in m
              for n in sorted(_imports(p, set(files))) if n != "guestbench" and _layer(n) > _layer(m)]
    assert not upward, "imports of a higher layer: " + "; ".join(upward)


# Readers of a results document and the computations behind a figure: output/ lays figures out, it computes none.
# A results file's figures come from its findings (guestbench.analysis.findings), a comparison's from compare.
DOCUMENT_READERS = {"guestbench.results.figures", "guestbench.results.hosts", "guestbench.results.io"}
COMPUTATIONS = {"summarize", "ratio_ci", "relative_precision", "permutation_p"}  # guestbench.analysis.stats


def test_output_reads_findings_and_computes_no_figure() -> None:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    found = []
    for m, p in files.items():
        if not m.startswith("guestbench.output"):
            continue
        found += [f"{m} imports {n}" for n in sorted(_imports(p, set(files)) & DOCUMENT_READERS)]
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            found += [f"{m} calls {name} (line {node.lineno})"] if name in COMPUTATIONS else []
    assert not found, "; ".join(found)
