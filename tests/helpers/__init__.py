"""Helpers the tests share (imported as `helpers`, tests/ being on the path): test doubles and fixtures' parts."""
