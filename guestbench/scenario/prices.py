"""The prices a scenario's `cost:` key gives (guestbench.analysis.cost turns a sample's core- and GiB-seconds into
money with them): unit prices, or an instance's price with its vCPUs and memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIB_PER_GIB = 1024.0
KEYS = {"currency": "text shown with every amount (e.g. USD, EUR); default 'money'",
        "vcpu_hour": "price of one vCPU for an hour (a number >= 0)",
        "gib_hour": "price of one GiB of memory for an hour (a number >= 0)",
        "instance_hour": "price of one instance for an hour (with vcpus and memory)",
        "vcpus": "the instance's vCPUs (an integer >= 1)",
        "memory": "the instance's memory (MiB, or a size such as 16GiB)"}
FORMS = "either vcpu_hour and gib_hour, or instance_hour with vcpus and memory"


@dataclass(frozen=True)
class Prices:
    currency: str = "money"
    vcpu_hour: float | None = None
    gib_hour: float | None = None
    instance_hour: float | None = None
    vcpus: int | None = None
    memory_mib: int | None = None

    @property
    def instance(self) -> bool:
        return self.instance_hour is not None

    def per_sample(self, core_s: float, gib_s: float) -> float:
        if self.instance:
            assert self.instance_hour is not None and self.vcpus and self.memory_mib
            share = max(core_s / self.vcpus, gib_s / (self.memory_mib / MIB_PER_GIB))
            return self.instance_hour / 3600 * share
        assert self.vcpu_hour is not None and self.gib_hour is not None
        return core_s * self.vcpu_hour / 3600 + gib_s * self.gib_hour / 3600

    def describe(self) -> str:
        if self.instance:
            assert self.memory_mib is not None
            return (f"an instance of {self.vcpus} vCPUs and {self.memory_mib / MIB_PER_GIB:g} GiB at "
                    f"{self.instance_hour:g} {self.currency}/hour; an appliance pays for the larger of its CPU share "
                    "(core-s / vCPUs) and its memory share (GiB-s / GiB) of it")
        return (f"{self.vcpu_hour:g} {self.currency} per vCPU-hour and {self.gib_hour:g} {self.currency} per "
                "GiB-hour, applied to core-s and GiB-s")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("currency", self.currency), ("vcpu_hour", self.vcpu_hour),
                                  ("gib_hour", self.gib_hour), ("instance_hour", self.instance_hour),
                                  ("vcpus", self.vcpus), ("memory_mib", self.memory_mib)) if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prices:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def to_file(self) -> dict[str, Any]:
        """The scenario-file form (memory under its file key)."""
        d = self.to_dict()
        if "memory_mib" in d:
            d["memory"] = d.pop("memory_mib")
        return d
