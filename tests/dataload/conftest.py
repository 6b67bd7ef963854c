"""Real files for the dataload tests: a few MB of random bytes, and a data-set tree."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from dataload_helpers import write_random


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    """3 MiB and a bit: not a multiple of any block size."""
    return write_random(tmp_path / "shard-000.bin", 3 * (1 << 20) + 12345)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A data set as training uses them: many small samples in nested folders, two large shards,
    an empty file, and entries that must not be read (a FIFO, a link to /dev/zero, a link loop)."""
    root = tmp_path / "dataset"
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
