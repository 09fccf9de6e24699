"""Modules executed when one of their names is first read (importlib's LazyLoader): the command line names every
module its commands use, and a command refused early (a bad scenario: exit 2) then never pays for numpy, rich and
the reports (measured here: 0.70 CPU-s a call against 0.29, n=8). First uses are on the main thread: Python
3.11's LazyLoader is not thread-safe."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def on_first_use(name: str) -> ModuleType:
    """The module `name`, registered as an import would register it, executed at its first attribute read."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:  # `import guestbench.output.render` then `guestbench.output.render.terminal` works
        setattr(sys.modules[parent], child, module)
    loader.exec_module(module)
    return module
