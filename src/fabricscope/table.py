"""The nccl-tests text table, so existing parsers and habits keep working.

Column widths and number formatting follow nccl-tests ``src/util.cu``
(``writeResultHeader``, ``writeBenchmarkLinePreamble``, ``getFloatStr``,
``writeResultFooter``).  fabricscope's own summary lines come after the
``Avg bus bandwidth`` line and, like every non-row line, start with ``#``.
Both measured and predicted records print through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Row",
    "float_str",
    "footer_lines",
    "format_row",
    "header_lines",
    "pair_rows",
    "summary_lines",
]


def float_str(value: float, width: int) -> str:
    """Format like nccl-tests' ``getFloatStr``: fewer decimals as the number grows."""
    power = 0
    threshold = 1
    while value >= threshold and power < 40:
        power += 1
        threshold *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def header_lines() -> list[str]:
    """The column-header lines of the nccl-tests table (after a ``#`` line)."""
    columns = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
    return [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""),
        columns
        % (
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong",
        ),
        columns % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


@dataclass(frozen=True, slots=True)
class Row:
    """One table row: the shared columns and the out-of-place and in-place records."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    out: Mapping[str, Any] | None
    inp: Mapping[str, Any] | None


def _figure(value: object, width: int) -> str:
    """A number as nccl-tests prints it, or N/A where a record has none (a null the format allows)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float_str(float(value), width)
    return "N/A"


def _body(record: Mapping[str, Any] | None, check: bool) -> str:
    if record is None:
        return "  %7s  %6s  %6s  %6s" % ("N/A", "N/A", "N/A", "N/A")
    text = "  %7s  %6s  %6s" % (
        _figure(record.get("time_us"), 7),
        _figure(record.get("algbw_gbps"), 6),
        _figure(record.get("busbw_gbps"), 6),
    )
    wrong = record.get("wrong")
    if check and wrong is not None:
        return text + "  %6g" % float(wrong)
    return text + "    N/A"


def format_row(row: Row, *, check: bool) -> str:
    """One data line: ``%12li  %12li  %8s  %6s  %6s`` then both placements."""
    head = "%12d  %12d  %8s  %6s  %6s" % (row.size_bytes, row.count, row.dtype, row.redop, "%6d" % row.root)
    return head + _body(row.out, check) + _body(row.inp, check)


def pair_rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Group records by (size, count, dtype, redop, root) into rows, in first-seen order; a size measured
    again (``-N`` cycles) starts a row of its own, as nccl-tests prints every cycle's table."""
    rows: list[dict[str, Any]] = []
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        key = (
            record["op"],
            record["size_bytes"],
            record["count"],
            record["dtype"],
            record["redop"],
            record["root"],
        )
        slot = latest.get(key)
        if slot is None or slot[record["placement"]] is not None:
            slot = latest[key] = {"key": key, "out": None, "in": None}
            rows.append(slot)
        slot[record["placement"]] = record
    return [
        Row(size_bytes=size, count=count, dtype=dtype, redop=redop, root=root, out=slot["out"], inp=slot["in"])
        for slot in rows
        for _, size, count, dtype, redop, root in (slot["key"],)
    ]


def footer_lines(
    records: Sequence[Mapping[str, Any]],
    *,
    check: bool,
    min_busbw: float | None = None,
    predicted: bool = False,
    average: float | None = None,
) -> list[str]:
    """``Out of bounds values`` and ``Avg bus bandwidth``.

    A prediction checked nothing: its out-of-bounds line says ``N/A`` (the line
    stays, since tools that read nccl-tests output look for it).

    Out of bounds values counts the failed checks, one per row and placement
    with wrong elements, as nccl-tests counts them (a row wrong in both
    placements counts twice).

    The average is the mean busbw over every row and both placements, tiny
    sizes included, exactly as nccl-tests computes it.  With ``min_busbw``
    (nccl-tests' ``NCCL_TESTS_MIN_BW``) the line ends in OK or FAILED.  ``average``: the one a log printed
    (an imported table's rows are rounded to two decimals; the run's own average was not).
    """
    failed = sum(1 for r in records if check and (r.get("wrong") or 0))
    if average is None:
        average = avg_busbw(records)
    verdict = ""
    if min_busbw is not None:
        verdict = "OK" if average >= 0.9 * min_busbw else "FAILED"
    bounds = "N/A (a prediction checks nothing)" if predicted else "%d %s" % (failed, "FAILED" if failed else "OK")
    return [
        "# %-20s : %s" % ("Out of bounds values", bounds),
        "# %-20s : %s %s" % ("Avg bus bandwidth", _g(average), verdict),
    ]


def _g(value: float) -> str:
    return "%g" % value


def avg_busbw(records: Sequence[Mapping[str, Any]]) -> float:
    values = [float(r["busbw_gbps"]) for r in records]
    return sum(values) / len(values) if values else 0.0


def op_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numbers behind the footer and summary lines of one op, as kept in a Result.

    Half of peak is the smallest size whose better placement reaches 50% of
    the peak busbw (the n-half of HPC benchmarking): below it latency
    dominates, above it bandwidth does.
    """
    if not records:
        return {}
    peak = max(records, key=lambda r: float(r["busbw_gbps"]))
    peak_bw = float(peak["busbw_gbps"])
    best: dict[int, float] = {}
    for record in records:
        size = int(record["size_bytes"])
        best[size] = max(best.get(size, 0.0), float(record["busbw_gbps"]))
    half = min((s for s, bw in best.items() if bw >= peak_bw / 2), default=None) if peak_bw > 0 else None
    wrong = [int(r["wrong"]) for r in records if r.get("wrong") is not None]
    return {
        "avg_busbw_gbps": avg_busbw(records),
        "peak_busbw_gbps": peak_bw,
        "peak_size_bytes": int(peak["size_bytes"]),
        "peak_placement": peak["placement"],
        "half_peak_size_bytes": half,
        "wrong": sum(wrong) if wrong else None,
        "rows": len({(r["size_bytes"], r["dtype"], r["redop"]) for r in records}),
    }


def summary_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """fabricscope's own lines: peak busbw and where it occurs; where half of it is reached.

    They follow nccl-tests' footer, so they must not contain the markers that
    parsers of nccl-tests output search for (SuperBench takes the table from the
    last line holding ``out-of-place``): the placement is written "out of place".
    """
    summary = op_summary(records)
    if not summary:
        return []
    placement = "out of place" if summary["peak_placement"] == "out" else "in place"
    lines = [
        "# %-20s : %.4g GB/s at %d B (%s)"
        % ("Peak bus bandwidth", summary["peak_busbw_gbps"], summary["peak_size_bytes"], placement)
    ]
    if summary["half_peak_size_bytes"] is not None:
        lines.append("# %-20s : %d B" % ("Half of peak from", summary["half_peak_size_bytes"]))
    return lines
