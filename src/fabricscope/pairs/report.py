"""The pairs report: a bandwidth and a latency matrix (rich tables) and the findings in words.

Rows are senders, columns receivers; an outlier's cell carries a ``*`` (and
is red on a terminal).  Above :data:`MAX_MATRIX` endpoints the matrices would
not fit a screen: the :data:`SLOWEST_SHOWN` slowest links are listed instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from fabricscope import pair_matrix
from fabricscope.pairs.analysis import FACTOR, THRESHOLD, Findings
from fabricscope.shown import printable

__all__ = ["MAX_MATRIX", "SLOWEST_SHOWN", "endpoint_label", "findings_lines", "print_report"]

MAX_MATRIX = 32
SLOWEST_SHOWN = 10


def endpoint_label(record: Mapping[str, Any], end: str, by: str) -> str:
    """``rank 3 (host)`` or, by node, the host name (on one line, whatever a file holds)."""
    host = printable(str(record[f"{end}_host"]), 80)
    return host if by == "node" else f"rank {record[end]} ({host})"


def findings_lines(records: Sequence[Mapping[str, Any]], findings: Findings, by: str) -> list[str]:
    """What the matrices say, one finding a line."""
    lines: list[str] = []
    bandwidth = [r for r in records if r.get("test") == "bandwidth"]
    if "bandwidth" in findings.medians:
        size = bandwidth[0]["size_bytes"] if bandwidth else 0
        lines.append(
            f"median bandwidth: {findings.medians['bandwidth']:.3g} GB/s over {len(bandwidth)} directions "
            f"({size} B messages)"
        )
    if "latency" in findings.medians:
        lines.append(f"median latency: {findings.medians['latency']:.1f} us (8 B, half a round trip)")
    if findings.outliers:
        lines.append(f"outliers (modified z-score beyond {THRESHOLD:g}, or {FACTOR:g}x slower than the median):")
        for o in findings.outliers:
            unit, fmt = ("GB/s", "{:.3g}") if o.test == "bandwidth" else ("us", "{:.1f}")
            ends = (
                f"{o.src_host} -> {o.dst_host}"
                if by == "node"
                else f"rank {o.src} ({o.src_host}) -> rank {o.dst} ({o.dst_host})"
            )
            lines.append(
                f"  {o.test:9} {ends}: {fmt.format(o.value)} {unit} (median {fmt.format(o.median)}, score {o.score:g})"
            )
    else:
        lines.append(f"no outliers (no link's modified z-score beyond {THRESHOLD:g}, none {FACTOR:g}x slower)")
    if findings.slowest is not None:
        slow = findings.slowest
        lines.append(
            f"slowest link: {endpoint_label(slow, 'src', by)} -> {endpoint_label(slow, 'dst', by)}: "
            f"{slow['algbw_gbps']:.3g} GB/s, {slow['time_us']:.1f} us per {slow['size_bytes']} B message"
        )
    hosts = {str(r[f"{end}_host"]) for r in records for end in ("src", "dst")}
    if findings.outliers and len(hosts) > 1:
        names = " and ".join(findings.nodes)
        lines.append(
            f"node most often involved: {names} ({findings.node_count} of {len(findings.outliers)} outliers"
            f"{' each' if len(findings.nodes) > 1 else ''})"
        )
    if findings.outliers and by == "rank":
        names = " and ".join(str(r) for r in findings.ranks)
        lines.append(
            f"rank most often involved: {names} ({findings.rank_count} of {len(findings.outliers)} outliers"
            f"{' each' if len(findings.ranks) > 1 else ''})"
        )
    return lines


def print_report(records: Sequence[Mapping[str, Any]], findings: Findings, by: str, out: TextIO) -> None:
    """Print the matrices (or the slowest links) and the findings to ``out``."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    flagged = {(o.test, o.src, o.dst) for o in findings.outliers}
    ends: dict[int, str] = {}  # rich markup: a host name from a file is text, not tags
    for record in records:
        for end in ("src", "dst"):
            ends[int(record[end])] = escape(endpoint_label(record, end, by)) if by == "node" else str(record[end])
    order = sorted(ends)
    width = min(400, max(100, 24 + 10 * len(order)))
    console = Console(file=out, width=width, highlight=False, soft_wrap=False)
    for matrix in pair_matrix.TESTS:
        test, key, unit, fmt = matrix.name, matrix.key, matrix.unit, matrix.fmt
        found = pair_matrix.cells(records, matrix)
        chosen = list(found.values())
        if not chosen:
            continue
        if len(order) > MAX_MATRIX:
            _print_slowest(console, chosen, test, key, unit, fmt, flagged, by)
            continue
        size = chosen[0]["size_bytes"]
        out.write(f"{test}: {key} ({unit}) of {size} B messages, sender (row) -> receiver (column)\n")
        table = Table()
        table.add_column("from \\ to")
        for column in order:
            table.add_column(ends[column], justify="right")
        cells = {(int(src), int(dst)): r for (src, dst), r in found.items()}
        for src in order:
            row = []
            for dst in order:
                cell = cells.get((src, dst))
                if cell is None:
                    row.append("-" if src == dst else "")
                    continue
                text = fmt.format(float(cell[key]))
                row.append(f"[bold red]{text}*[/]" if (test, src, dst) in flagged else text)
            table.add_row(ends[src], *row)
        console.print(table)
    for line in findings_lines(records, findings, by):
        out.write(line + "\n")


def _print_slowest(
    console: Any,
    chosen: Sequence[Mapping[str, Any]],
    test: str,
    key: str,
    unit: str,
    fmt: str,
    flagged: set[tuple[str, int, int]],
    by: str,
) -> None:
    from rich.markup import escape
    from rich.table import Table

    worst = sorted(chosen, key=lambda r: float(r[key]), reverse=test == "latency")[:SLOWEST_SHOWN]
    console.file.write(f"{test}: the {len(worst)} slowest of {len(chosen)} directions\n")
    table = Table()
    for name in ("from", "to", f"{key} ({unit})"):
        table.add_column(name)
    for record in worst:
        text = fmt.format(float(record[key]))
        flag = (test, int(record["src"]), int(record["dst"])) in flagged
        ends = (escape(endpoint_label(record, end, by)) for end in ("src", "dst"))
        table.add_row(*ends, f"{text}*" if flag else text)
    console.print(table)
