"""density: how many appliances fit on this host at once. Level by level (1, 2, 4, … appliances at once), until a
limit: a failure, a median past `slowdown_pct` of the single appliance's, a next level that would pass
`memory_budget_pct` of the host's RAM, or `max_appliances`. Each appliance does the level's `job`: by default
start-ups (launch plus one daemon round trip, the scenario's repetitions of it, launched together), or one
launch and then the repetitions of a chosen transfer measurement of `job_size` bytes, timed together. The levels
are run by guestbench.run.density; every appliance of a level is an ordinary cell of the results (its samples,
CPU and memory), and the run keeps what the levels reached."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import Measurement, choice_param, int_param, min_disk_size, size_param
from guestbench.measurements.startup import Startup
from guestbench.measurements.upload import Upload
from guestbench.measurements.upload_no_write import UploadNoWrite
from guestbench.measurements.write_no_upload import WriteNoUpload

JOBS: dict[str, Measurement] = {m.name: m for m in (Upload(), UploadNoWrite(), WriteNoUpload())}
"""The measurements an appliance of a level may do instead of start-ups (`job`), by name."""


class Density(Startup):
    name = "density"
    summary = "launch 1, 2, 4, ... appliances at once until start-up slows past a bound, memory runs out or one fails"
    timed = ("wall time of launch() plus one daemon round trip on each of N appliances launched at the same "
             "moment (each a fresh handle with one scratch disk); a level's figures are over all its appliances")
    params = (*Startup.params,
              int_param("max_appliances", 16, "the last level's appliances (levels double from 1 up to it)"),
              int_param("slowdown_pct", 200, "stop after a level whose median is at or past this percent of the "
                        "single appliance's", minimum=101),
              int_param("memory_budget_pct", 80, "do not start a level whose appliances would take the host's "
                        "used memory past this percent of its RAM", minimum=1, maximum=100),
              choice_param("job", "startup", ("startup", *JOBS), "what each appliance does: start-ups, or one "
                           "launch and then the timed transfer measurement of that name"),
              size_param("job_size", "16MiB", "the bytes a transfer job moves each time (its disk: the smallest "
                         "that holds them)"))
    density = True

    def job(self, params: dict[str, Any]) -> tuple[Measurement, dict[str, Any]] | None:
        """The chosen transfer measurement and its full parameters; None for start-ups (the density cell's own)."""
        m = JOBS.get(str(params.get("job", "startup")))
        if m is None:
            return None
        values = m.defaults()
        values["size"] = params["job_size"]
        if "disk_size" in values:
            values["disk_size"] = min_disk_size(params["job_size"])
        return m, values

    def describe(self, params: dict[str, Any]) -> str:
        job = self.job(params)
        text = super().describe(params)
        return text if job is None else f"{text}; each appliance: {job[0].describe(job[1])}"
