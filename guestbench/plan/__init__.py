"""What runs when: a scenario's cells in run order, which backends may run, whose turn is next.

  cells.py     the cells of a scenario, in run order, grouped and put in blocks
  gate.py      backend verdicts: probe, cached verdict, deferred probe, refusal
  schedule.py  the order of a block's samples and the turnstile that enforces it
  dryrun.py    a run's plan without a launch (`--dry-run`)
"""
