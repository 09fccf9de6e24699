"""Durability trials: every iteration is one appliance on a fresh disk with a volatile write cache; when it has
written and fsynced, the hypervisor and the disk's cache are killed together (a power cut) and the image on
the host is checked (guestbench.measurements.durability). Warm-up trials are checked too but kept apart.
"""

from __future__ import annotations

from typing import Any

from guestbench.measurements import durability
from guestbench.run.cell import CellTask
from guestbench.plan.cells import verdict_name
from guestbench.execute.protocol import Message, Msg
from guestbench.util.errors import Unavailable
from guestbench.storage.backing import Drive, Backings


class PowerCutTrials(CellTask):
    """A cell of a measurement that kills its hypervisor: one worker per trial, the power cut on its word."""

    def run(self) -> None:
        self.rec.state(self.cell, "running")
        handle_config = self.handle_config()
        for idx, it in enumerate(self.numbered):
            if self.ctx.stop.is_set():
                return
            self.rec.doing(self.cell, f"trial {idx + 1}/{len(self.its)}")
            with Backings(self.workdir / f"trial{idx}") as storage:
                try:
                    # a plain file, as a disk image normally is (qemu and UML flush a file with fdatasync/fsync),
                    # unless the backend cannot be handed a FUSE file (then NBD)
                    drive = storage.volatile(f"trial{idx}", self.params["disk_size"],
                                             as_file=self.backend.volatile_disk_as_file)
                except Unavailable as e:
                    self.rec.unavailable(self.cell, len(self.its) - idx, str(e))
                    return
                self.rec.update(self.cell, disk="NBD" if drive.protocol == "nbd" else "file",
                                disk_describe=drive.describe)
                self._trial(idx, it, handle_config, storage, drive)
            if (refusal := self.ctx.gate.refusal(verdict_name(self.cell))) is not None:
                self.rec.skip(self.cell, len(self.its) - idx - 1, refusal)
                return
        self.rec.finish(self.cell)

    def _trial(self, idx: int, it: tuple[str, int], handle_config: dict[str, Any], storage: Backings,
               drive: Drive) -> None:
        params = self.params
        token = durability.token_for(str(self.workdir), idx)
        outcome: dict[str, Any] = {}

        def on_message(msg: Message) -> None:
            if msg["t"] == Msg.LAUNCHED:
                outcome["launched"] = True
                self.ctx.gate.first_launch_ended(verdict_name(self.cell), msg["s"])
            elif msg["t"] == Msg.SAMPLE:
                outcome["sample"] = msg
            elif msg["t"] == Msg.FAILURE:
                outcome["failure"] = self.backend.explain(msg["reason"], False)
            elif msg["t"] == Msg.POWERCUT:
                # The disk first: a hypervisor that dies first closes the image file, and that close flushes
                # it (FUSE sends a flush on close), which no real power cut does.
                storage.power_cut()
                self.executor.kill()  # then the hypervisor, its worker and any libvirt domain
                with open(storage.image_path(drive), "rb") as f:
                    f.seek(durability.OFFSET)
                    image = f.read(params["size"])
                outcome["verdict"] = durability.verdict(image, token, params["size"])
                outcome["requests"] = storage.requests(drive)

        request = self.ctx.request(self.cell, [it[0]], handle_config, self.workdir, drives=[drive.to_dict()],
                                   params={**params, "token": token}, verify=False)
        ex = self.executor.run_worker(request, self.backend, on_message)
        if "verdict" in outcome and "sample" in outcome:
            seen = outcome.get("requests") or {}
            figures = {**outcome["sample"].get("metrics", {}), "verdict": outcome["verdict"],
                       "durable": 1.0 if outcome["verdict"] == "honoured" else 0.0,
                       "host_writes": float(seen.get("writes", 0)), "host_flushes": float(seen.get("flushes", 0))}
            self.rec.sample(self.cell, it, outcome["sample"]["s"], metrics=figures,
                            extra={k: outcome["sample"][k] for k in ("load", "resources") if k in outcome["sample"]})
            return
        self.rec.failure(self.cell, it, reason := outcome.get("failure") or ex.explain(self.backend))
        if "launched" not in outcome:
            self.probe_failed(reason)  # refused: run() skips the rest
