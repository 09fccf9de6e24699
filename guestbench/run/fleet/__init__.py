"""Fleet runs: one scenario across many hosts on Dask distributed, one results file with each host named.

The unit that crosses the network is one host's share of the run, not a cell: turns between cells, host-side
disks, the busy check and clean-up are all host-local, so each host runs its share as `guestbench scenario`
does on one machine (its cells through the local supervisor), and its results file streams back, snapshot by
snapshot, to the run on the coordinating machine, which merges it with the host's name (as the nested
placement merges the level-1 guest's).

- ``resources``: what a worker advertises (``bench`` plus one resource per usable backend);
- ``worker``: ``guestbench worker``: checks the backends, runs a Dask worker, and cleans up after it;
- ``task``: what runs on a worker: the host's share, as a ``guestbench scenario`` child process;
- ``coordinator``: ``scenario --cluster``: picks hosts, submits, merges, notices lost hosts, cancels;
- ``local``: ``guestbench fleet local N``: a scheduler and N workers on this machine;
- ``address``: who may send work: a plain scheduler address off loopback is refused without ``--insecure``, and
  a worker listens only on the interface that reaches its scheduler;
- ``tls``: the Dask TLS settings a ``tls://`` address needs, checked before connecting.
"""
