"""The Dask worker process of `guestbench worker` (its keeper is guestbench.run.fleet.worker):
python -m guestbench.run.fleet.daskworker ADDRESS NAME RESOURCES_JSON LOCAL_DIR."""

from __future__ import annotations

import asyncio
import json
import sys

from guestbench.run.fleet.worker import DEATH_TIMEOUT_S


async def _serve(address: str, name: str, offered: dict[str, float], local_dir: str) -> None:
    from distributed import Worker

    async with Worker(address, nthreads=1, name=name, resources=offered, local_directory=local_dir,
                      death_timeout=DEATH_TIMEOUT_S, memory_limit=0) as w:  # its tasks hold no data
        await w.finished()


def main(argv: list[str]) -> int:
    address, name, offered, local_dir = argv
    try:
        asyncio.run(_serve(address, name, json.loads(offered), local_dir))
    except (TimeoutError, OSError) as e:  # no scheduler there (Dask retries until death_timeout)
        print(f"guestbench worker: cannot reach a Dask scheduler at {address} within {DEATH_TIMEOUT_S} s "
              f"({type(e).__name__}: {e}); start one with 'dask scheduler' and give its address", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
