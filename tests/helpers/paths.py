"""Where the tests find the checkout: its data files, and the working directory a user's `guestbench` runs in."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # tests/helpers/paths.py: the checkout
