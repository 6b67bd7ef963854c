"""The report's plots, drawn with matplotlib's Agg backend (no display, no network).

Each function takes Results (or their records) and returns :class:`Plot`
objects: a name for files, a title, and the matplotlib figure.  What a plot
needs from a record is what every producer writes: collective rows
(``op, size_bytes, placement, time_us, busbw_gbps``), estimate records with a
``breakdown``, pair records with ``src, dst, algbw_gbps``, monitor records with
``t_s, label, rx_gbit_per_s, tx_gbit_per_s``.
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricscope import pair_matrix
from fabricscope.results import Result

__all__ = [
    "SMALL_BYTES",
    "Plot",
    "Series",
    "breakdown_plot",
    "busbw_plots",
    "compare_plots",
    "dataload_plot",
    "heatmap_plots",
    "latency_plots",
    "svg_of",
    "timeseries_plot",
]

SMALL_BYTES = 64 * 1024
"""Largest size on the small-message latency plot."""
MAX_RATE = 1e15
"""Highest read rate drawn, bytes/s (a petabyte a second): past it a value in a file is not a measurement."""
MAX_TICKS = 48
"""Most rank labels a heatmap axis carries (every k-th rank beyond)."""
MAX_CELLS = 1000
"""Most cells a heatmap side draws: past it each cell is the worst link of a block of ranks."""

_STYLES = {"run": "-", "baseline": "--", "prediction": ":"}


@dataclass(frozen=True, slots=True)
class Series:
    """One line family on the collective plots."""

    label: str
    result: Result
    role: str = "run"
    """``run``, ``baseline`` or ``prediction`` (line style and legend)."""


@dataclass(frozen=True, slots=True)
class Plot:
    name: str
    """File-safe name, for ``--png DIR``."""
    title: str
    figure: Any
    """A matplotlib Figure."""


def _figure(width: float, height: float) -> tuple[Any, Any]:
    """A figure and its axes, outside pyplot: nothing global holds it (no open-figure count to
    warn about, however many plots a report has); it is freed with the report."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    return figure, figure.subplots()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "plot"


def svg_of(figure: Any) -> str:
    """The figure as an ``<svg>`` element to inline in HTML (no XML prolog, DOCTYPE or metadata links)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _collective(records: Iterable[Any]) -> list[Mapping[str, Any]]:
    keep = []
    for r in records:
        if isinstance(r, Mapping) and all(k in r for k in ("op", "size_bytes", "time_us", "busbw_gbps")):
            number = r["busbw_gbps"]
            if isinstance(number, int | float) and math.isfinite(number) and int(r["size_bytes"]) > 0:
                keep.append(r)
    return keep


def _line(records: Sequence[Mapping[str, Any]], op: str, field: str) -> tuple[list[int], list[float]]:
    """One curve per op: the most common datatype and reduction, out-of-place (in-place when only that)."""
    sizes, values, _ = _placed_line(records, op, field)
    return sizes, values


def _placed_line(records: Sequence[Mapping[str, Any]], op: str, field: str) -> tuple[list[int], list[float], str]:
    """:func:`_line` and the placement it drew (``out`` or ``in``)."""
    mine = [r for r in records if r["op"] == op]
    if not mine:
        return [], [], "out"
    dtype, redop = Counter((r.get("dtype"), r.get("redop")) for r in mine).most_common(1)[0][0]
    mine = [r for r in mine if (r.get("dtype"), r.get("redop")) == (dtype, redop)]
    placement = "out" if any(r.get("placement") == "out" for r in mine) else "in"
    points: dict[int, list[float]] = {}
    for r in mine:
        value = r.get(field)
        if r.get("placement", "out") == placement and isinstance(value, int | float) and math.isfinite(value):
            points.setdefault(int(r["size_bytes"]), []).append(float(value))
    sizes = sorted(points)
    return sizes, [sum(points[s]) / len(points[s]) for s in sizes], placement


SIZE_TICKS = 8
"""Most sizes a narrow size axis labels (every k-th drawn size beyond)."""


def _size_axis(axes: Any) -> None:
    """A log2 size axis over the lines drawn so far, labelled in binary K/M/G at the powers of 4 where it
    spans two of them or more (its 2^odd ticks unlabelled); a narrower one, where a power of 4 may not
    fall at all, is labelled at the sizes drawn (at most :data:`SIZE_TICKS` of them)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    from fabricscope.units import format_size

    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(int(x)) if x >= 1 else ""))
    axes.xaxis.set_minor_formatter(NullFormatter())
    low, high = axes.get_xlim()
    if low > 0 and high / low >= 16:
        axes.xaxis.set_major_locator(LogLocator(base=4))
    else:
        # Lines on the data's own coordinates (not axhline's, whose x runs 0 to 1 across the axes).
        drawn = {
            float(x)
            for line in axes.get_lines()
            if line.get_transform() is axes.transData
            for x in line.get_xdata()
            if x >= 1
        }
        sizes = sorted(drawn)
        step = max(1, math.ceil(len(sizes) / SIZE_TICKS))
        axes.xaxis.set_major_locator(FixedLocator(sizes[::step]))
    axes.set_xlabel("message size (bytes, binary K/M/G)")
    axes.grid(True, which="major", alpha=0.3)


def _log_y(axes: Any) -> None:
    """A log y axis over the lines drawn so far.  Where it spans two decades or more (two of them
    labelled, at least), the decades alone carry ticks, labelled in one notation (0.01, 1, 1000 within
    0.001-100000, else 1e-5, 1e3): matplotlib's default adds eight minor ticks a decade and writes labels
    as TeX, over half of a report's drawing time.  A narrower axis keeps the default, whose minor ticks
    carry its labels."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    axes.set_yscale("log")
    low, high = axes.get_ylim()
    if low > 0 and high / low >= 100:
        # One notation on an axis: plain where every decade reads short (0.001 to 100000), else 1e-5, 1e3.
        plain = low >= 1e-3 and high < 1e6
        axes.yaxis.set_major_formatter(
            FuncFormatter(lambda y, _: "" if y <= 0 else f"{y:g}" if plain else f"1e{round(math.log10(y))}")
        )
        axes.yaxis.set_minor_locator(NullLocator())


def _draw(axes: Any, series: Series, sizes: Sequence[int], values: Sequence[float]) -> None:
    # A series of one size is a point: a marker, or a baseline or prediction line would not show at all.
    marker = "o" if len(sizes) == 1 else ("." if series.role == "run" else None)
    axes.plot(sizes, values, _STYLES.get(series.role, "-"), marker=marker, label=series.label)


def busbw_plots(series: Sequence[Series], *, peak_gbps: float | None = None) -> list[Plot]:
    """busbw against size, one plot per op, every run (and the baseline and prediction) on it."""
    ops = list(dict.fromkeys(str(r["op"]) for s in series if s.role == "run" for r in _collective(s.result.records)))
    plots = []
    for op in ops:
        figure, axes = _figure(8, 4.5)
        for s in series:
            sizes, values, placement = _placed_line(_collective(s.result.records), op, "busbw_gbps")
            if sizes:
                # A series of one size is a point: a marker, or it would not show at all.
                marker = "o" if len(sizes) == 1 else ("." if s.role == "run" else None)
                label = f"{s.label} ({placement}-of-place)" if s.role != "prediction" else s.label
                axes.plot(sizes, values, _STYLES.get(s.role, "-"), marker=marker, label=label)
        if peak_gbps:
            axes.axhline(peak_gbps, color="tab:red", linewidth=1, label=f"theoretical peak {peak_gbps:.3g} GB/s")
        _size_axis(axes)
        # Log busbw, as nccl-tests users plot a sweep: a CPU run at 0.01 GB/s stays visible under a
        # prediction or a peak at hundreds (a linear axis scaled to the highest line flattens it to zero).
        if any(v > 0 for line in axes.get_lines() for v in line.get_ydata()):
            _log_y(axes)
        axes.set_ylabel("busbw (GB/s, 1e9 B/s, log)")
        axes.set_title(f"{op}: bus bandwidth")
        axes.legend(fontsize="small")
        plots.append(Plot(name=f"busbw-{_slug(op)}", title=f"{op}: busbw against size", figure=figure))
    return plots


def latency_plots(series: Sequence[Series]) -> list[Plot]:
    """Time of small messages (up to 64K), where latency, not bandwidth, decides."""
    ops = list(dict.fromkeys(str(r["op"]) for s in series if s.role == "run" for r in _collective(s.result.records)))
    plots = []
    for op in ops:
        lines = []
        for s in series:
            small = [r for r in _collective(s.result.records) if int(r["size_bytes"]) <= SMALL_BYTES]
            sizes, values = _line(small, op, "time_us")
            if sizes:
                lines.append((s, sizes, values))
        if not any(s.role == "run" for s, _, _ in lines):
            continue
        figure, axes = _figure(8, 4)
        for s, sizes, values in lines:
            _draw(axes, s, sizes, values)
        _size_axis(axes)
        _log_y(axes)
        axes.set_ylabel("time (us)")
        axes.set_title(f"{op}: small-message latency (up to 64K)")
        axes.legend(fontsize="small")
        plots.append(Plot(name=f"latency-{_slug(op)}", title=f"{op}: small-message latency", figure=figure))
    return plots


def breakdown_plot(results: Sequence[tuple[str, Result]]) -> Plot | None:
    """The step-time breakdown of estimate results, one stacked bar each."""
    bars = []
    for label, result in results:
        for record in result.records:
            breakdown = record.get("breakdown") if isinstance(record, Mapping) else None
            if isinstance(breakdown, Mapping):
                parts = {str(k): float(v) for k, v in breakdown.items() if isinstance(v, int | float) and v > 0}
                if parts:
                    bars.append((label, parts))
    if not bars:
        return None
    figure, axes = _figure(8, 1.2 + 0.6 * len(bars))
    names = list(dict.fromkeys(k for _, parts in bars for k in parts))
    from matplotlib import colormaps

    colors = colormaps["tab20"](range(20))
    for row, (_, parts) in enumerate(bars):
        left = 0.0
        for index, name in enumerate(names):
            width = parts.get(name, 0.0)
            axes.barh(row, width, left=left, color=colors[index % len(colors)], label=name if row == 0 else None)
            left += width
    axes.set_yticks(range(len(bars)), [label for label, _ in bars])
    axes.set_xlabel("seconds per training step")
    axes.set_title("estimate: where a step's time goes")
    axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4)
    return Plot(name="step-breakdown", title="step-time breakdown", figure=figure)


def heatmap_plots(label: str, result: Result) -> list[Plot]:
    """The bandwidth matrix and the latency matrix of a pairs result, each from its own records
    (:func:`fabricscope.pair_matrix.cells`, the cells ``pairs`` prints)."""
    plots = []
    for test in pair_matrix.TESTS:
        cells = {pair: float(r[test.key]) for pair, r in pair_matrix.cells(result.records, test).items()}
        if cells:
            plots.append(_heatmap(label, test, cells))
    return plots


def _worst_of_blocks(grid: np.ndarray, k: int, *, low_is_worse: bool) -> np.ndarray:
    """``grid`` in blocks of ``k`` x ``k`` cells, each the worst of its block (NaN where it has none)."""
    n = grid.shape[0]
    m = -(-n // k)
    padded = np.full((m * k, m * k), np.nan)
    padded[:n, :n] = grid
    blocks = padded.reshape(m, k, m, k).transpose(0, 2, 1, 3).reshape(m, m, k * k)
    found = ~np.isnan(blocks).all(axis=2)
    worst = np.full((m, m), np.nan)
    filled = np.where(np.isnan(blocks), np.inf if low_is_worse else -np.inf, blocks)
    pick = filled.min(axis=2) if low_is_worse else filled.max(axis=2)
    worst[found] = pick[found]
    return worst


def _heatmap(label: str, test: pair_matrix.MatrixTest, cells: Mapping[tuple[Any, Any], float]) -> Plot:
    names = sorted({k for pair in cells for k in pair}, key=lambda n: (str(type(n)), n))
    index = {n: i for i, n in enumerate(names)}
    grid = np.full((len(names), len(names)), np.nan)
    for (src, dst), value in cells.items():
        grid[index[src], index[dst]] = value
    # Past MAX_CELLS ranks a side, a cell stands for a block of ranks and shows its worst link: a picture
    # of 4,000 ranks is drawn at about a thousand pixels, where one slow link would be averaged away.
    block = max(1, math.ceil(len(names) / MAX_CELLS))
    if block > 1:
        grid = _worst_of_blocks(grid, block, low_is_worse=test.name == "bandwidth")
    size = min(10.0, 3.0 + 0.4 * len(names))
    figure, axes = _figure(size + 1.5, size)
    # Brighter is better in both: the latency matrix runs its colours the other way.
    image = axes.imshow(grid, cmap="viridis" if test.name == "bandwidth" else "viridis_r", interpolation="nearest")
    figure.colorbar(image, ax=axes, label=test.label)
    # At most MAX_TICKS labels an axis: every one of 600 (or 4,000) ranks would be unreadable, and laying
    # them out was most of the report's time on a large pairs result.
    every = max(1, math.ceil(grid.shape[0] / MAX_TICKS))
    ticks = range(0, grid.shape[0], every)
    axes.set_xticks(ticks, [str(names[i * block]) for i in ticks], rotation=90 if len(ticks) > 8 else 0)
    axes.set_yticks(ticks, [str(names[i * block]) for i in ticks])
    blocks = f" (each cell the worst of {block} x {block} ranks)" if block > 1 else ""
    axes.set_xlabel("destination" + blocks)
    axes.set_ylabel("source")
    if len(names) <= 12:
        for (src, dst), value in cells.items():
            axes.text(
                index[dst], index[src], test.fmt.format(value), ha="center", va="center", color="white", fontsize=8
            )
    axes.set_title(f"{label}: {test.name} of every pair ({test.unit})")
    suffix = "" if test.name == "bandwidth" else "-latency"
    return Plot(name=f"pairs-{_slug(label)}{suffix}", title=f"{label}: pairwise {test.name}", figure=figure)


def timeseries_plot(label: str, result: Result) -> Plot | None:
    """Receive and transmit rates over time of each port a monitor result recorded."""
    lines: dict[str, tuple[list[float], list[float]]] = {}
    for record in result.records:
        if not isinstance(record, Mapping) or not isinstance(record.get("t_s"), int | float):
            continue
        for field in ("rx_gbit_per_s", "tx_gbit_per_s"):
            value = record.get(field)
            if isinstance(value, int | float) and math.isfinite(value):
                key = f"{record.get('label') or record.get('device') or '?'} {field.split('_')[0]}"
                xs, ys = lines.setdefault(key, ([], []))
                xs.append(float(record["t_s"]))
                ys.append(float(value))
    if not lines:
        return None
    figure, axes = _figure(8, 4)
    for key, (xs, ys) in sorted(lines.items()):
        axes.plot(xs, ys, "-" if key.endswith("rx") else "--", label=key)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("Gbit/s")
    axes.set_title(f"{label}: traffic per port")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", ncol=2)
    return Plot(name=f"monitor-{_slug(label)}", title=f"{label}: traffic over time", figure=figure)


_VERDICT_COLOURS = {"regressed": "tab:red", "improved": "tab:green"}


def compare_plots(label: str, result: Result) -> list[Plot]:
    """A compare result, one plot per op: how much worse (+) or better (-) each size got against the
    reference, in percent, the tolerance band shaded, regressions red and improvements green (each
    row's own verdict, as ``compare`` printed it)."""
    rows = [
        r
        for r in result.records
        if isinstance(r, Mapping)
        and isinstance(r.get("change"), int | float)
        and math.isfinite(100.0 * r["change"])
        and isinstance(r.get("size_bytes"), int)
        and r["size_bytes"] > 0
    ]
    config = result.config if isinstance(result.config, Mapping) else {}
    tolerance = config.get("tolerance")
    plots = []
    from fabricscope.store.compare import worse_by

    for op in dict.fromkeys(str(r.get("op")) for r in rows):
        figure, axes = _figure(8, 4)
        # One line per placement, of the op's most common datatype and reduction (as the busbw plots).
        ops_rows = [r for r in rows if r.get("op") == op]
        kind = Counter(_kind(r) for r in ops_rows).most_common(1)[0][0]
        for placement, style in (("out", "-"), ("in", ":")):
            mine = sorted((r for r in ops_rows if r.get("placement") == placement and _kind(r) == kind), key=_size_key)
            if not mine:
                continue
            sizes = [int(r["size_bytes"]) for r in mine]
            worse = [100.0 * worse_by(str(r.get("metric")), r["change"]) for r in mine]  # worse is up
            axes.plot(sizes, worse, style, color="tab:blue", label=f"{placement}-of-place")
            for verdict, colour in _VERDICT_COLOURS.items():
                points = [(s, w) for s, w, r in zip(sizes, worse, mine, strict=True) if r.get("verdict") == verdict]
                if points:
                    xs, ys = zip(*points, strict=True)
                    axes.plot(xs, ys, "o", color=colour, label=f"{verdict} ({placement})")
        if isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance > 0:
            axes.axhspan(-100 * tolerance, 100 * tolerance, color="tab:gray", alpha=0.15, label="within tolerance")
        axes.axhline(0.0, color="black", linewidth=0.8)
        _size_axis(axes)
        axes.set_ylabel("worse than the reference (%)")
        axes.set_title(f"{label}: {op} against {config.get('reference', 'the reference')}")
        axes.legend(fontsize="small")
        plots.append(Plot(name=f"compare-{_slug(label)}-{_slug(op)}", title=f"{label}: {op} change", figure=figure))
    return plots


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _rate(value: Any) -> float | None:
    """A read rate a file holds, in bytes/s, when it is one that can be drawn (0 to :data:`MAX_RATE`)."""
    return float(value) if _number(value) and 0 <= value <= MAX_RATE else None


def _kind(record: Mapping[str, Any]) -> tuple[str, str]:
    """A compare row's datatype and reduction, as text (a file may hold anything there)."""
    return str(record.get("dtype")), str(record.get("redop"))


def _size_key(record: Mapping[str, Any]) -> int:
    return int(record["size_bytes"])


def dataload_plot(label: str, result: Result) -> Plot | None:
    """A dataload result: the read rate of each pass (MB/s), and the rate training needs where the
    run was given one."""
    rates = [
        (r["pass"] if _whole(r.get("pass")) else i + 1, float(r["bytes_per_s"]))
        for i, r in enumerate(result.records)
        if isinstance(r, Mapping) and _rate(r.get("bytes_per_s")) is not None
    ]
    if not rates:
        return None
    summary = result.summary if isinstance(result.summary, Mapping) else {}
    verdict = summary.get("verdict") if isinstance(summary.get("verdict"), Mapping) else None
    figure, axes = _figure(8, 4)
    passes = [p for p, _ in rates]
    axes.bar(range(len(rates)), [v / 1e6 for _, v in rates], color="tab:blue", label="read rate")
    axes.set_xticks(range(len(rates)), [str(p) for p in passes])
    overall = _rate(summary.get("bytes_per_s"))
    if overall is not None:
        whole = f"whole run {overall / 1e6:.4g} MB/s"
        axes.axhline(overall / 1e6, color="tab:blue", linestyle="--", linewidth=1, label=whole)
    need = _rate(verdict.get("needed_bytes_per_s")) if verdict is not None else None
    if verdict is not None and need is not None and need > 0:
        colour = "tab:red" if verdict.get("starves") else "tab:green"
        axes.axhline(need / 1e6, color=colour, linewidth=1.5, label=f"training needs {need / 1e6:.4g} MB/s")
    heights = [v for _, v in rates] + [line.get_ydata()[0] * 1e6 for line in axes.get_lines()]
    spread = max(heights) / max(min(h for h in heights if h > 0), 1e-300) if any(h > 0 for h in heights) else 1.0
    # A need hundreds of times the rate (or below it) would flatten the bars: log, as the busbw plots.
    log = spread > 20
    if log:
        _log_y(axes)
    axes.set_xlabel("pass over the dataset")
    axes.set_ylabel("MB/s (1e6 bytes per second" + (", log)" if log else ")"))
    axes.set_title(f"{label}: read rate per pass")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize="small")
    return Plot(name=f"dataload-{_slug(label)}", title=f"{label}: data loading rate", figure=figure)
