"""Upload payloads: exact size, matching sha256, incompressible, made once and reused."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import pytest

from guestbench.measurements.payload import payload

MiB = 2**20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GUESTBENCH_CACHE", str(d))
    return d


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("size", [1, 4096, 1000, MiB, 3 * MiB + 7])
def test_exact_size_and_digest(cache: Path, size: int) -> None:
    path, digest = payload(size)
    assert path.is_file()
    assert path.stat().st_size == size
    assert len(digest) == 64
    assert digest == sha256(path)
    # it lives in the cache named by GUESTBENCH_CACHE, not the user's
    assert path.parent == cache / "payloads"
    assert (cache / "payloads" / f"random-{size}.sha256").read_text() == digest + "\n"


def test_larger_than_one_chunk(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import guestbench.measurements.payload as mod

    monkeypatch.setattr(mod, "CHUNK", 1000)  # several blocks, the last one short
    path, digest = payload(4500)
    assert path.stat().st_size == 4500
    assert digest == sha256(path)


def test_incompressible(cache: Path) -> None:
    path, _ = payload(MiB)
    data = path.read_bytes()
    assert len(zlib.compress(data, 9)) > 0.99 * MiB
    # not a repeated block either
    assert data[: MiB // 2] != data[MiB // 2:]
    assert len(set(data[:4096])) > 200


def test_reused_on_second_call(cache: Path) -> None:
    path, digest = payload(MiB)
    st = path.stat()
    again, digest2 = payload(MiB)
    assert again == path
    assert digest2 == digest
    st2 = again.stat()
    assert st2.st_mtime_ns == st.st_mtime_ns
    assert st2.st_ino == st.st_ino


def test_no_temp_files_left(cache: Path) -> None:
    payload(12345)
    names = sorted(p.name for p in (cache / "payloads").iterdir())
    assert names == ["random-12345.bin", "random-12345.sha256"]


def test_different_sizes_are_different_files(cache: Path) -> None:
    a, da = payload(2048)
    b, db = payload(4096)
    assert a != b
    assert da != db
    assert a.stat().st_size == 2048 and b.stat().st_size == 4096


def test_same_size_same_bytes_after_cache_loss(cache: Path) -> None:
    path, digest = payload(65536)
    path.unlink()
    path2, digest2 = payload(65536)
    assert digest2 == digest  # seeded: reruns upload the same bytes
    assert sha256(path2) == digest


def test_truncated_file_is_made_again(cache: Path) -> None:
    path, digest = payload(65536)
    with open(path, "r+b") as f:
        f.truncate(1000)
    path2, digest2 = payload(65536)
    assert path2.stat().st_size == 65536
    assert digest2 == digest == sha256(path2)


@pytest.mark.parametrize("checksum", ["", "\n", "abc\n", "0" * 63])
def test_torn_checksum_file_is_made_again(cache: Path, checksum: str) -> None:
    path, digest = payload(65536)
    sums = path.with_name("random-65536.sha256")
    sums.write_text(checksum)
    _, digest2 = payload(65536)
    assert digest2 == digest
    assert sums.read_text() == digest + "\n"


def test_missing_checksum_file_is_made_again(cache: Path) -> None:
    path, digest = payload(65536)
    os.unlink(path.with_name("random-65536.sha256"))
    _, digest2 = payload(65536)
    assert digest2 == digest == sha256(path)
