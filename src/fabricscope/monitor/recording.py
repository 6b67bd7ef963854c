"""``--record F``: the time series as JSON lines, flushed every interval, and read back as a Result.

Line 1 is a header (``{"type": "header", "format": ..., "kind": "monitor",
"config": ..., "host": ...}``); then one ``{"type": "interval", "records":
[...]}`` line per interval, ``{"type": "note", ...}`` lines as notes are made,
and a last ``{"type": "summary", ...}`` line when the monitor ends normally.
Each line is written whole and flushed (and fsynced) at once, so a monitor
killed mid-run leaves every interval before the last one readable; a torn
last line is ignored on load, and a recording without its summary line loads
as an ``interrupted`` Result whose summary is recomputed from its records.

Format history (bump :data:`RECORDING_VERSION` and add a line when it changes)::

    1 - header, interval, note and summary lines.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.monitor.summary import Summary
from fabricscope.results import STDOUT, Result

__all__ = ["RECORDING_FORMAT", "RECORDING_VERSION", "Recorder", "load_recording"]

RECORDING_FORMAT = "fabricscope-monitor-recording"
RECORDING_VERSION = 1
_MAX_LINE = 16 << 20
"""Longest line read back (an interval of a few hundred ports is well under a MiB)."""


class Recorder:
    """Appends lines to a recording; every write is flushed and synced before it returns."""

    __slots__ = ("_fd", "_sync", "path")

    def __init__(self, path: str, header: Result) -> None:
        self.path = path
        try:
            # Non-blocking open: a FIFO without a reader is refused (ENXIO) instead of hanging the monitor.
            if path == STDOUT:
                sys.stdout.flush()
                fd = os.dup(sys.stdout.fileno())
            else:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
            os.set_blocking(fd, True)
            self._fd: int | None = fd
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing was run yet: a bad argument, not a failed run
                raise UsageError(f"cannot write {path}: a FIFO with no reader") from None
            raise RunError(f"cannot write {path}: {exc.strerror or exc}") from None
        self._sync = os.path.isfile(path)  # a pipe or /dev/stdout cannot be fsynced
        data = header.to_dict()
        self._write(
            {
                "type": "header",
                "format": RECORDING_FORMAT,
                "recording_version": RECORDING_VERSION,
                **{k: data[k] for k in ("version", "kind", "created", "host", "env", "config")},
            }
        )

    def interval(self, records: list[dict[str, Any]]) -> None:
        self._write({"type": "interval", "records": records})

    def notes(self, texts: Iterable[str]) -> None:
        for text in texts:
            self._write({"type": "note", "text": text})

    def finish(self, summary: dict[str, Any], status: str) -> None:
        self._write({"type": "summary", "status": status, "summary": summary})
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
        data = (json.dumps(line, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            if self._sync:
                os.fsync(self._fd)
        except OSError as exc:
            self.close()  # a disk that failed once is not written again; what is there stays readable
            raise RunError(f"cannot write {self.path}: {exc.strerror or exc}") from None


def load_recording(path: str | os.PathLike[str]) -> Result:
    """A recording as a ``monitor`` Result (records flattened, summary as written or recomputed).

    Raises :class:`ResultFormatError` for a file that is not a recording; a
    torn last line (the monitor was killed while writing it) is dropped.
    """
    from fabricscope.userfiles import read_text

    source = str(path)
    text = read_text(path, what="recording", max_bytes=1 << 30, error=ResultFormatError)
    lines = text.split("\n")
    parsed: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > _MAX_LINE:
            raise ResultFormatError(f"{source}: line {number} is longer than {_MAX_LINE >> 20} MiB")
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if number >= len(lines) - 1:  # the last line, torn by a kill mid-write
                break
            raise ResultFormatError(f"{source}: line {number} is not JSON") from None
        if not isinstance(item, dict):
            raise ResultFormatError(f"{source}: line {number} is not a JSON object")
        parsed.append(item)
    if not parsed or parsed[0].get("type") != "header" or parsed[0].get("format") != RECORDING_FORMAT:
        raise ResultFormatError(f"{source}: not a fabricscope monitor recording (no {RECORDING_FORMAT} header)")
    header = parsed[0]
    if header.get("recording_version") != RECORDING_VERSION:
        raise ResultFormatError(
            f"{source}: recording version {header.get('recording_version')!r} is not supported "
            f"(this fabricscope reads version {RECORDING_VERSION})"
        )
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    summary = Summary()
    final: dict[str, Any] | None = None
    for item in parsed[1:]:
        kind = item.get("type")
        if kind == "interval" and isinstance(item.get("records"), list):
            rows = [r for r in item["records"] if isinstance(r, dict)]
            records.extend(rows)
            summary.add(rows)
        elif kind == "note" and isinstance(item.get("text"), str):
            notes.append(item["text"])
        elif kind == "summary" and isinstance(item.get("summary"), dict):
            final = item
    if final is not None:
        result_summary, status = final["summary"], str(final.get("status") or "complete")
    else:
        result_summary, status = summary.to_dict(), "interrupted"
        result_summary["notes"] = notes
    data = {
        "format": "fabricscope-result",
        "version": header.get("version"),
        "kind": header.get("kind"),
        "created": header.get("created"),
        "status": status,
        "host": header.get("host"),
        "env": header.get("env"),
        "config": header.get("config"),
        "summary": result_summary,
        "records": records,
    }
    return Result.from_dict(data, source=source)
