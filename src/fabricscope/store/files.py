"""Reading a file a user names (a result, a log to import) without hanging or filling memory.

Only regular files are read: a FIFO would block forever, ``/dev/zero`` never
ends and a folder is not a file.  The file is opened without blocking and
checked after opening, so it cannot be swapped for a FIFO in between.
"""

from __future__ import annotations

import errno
import os
import stat

from fabricscope.errors import UsageError

__all__ = ["MAX_BYTES", "read_user_file"]

MAX_BYTES = 1 << 30
"""Largest file read (1 GiB): a bench Result with raw samples of a long sweep stays far below."""


def read_user_file(path: str, *, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of the regular file ``path``; any problem is one UsageError naming it as ``what``."""
    shown = path if len(path) <= 200 else path[:100] + "..." + path[-40:]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UsageError(f"{what} {shown}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{what} {shown}: file name too long ({len(path)} characters)") from None
        raise UsageError(f"{what} {shown}: cannot open ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{what} {shown} is a folder: give a file")
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{what} {shown} is not a regular file (a pipe, device or socket): give a file")
        if info.st_size > max_bytes:
            raise UsageError(f"{what} {shown} is {info.st_size} bytes, more than the {max_bytes} this reads")
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > max_bytes:
                raise UsageError(f"{what} {shown} grew past {max_bytes} bytes while read")
            chunks.append(chunk)
    except OSError as exc:
        raise UsageError(f"{what} {shown}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {shown}: not UTF-8 text (byte {exc.start})") from None
