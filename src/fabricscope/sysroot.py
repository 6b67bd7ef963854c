"""One root directory for every file the doctor and the monitor read.

All of ``/sys``, ``/proc`` and ``/etc`` are reached through a :class:`SysRoot`,
so tests and ``--root DIR`` point the probes and samplers at a captured tree,
and ``doctor --capture DIR`` can copy exactly what was read.

A root other than ``/`` confines every read as ``chroot(2)`` would: each path
component is resolved inside the root, an absolute link (``etc/nccl.conf ->
/etc/passwd``) restarts from the root, not from the host's ``/``, and ``..``
never climbs above it.  A link loop or a chain of more than
:data:`MAX_LINKS` links reads as ``ELOOP``, an unreadable file like any other.
The last component is opened with ``O_NOFOLLOW``, so a link swapped in after
the walk is refused rather than followed; a tree that is rewritten while it is
read (a directory replaced by a link mid-walk) is out of scope: captured trees
are static.

Reads never raise and never block.  A file that does not exist reads as
``None`` quietly (many sysfs files exist only on some devices); ``EINVAL`` also
reads as ``None`` quietly, because that is how sysfs says "unknown" (``speed``
of a virtual NIC).  Anything else (permission denied, I/O error, a directory,
FIFO or device where a file should be, a file larger than :data:`MAX_READ`,
bytes that are not text) reads as ``None`` and is kept in
:attr:`SysRoot.anomalies`, and so is content a parser could not understand
(:meth:`SysRoot.garbage`); the ``probe.read`` check reports them.  Only
regular files (or links to them) are read: a FIFO would block a reader
forever.

A read error cannot be stored in a plain file, so a captured tree keeps the
errors it met in ``fabricscope-capture/manifest.json`` (``"errors": {path:
errno name}``); reading such a path from the capture gives the same error.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from fabricscope.in_root import (
    DIRECTORY,
    DIRECTORY_NAME,
    LINK,
    file_opener,
    open_in_root,
    open_root_dir,
    resolve_in_root,
)
from fabricscope.shown import quoted

__all__ = [
    "CAPTURE_DIR",
    "MANIFEST",
    "MAX_LINKS",
    "MAX_READ",
    "Anomaly",
    "NotAFileError",
    "SysRoot",
    "read_open_file",
    "read_regular_file",
]

CAPTURE_DIR = "fabricscope-capture"
"""Folder, inside a captured tree, for what is not a plain file of the node."""
MANIFEST = f"{CAPTURE_DIR}/manifest.json"
"""Read errors met during the capture, the NCCL variables, when and where."""

_QUIET = {errno.ENOENT, errno.EINVAL, errno.ENOTDIR, errno.ENODEV, errno.ENXIO, errno.EOPNOTSUPP}
"""Errors that mean "not there" or "unknown" in sysfs, not "something is wrong"."""
MAX_LINKS = 40
"""Most links followed while resolving one path (Linux's ``MAXSYMLINKS``); more is ``ELOOP``."""
_MAX_DIRS = 100_000
"""Most resolved folders kept (a tree with more reads on, resolving the rest each time)."""
MAX_READ = 1 << 20
"""Largest file read (sysfs attributes are one page; ``ethtool -S`` captures a few hundred KiB)."""
_NOT_TEXT = "ENOTTEXT"
"""Pseudo errno name for a file whose bytes are not UTF-8 text."""
_PROBLEMS = {
    _NOT_TEXT: "not text (undecodable bytes)",
    "EFBIG": f"larger than {MAX_READ >> 20} MiB: not a sysfs file, not read",
    "FIFO": "a FIFO, not a file: not read (reading it would block)",
    "CHARDEV": "a character device, not a file: not read",
    "BLOCKDEV": "a block device, not a file: not read",
    "SOCKET": "a socket, not a file: not read",
    "BADPATH": "not a valid path (a NUL byte, or a name no file system holds)",
    "ELOOP": f"a link loop or a chain of more than {MAX_LINKS} links: not read",
}
"""Problems that have no errno of their own (pseudo errno names, as the capture manifest stores them)."""
_FORMAT, _REGULAR = 0o170000, stat.S_IFREG
"""The file-type bits of ``st_mode`` (``S_IFMT``), and their value for a regular file."""
_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "CHARDEV"), (stat.S_ISBLK, "BLOCKDEV"), (stat.S_ISSOCK, "SOCKET"))


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A file a probe or sampler needed but could not read or understand."""

    path: str
    """Path relative to the root, e.g. ``sys/class/net/eth0/mtu``."""
    problem: str
    """What went wrong: ``EACCES``, ``missing``, ``unparsable 'abc' (expected a whole number)``..."""


class NotAFileError(OSError):
    """What :func:`read_regular_file` refuses: ``name`` is a key of the problems above or an errno name."""

    def __init__(self, name: str) -> None:
        super().__init__(errno.EINVAL, _PROBLEMS.get(name, name))
        self.name = name


def read_regular_file(path: str, *, follow: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file (or a link to one) of at most :data:`MAX_READ` bytes.

    Opened without blocking, so a FIFO opens at once and is refused rather
    than read; a directory raises :class:`IsADirectoryError`, another
    non-file or a file too large :class:`NotAFileError`.  ``follow=False``
    refuses a link as the last component (``ELOOP``).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    return read_open_file(os.open(path, flags), path)


def read_open_file(fd: int, path: str) -> bytes:
    """The bytes of the file open on ``fd`` (closed after), as :func:`read_regular_file` takes them."""
    try:
        info = os.fstat(fd)
        mode, size = info.st_mode, info.st_size
        if mode & _FORMAT != _REGULAR:
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            raise NotAFileError(next((name for test, name in _KINDS if test(mode)), "not a regular file"))
        # A file's size, one more byte to see its end; sysfs says 4096 and holds less, /proc says 0.
        first = os.read(fd, size + 1 if 0 < size <= MAX_READ else 1 << 16)
        if len(first) == size:
            return first
        chunks = [first]
        size = len(first)
        while first and size <= MAX_READ:
            chunk = os.read(fd, MAX_READ + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_READ:
            raise NotAFileError("EFBIG")
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Record:
    texts: dict[str, str | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    listed: dict[str, list[str]] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    extra: dict[str, str] = field(default_factory=dict)


class SysRoot:
    """Reads files under ``root`` by paths relative to it (``sys/class/net``)."""

    __slots__ = (
        "__weakref__",
        "_dirs",
        "_live",
        "_manifest_errors",
        "_open_file",
        "_real_base",
        "_record",
        "_root_fd",
        "anomalies",
        "manifest",
        "path",
    )

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.path = Path(root)
        self._real_base = os.path.realpath(self.path)
        self._live = self._real_base == "/"
        self._root_fd = None if self._live else open_root_dir(self._real_base)
        self._open_file = None if self._root_fd is None else file_opener(self._root_fd)
        if self._root_fd is not None:
            weakref.finalize(self, os.close, self._root_fd)
        self.anomalies: list[Anomaly] = []
        self._record = _Record()
        self._dirs: dict[str, tuple[str, int]] = {}
        """Resolved folders by the path asked for: a captured tree is static, and a device's files share one."""
        self.manifest: dict[str, object] = {}
        self._manifest_errors: dict[str, str] = {}
        manifest = self.file(MANIFEST)
        if not self.is_live and os.path.lexists(manifest):
            try:
                data = json.loads(read_regular_file(manifest, follow=False).decode("utf-8"))
                wrong = _manifest_shape_problem(data)
                if wrong is not None:
                    raise ValueError(wrong)
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                self.anomalies.append(Anomaly(MANIFEST, f"unreadable capture manifest ({exc})"))
                data = {}
            self.manifest = data
            self._manifest_errors = dict(data.get("errors") or {})

    @property
    def is_live(self) -> bool:
        """True when the root is this machine's own ``/`` (so NVML and ioctls apply)."""
        return self._live

    def file(self, rel: str) -> str:
        """The path of ``rel`` under the root, its links resolved inside the root (see :meth:`resolve`).

        A path that cannot be resolved (a link loop) comes back unresolved
        under the root; opening it without following links then fails.
        """
        try:
            return self._host(self.resolve(rel))
        except OSError:
            return os.path.join(self._real_base, _norm(rel))

    def resolve(self, rel: str, *, last: bool = True) -> str:
        """``rel`` with every link and ``..`` resolved inside the root, relative to it (``""`` is the root).

        Links resolve as under ``chroot(2)``: an absolute target starts again
        at the root and ``..`` stops there.  ``last=False`` leaves the final
        component as it is (a link stays a link, as ``lstat`` sees it).
        Components past one that does not exist (or is not a directory) are
        kept as they are, so the read that follows fails as it would have.
        Raises ``OSError(ELOOP)`` for a loop or more than :data:`MAX_LINKS`
        links.  On the live root the kernel's own resolution is the same
        (and knows /proc's magic links), so the path is only normalized.
        """
        if self._live:
            return _norm(rel)
        if self._root_fd is not None:
            resolved = resolve_in_root(self._root_fd, self._real_base, rel, follow=last)
            if resolved is not None:
                return resolved
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if len(parts) < 2 or ".." in parts:
            return self._walk(parts, [], 0, last, rel)[0]
        parent = "/".join(parts[:-1])
        cached = self._dirs.get(parent)
        if cached is None:
            cached = self._walk_from_ancestor(parts[:-1], rel)
            if len(self._dirs) < _MAX_DIRS:
                self._dirs[parent] = cached
        base, links = cached
        return self._walk(parts[-1:], base.split("/") if base else [], links, last, rel)[0]

    def _walk_from_ancestor(self, parts: list[str], rel: str) -> tuple[str, int]:
        """Resolve the folder ``parts`` from the deepest of its ancestors already resolved (a sysfs tree
        reads many folders under one device's): one ``lstat`` per new component, not per component."""
        start, state = 0, ("", 0)
        for cut in range(len(parts) - 1, 0, -1):
            found = self._dirs.get("/".join(parts[:cut]))
            if found is not None:
                start, state = cut, found
                break
        # Component by component, each prefix remembered: its siblings' reads start from it.
        for index in range(start, len(parts)):
            base, links = state
            state = self._walk(parts[index : index + 1], base.split("/") if base else [], links, True, rel)
            if index < len(parts) - 1 and len(self._dirs) < _MAX_DIRS:
                self._dirs["/".join(parts[: index + 1])] = state
        return state

    def _walk(self, parts: list[str], done: list[str], links: int, last: bool, rel: str) -> tuple[str, int]:
        """Resolve ``parts`` from the resolved folder ``done``, ``links`` links already followed (see :meth:`resolve`).

        Returns the resolved path and the links followed in all, which count
        against :data:`MAX_LINKS` over the whole path, as the kernel counts them.
        """
        while parts:
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            if not parts and not last:
                done.append(part)
                break
            here = "/".join((self._real_base, *done, part))  # os.path.join is the slow part of a probe
            try:
                mode = os.lstat(here).st_mode
            except (OSError, ValueError):
                done.append(part)
                done.extend(parts)  # the read fails on this component, as the kernel's would
                break
            if not stat.S_ISLNK(mode):
                done.append(part)
                if parts and not stat.S_ISDIR(mode):
                    done.extend(parts)  # more after a file: the kernel stops here (ENOTDIR), `..` included
                    break
                continue
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
        return "/".join(done), links

    def _host(self, resolved: str) -> str:
        """The host path of a path already resolved inside the root."""
        return os.path.join(self._real_base, resolved) if resolved else self._real_base

    # -- reading ---------------------------------------------------------------

    def text(self, rel: str, *, required: bool = False) -> str | None:
        """The stripped text of a file, or None when it is missing or unreadable.

        ``required`` turns a missing file into an anomaly (a file that must be
        there for the device to make sense, such as an RDMA port's ``state``).
        """
        raw = self.raw(rel, required=required)
        return None if raw is None else raw.strip()

    def raw(self, rel: str, *, required: bool = False) -> str | None:
        """The text of a file as it is, spaces and line ends included (what NCCL reads of a config file)."""
        rel = _norm(rel)
        texts = self._record.texts
        if rel in texts:
            return texts[rel]
        value = texts[rel] = self._read(rel, required)
        return value

    def _read(self, rel: str, required: bool) -> str | None:
        if self._manifest_errors:  # only a capture that met failing reads has any
            injected = self._manifest_errors.get(rel)
            if injected is not None:
                self._fail(rel, injected, required)
                return None
        try:
            data = self._read_file(rel)
        except NotAFileError as exc:
            self._fail(rel, exc.name, required)
            return None
        except OSError as exc:
            self._fail(rel, errno.errorcode.get(exc.errno or 0, type(exc).__name__), required)
            return None
        except ValueError:  # a NUL byte in a path that came from a variable (NCCL_CONF_FILE)
            self._fail(rel, "BADPATH", required)
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(rel, _NOT_TEXT, required)
            return None

    def _read_file(self, rel: str) -> bytes:
        """The bytes of the normalized path ``rel``, resolved inside the root (see :func:`read_regular_file`).

        A captured tree is opened by the kernel, confined to the root in one call (:mod:`fabricscope.in_root`);
        where that cannot be used, the path is walked one link at a time (:meth:`resolve`).
        """
        if self._open_file is not None:
            fd = self._open_file(rel or ".")  # the root itself: a directory, as the walk finds it
            if fd is not None:
                return read_open_file(fd, rel)
        return read_regular_file(self._host(self.resolve(rel)), follow=self._live)

    def read_now(self, rel: str) -> str:
        """The text of ``rel`` read again now, for counters sampled every interval.

        Unlike :meth:`text` nothing is cached or recorded: the caller decides
        what a failure means.  Raises :class:`OSError` (a
        :class:`NotAFileError` for what is not a text file), with errors
        replayed from a capture manifest as :meth:`text` does.
        """
        rel = _norm(rel)
        injected = self._manifest_errors.get(rel)
        if injected is not None:
            code = getattr(errno, injected, None)
            if isinstance(code, int):
                raise OSError(code, os.strerror(code), rel)
            raise NotAFileError(injected)
        try:
            data = read_regular_file(self._host(self.resolve(rel)), follow=self._live)
        except ValueError:
            raise NotAFileError("BADPATH") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotAFileError(_NOT_TEXT) from None

    def _fail(self, rel: str, name: str, required: bool) -> None:
        self._record.errors[rel] = name
        code = getattr(errno, name, None)
        if code in _QUIET and not required:
            return
        problem = {errno.ENOENT: "missing"}.get(code or -1) or _PROBLEMS.get(name, name)
        self.anomalies.append(Anomaly(rel, problem))

    def too_large(self, rel: str) -> bool:
        """Whether ``rel`` was left unread for being larger than :data:`MAX_READ` (the reader's limit, not
        the file's fault: the program it configures reads it whole)."""
        return self._record.errors.get(_norm(rel)) == "EFBIG"

    def read_problem(self, rel: str) -> str | None:
        """Why reading ``rel`` failed, in words (``Permission denied``, ``a FIFO, not a file: not read``).

        None when ``rel`` was read, or not read yet.
        """
        name = self._record.errors.get(_norm(rel))
        if name is None:
            return None
        code = getattr(errno, name, None)
        return os.strerror(code) if isinstance(code, int) else _PROBLEMS.get(name, name)

    def listdir(self, rel: str, *, required: bool = False) -> list[str]:
        """Sorted entry names of a directory; [] when it is missing or unreadable."""
        rel = _norm(rel)
        cached = self._record.listed.get(rel)
        if cached is not None:
            return list(cached)
        try:
            names = self._listdir(rel)
        except (OSError, ValueError) as exc:
            if not isinstance(exc, OSError):  # a NUL byte in the path
                exc = OSError(errno.EINVAL, "not a valid path")
            name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            if required or exc.errno not in _QUIET:
                self.anomalies.append(Anomaly(rel, "missing directory" if exc.errno == errno.ENOENT else name))
            names = []
        if rel == "" or rel == ".":
            names = [n for n in names if n != CAPTURE_DIR]
        self._record.listed[rel] = names
        return list(names)

    def listdir_now(self, rel: str) -> list[str]:
        """Sorted entry names of a directory read again now (devices come and go); raises :class:`OSError`.

        Nothing is cached or recorded, as with :meth:`read_now`.
        """
        try:
            return self._listdir(_norm(rel))
        except ValueError:
            raise NotAFileError("BADPATH") from None

    def _listdir(self, rel: str) -> list[str]:
        """Sorted names in the directory ``rel``; raises OSError (ValueError for a NUL byte)."""
        fd = self._open(rel, DIRECTORY)
        if fd is None:
            return sorted(os.listdir(self._host(self.resolve(rel))))
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def _open(self, rel: str, flags: int) -> int | None:
        """``rel`` opened by the kernel inside a captured root (see :func:`~fabricscope.in_root.open_in_root`);
        None on the live root or where that cannot be used (then the caller resolves the path itself)."""
        return None if self._root_fd is None else open_in_root(self._root_fd, rel or ".", flags)

    def exists(self, rel: str) -> bool:
        rel = _norm(rel)
        if rel in self._manifest_errors:
            return True
        try:
            fd = self._open(rel, LINK)
            if fd is None:
                exists = os.path.lexists(self._host(self.resolve(rel, last=False)))
            else:
                os.close(fd)
                exists = True
        except OSError as exc:
            exists = exc.errno == errno.ELOOP  # a link loop is there, even if it leads nowhere
        except ValueError:  # a NUL byte, a name no file system holds
            exists = False
        if exists:
            self._record.touched.add(rel)
        return exists

    def is_dir(self, rel: str) -> bool:
        """True when ``rel`` resolves to a directory; a dangling or looping link is an anomaly."""
        rel = _norm(rel)
        self._record.touched.add(rel)
        try:
            fd = self._open(rel, DIRECTORY_NAME)
            if fd is None:
                if os.path.isdir(self._host(self.resolve(rel))):
                    return True
            else:
                os.close(fd)
                return True
        except (OSError, ValueError):
            pass
        try:
            link = os.path.islink(self._host(self.resolve(rel, last=False)))
        except OSError:
            link = True  # the loop is on the way to it
        if link:
            self.anomalies.append(Anomaly(rel, "link to nothing (dangling or looping)"))
        return False

    def realpath(self, rel: str) -> str | None:
        """The path ``rel`` resolves to inside the root, relative to it; None for a link loop.

        On the live root this is ``os.path.realpath``.
        """
        rel = _norm(rel)
        try:
            if self._live:
                full = os.path.realpath(self.file(rel), strict=False)
                resolved = os.path.relpath(full, "/") if full != "/" else ""
            else:
                resolved = self.resolve(rel)
        except (OSError, RuntimeError, ValueError):
            self.anomalies.append(Anomaly(rel, "unresolvable link (a loop or too many links)"))
            return None
        self._record.touched.add(rel)
        return resolved

    def link_name(self, rel: str) -> str | None:
        """The last component of a symlink's target (``driver`` -> ``mlx5_core``)."""
        rel = _norm(rel)
        try:
            fd = self._open(rel, LINK)
            if fd is None:
                target = os.readlink(self._host(self.resolve(rel, last=False)))
            else:
                try:
                    target = os.readlink("", dir_fd=fd)  # the link open on fd itself (readlinkat, empty path)
                finally:
                    os.close(fd)
        except (OSError, ValueError):
            return None
        self._record.touched.add(rel)
        return os.path.basename(target.rstrip("/")) or None

    def garbage(self, rel: str, text: str, expected: str) -> None:
        """Note that ``rel`` held text a parser could not understand."""
        self.anomalies.append(Anomaly(_norm(rel), f"unparsable {quoted(text, 40)} (expected {expected})"))

    def remember(self, name: str, text: str) -> None:
        """Keep a non-file fact (``ethtool -S`` output) so that a capture can store it."""
        self._record.extra[name] = text

    # -- what was read, for --capture ------------------------------------------

    def read_paths(self) -> dict[str, str | None]:
        """Every file read: its text, or None when the read failed."""
        return dict(self._record.texts)

    def read_errors(self) -> dict[str, str]:
        """errno names of the reads that failed, by path."""
        return dict(self._record.errors)

    def listings(self) -> dict[str, list[str]]:
        """Directories listed, with the names they held."""
        return {k: list(v) for k, v in self._record.listed.items()}

    def touched(self) -> list[str]:
        """Paths whose links were followed or whose existence was tested."""
        return sorted(self._record.touched)

    def extras(self) -> dict[str, str]:
        return dict(self._record.extra)


_MANIFEST_STRINGS = ("format", "created", "hostname", "source_root", "fabricscope", "home")
"""Manifest keys that hold a string (or null) when present."""


def _manifest_shape_problem(data: object) -> str | None:
    """What is wrong with a parsed manifest's shape, or None; a wrong shape is as unreadable as bad JSON."""
    if not isinstance(data, dict):
        return f"not a JSON object: {type(data).__name__}"
    for key in ("env", "errors"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            return f'"{key}" must be an object of strings, got {json.dumps(value)[:40]}'
    for key in _MANIFEST_STRINGS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            return f'"{key}" must be a string, got {json.dumps(value)[:40]}'
    return None


def _norm(rel: str) -> str:
    """``/sys/./class//net/`` -> ``sys/class/net``; ``..`` never climbs above the root (as in a chroot)."""
    if rel and rel[0] not in "./" and rel[-1] != "/" and "//" not in rel and "/." not in rel:
        return rel  # already normal: the common case, without normpath's cost
    return os.path.normpath("/" + rel).lstrip("/")
