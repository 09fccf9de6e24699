"""Free space: what a cell needs is checked before it starts, and a full filesystem is named in one line (nothing
here launches an appliance; the faults during a sample are in test_faults.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guestbench.host import space
from guestbench.util.errors import Unavailable

from helpers.cli import guestbench, write_scenario
from helpers.dirs import small_tmpfs


def fill(mnt: Path, leave: int = 0) -> None:
    with open(mnt / "filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, space.free_bytes(mnt) - leave)


def test_shortfall_says_what_does_not_fit_where_and_full_reason_names_the_mount() -> None:
    with small_tmpfs("100m") as mnt:
        target = mnt / "not" / "made" / "yet"  # a directory about to be made is on its parent's filesystem
        assert space.shortfall(target, 8 * 2**20, "x") is None
        short = space.shortfall(target, 60 * 2**20, "its disk images")
        assert short is not None and short.startswith(f"needs 124MiB free in {target} for its disk images")
        assert short.endswith(f"100MiB free on {mnt}"), short
        with pytest.raises(Unavailable, match="needs"):
            space.require(target, 60 * 2**20, "its disk images")
        assert space.full_reason(target) is None
        fill(mnt)
        assert space.full_reason(target) == f"host filesystem full at {mnt} (0B free)"
        assert space.full_among([Path("/"), target]) in (space.full_reason(Path("/")), space.full_reason(target))


def test_a_payload_that_does_not_fit_in_the_cache_is_unavailable_and_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from guestbench.measurements.payload import payload

    with small_tmpfs("80m") as mnt:
        monkeypatch.setenv("GUESTBENCH_CACHE", str(mnt))
        with pytest.raises(Unavailable, match=rf"needs .* free in {mnt}/payloads for the 32MiB payload"):
            payload(32 * 2**20)
        assert list((mnt / "payloads").iterdir()) == []
        path, digest = payload(2**20)  # what fits is made as before
        assert path.stat().st_size == 2**20 and len(digest) == 64


def test_a_full_cache_is_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.yaml", "name: full\nrepetitions: 1\nwarmup: 0\nmeasurements: [startup]\n")
    with small_tmpfs("4m") as mnt:
        fill(mnt)
        proc = guestbench("scenario", str(sc), "--backend", "tcg", "--results", str(tmp_path / "r"), timeout=300,
                          env={**os.environ, "GUESTBENCH_CACHE": str(mnt / "cache")})
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last == (f"guestbench: No space left on device: host filesystem full at {mnt} (0B free), which holds "
                    f"the cache (GUESTBENCH_CACHE) {mnt / 'cache'}: free space there, or point it elsewhere"), last
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_uml_keeps_guest_ram_in_the_first_place_it_can_boot_or_says_where_nothing_does() -> None:
    from guestbench.backends.uml.hv import ram_tmpdir

    with small_tmpfs("64m") as small, small_tmpfs("512m") as big, small_tmpfs("2g") as huge:
        assert ram_tmpdir(256, (str(small), str(big))) == (str(big), None)
        # the first that can boot it wins over a later one with room for all (/dev/shm before a disk's /tmp)
        assert ram_tmpdir(1024, (str(small), str(big), str(huge))) == (
            str(big), f"UML's 1024 MiB of guest RAM may not all fit: {big} has 512 MiB free; a guest that touches "
            "more dies (SIGBUS)")
        assert ram_tmpdir(1024, (str(small), str(huge))) == (str(huge), None)
        where, why = ram_tmpdir(1024, (str(small),))
        assert where is None and why == (f"UML needs 1024 MiB free for the guest's RAM, at least 256 MiB to boot, but "
                                         f"{small} has 64 MiB free (free space there, or give the appliance less "
                                         "memory: appliance.memsize)")
