"""The report's log axes carry readable labels whatever range they span.

A wide axis (two decades of y, two powers of 4 of size or more) is labelled at
its decades in plain numbers, with no minor ticks (matplotlib's TeX labels
and minor ticks were over half of a report's drawing time); a narrow one keeps
matplotlib's default, whose minor ticks carry the labels.  Either way every
plot shows labelled ticks inside its view.
"""

from __future__ import annotations

from typing import Any

import pytest

from fabricscope.report import plots
from fabricscope.results import Result


def _record(size: int, busbw: float, time_us: float) -> dict[str, Any]:
    return {
        "op": "all_reduce",
        "size_bytes": size,
        "placement": "out",
        "time_us": time_us,
        "busbw_gbps": busbw,
        "dtype": "float",
        "redop": "sum",
    }


def _labels(axes: Any, axis: str) -> list[str]:
    """The tick labels drawn inside the view of ``axis`` (``x`` or ``y``), major and minor."""
    owner = axes.xaxis if axis == "x" else axes.yaxis
    low, high = sorted(axes.get_xlim() if axis == "x" else axes.get_ylim())
    shown = []
    for which in ("major", "minor"):
        for tick in owner.get_ticklabels(which=which):
            where = tick.get_position()[0 if axis == "x" else 1]
            if tick.get_text() and low <= where <= high:
                shown.append(tick.get_text())
    return shown


def _drawn(records: list[dict[str, Any]]) -> list[plots.Plot]:
    result = Result(kind="bench", config={}, records=records, summary={}, host={}, env={})
    series = [plots.Series("run", result)]
    drawn = plots.busbw_plots(series) + plots.latency_plots(series)
    for plot in drawn:
        plots.svg_of(plot.figure)  # lays the ticks out as the report does
    return drawn


def _one_notation(labels: list[str]) -> bool:
    """Decade labels all plain (0.01, 100) or all powers of ten (1e-5, 1e3), not a mix."""
    powers = [text.startswith("1e") for text in labels]
    return all(powers) or not any(powers)


@pytest.mark.parametrize(
    ("low", "expected"),
    [(0.01, {"0.1", "1", "10", "100"}), (1e-6, {"1e-5", "1e-4", "1e-3"})],
    ids=["plain", "powers-of-ten"],
)
def test_a_wide_sweep_is_labelled_at_its_decades_in_one_notation(low: float, expected: set[str]) -> None:
    drawn = _drawn([_record(8 << i, low * 2**i, 5.0 * 1.5**i) for i in range(15)])
    assert [p.name for p in drawn] == ["busbw-all_reduce", "latency-all_reduce"]
    for plot in drawn:
        axes = plot.figure.axes[0]
        for axis in ("x", "y"):
            labels = _labels(axes, axis)
            assert len(labels) >= 2 and not any("$" in text for text in labels), (plot.name, axis, labels)
        assert _one_notation(_labels(axes, "y")), _labels(axes, "y")
        assert not axes.yaxis.get_minorticklocs().size, plot.name
    busbw = _labels(drawn[0].figure.axes[0], "y")
    assert expected <= set(busbw), busbw


def test_a_size_axis_narrower_than_a_power_of_4_is_labelled_at_its_sizes() -> None:
    """6K to 12K holds no power of 4: the sizes drawn carry the labels (none showed before)."""
    drawn = _drawn([_record(6 << 10, 0.5, 30.0), _record(12 << 10, 0.7, 40.0)])
    for plot in drawn:
        assert _labels(plot.figure.axes[0], "x") == ["6K", "12K"], plot.name
    many = _drawn([_record((1 << 20) + i * 4096, 1.0 + i / 100, 50.0 + i) for i in range(60)])
    labels = _labels(many[0].figure.axes[0], "x")
    assert 2 <= len(labels) <= plots.SIZE_TICKS and labels[0] == "1M", labels


@pytest.mark.parametrize(
    "records",
    [
        [_record(1 << 20, 1.2, 900.0), _record(2 << 20, 1.5, 1500.0), _record(4 << 20, 1.7, 2600.0)],
        [_record(32 << 10, 0.8, 40.0)],
        [_record(16 << 10, 0.5, 30.0), _record(32 << 10, 0.6, 50.0)],
    ],
    ids=["a-factor-of-1.4", "one-size", "two-sizes"],
)
def test_a_narrow_range_still_shows_labelled_ticks(records: list[dict[str, Any]]) -> None:
    for plot in _drawn(records):
        axes = plot.figure.axes[0]
        for axis in ("x", "y"):
            assert _labels(axes, axis), (plot.name, axis)


def test_a_dataload_plot_on_a_log_axis_is_labelled() -> None:
    records = [{"pass": i + 1, "bytes_per_s": rate} for i, rate in enumerate((2e6, 3e6, 2.5e6))]
    summary = {"bytes_per_s": 2.4e6, "verdict": {"needed_bytes_per_s": 5e9, "starves": True}}
    plot = plots.dataload_plot("nfs", Result(kind="dataload", config={}, records=records, summary=summary))
    assert plot is not None
    plots.svg_of(plot.figure)
    axes = plot.figure.axes[0]
    assert axes.get_yscale() == "log"
    labels = _labels(axes, "y")
    assert len(labels) >= 2 and not any("$" in text for text in labels), labels
