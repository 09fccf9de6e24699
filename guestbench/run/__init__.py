"""A run: from a scenario to a results file (what runs when is guestbench.plan; how a cell runs, guestbench.execute).

  runner.py    a run: verdicts, then the host placement's groups of cells, then the nested placement
  block.py     cells that take turns, each in its own thread; cell.py: one cell through an executor
  density.py   density levels; powercut.py: a cell of power-cut trials
  record.py    every change to the results document, and what the console says of it
  nested.py    the nested placement (the level-1 machinery is guestbench.nested); fleet/: the fleet placement
  command.py   `guestbench exec`: one command in one appliance; leaks.py: what a long run leaked
"""
