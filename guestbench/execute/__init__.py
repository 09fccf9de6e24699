"""How one cell runs, and where: the request, the worker process, the executors that run it.

  protocol.py   the request, the message kinds, how a worker ended
  executor.py   the seam: a request in, the worker's messages out; supervisor.py is the local executor
  worker.py     the worker process; inprocess.py: a cell in this process, for the pytest plugin
  remote.py     merging a run that ran elsewhere (nested, fleet); threads.py: cells that run at the same time
  probe.py      one backend's verdict, from one real launch
  turns.py      a worker's turns (granted by guestbench.plan.schedule); lockstep.py: concurrent guests in step

Nothing is imported here, so that `python -m guestbench.execute.worker` loads only what a worker needs.
"""
