"""``--record F``: the time series as a Result stream, flushed every interval, and read back.

The file is a :class:`fabricscope.results.ResultStream` (JSON lines: a header,
one ``records`` line per interval, ``note`` lines as notes are made, and an
``end`` line with the summary when the monitor ends normally), so every command
that takes a RUN reads it with :func:`fabricscope.results.load`.  A monitor killed
mid-run leaves every interval before the last one readable; such a recording
loads as ``interrupted``, and :func:`load_recording` recomputes its summary from
the records.
"""

from __future__ import annotations

import os

from fabricscope.errors import ResultFormatError
from fabricscope.monitor.summary import Summary
from fabricscope.results import Result, ResultStream, load

__all__ = ["Recorder", "load_recording"]

Recorder = ResultStream
"""The recording writer: a Result stream (``records`` once per interval, ``finish`` at the end)."""


def load_recording(path: str | os.PathLike[str]) -> Result:
    """A recording as a ``monitor`` Result; an unfinished one gets its summary recomputed."""
    result = load(path)
    if result.kind != "monitor":
        raise ResultFormatError(f"{path}: a {result.kind} result, not a monitor recording")
    if "intervals" not in result.summary:
        summary = Summary()
        batches: dict[object, list[dict[str, object]]] = {}
        for record in result.records:  # the records of one interval share its time stamp
            batches.setdefault(record.get("t_s"), []).append(record)
        for batch in batches.values():
            summary.add(batch)
        result.summary = {**summary.to_dict(), "notes": result.summary.get("notes", [])}
    return result
