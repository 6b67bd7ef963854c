"""What a data set is on disk: the regular files under a path, with their sizes.

A data set is one file or a directory tree of them (many small samples, a few
large shards).  Only regular files are read: a FIFO would block, ``/dev/zero``
never ends, a socket cannot be read at all.  The path given is refused when it
is none of these; inside a directory such entries are skipped and counted, and
links to directories are not followed (no loops).  The walk keeps its own stack,
so a tree nested thousands deep is no recursion problem.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

from fabricscope.errors import UsageError
from fabricscope.shown import cut
from fabricscope.userfiles import describe_mode

__all__ = ["DataFile", "DataSet", "scan"]


@dataclass(frozen=True, slots=True)
class DataFile:
    """One regular file of the data set, as it was when the data set was scanned."""

    path: str
    size: int
    """Bytes, from ``stat`` at scan time; what a full pass must read."""
    stored: int = -1
    """Bytes the file system holds for it (``st_blocks`` x 512, at most ``size``): less than ``size``
    where the file is sparse, whose holes read as zeros from memory; -1 where unknown."""


@dataclass(kw_only=True, slots=True)
class DataSet:
    """The files under one path, in a stable (sorted) order."""

    path: str
    """The path the user gave."""
    is_dir: bool
    files: list[DataFile]
    skipped: dict[str, int] = field(default_factory=dict)
    """Entries not read, by kind (``FIFO``, ``character device``, ``link to a directory``...)."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def hole_bytes(self) -> int:
        """Bytes of the files with no storage behind them (holes of sparse files)."""
        return sum(f.size - f.stored for f in self.files if 0 <= f.stored < f.size)


def _data_file(path: str, info: os.stat_result) -> DataFile:
    blocks = getattr(info, "st_blocks", None)
    return DataFile(path, info.st_size, min(blocks * 512, info.st_size) if isinstance(blocks, int) else -1)


def _stat_error(path: str, exc: OSError) -> UsageError:
    if exc.errno == errno.ENOENT:
        return UsageError(f"{cut(path)}: no such file or directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return UsageError(f"{cut(path)}: permission denied (it must be readable)")
    if exc.errno == errno.ENOTDIR:
        return UsageError(f"{cut(path)}: a part of the path is not a directory")
    if exc.errno == errno.ENAMETOOLONG:
        return UsageError(f"{cut(path)}: the name is too long for this file system")
    if exc.errno == errno.ELOOP:
        return UsageError(f"{cut(path)}: too many levels of symbolic links")
    return UsageError(f"{cut(path)}: cannot be read ({exc.strerror or exc})")


def scan(path: str) -> DataSet:
    """The regular files under ``path`` (a file or a directory), sizes included.

    Raises :class:`UsageError` when ``path`` does not exist, cannot be read, is
    not a regular file or directory (a FIFO, a device, a link to ``/dev/zero``),
    or is a directory holding no regular file.
    """
    if not path:
        raise UsageError("the data path is empty: give a file or a directory to read")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _stat_error(path, exc) from None
    if stat.S_ISREG(info.st_mode):
        _check_readable(path)
        if info.st_size == 0:
            raise UsageError(f"{cut(path)} is empty: there is nothing to read")
        return DataSet(path=path, is_dir=False, files=[_data_file(path, info)])
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(
            f"{cut(path)} is a {describe_mode(info.st_mode)}: dataload reads a regular file "
            "or a directory of them (it would block or never end)"
        )
    files, skipped = _walk(path)
    if not files:
        detail = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
        raise UsageError(
            f"{cut(path)} holds no regular file to read"
            + (f" (skipped: {detail})" if detail else " (it is empty)")
            + ": give a file or a directory of data files"
        )
    files.sort(key=lambda f: f.path)
    dataset = DataSet(path=path, is_dir=True, files=files, skipped=skipped)
    if dataset.total_bytes == 0:
        raise UsageError(f"{cut(path)} holds only empty files ({len(files)}): there is nothing to read")
    return dataset


def _check_readable(path: str) -> None:
    # Root passes os.access everywhere; opening is the only honest test.  O_NONBLOCK:
    # if the file was swapped for a FIFO since the stat, the open must not wait for a writer.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _stat_error(path, exc) from None
    os.close(fd)


def _walk(root: str) -> tuple[list[DataFile], dict[str, int]]:
    files: list[DataFile] = []
    skipped: dict[str, int] = {}

    def skip(kind: str) -> None:
        skipped[kind] = skipped.get(kind, 0) + 1

    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            if folder == root:
                raise _stat_error(root, exc) from None
            skip("unreadable directory")
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                info = entry.stat(follow_symlinks=True)
            except OSError:
                skip("broken link or unreadable entry")
                continue
            if stat.S_ISREG(info.st_mode):
                files.append(_data_file(entry.path, info))
            elif stat.S_ISDIR(info.st_mode):
                skip("link to a directory")
            else:
                skip(describe_mode(info.st_mode))
    return files, skipped
