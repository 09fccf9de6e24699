"""density: how many appliances fit on this host at once. Level by level (1, 2, 4, … appliances launched
together, each taking the scenario's repetitions of a start-up), until a limit: a failure, a start-up median past
`slowdown_pct` of the single appliance's, a next level that would pass `memory_budget_pct` of the host's RAM, or
`max_appliances`. The levels are run by guestbench.run.density; every appliance of a level is an ordinary
start-up cell of the results (its samples, CPU and memory), and the run keeps what the levels reached."""

from __future__ import annotations

from guestbench.measurements.base import int_param
from guestbench.measurements.startup import Startup


class Density(Startup):
    name = "density"
    summary = "launch 1, 2, 4, ... appliances at once until start-up slows past a bound, memory runs out or one fails"
    timed = ("wall time of launch() plus one daemon round trip on each of N appliances launched at the same "
             "moment (each a fresh handle with one scratch disk); a level's figures are over all its appliances")
    params = (*Startup.params,
              int_param("max_appliances", 16, "the last level's appliances (levels double from 1 up to it)"),
              int_param("slowdown_pct", 200, "stop after a level whose median start-up is at or past this percent "
                        "of the single appliance's", minimum=101),
              int_param("memory_budget_pct", 80, "do not start a level whose appliances would take the host's "
                        "used memory past this percent of its RAM", minimum=1, maximum=100))
    density = True
