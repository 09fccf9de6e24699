"""`python -m guestbench.cli`, as `guestbench`."""

from guestbench.cli import main

raise SystemExit(main())
