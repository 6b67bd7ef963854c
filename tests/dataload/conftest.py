"""Real files for the dataload tests: a few MB of random bytes, and a data-set tree."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dataload_helpers import MEMORY_FILE_SYSTEMS, fs_type, write_random


@pytest.fixture
def disk_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder on a disk file system: the page cache can be dropped there, and O_DIRECT works.

    pytest's tmp_path where it is on one; otherwise a folder under /var/tmp (a RAM-backed /tmp, as
    on some CI runners, keeps every page "cached" and may refuse O_DIRECT)."""
    if fs_type(tmp_path) not in MEMORY_FILE_SYSTEMS:
        yield tmp_path
        return
    if not os.path.isdir("/var/tmp") or fs_type(Path("/var/tmp")) in MEMORY_FILE_SYSTEMS:
        pytest.skip("no disk-backed folder for test data: /tmp and /var/tmp are in memory")
    folder = Path(tempfile.mkdtemp(prefix="fabricscope-test-dataload.", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def big_file(disk_dir: Path) -> Path:
    """3 MiB and a bit: not a multiple of any block size."""
    return write_random(disk_dir / "shard-000.bin", 3 * (1 << 20) + 12345)


@pytest.fixture
def tree(disk_dir: Path) -> Path:
    """A data set as training uses them: many small samples in nested folders, two large shards,
    an empty file, and entries that must not be read (a FIFO, a link to /dev/zero, a link loop)."""
    root = disk_dir / "dataset"
    rng = random.Random(7)
    for i in range(240):
        write_random(root / "train" / f"class{i % 6}" / f"sample{i:04d}.jpg", rng.randint(1, 40_000))
    write_random(root / "shards" / "a.tar", 2 * (1 << 20) + 1)
    write_random(root / "shards" / "b.tar", 1 << 20)
    (root / "train" / "empty.txt").write_bytes(b"")
    os.mkfifo(root / "train" / "pipe")
    os.symlink("/dev/zero", root / "train" / "zero")
    os.symlink("..", root / "train" / "loop")
    return root
