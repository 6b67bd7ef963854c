"""One root directory for every file the doctor reads.

All of ``/sys``, ``/proc`` and ``/etc`` are reached through a :class:`SysRoot`,
so tests and ``--root DIR`` point the probes at a captured tree, and
``--capture DIR`` can copy exactly what was read.

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
from dataclasses import dataclass, field
from pathlib import Path

from fabricscope.doctor.inventory import Anomaly

__all__ = [
    "CAPTURE_DIR",
    "MANIFEST",
    "MAX_READ",
    "NotAFileError",
    "SysRoot",
    "read_regular_file",
]

CAPTURE_DIR = "fabricscope-capture"
"""Folder, inside a captured tree, for what is not a plain file of the node."""
MANIFEST = f"{CAPTURE_DIR}/manifest.json"
"""Read errors met during the capture, the NCCL variables, when and where."""

_QUIET = {errno.ENOENT, errno.EINVAL, errno.ENOTDIR, errno.ENODEV, errno.ENXIO, errno.EOPNOTSUPP}
"""Errors that mean "not there" or "unknown" in sysfs, not "something is wrong"."""
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
    "BADPATH": "not a valid path (it holds a NUL byte)",
}
"""Problems that have no errno of their own (pseudo errno names, as the capture manifest stores them)."""
_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "CHARDEV"), (stat.S_ISBLK, "BLOCKDEV"), (stat.S_ISSOCK, "SOCKET"))


class NotAFileError(OSError):
    """What :func:`read_regular_file` refuses: ``name`` is a key of the problems above or an errno name."""

    def __init__(self, name: str) -> None:
        super().__init__(errno.EINVAL, _PROBLEMS.get(name, name))
        self.name = name


def read_regular_file(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file (or a link to one) of at most :data:`MAX_READ` bytes.

    Opened without blocking, so a FIFO opens at once and is refused rather
    than read; a directory raises :class:`IsADirectoryError`, another
    non-file or a file too large :class:`NotAFileError`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise NotAFileError(next((name for test, name in _KINDS if test(mode)), "not a regular file"))
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_READ:
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

    __slots__ = ("_base", "_live", "_manifest_errors", "_real_base", "_record", "anomalies", "manifest", "path")

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.path = Path(root)
        self._base = str(self.path)
        self._real_base = os.path.realpath(self._base)
        self._live = self._real_base == "/"
        self.anomalies: list[Anomaly] = []
        self._record = _Record()
        self.manifest: dict[str, object] = {}
        self._manifest_errors: dict[str, str] = {}
        manifest = self.path / MANIFEST
        if not self.is_live and manifest.is_file():
            try:
                data = json.loads(read_regular_file(str(manifest)).decode("utf-8"))
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
        """The path of ``rel`` under the root."""
        return os.path.join(self._base, rel.lstrip("/"))

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
        if rel in self._record.texts:
            return self._record.texts[rel]
        value = self._read(rel, required)
        self._record.texts[rel] = value
        return value

    def _read(self, rel: str, required: bool) -> str | None:
        injected = self._manifest_errors.get(rel)
        if injected is not None:
            self._fail(rel, injected, required)
            return None
        try:
            data = read_regular_file(self.file(rel))
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

    def _fail(self, rel: str, name: str, required: bool) -> None:
        self._record.errors[rel] = name
        code = getattr(errno, name, None)
        if code in _QUIET and not required:
            return
        problem = {errno.ENOENT: "missing"}.get(code or -1) or _PROBLEMS.get(name, name)
        self.anomalies.append(Anomaly(rel, problem))

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
            names = sorted(os.listdir(self.file(rel)))
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            if required or exc.errno not in _QUIET:
                self.anomalies.append(Anomaly(rel, "missing directory" if exc.errno == errno.ENOENT else name))
            names = []
        if rel == "" or rel == ".":
            names = [n for n in names if n != CAPTURE_DIR]
        self._record.listed[rel] = names
        return list(names)

    def exists(self, rel: str) -> bool:
        rel = _norm(rel)
        if rel in self._manifest_errors:
            return True
        exists = os.path.lexists(self.file(rel))
        if exists:
            self._record.touched.add(rel)
        return exists

    def is_dir(self, rel: str) -> bool:
        """True when ``rel`` resolves to a directory; a dangling or looping link is an anomaly."""
        rel = _norm(rel)
        self._record.touched.add(rel)
        try:
            if os.path.isdir(self.file(rel)):
                return True
        except OSError:
            pass
        if os.path.islink(self.file(rel)):
            self.anomalies.append(Anomaly(rel, "link to nothing (dangling or looping)"))
        return False

    def realpath(self, rel: str) -> str | None:
        """The path ``rel`` resolves to, relative to the root; None when it leaves the root."""
        rel = _norm(rel)
        base = self._real_base
        try:
            full = os.path.realpath(self.file(rel))
        except (OSError, RuntimeError):
            self.anomalies.append(Anomaly(rel, "unresolvable link"))
            return None
        if full != base and not full.startswith(base.rstrip("/") + "/"):
            self.anomalies.append(Anomaly(rel, f"link leaves the root ({full})"))
            return None
        self._record.touched.add(rel)
        return os.path.relpath(full, base) if full != base else ""

    def link_name(self, rel: str) -> str | None:
        """The last component of a symlink's target (``driver`` -> ``mlx5_core``)."""
        rel = _norm(rel)
        try:
            target = os.readlink(self.file(rel))
        except OSError:
            return None
        self._record.touched.add(rel)
        return os.path.basename(target.rstrip("/")) or None

    def garbage(self, rel: str, text: str, expected: str) -> None:
        """Note that ``rel`` held text a parser could not understand."""
        shown = text if len(text) <= 40 else text[:37] + "..."
        self.anomalies.append(Anomaly(_norm(rel), f"unparsable {shown!r} (expected {expected})"))

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
    return os.path.normpath("/" + rel).lstrip("/")
