"""Registry of measurements, by the name used in scenario files."""

from __future__ import annotations

from guestbench.measurements.api_suite import ApiSuite
from guestbench.measurements.base import Measurement
from guestbench.measurements.bonnie import Bonnie
from guestbench.measurements.command import Command
from guestbench.measurements.dbench import Dbench
from guestbench.measurements.density import Density
from guestbench.measurements.durability import Durability
from guestbench.measurements.fio import Fio
from guestbench.measurements.startup import Startup
from guestbench.measurements.tar import Tar
from guestbench.measurements.upload import Upload
from guestbench.measurements.upload_no_write import UploadNoWrite
from guestbench.measurements.write_no_upload import WriteNoUpload

MEASUREMENTS: dict[str, Measurement] = {m.name: m for m in (Startup(), Upload(), UploadNoWrite(), WriteNoUpload(),
                                                             Fio(), Bonnie(), Dbench(), Tar(), Durability(),
                                                             Command(), ApiSuite(), Density())}


def get(name: str) -> Measurement:
    return MEASUREMENTS[name]
