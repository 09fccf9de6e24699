"""The drive a host storage kind hands to the hypervisor, as the worker passes it to libguestfs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Drive:
    """What the worker passes to libguestfs's `g.add_drive`; crosses the JSON pipe to the worker process.

    An NBD drive names no file: libguestfs wants the export name (the default export is "") and the
    server address, e.g. add_drive("", protocol="nbd", server=["unix:/path.sock"], format="raw").
    """

    filename: str
    format: str
    protocol: str = "file"
    server: list[str] = field(default_factory=list)
    describe: str = ""
    kind: str = ""
    name: str = ""

    def add_drive_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `g.add_drive(**kwargs)`."""
        kw: dict[str, Any] = {"filename": self.filename, "format": self.format}
        if self.protocol != "file":
            kw["protocol"] = self.protocol
            kw["server"] = list(self.server)
        return kw

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Drive:
        return cls(filename=str(d["filename"]), format=str(d["format"]), protocol=str(d.get("protocol", "file")),
                   server=[str(s) for s in d.get("server") or []], describe=str(d.get("describe", "")),
                   kind=str(d.get("kind", "")), name=str(d.get("name", "")))
