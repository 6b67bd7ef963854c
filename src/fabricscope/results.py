"""The Result: one versioned JSON document for everything a command produces.

A measured collective record and a predicted one share the same fields
(:data:`COLLECTIVE_FIELDS`), so a measurement, a baseline and a prediction
compare directly.  Units live in field names (``time_us``, ``busbw_gbps``);
GB/s means 1e9 bytes per second.  Measured records also keep their raw
per-iteration samples so statistics can be recomputed later.

Format history (bump ``VERSION`` and add a line when the layout changes)::

    1 - first version: format, version, kind, created, status, host, env,
        config, records, summary, error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import socket
import stat
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.userfiles import read_json

__all__ = [
    "COLLECTIVE_FIELDS",
    "FORMAT",
    "STATUSES",
    "VERSION",
    "CollectiveRecord",
    "Result",
    "atomic_write_text",
    "check_output_path",
    "load",
    "percentile",
    "written_through",
]

FORMAT = "fabricscope-result"
VERSION = 1
STATUSES = ("complete", "partial", "failed", "interrupted")

MAX_RESULT_BYTES = 1 << 30
"""Largest result file :func:`load` reads (a long ``--duration`` run keeps every sample)."""

COLLECTIVE_FIELDS = (
    "op",
    "size_bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "placement",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
)
"""Fields every collective record has, measured or predicted."""


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list (as nccl-tests' ``-I`` stats)."""
    if not sorted_values:
        return math.nan
    n = len(sorted_values)
    index = min(n - 1, max(0, math.ceil(n * pct / 100.0) - 1))
    return sorted_values[index]


@dataclass(kw_only=True, slots=True)
class CollectiveRecord:
    """One row of a collective sweep, in one placement (out-of-place or in-place)."""

    op: str
    """Collective name, e.g. ``all_reduce``."""
    size_bytes: int
    """The nccl-tests ``size`` column: max(send bytes, receive bytes) per rank."""
    count: int
    """The nccl-tests ``count`` column: elements per rank passed to the collective."""
    dtype: str
    redop: str
    """Reduction (``sum``...), or ``none`` for ops that do not reduce."""
    root: int
    """Root rank, or -1 for ops without one."""
    placement: str
    """``out`` (out-of-place) or ``in`` (in-place)."""
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None
    """Wrong elements summed over ranks; None when the check was off."""
    samples_us: list[float] | None = None
    """Per-iteration times, reduced across ranks as the run's ``-a`` mode says."""
    min_us: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    max_us: float | None = None
    algorithm: str | None = None
    """Predicted records: the algorithm the model chose (ring, tree, ...)."""

    def __post_init__(self) -> None:
        if self.placement not in ("out", "in"):
            raise ValueError(f"placement must be 'out' or 'in', got {self.placement!r}")
        if self.samples_us and self.min_us is None:
            ordered = sorted(self.samples_us)
            self.min_us = ordered[0]
            self.p50_us = percentile(ordered, 50)
            self.p99_us = percentile(ordered, 99)
            self.max_us = ordered[-1]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: v for k, v in data.items() if v is not None or k in COLLECTIVE_FIELDS}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(kw_only=True, slots=True)
class Result:
    """A command's output: metadata, the config that produced it, and records."""

    kind: str
    """What produced it: ``bench``, ``predict``, ``estimate``, ``plan``, ``validate``, ``doctor``..."""
    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=lambda: {"hostname": socket.gethostname()})
    env: dict[str, Any] = field(default_factory=dict)
    status: str = "complete"
    error: str | None = None
    created: str = field(default_factory=_now)
    version: int = VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "kind": self.kind,
            "created": self.created,
            "status": self.status,
            "error": self.error,
            "host": self.host,
            "env": self.env,
            "config": self.config,
            "summary": self.summary,
            "records": self.records,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False, default=_json_default)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically: readers see the old file or the new one, never half."""
        atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<data>") -> Result:
        if not isinstance(data, dict):
            raise ResultFormatError(f"{source}: not a fabricscope result (expected a JSON object)")
        if data.get("format") != FORMAT:
            raise ResultFormatError(
                f"{source}: not a fabricscope result (format is {data.get('format')!r}, expected {FORMAT!r})"
            )
        version = data.get("version")
        if not isinstance(version, int) or not 1 <= version <= VERSION:
            raise ResultFormatError(
                f"{source}: result version {version!r} is not supported "
                f"(this fabricscope reads versions 1 to {VERSION})"
            )
        for key, kind in (("kind", str), ("records", list), ("config", dict)):
            if not isinstance(data.get(key), kind):
                raise ResultFormatError(f"{source}: field {key!r} is missing or not a {kind.__name__}")
        status = data.get("status", "complete")
        if status not in STATUSES:
            raise ResultFormatError(f"{source}: status {status!r} is not one of {', '.join(STATUSES)}")
        return cls(
            kind=data["kind"],
            config=data["config"],
            records=data["records"],
            summary=data.get("summary") or {},
            host=data.get("host") or {},
            env=data.get("env") or {},
            status=status,
            error=data.get("error"),
            created=data.get("created") or "",
            version=version,
        )


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in a result")


def load(path: str | os.PathLike[str]) -> Result:
    """Read a Result file; any problem is a :class:`ResultFormatError` naming the file."""
    data = read_json(path, what="result file", max_bytes=MAX_RESULT_BYTES, error=ResultFormatError)
    return Result.from_dict(data, source=str(path))


def check_output_path(flag: str, path: str) -> None:
    """Refuse, before any work, an output file that cannot be written.

    Raises :class:`UsageError` (one line, exit 2) when ``path`` is a folder,
    its folder does not exist, or a file cannot be created there (read-only,
    no permission, a pseudo file system): checked by creating and removing a
    probe file, since ``os.access`` says yes to root everywhere.  A stream or
    device (``/dev/stdout``, ``/dev/null``) is accepted: it is written through.
    """
    if os.path.isdir(path):
        example = os.path.join(path, "result.csv" if flag == "--csv" else "result.json")
        raise UsageError(f"{flag} {path} is a folder: give a file name, e.g. {example}")
    if written_through(path):
        return
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist")
    probe = os.path.join(folder, f".fabricscope-probe.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)


_STREAMS = re.compile(r"/dev/std(out|err)$|/dev/fd/|/proc/[^/]+/fd/")
"""Paths that name one of this process's open files, whatever it is."""


def written_through(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a stream or device: written in place (appended), never replaced.

    That is ``/dev/stdout`` and the like (``> out.txt`` must keep the table already
    there), and anything that is not a regular file: a pipe, a device, a socket.
    ``os.stat`` follows ``/dev/stdout`` -> ``/proc/self/fd/1`` to a pipe, which
    ``realpath`` cannot name.
    """
    if _STREAMS.match(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    A link is followed: the file it points at is replaced, the link kept.  A
    stream or device (``/dev/stdout``, a pipe) is appended to, never replaced.  On
    failure (disk full, permission) the previous content of ``path`` is left
    untouched and a :class:`RunError` says why.
    """
    if written_through(path):
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise RunError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    target = Path(os.path.realpath(path))
    directory = target.parent
    tmp_name = None
    try:
        # Not mkstemp: its file is private (0600); a result should get the umask's mode.
        tmp_name = str(directory / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
    except OSError as exc:
        raise RunError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
