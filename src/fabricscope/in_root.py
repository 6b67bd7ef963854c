"""Opening a file inside a root directory in one system call: ``openat2(2)`` with ``RESOLVE_IN_ROOT``.

The kernel then resolves the path as if the process had ``chroot(2)``-ed
into the root: an absolute link starts again at the root, ``..`` stops
there, and more than 40 links is ``ELOOP`` (Linux 5.6+, ``man 2 openat2``).
That is the confinement :class:`fabricscope.sysroot.SysRoot` gives a captured
tree, without an ``lstat`` per path component, so reading a captured node
costs what reading its files costs.

Python has no binding for ``openat2``; it is called through libc's
``syscall``.  Where it cannot be used (not Linux, an older kernel, a seccomp
filter that refuses it, an architecture whose number differs),
:func:`open_in_root` answers None once and for good, and the caller walks the
path itself.
"""

from __future__ import annotations

import errno
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "DIRECTORY",
    "DIRECTORY_NAME",
    "LINK",
    "NAME",
    "file_opener",
    "open_in_root",
    "open_root_dir",
    "resolve_in_root",
]

_NUMBER = 437
"""``__NR_openat2`` in the table every architecture shares for system calls added since Linux 5.1."""
_MACHINES = {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "loongarch64"}
"""Machines whose kernels number it 437 (alpha, ia64 and mips do not)."""
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_UNUSABLE = {errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG, errno.EOPNOTSUPP}
"""What a kernel or a seccomp filter answers when ``openat2`` or its flags are not there."""
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC if sys.platform == "linux" else 0
"""A descriptor that only names the file (``O_PATH``): what resolving a path needs, whatever the file is."""
NAME = _PATH_FLAGS
"""Open only the name of what the path leads to (its links followed): it is there."""
DIRECTORY_NAME = _PATH_FLAGS | os.O_DIRECTORY
"""Open only the name of a directory (``ENOTDIR`` for anything else): it is one, whatever its permissions."""
LINK = _PATH_FLAGS | os.O_NOFOLLOW
"""Open only the name, a link in the last place left as it is: it is there, and ``readlink`` reads it."""
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
"""Open a directory to list it (``ENOTDIR`` for anything else, without blocking on a FIFO)."""
_HOWS = (_FLAGS, NAME, DIRECTORY_NAME, LINK, DIRECTORY)

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
"""How :func:`os.fsencode` turns a path into bytes, without its call per path."""

_call: Any = None
"""The bound system call once it has worked, False when it cannot be used, None before the first try."""


def open_root_dir(path: str) -> int | None:
    """A descriptor of the root directory to resolve inside, or None (then paths are walked)."""
    if sys.platform != "linux" or _call is False:
        return None
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def open_in_root(root_fd: int, rel: str, flags: int = _FLAGS) -> int | None:
    """A descriptor of ``rel`` resolved inside ``root_fd``; None when ``openat2`` cannot be used here.

    ``flags`` are a read-only, non-blocking open of a file by default, or
    :data:`NAME`, :data:`DIRECTORY_NAME`, :data:`LINK` or :data:`DIRECTORY`.  Raises
    :class:`OSError` as ``open`` would (``ENOENT``, ``ELOOP``, ``EACCES``...),
    and :class:`ValueError` for a path holding a NUL byte.
    """
    if "\0" in rel:
        raise ValueError("embedded null byte")
    bound = _bound()
    if bound is False:
        return None
    call, number, hows, size, _ = bound
    fd: int = call(number, root_fd, rel.encode(_FS_ENCODING, _FS_ERRORS), hows[flags], size)
    if fd < 0:
        _refused(root_fd, rel)  # raises open's OSError, unless the caller should walk the path
        return None
    return fd


def file_opener(root_fd: int) -> Callable[[str], int | None] | None:
    """:func:`open_in_root` of files inside ``root_fd``, bound once: what reading a thousand files of a
    captured tree calls (each call of the general one looks the system call up again).  None where
    ``openat2`` cannot be used here."""
    bound = _bound()
    if bound is False:
        return None
    call, number, hows, size, _ = bound
    how = hows[_FLAGS]
    plain = _FS_ENCODING == "utf-8"

    def open_file(rel: str) -> int | None:
        if "\0" in rel:
            raise ValueError("embedded null byte")
        if _call is False:  # found unusable since (a seccomp filter): the caller walks
            return None
        try:
            path = rel.encode() if plain else rel.encode(_FS_ENCODING, _FS_ERRORS)
        except UnicodeEncodeError:  # an undecodable name read from a listing: its bytes back
            path = rel.encode(_FS_ENCODING, _FS_ERRORS)
        fd: int = call(number, root_fd, path, how, size)
        if fd < 0:
            _refused(root_fd, rel)
            return None
        return fd

    return open_file


def _bound() -> Any:
    """The bound system call (binding it on first use), or False where it cannot be used."""
    global _call
    if _call is None:
        _call = _bind()
    return _call


def _refused(root_fd: int, rel: str) -> None:
    """After ``openat2`` of ``rel`` failed: raise the :class:`OSError` ``open`` would have raised, or
    return when the caller should walk the path itself."""
    global _call
    import ctypes

    code = ctypes.get_errno()
    if code == errno.EAGAIN:  # the tree moved while it was resolved: walk this one path
        return None
    if code in _UNUSABLE and _call is not False:
        # The call itself refused (no openat2, a seccomp filter), or only this file did (EPERM, EINVAL
        # from a special file): opening the root itself tells them apart.
        call, number, hows, size, _ = _call
        probe: int = call(number, root_fd, b".", hows[_FLAGS], size)
        if probe < 0:
            _call = False
            return None
        os.close(probe)
    raise OSError(code, os.strerror(code), rel)


def resolve_in_root(root_fd: int, base: str, rel: str, *, follow: bool = True) -> str | None:
    """``rel`` resolved inside the root ``base`` (open on ``root_fd``) by the kernel, relative to it (``""``
    for the root); ``follow=False`` leaves a link in the last place as it is.

    The path is opened with ``O_PATH`` and read back from ``/proc/self/fd``.
    None whenever the kernel cannot say it all: ``openat2`` unusable here, a
    component missing (the caller keeps the rest of the path as it is), a
    loop, ``/proc`` not mounted; the caller then walks the path itself.
    """
    global _call
    if _call is None:
        _call = _bind()
    if _call is False or "\0" in rel or (not follow and rel.endswith(("/", "/.", "/.."))):
        return None  # a trailing slash makes the kernel follow a last link, O_NOFOLLOW or not: walk it
    call, number, hows, size, _ = _call
    try:
        path = rel.encode(_FS_ENCODING, _FS_ERRORS)
    except UnicodeEncodeError:  # a lone surrogate: no file has that name, and the walk says so
        return None
    fd: int = call(number, root_fd, path, hows[_PATH_FLAGS | (0 if follow else os.O_NOFOLLOW)], size)
    if fd < 0:
        return None
    try:
        host = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    if host == base:
        return ""
    return host[len(base) + 1 :] if host.startswith(base + "/") else None


def _bind() -> Any:
    if platform.machine().lower() not in _MACHINES:
        return False
    try:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
        structs = {flags: OpenHow(flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS) for flags in _HOWS}
        hows = {flags: ctypes.byref(how) for flags, how in structs.items()}
        # Arguments of a variadic call are typed: a size_t must not go as a 32-bit int.
        return call, ctypes.c_long(_NUMBER), hows, ctypes.c_size_t(ctypes.sizeof(OpenHow)), structs
    except (ImportError, OSError, AttributeError):
        return False
