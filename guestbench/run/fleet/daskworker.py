"""The Dask worker process of `guestbench worker` (its keeper is guestbench.run.fleet.keeper):
python -m guestbench.run.fleet.daskworker ADDRESS NAME LISTEN_HOST RESOURCES_JSON LOCAL_DIR.

It listens on LISTEN_HOST only (the interface that reaches the scheduler: guestbench.run.fleet.address), and
its HTTP server (health and metrics routes; there is no dashboard) on loopback only: a worker runs, as root,
whatever reaches it, so it is reachable from no further than it must be. Dask's handlers that run code a peer
sends (`run`, `run_coroutine`, plugins, uploads) are refused to everyone, and when this host's certificate is
a worker's (guestbench.run.fleet.roles), only the scheduler's certificate may connect to it at all."""

from __future__ import annotations

import asyncio
import json
import sys

from guestbench.run.fleet.keeper import DEATH_TIMEOUT_S


async def _serve(address: str, name: str, host: str, offered: dict[str, float], local_dir: str) -> None:
    from distributed import Worker

    from guestbench.run.fleet import roles, tls

    roles.worker_setup(tls.configured("worker_cert") if address.startswith("tls://") else None)

    async with Worker(address, nthreads=1, name=name, resources=offered, local_directory=local_dir,
                      death_timeout=DEATH_TIMEOUT_S, memory_limit=0,  # its tasks hold no data
                      host=host, dashboard=False, dashboard_address="127.0.0.1:0") as w:
        await w.finished()


def main(argv: list[str]) -> int:
    address, name, host, offered, local_dir = argv
    try:
        asyncio.run(_serve(address, name, host, json.loads(offered), local_dir))
    except RuntimeError as e:  # a Dask the roles were not made for (guestbench.run.fleet.roles.check_dask)
        print(f"guestbench worker: {e}", file=sys.stderr)
        return 2
    except (TimeoutError, OSError) as e:  # no scheduler there (Dask retries until death_timeout)
        print(f"guestbench worker: cannot reach a Dask scheduler at {address} within {DEATH_TIMEOUT_S} s "
              f"({type(e).__name__}: {e}); start one with 'dask scheduler' and give its address", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
