"""The run pipeline: from a scenario to a results file.

  runner.py    a run: verdicts, then the host placement's groups of cells, then the nested placement
  plan.py      the cells of a scenario, in run order
  gate.py      backend verdicts: probe, cached verdict, deferred probe, refusal
  cell.py      one cell through an executor; powercut.py: a cell of power-cut trials
  record.py    every change to the results document, and what the console says of it
  nested.py    the nested placement (the level-1 machinery is guestbench.nested)
  executor.py  the seam: a request in, the worker's messages out; supervisor.py is the local executor
  protocol.py  the request, the message kinds, how a worker ended
  worker.py    the worker process; inprocess.py: a cell in this process, for the pytest plugin
  probe.py     one backend's verdict; lockstep.py: concurrent guests start each sample together

Nothing is imported here, so that `python -m guestbench.run.worker` loads only what a worker needs.
"""
