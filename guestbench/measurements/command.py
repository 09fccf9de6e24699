"""command: a user's own libguestfs workload (virt-ls, virt-inspector, a guestfish script), timed per backend.

The command runs exactly as under `guestbench exec BACKEND` (guestbench.run.command): the worker launches no
appliance itself, the command launches its own. A disk image is made once per cell from the scenario's keys
(guestbench.storage.image: on one host, the same keys give the same bytes) and copied fresh before every sample;
`{image}` and `{workdir}` in the command are replaced by its path and the cell's work dir. The deadline is the
sample's: when it passes the supervisor kills the worker's whole process tree, the command and every hypervisor it
started with it.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from typing import Any

from guestbench.backends.base import HandleConfig
from guestbench.backends.uml.channel import refusals
from guestbench.measurements.base import (FORMAT, CellContext, Measurement, Param, bool_param, choice_param,
                                          int_param, size_param)
from guestbench.util.errors import Unavailable
from guestbench.storage.image import FILESYSTEMS, ImageError, ImageSpec, make_image, sha256

MIN_DISK = 8 * 2**20
SCRIPT = "script.gf"  # a guestfish script's file in the cell's work dir


class Command(Measurement):
    name = "command"
    summary = "time a libguestfs program (argv, or a guestfish script) on each backend, on an image made per cell"
    timed = ("wall time of the command, from starting it until it exits (every appliance it launches and shuts "
             "down included), run with 'guestbench env BACKEND' settings on a fresh copy of the cell's image "
             "(copied before every sample, not timed)")
    launches = False
    params = (
        Param("argv", "argv", None, "the command and its arguments (a list, or one string split as a shell "
              "would); {image} and {workdir} are replaced"),
        Param("guestfish", "text", None, "a guestfish script instead of argv: run as guestfish [--ro] -a {image} "
              "-f SCRIPT (the script says 'run' itself)"),
        bool_param("readonly", False, "the image must keep every byte (checked after the first sample); guestfish "
                   "gets --ro"),
        size_param("disk_size", "64MiB", "size of the image (its filesystem is on the whole disk, /dev/sda)"),
        choice_param("filesystem", "ext4", FILESYSTEMS, "filesystem on the image"),
        int_param("files", 20, "small files under /srv/data in the image", minimum=0, maximum=100000),
        bool_param("os", True, "the image holds a tree that libguestfs's inspection takes for Debian 12 (tools "
                   "with -i or without -m need one)"),
        FORMAT,
        Param("expect", "text", "", "text the command's standard output must contain (empty: not checked)"),
        int_param("exit_status", 0, "the exit status the command must end with", minimum=0, maximum=255),
    )

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        if (params["argv"] is None) == (params["guestfish"] is None):
            return [("argv", "give exactly one of argv and guestfish; allowed: argv: [virt-ls, -a, '{image}', /] "
                     "or guestfish: a script")]
        if params["disk_size"] < MIN_DISK:
            return [("disk_size", f"allowed: at least {MIN_DISK // 2**20}MiB")]
        program = params["argv"][0] if params["argv"] is not None else "guestfish"
        if "{" not in program and shutil.which(program) is None:
            return [("argv" if params["argv"] is not None else "guestfish",
                     f"{program} is not on this host's PATH; allowed: an installed program (libguestfs-tools has "
                     "guestfish and the virt-* tools)")]
        return []

    def describe(self, params: dict[str, Any]) -> str:
        what = shlex.join(params["argv"]) if params["argv"] is not None else \
            "guestfish script: " + " : ".join(ln.strip() for ln in params["guestfish"].splitlines() if ln.strip())
        return f"command({what[:120]}{'...' if len(what) > 120 else ''}; image {self._image_text(params)})"

    # ---- worker side: no appliance of the worker's own (g is None) ----
    def after_launch(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        p = ctx.params
        spec = ImageSpec(size=p["disk_size"], filesystem=p["filesystem"], files=p["files"], os_tree=p["os"],
                         format=p["format"])
        try:
            base = make_image(ctx.workdir / f"base.{p['format']}", spec)
        except ImageError as e:  # the same on every try: the cell is unavailable, said once
            raise Unavailable(f"making the image: {e}") from None
        ctx.state.update(base=base, sha256=sha256(base), image=ctx.workdir / f"disk.{p['format']}")
        return {"stack": {"layout": "image", "filesystem": p["filesystem"], "device": "/dev/sda",
                          "description": self._image_text(p), "layers": [self._image_text(p)],
                          "size_bytes": p["disk_size"]}}

    def prepare(self, g: Any, ctx: CellContext) -> None:
        subprocess.run(["cp", "--sparse=always", str(ctx.state["base"]), str(ctx.state["image"])], check=True,
                       timeout=300)
        ctx.state["argv"] = self._argv(ctx)
        ctx.state["env"] = HandleConfig.from_dict(ctx.backend).process_environment(ctx.workdir)

    def timed_op(self, g: Any, ctx: CellContext) -> None:
        p, argv = ctx.params, ctx.state["argv"]
        proc = subprocess.run(argv, env=ctx.state["env"], cwd=ctx.workdir, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace")
        if proc.returncode != p["exit_status"]:
            said = " ".join((proc.stderr or proc.stdout).split()[-60:])
            refused = "".join(f" | the hypervisor program {r}" for r in refusals(ctx.workdir))
            raise RuntimeError(f"{argv[0]} exited with status {proc.returncode}, not {p['exit_status']}: "
                               f"{said or 'it printed nothing'}{refused}")
        if p["expect"] and p["expect"] not in proc.stdout:
            raise RuntimeError(f"the output of {argv[0]} lacks the expected {p['expect']!r}: "
                               f"{' '.join(proc.stdout.split())[:200]!r}")
        return None

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        if not ctx.params["readonly"]:
            return None
        after = sha256(ctx.state["image"])
        return {"what": "sha256 of the read-only image after the command", "host": ctx.state["sha256"],
                "guest": after, "ok": after == ctx.state["sha256"]}

    def before_shutdown(self, g: Any, ctx: CellContext) -> None:
        for key in ("image", "base"):
            if key in ctx.state:
                ctx.state[key].unlink(missing_ok=True)

    def host_program(self, params: dict[str, Any]) -> dict[str, Any]:
        """The argv with {image} and {workdir} still in it (and the guestfish script): what runs, as given."""
        if params["argv"] is not None:
            return {"argv": list(params["argv"])}
        return {"argv": ["guestfish", *(["--ro"] if params["readonly"] else []), "--format=" + params["format"],
                         "-a", "{image}", "-f", "{workdir}/" + SCRIPT], "script": params["guestfish"]}

    # ---- helpers ----
    def _argv(self, ctx: CellContext) -> list[str]:
        subst = {"image": str(ctx.state["image"]), "workdir": str(ctx.workdir)}
        shown = self.host_program(ctx.params)
        if "script" in shown:
            (ctx.workdir / SCRIPT).write_text(_fill(shown["script"], subst))
        return [_fill(a, subst) for a in shown["argv"]]

    @staticmethod
    def _image_text(p: dict[str, Any]) -> str:
        tree = "a Debian 12 tree and " if p["os"] else ""
        return (f"{p['filesystem']} on a {p['disk_size'] // 2**20} MiB {p['format']} image holding {tree}"
                f"{p['files']} small files")


def _fill(text: str, subst: dict[str, str]) -> str:
    """{image} and {workdir} replaced; every other brace is the command's own."""
    for k, v in subst.items():
        text = text.replace("{" + k + "}", v)
    return text
