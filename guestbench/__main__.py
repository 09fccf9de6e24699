from guestbench.cli import main

raise SystemExit(main())
