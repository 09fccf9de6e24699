"""Helpers the tests share (imported as `helpers`, tests/ being on the path): test doubles and fixtures' parts.

One module a concern, each imported as `from helpers.x import y` (conftest.py keeps only fixtures and hooks, and
no test imports it, nor any test module another): session (this process's roots and timeline), paths (the
checkout), leaks (what a test may leave on the host), cli (guestbench run as a user runs it, or in-process, or
measured), dirs (a sticky shared directory, a small tmpfs, a tree's snapshot), users (the user nobody), waits
(waiting for an event), results (results documents), history (`guestbench history`'s input and the command),
fleet (a test cluster's parts, a fleet run's documents), nested (placement nested's results), terminal (a terminal
and what it obeys), browser (a page as Chromium renders it), phases (boot phases from real launch logs), storage
(guest-side storage stacks exercised), hv (test hypervisors), scripted (the scripted executor). A helper written
twice in tests, or one that a second test module needs, belongs here, once, taking as parameters what its copies
differed in.

Their asserts are rewritten as a test module's are (pytest's assertion rewriting, registered here before any of
them is imported): a check that fails in a helper says what it compared, as it did where it was written."""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))
