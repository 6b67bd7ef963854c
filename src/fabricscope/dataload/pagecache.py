"""How much of a data set sits in the page cache, and dropping it.

A buffered read of cached pages measures memory, not the disk: the number
means nothing about a cold epoch.  :func:`cached_fraction` asks the kernel
which pages are resident (``mincore(2)`` on a read-only mapping, as
``fincore(1)`` from util-linux and ``vmtouch`` do), so the report can say what
it measured.  :func:`drop` asks the kernel to forget a file's clean pages
(``posix_fadvise(POSIX_FADV_DONTNEED)``); it needs no privilege, unlike
``/proc/sys/vm/drop_caches``, and leaves other files alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Sequence

from fabricscope.dataload.dataset import DataFile

__all__ = ["MAX_FILES_CHECKED", "MAX_WINDOWS_PER_FILE", "WINDOW_BYTES", "available_memory", "cached_fraction", "drop"]

MAX_FILES_CHECKED = 4096
"""Files whose residency is checked at most (spread evenly over a larger data set)."""

_PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(i & 1 for i in range(256))


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


_LIBC = _libc()


WINDOW_BYTES = 64 << 20
"""Bytes of a file mapped and checked at once: a bounded mapping and residency vector (16 KiB)."""
MAX_WINDOWS_PER_FILE = 64
"""Windows checked in one file at most, spread over it: 4 GiB of a file larger than that is a sample,
so a 15 TB (or sparse) file costs what a 4 GiB one does, not a vector of a byte per page of it."""


def _resident_share(path: str, size: int) -> float | None:
    """Share (0..1) of ``path``'s pages in the page cache, from at most :data:`MAX_WINDOWS_PER_FILE`
    windows spread over it, or None when the kernel cannot say."""
    if _LIBC is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        windows = (size + WINDOW_BYTES - 1) // WINDOW_BYTES
        picked = (
            range(windows)
            if windows <= MAX_WINDOWS_PER_FILE
            else ((i * windows) // MAX_WINDOWS_PER_FILE for i in range(MAX_WINDOWS_PER_FILE))
        )
        resident = checked = 0
        for window in picked:
            offset = window * WINDOW_BYTES
            found = _resident_in(fd, offset, min(WINDOW_BYTES, size - offset))
            if found is None:
                return None
            resident += found
            checked += (min(WINDOW_BYTES, size - offset) + _PAGE - 1) // _PAGE
        return resident / checked if checked else None
    finally:
        os.close(fd)


def _resident_in(fd: int, offset: int, length: int) -> int | None:
    """Resident pages of ``length`` bytes of ``fd`` from ``offset`` (a multiple of the page size)."""
    assert _LIBC is not None
    addr = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        pages = (length + _PAGE - 1) // _PAGE
        vec = (ctypes.c_ubyte * pages)()
        if _LIBC.mincore(ctypes.c_void_p(addr), length, vec) != 0:
            return None
        return bytes(vec).translate(_LOW_BIT).count(1)  # bit 0 is "resident"; the others are reserved
    finally:
        _LIBC.munmap(ctypes.c_void_p(addr), length)


def _sample(files: Sequence[DataFile]) -> Sequence[DataFile]:
    if len(files) <= MAX_FILES_CHECKED:
        return files
    step = len(files) / MAX_FILES_CHECKED
    return [files[int(i * step)] for i in range(MAX_FILES_CHECKED)]


def cached_fraction(files: Sequence[DataFile]) -> float | None:
    """The fraction (0..1) of the files' pages that are in the page cache now.

    Weighted by size; at most :data:`MAX_FILES_CHECKED` files are checked, spread
    over the list, and at most :data:`MAX_WINDOWS_PER_FILE` windows of each.  None
    when nothing could be checked (no mincore, empty files).
    """
    resident = total = 0.0
    for item in _sample(files):
        if item.size <= 0:
            continue
        share = _resident_share(item.path, item.size)
        if share is None:
            continue
        resident += share * item.size
        total += item.size
    return resident / total if total else None


def drop(files: Sequence[DataFile]) -> int:
    """Ask the kernel to drop the files' clean cached pages; return how many files it accepted.

    Dirty pages are not dropped by ``POSIX_FADV_DONTNEED``: each file is synced
    first (``fdatasync`` works on a read-only descriptor).
    """
    done = 0
    for item in files:
        try:
            fd = os.open(item.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            with contextlib.suppress(OSError):
                os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


def available_memory() -> int | None:
    """Bytes the kernel could give without swapping (``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
