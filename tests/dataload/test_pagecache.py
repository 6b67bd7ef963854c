"""The page-cache check and sparse files: bounded by what is sampled, not by a file's size."""

from __future__ import annotations

import os

import pytest

from fabricscope.dataload import pagecache
from fabricscope.dataload.dataset import scan
from fabricscope.results import load
from helpers import run_cli


def test_a_huge_sparse_file_is_sampled_not_mapped_whole(tmp_path, monkeypatch) -> None:
    # A 1 TiB sparse file: before, one mapping and a byte per page of it (268M pages, GBs of memory
    # and seconds); now at most MAX_WINDOWS_PER_FILE windows of WINDOW_BYTES, spread over the file.
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as handle:
        handle.truncate(1 << 40)
    calls: list[tuple[int, int]] = []
    real = pagecache._resident_in

    def counted(fd: int, offset: int, length: int) -> int | None:
        calls.append((offset, length))
        return real(fd, offset, length)

    monkeypatch.setattr(pagecache, "_resident_in", counted)
    fraction = pagecache.cached_fraction(scan(str(path)).files)
    assert fraction is not None and 0.0 <= fraction <= 1.0
    assert len(calls) == pagecache.MAX_WINDOWS_PER_FILE
    assert all(length <= pagecache.WINDOW_BYTES for _, length in calls)
    offsets = [offset for offset, _ in calls]
    assert offsets[0] == 0 and offsets[-1] > (1 << 40) * 0.9  # spread over the whole file


def test_a_small_file_is_checked_page_by_page(tmp_path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(os.urandom(3 * pagecache.WINDOW_BYTES // 2))
    with open(path, "rb") as handle:
        handle.read()  # now cached
    assert pagecache.cached_fraction(scan(str(path)).files) == pytest.approx(1.0, abs=0.05)


def test_a_sparse_data_set_is_named_in_the_notes(tmp_path) -> None:
    # Holes read as zeros from memory: the rate of a sparse file is not the storage's, and says so.
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as handle:
        handle.truncate(64 << 20)
    assert scan(str(sparse)).hole_bytes == 64 << 20
    out = tmp_path / "d.json"
    done = run_cli(["dataload", str(sparse), "--duration", "1", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    assert "sparse: 100% of the data set's bytes have no blocks of their own" in done.stdout
    assert any("holes" in note for note in load(out).summary["notes"])
    dense = tmp_path / "dense.bin"
    dense.write_bytes(os.urandom(1 << 20))
    assert scan(str(dense)).hole_bytes == 0
