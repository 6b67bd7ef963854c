"""The Result: one versioned JSON document for everything a command produces.

A measured collective record and a predicted one share the same fields
(:data:`COLLECTIVE_FIELDS`), so a measurement, a baseline and a prediction
compare directly.  Units live in field names (``time_us``, ``busbw_gbps``);
GB/s means 1e9 bytes per second.  Measured records also keep their raw
per-iteration samples so statistics can be recomputed later.

Format history (bump ``VERSION`` and add a line when the layout changes)::

    1 - first version: format, version, kind, created, status, host, env,
        config, records, summary, error.  Collective records may carry ``cv``
        (coefficient of variation of their samples) since fabricscope 0.2; a
        reader treats a missing ``cv`` as unknown.  Measured records of ``bench
        --streams K`` carry ``streams`` (each stream's time and bandwidths; the
        record's own are the aggregate) since fabricscope 0.3.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import select
import socket
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.userfiles import parse_json, read_text, shorten

__all__ = [
    "COLLECTIVE_FIELDS",
    "FORMAT",
    "STATUSES",
    "STDOUT",
    "STREAM_FORMAT",
    "STREAM_VERSION",
    "VERSION",
    "CollectiveRecord",
    "Result",
    "ResultStream",
    "atomic_write_text",
    "check_output_path",
    "claim_stdout",
    "coefficient_of_variation",
    "data_stdout",
    "load",
    "mark_unfinished",
    "percentile",
    "release_stdout",
    "say_written",
    "stdout_holds_data",
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
    """The ``pct`` percentile of an already sorted list, as nccl-tests computes it: ``sorted[n * pct / 100]``.

    nccl-tests' per-iteration statistics take the element at index
    ``floor(n * pct / 100)`` (so p50 of 20 samples is ``sorted[10]``, the upper
    median), clamped to the last element.
    """
    if not sorted_values:
        return math.nan
    n = len(sorted_values)
    index = min(n - 1, max(0, int(n * pct // 100)))
    return sorted_values[index]


def coefficient_of_variation(values: list[float]) -> float | None:
    """Sample standard deviation over mean (None below two values or with a zero mean)."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    if mean == 0:
        return None
    variance = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance) / mean


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
    cv: float | None = None
    """Coefficient of variation of the samples (standard deviation / mean)."""
    algorithm: str | None = None
    """Predicted records: the algorithm the model chose (ring, tree, ...)."""
    streams: list[dict[str, Any]] | None = None
    """``bench --streams K``: each stream's ``stream``, ``time_us``, ``algbw_gbps``, ``busbw_gbps``
    (the record's own time and bandwidths are then the aggregate of all K)."""

    def __post_init__(self) -> None:
        if self.placement not in ("out", "in"):
            raise ValueError(f"placement must be 'out' or 'in', got {self.placement!r}")
        if self.samples_us and self.min_us is None:
            ordered = sorted(self.samples_us)
            self.min_us = ordered[0]
            self.p50_us = percentile(ordered, 50)
            self.p99_us = percentile(ordered, 99)
            self.max_us = ordered[-1]
            self.cv = coefficient_of_variation(self.samples_us)

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

    def world(self) -> tuple[int, int] | None:
        """(ranks, nodes) the records ran or were predicted on: ``host.ranks`` (bench: one entry a
        rank, nodes = distinct hosts), else ``config.nranks`` and ``config.nodes`` (imported logs),
        else ``config.nodes`` and ``config.gpus_per_node`` (predictions); None when it does not say."""

        def whole(key: str, default: Any = None) -> int | None:
            value = self.config.get(key, default)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

        ranks = self.host.get("ranks") if isinstance(self.host, dict) else None
        if isinstance(ranks, list) and ranks and all(isinstance(r, dict) for r in ranks):
            return len(ranks), max(len({str(r.get("host", "")) for r in ranks}), 1)
        nranks, nodes, per_node = whole("nranks"), whole("nodes", 1), whole("gpus_per_node")
        if nranks is not None and nodes is not None and nodes <= nranks:
            return nranks, nodes
        if "nodes" in self.config and nodes is not None and per_node is not None:
            return nodes * per_node, nodes
        return None

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

    def save_during_run(self, path: str | None, *, final: bool) -> str | None:
        """Rewrite ``path`` (None: no file) as a run goes, so that what is measured is on disk; a stream
        (``-``, ``/dev/stdout``) gets the Result once, when ``final``.  A file that cannot be written
        does not stop the run: the problem comes back, for the caller to report."""
        if not path or (not final and written_through(path)):
            return None
        try:
            self.save(path)
        except RunError as exc:
            return str(exc)
        return None

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
        _check_records(data["records"], source)
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


def mark_unfinished(path: str | os.PathLike[str], status: str, error: str) -> bool:
    """Give a result file that a killed process left ``partial`` the status and reason it lacks.

    For a process that outlived the one that wrote the file (a launcher whose rank 0
    was killed).  A file that is not partial, or cannot be read or written, is left
    alone; returns whether the file was changed.
    """
    try:
        result = load(path)
        if result.status != "partial":
            return False
        result.status, result.error = status, error
        result.save(path)
    except (ResultFormatError, RunError):
        return False
    return True


_NUMERIC = ("size_bytes", "busbw_gbps")
"""Fields of a collective record that every command reads as numbers."""
_OPTIONAL_NUMERIC = ("count", "time_us", "algbw_gbps", "min_us", "p50_us", "p99_us", "max_us")
"""Fields that may be missing (null), but are numbers when given."""


def _check_records(records: list[Any], source: str) -> None:
    """Every record is an object; a collective record's figures are finite numbers."""
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise ResultFormatError(f"{source}: record {index} is not a JSON object")
        if "op" not in record or "busbw_gbps" not in record:
            continue
        for key in (*_NUMERIC, *(k for k in _OPTIONAL_NUMERIC if record.get(k) is not None)):
            value = record.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ResultFormatError(
                    f"{source}: record {index} ({record.get('op')!r}) has {key} = {value!r}: it must be a number"
                )


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in a result")


def load(path: str | os.PathLike[str]) -> Result:
    """Read a Result file, a JSON document or a stream of JSON lines (:class:`ResultStream`).

    Any problem is a :class:`ResultFormatError` naming the file.
    """
    text = read_text(path, what="result file", max_bytes=MAX_RESULT_BYTES, error=ResultFormatError)
    source = shorten(os.fspath(path))
    if text.lstrip().startswith('{"type":"header"'):
        return _from_stream(text, source)
    data = parse_json(text, source=source, what="result file", error=ResultFormatError)
    return Result.from_dict(data, source=source)


STREAM_FORMAT = "fabricscope-result-stream"
STREAM_VERSION = 1
_MAX_STREAM_LINE = 16 << 20


class ResultStream:
    """A Result written as it is made: JSON lines, each written whole, flushed and synced.

    Line 1 is a header (the Result's kind, created, host, env and config); then
    ``{"type": "records", "records": [...]}`` lines as records are made, ``{"type":
    "note", "text": ...}`` lines, and a last ``{"type": "end", "status": ...,
    "summary": {...}}`` line when the run ends.  A process killed mid-run leaves
    every line before the last readable: :func:`load` drops a torn last line and
    loads a stream without its end line as an ``interrupted`` Result with an empty
    summary (the command that wrote it may recompute one).

    Format history: 1 - header, records, note and end lines.
    """

    __slots__ = ("_fd", "_sync", "path")

    def __init__(self, path: str, header: Result) -> None:
        self.path = path
        try:
            if path == STDOUT:
                out = data_stdout()
                out.flush()
                fd = os.dup(out.fileno())
            else:
                # Non-blocking open: a FIFO without a reader is refused (ENXIO) instead of hanging.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
            os.set_blocking(fd, True)
            self._fd: int | None = fd
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing was run yet: a bad argument, not a failed run
                raise UsageError(f"cannot write {shorten(path)}: a FIFO with no reader") from None
            raise RunError(f"cannot write {shorten(path)}: {exc.strerror or exc}") from None
        self._sync = os.path.isfile(path)  # a pipe or /dev/stdout cannot be fsynced
        data = header.to_dict()
        self._write(
            {
                "type": "header",
                "format": STREAM_FORMAT,
                "stream_version": STREAM_VERSION,
                **{k: data[k] for k in ("version", "kind", "created", "host", "env", "config")},
            }
        )

    def records(self, records: list[dict[str, Any]]) -> None:
        self._write({"type": "records", "records": records})

    def notes(self, texts: Iterable[str]) -> None:
        for text in texts:
            self._write({"type": "note", "text": text})

    def finish(self, summary: dict[str, Any], status: str) -> None:
        self._write({"type": "end", "status": status, "summary": summary})
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)

    def _write(self, line: dict[str, Any]) -> None:
        """One whole line, unbuffered (nothing is left to flush at close), then synced to disk."""
        if self._fd is None:
            return
        data = (json.dumps(line, allow_nan=False, separators=(",", ":"), default=_json_default) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            if self._sync:
                os.fsync(self._fd)
        except OSError as exc:
            self.close()  # a disk that failed once is not written again; what is there stays readable
            raise RunError(f"cannot write {shorten(self.path)}: {exc.strerror or exc}") from None


def _from_stream(text: str, source: str) -> Result:
    lines = text.split("\n")
    parsed: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > _MAX_STREAM_LINE:
            raise ResultFormatError(f"{source}: line {number} is longer than {_MAX_STREAM_LINE >> 20} MiB")
        try:
            item = parse_json(line, source=f"{source}: line {number}", what="line", error=ResultFormatError)
        except ResultFormatError:
            if number >= len(lines) - 1:  # the last line, torn by a kill mid-write
                break
            raise
        if not isinstance(item, dict):
            raise ResultFormatError(f"{source}: line {number} is not a JSON object")
        parsed.append(item)
    header = parsed[0] if parsed else {}
    if header.get("format") != STREAM_FORMAT:
        raise ResultFormatError(f"{source}: not a fabricscope result stream (no {STREAM_FORMAT} header)")
    if header.get("stream_version") != STREAM_VERSION:
        raise ResultFormatError(
            f"{source}: result stream version {header.get('stream_version')!r} is not supported "
            f"(this fabricscope reads version {STREAM_VERSION})"
        )
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    end: dict[str, Any] | None = None
    for item in parsed[1:]:
        kind = item.get("type")
        if kind == "records" and isinstance(item.get("records"), list):
            records.extend(r for r in item["records"] if isinstance(r, dict))
        elif kind == "note" and isinstance(item.get("text"), str):
            notes.append(item["text"])
        elif kind == "end" and isinstance(item.get("summary"), dict):
            end = item
    summary = end["summary"] if end is not None else {"notes": notes}
    status = str(end.get("status") or "complete") if end is not None else "interrupted"
    data = {k: header.get(k) for k in ("version", "kind", "created", "host", "env", "config")}
    data.update(format=FORMAT, status=status, summary=summary, records=records)
    if end is None:
        data["error"] = "the stream has no end line: the run did not finish"
    return Result.from_dict(data, source=source)


STDOUT = "-"
"""An output path of ``-`` means standard output, as most tools read it."""

_STREAM_TIMEOUT_S = 30.0
"""Longest wait for a stream's reader (a FIFO, a pipe) to take what we write."""

_held: dict[str, int] = {}
"""FIFOs opened by :func:`check_output_path`, kept open so that their reader stays."""

_STDOUT_NAMES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
"""Other names of standard output, which :func:`check_output_path` treats as ``-`` for the report."""

_data_out: TextIO | None = None
"""The real standard output, while an output flag holds it for its data (:func:`claim_stdout`)."""
_claimed_by: str | None = None
"""The output flag that holds standard output."""


def claim_stdout(flag: str, path: str | os.PathLike[str] | None) -> bool:
    """When ``path`` is ``-`` (or ``/dev/stdout``), give standard output to the data of ``flag``: the human
    report goes to standard error.  Returns whether ``path`` names standard output.

    Every command prints its report (tables, summaries, notes, warnings) on ``sys.stdout``.
    From this call on, ``sys.stdout`` is standard error, and the data is written to the
    real standard output (:func:`data_stdout`), so that ``--json - | jq`` or ``-o - >
    cluster.toml`` gets the JSON, CSV or TOML alone, and it parses.  :func:`check_output_path`
    calls this, so every output flag does it before any work; a process that writes data
    it did not check (a rank a launcher started) calls it itself.  Only one output can be
    standard output: a second flag is refused (:class:`UsageError`).  Child processes keep
    the real standard output: a command that starts one whose output is not data gives it
    standard error when :func:`stdout_holds_data`.
    """
    global _data_out, _claimed_by
    if path is None or not (os.fspath(path) == STDOUT or os.path.abspath(path) in _STDOUT_NAMES):
        return False
    if _claimed_by is not None:
        if _claimed_by != flag:
            raise UsageError(
                f"{_claimed_by} and {flag} both write to standard output, where only one can: give one a file name"
            )
        return True
    sys.stdout.flush()
    _data_out, _claimed_by = sys.stdout, flag
    sys.stdout = sys.stderr
    return True


def stdout_holds_data() -> bool:
    """Whether an output flag holds standard output for its data (:func:`claim_stdout`)."""
    return _claimed_by is not None


def release_stdout() -> None:
    """Undo :func:`claim_stdout`: ``sys.stdout`` is standard output again (the CLI calls it as a command ends)."""
    global _data_out, _claimed_by
    if _data_out is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        sys.stdout = _data_out
    _data_out = _claimed_by = None


def data_stdout() -> TextIO:
    """Where the data of an output given ``-`` goes: the real standard output, claimed or not."""
    return _data_out if _data_out is not None else sys.stdout


def say_written(path: str, detail: str = "") -> None:
    """The ``wrote PATH[: detail]`` line, on stderr; for ``-`` only the detail (the data on stdout is the rest)."""
    if path != STDOUT:
        sys.stderr.write(f"wrote {path}{': ' + detail if detail else ''}\n")
    elif detail:
        sys.stderr.write(f"wrote standard output: {detail}\n")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def check_output_path(flag: str, path: str, *, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output file that cannot or must not be written.

    Raises :class:`UsageError` (one line, exit 2) when ``path`` is empty, too long,
    a folder, in a folder that does not exist, a read-only file, one of the
    command's ``inputs`` (or inside an input folder, such as doctor's ``--root``),
    a FIFO nobody reads, or a file that cannot be created (checked by creating and
    removing a probe file, since ``os.access`` says yes to root everywhere).  ``-``
    and streams or devices (``/dev/stdout``, ``/dev/null``) are written through.
    """
    if path == "":
        raise UsageError(f"{flag} needs a file name, got an empty one (use - for standard output)")
    if claim_stdout(flag, path) and path == STDOUT:
        return
    shown = shorten(path)
    try:
        info: os.stat_result | None = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(
                f"{flag} {shown}: file name too long ({len(path)} characters; this system allows 255 per name)"
            ) from None
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        example = os.path.join(path, "result.csv" if flag == "--csv" else "result.json")
        raise UsageError(f"{flag} {shown} is a folder: give a file name, e.g. {example}")
    for source in inputs:
        name = os.fspath(source)
        if os.path.isdir(name) and _inside(path, name):
            raise UsageError(f"{flag} {shown} is inside {shorten(name)}, an input of this command: write it elsewhere")
        if _same_file(path, name):
            raise UsageError(f"{flag} {shown} is also an input of this command: writing it would destroy it")
    if info is not None and stat.S_ISFIFO(info.st_mode):
        _hold_fifo(flag, path)
        return
    if written_through(path):
        return
    if _is_database(path):
        raise UsageError(
            f"{flag} {shown} is a SQLite database (fabricscope's history, perhaps): "
            "writing a result over it would destroy it; give another name"
        )
    if info is not None and stat.S_ISREG(info.st_mode) and not info.st_mode & 0o222:
        raise UsageError(f"{flag} {shown} is read-only: fabricscope does not replace it (make it writable first)")
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {shown}: the folder {shorten(folder)} does not exist")
    if len(os.path.basename(path)) > 255 - 40:  # room for the temporary name written beside it
        raise UsageError(f"{flag} {shown}: file name too long ({len(os.path.basename(path))} characters)")
    probe = os.path.join(folder, f".fabricscope-probe.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise UsageError(f"{flag} {shown}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_database(path: str) -> bool:
    """Whether ``path`` (or the database it is the journal of) is a SQLite database."""
    real = os.path.realpath(path)
    candidates = [real] + [real[: -len(s)] for s in ("-wal", "-shm", "-journal") if real.endswith(s)]
    for name in candidates:
        try:
            with open(name, "rb") as handle:
                if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) and handle.read(16) == _SQLITE_MAGIC:
                    return True
        except OSError:
            continue
    return False


def _hold_fifo(flag: str, path: str) -> None:
    """Open a FIFO for writing now, without blocking: refuse one that nobody reads."""
    key = os.path.realpath(path)
    if key in _held:
        return
    try:
        _held[key] = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UsageError(
                f"{flag} {shorten(path)} is a FIFO that no process is reading: start its reader first"
            ) from None
        raise UsageError(f"{flag} {shorten(path)}: cannot open the FIFO ({exc.strerror or exc})") from None


_STREAMS = re.compile(r"/dev/std(out|err)$|/dev/fd/|/proc/[^/]+/fd/")
"""Paths that name one of this process's open files, whatever it is."""


def written_through(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a stream or device: written in place (appended), never replaced.

    That is ``-`` and ``/dev/stdout`` and the like (``> out.txt`` must keep the
    table already there), and anything that is not a regular file: a pipe, a
    device, a socket.  ``os.stat`` follows ``/dev/stdout`` -> ``/proc/self/fd/1``
    to a pipe, which ``realpath`` cannot name.
    """
    if os.fspath(path) == STDOUT or _STREAMS.match(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _silence_stdout() -> None:
    """Point stdout at /dev/null: later writes, and Python's flush at exit, go nowhere."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, data_stdout().fileno())
        os.close(devnull)


def _write_stream(path: str, text: str) -> None:
    """Append to a stream without ever waiting forever for its reader."""
    data = text.encode("utf-8")
    key = os.path.realpath(path) if path != STDOUT else ""
    if path == STDOUT:
        out = data_stdout()
        try:
            out.flush()
        except BrokenPipeError:
            _silence_stdout()
            return
        fd, own = out.fileno(), False
    elif key in _held:
        fd, own = _held[key], False
    else:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            why = "no process is reading it" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
            raise RunError(f"cannot write {shorten(path)}: {why}") from None
        own = True
    try:
        deadline = time.monotonic() + _STREAM_TIMEOUT_S
        while data:
            _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RunError(f"cannot write {shorten(path)}: its reader took nothing for {_STREAM_TIMEOUT_S:g} s")
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                if path == STDOUT or _STREAMS.match(os.path.abspath(path)):
                    _silence_stdout()  # our own reader went away (| head): not a failure of the run
                    return
                raise RunError(f"cannot write {shorten(path)}: no process reads it any more") from None
            except OSError as exc:
                raise RunError(f"cannot write {shorten(path)}: {exc.strerror or exc}") from None
    finally:
        if own:
            os.close(fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    A link is followed: the file it points at is replaced, the link kept.  A
    stream or device (``/dev/stdout``, a pipe) is appended to, never replaced.  On
    failure (disk full, permission) the previous content of ``path`` is left
    untouched and a :class:`RunError` says why.
    """
    if written_through(path):
        _write_stream(os.fspath(path), text)
        return
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
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
        if mode is not None:  # a replaced file keeps its mode
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
        tmp_name = None
    except OSError as exc:
        raise RunError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
