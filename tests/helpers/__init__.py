"""Helpers the tests share (imported as `helpers`, tests/ being on the path): test doubles and fixtures' parts.

One module a concern, each imported as `from helpers.x import y` (conftest.py keeps only fixtures and hooks, and
no test imports it): session (this process's roots and timeline), paths (the checkout), leaks (what a test may
leave on the host), cli (guestbench run as a user runs it, or in-process), dirs (a sticky shared directory, a small
tmpfs, a tree's snapshot), users (the user nobody), waits (waiting for an event), results (results documents),
fleet (a test cluster's parts), scripted (the scripted executor). A helper written twice in tests belongs here,
once, taking as parameters what its copies differed in."""
