"""Helpers of the dataload tests.

Imported as ``from dataload_helpers import ...`` (pytest puts ``tests/dataload`` on the path).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from helpers import skip_or_fail

MEMORY_FILE_SYSTEMS = ("tmpfs", "ramfs")


def fs_type(path: Path) -> str:
    """The file system type of path, as stat -f names it (ext2/ext3, xfs, tmpfs...)."""
    done = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write_random(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def data_files(root: Path) -> list[Path]:
    """The regular files under root that a pass must read, found independently of the code under test."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink() and path.is_file():
                found.append(path)
    return found


@contextlib.contextmanager
def ramfs(where: Path) -> Iterator[Path]:
    """A ramfs mount (a file system that refuses O_DIRECT); skip where mounting is not allowed."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a ramfs here (it refuses O_DIRECT): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
