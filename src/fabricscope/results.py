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
import operator
import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.metadata import collect_env
from fabricscope.outputs import STDOUT, atomic_write_text, data_stdout, written_through
from fabricscope.shown import cut
from fabricscope.userfiles import parse_json, read_text

__all__ = [
    "COLLECTIVE_FIELDS",
    "FORMAT",
    "STATUSES",
    "STREAM_FORMAT",
    "STREAM_VERSION",
    "VERSION",
    "CollectiveRecord",
    "Result",
    "ResultStream",
    "coefficient_of_variation",
    "load",
    "loads",
    "mark_unfinished",
    "percentile",
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
        # Field by field, not dataclasses.asdict: its deep copy was most of an import of 300,000 rows;
        # every field read in one call, and a missing optional one skipped before anything else.
        data: dict[str, Any] = {}
        for name, value in zip(_RECORD_SLOTS, _record_values(self), strict=True):
            if value is None:
                if name in _REQUIRED:
                    data[name] = None
            elif isinstance(value, list):
                data[name] = [dict(v) if isinstance(v, dict) else v for v in value]
            else:
                data[name] = value
        return data


_RECORD_SLOTS = tuple(f.name for f in fields(CollectiveRecord))
_record_values = operator.attrgetter(*_RECORD_SLOTS)
_REQUIRED = frozenset(COLLECTIVE_FIELDS)


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
    env: dict[str, Any] = field(default_factory=lambda: collect_env(argv=list(sys.argv)))
    """Versions, platform, the NCCL-related variables and the command line (:func:`~fabricscope.metadata.collect_env`)
    of the process that made it, unless the producer gives its own (a loaded file keeps the one it holds)."""
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
        """The file's text: indented, with one record per line (the records alone through the C
        encoder: an indented dump of 300,000 records took half a minute in json's Python one)."""
        data = self.to_dict()
        records = data.pop("records")
        head = json.dumps(data, indent=1, allow_nan=False, default=_json_default)
        if not records:
            return head[:-2] + ',\n "records": []\n}'
        encode = json.JSONEncoder(allow_nan=False, default=_json_default).encode  # one encoder: dumps makes one a call
        lines = ",\n  ".join(map(encode, records))
        return head[:-2] + ',\n "records": [\n  ' + lines + "\n ]\n}"

    def save(self, path: str | os.PathLike[str], *, text: str | None = None) -> None:
        """Write atomically: readers see the old file or the new one, never half.  ``text`` is this
        Result's :meth:`to_json`, when the caller has it already."""
        atomic_write_text(path, (self.to_json() if text is None else text) + "\n")

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
    def from_dict(cls, data: object, *, source: str = "<data>") -> Result:
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
        for key, kind, noun in (
            ("created", str, "text (an ISO 8601 time)"),
            ("error", str, "text"),
            ("summary", dict, "a JSON object"),
            ("host", dict, "a JSON object"),
            ("env", dict, "a JSON object"),
        ):
            if data.get(key) is not None and not isinstance(data[key], kind):
                raise ResultFormatError(f"{source}: field {key!r} must be {noun}, not {_json_type(data[key])}")
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


_TEXT = ("dtype", "redop", "placement", "algorithm")
"""Fields of a collective record that are text when given (``op`` always is)."""
_NUMERIC = ("size_bytes", "busbw_gbps")
"""Fields of a collective record that every command reads as numbers."""
_OPTIONAL_NUMERIC = ("count", "time_us", "algbw_gbps", "min_us", "p50_us", "p99_us", "max_us", "wrong")
"""Fields that may be missing (null), but are numbers when given."""


def _json_type(value: object) -> str:
    """What a JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "an object"


def _check_records(records: list[Any], source: str) -> None:
    """Every record is an object; a collective record's figures are finite numbers."""
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise ResultFormatError(f"{source}: record {index} is not a JSON object")
        if "op" not in record or "busbw_gbps" not in record:
            continue
        for key in ("op", *(k for k in _TEXT if record.get(k) is not None)):
            if not isinstance(record.get(key), str):
                raise ResultFormatError(
                    f"{source}: record {index} has {key} = {cut(repr(record.get(key)))}: it must be text, "
                    f"not {_json_type(record.get(key))}"
                )
        for key in (*_NUMERIC, *(k for k in _OPTIONAL_NUMERIC if record.get(k) is not None)):
            value = record.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ResultFormatError(
                    f"{source}: record {index} ({record.get('op')!r}) has {key} = {value!r}: it must be a number"
                )


def _json_default(value: object) -> Any:
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
    return loads(text, source=cut(os.fspath(path)))


def loads(text: str, *, source: str) -> Result:
    """A Result from the text of a Result file: what :func:`load` reads, and the check a command runs
    on what it is about to write (``import``), so that nothing is written that cannot be read back."""
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
                raise UsageError(f"cannot write {cut(path)}: a FIFO with no reader") from None
            raise RunError(f"cannot write {cut(path)}: {exc.strerror or exc}") from None
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
            raise RunError(f"cannot write {cut(self.path)}: {exc.strerror or exc}") from None


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
