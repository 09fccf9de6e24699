"""make soak: run a soak scenario under the leak watch (guestbench.run.leaks) and print what it gained.

usage: python tools/soak.py [SCENARIO] [guestbench scenario options...]   (default scenarios/soak.yaml)
Exit status 0 when nothing leaked and nothing failed, 1 otherwise; the figures also go to results/soak-*.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from guestbench.host import fingerprint
from guestbench.run.leaks import WINDOW, soak

WARMUP = 4  # samples of a cell before its baseline: caches filled, allocator settled


def main(argv: list[str]) -> int:
    scenario = Path(argv[0]) if argv and not argv[0].startswith("-") else Path("scenarios/soak.yaml")
    rest = argv[1:] if argv and not argv[0].startswith("-") else argv
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    results = Path("results") / f"soak-{stamp}"
    print(f"soak: {scenario} (results and the run's log in {results}/; over an hour on TCG)", flush=True)
    g = soak(scenario, results, *rest, warmup=WARMUP)
    fp = fingerprint.fingerprint()
    doc = {"scenario": str(scenario), "machine": {k: fp.get(k) for k in ("hostname", "cpu_model", "cores", "kernel")},
           **g.to_dict(), "problems": g.problems()}  # g's own "host" is what the host kept
    (results / "soak.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"launches {g.launches}, samples {g.samples}, failures {g.failures}, exit status {g.exit_status}, "
          f"{g.seconds / 60:.0f} min")
    for who, growth in (("guestbench process", g.runner), ("worst worker", g.worker)):
        shown = ", ".join(f"{k} {v:+g}" for k, v in growth.items()) or "too few samples to judge"
        print(f"growth of the {who} (worst cell: its last {WINDOW} samples before its final one against samples "
              f"{WARMUP + 1}-{WARMUP + WINDOW}; fds and threads: the end's least over the baseline's most, RSS its "
              f"median): {shown}")
    for k, v in g.host.items():
        print(f"left on the host, {k.replace('_', ' ')}: {len(v)}{': ' + ', '.join(v) if v else ''}")
    for p in g.problems():
        print(f"LEAK: {p}")
    print(f"figures: {results / 'soak.json'}")
    return 0 if not g.problems() and g.failures == 0 and g.exit_status == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
