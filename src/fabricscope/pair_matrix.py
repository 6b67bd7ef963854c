"""The matrices of a pairs Result: which records make the bandwidth matrix and which the latency one.

``pairs`` measures every direction twice: a bandwidth test (``--size`` messages,
``algbw_gbps``) and a latency test (8-byte messages, ``time_us``), one record each,
told apart by the record's ``test`` field.  The terminal report and the HTML
heatmap both take their cells from :func:`cells`, so they show the same numbers;
a cell keyed by source and destination alone would let one test overwrite the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

__all__ = ["PAIR_FIELDS", "SLOW_LINK_FACTOR", "TESTS", "MatrixTest", "PairRecord", "Test", "cells", "well_formed"]


Test = Literal["bandwidth", "latency"]

SLOW_LINK_FACTOR = 10.0
"""A link this many times slower than the median is broken whatever the scores say (``pairs`` and doctor's
fleet pairs judge by it)."""


class PairRecord(TypedDict):
    """One ``pairs`` record: one test of one direction of one pair, as its Result keeps it."""

    test: Test
    src: int
    """The sending rank."""
    dst: int
    src_host: str
    dst_host: str
    size_bytes: int
    """The message: ``--size`` for bandwidth, 8 bytes for latency."""
    time_us: float
    """Bandwidth: the series' time over its messages; latency: half the mean round trip."""
    algbw_gbps: float
    round: int
    """The round of the schedule the pair was tested in (from 1)."""


PAIR_FIELDS = tuple(PairRecord.__annotations__)
"""Fields of every ``pairs`` record, in order."""


@dataclass(frozen=True, slots=True)
class MatrixTest:
    name: str
    """The records' ``test`` field: ``bandwidth`` or ``latency``."""
    key: str
    """The record field the matrix shows."""
    unit: str
    fmt: str
    """How a cell is printed."""
    label: str
    """What a plot's colour bar says."""


TESTS = (
    MatrixTest("bandwidth", "algbw_gbps", "GB/s", "{:.3g}", "algbw (GB/s)"),
    MatrixTest("latency", "time_us", "us", "{:.1f}", "latency (us)"),
)
"""The two matrices, in the order they are shown."""


def cells(records: Iterable[Any], test: MatrixTest) -> dict[tuple[Any, Any], Mapping[str, Any]]:
    """The records of ``test`` keyed by (src, dst), each with a finite value of the test's field.

    A record without a ``test`` field (written by hand or by another tool) counts as bandwidth
    when it has ``algbw_gbps``; the last record of a direction wins (a later round)."""
    found: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for record in records:
        if not isinstance(record, Mapping) or not {"src", "dst", test.key} <= record.keys():
            continue
        kind = record.get("test", "bandwidth" if "algbw_gbps" in record else None)
        value = record[test.key]
        if kind != test.name or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            found[(record["src"], record["dst"])] = record
    return found


def well_formed(records: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The records of a stored pairs Result that the printed report can show: a known test, whole-number
    ranks and size, host names, finite time and bandwidth (a file may hold anything; ``round`` may be absent)."""

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def finite(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    names = {test.name for test in TESTS}
    return [
        r
        for r in records
        if isinstance(r, Mapping)
        and isinstance(r.get("test"), str)
        and r.get("test") in names
        and all(whole(r.get(k)) for k in ("src", "dst", "size_bytes"))
        and all(isinstance(r.get(k), str) for k in ("src_host", "dst_host"))
        and all(finite(r.get(k)) for k in ("time_us", "algbw_gbps"))
    ]
