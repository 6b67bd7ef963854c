"""The one-line verdict from the summary of a run, for each kind of run."""

from __future__ import annotations

from typing import Any

import pytest

from fabricscope.monitor.summary import Summary


def rows(utilizations: list[float], *, speed: float | None = 200.0, errors: int = 0) -> list[list[dict[str, Any]]]:
    """One interval per value: a 200G port at that share of its line rate for one second."""
    out = []
    for i, share in enumerate(utilizations):
        rate = share * (speed or 100.0)
        out.append(
            [
                {
                    "t_s": i + 1.0, "dt_s": 1.0, "kind": "rdma", "label": "mlx5_0/1",
                    "rx_bytes": int(rate * 1e9 / 8), "tx_bytes": 0, "rx_gbit_per_s": rate, "tx_gbit_per_s": 0.0,
                    "link_speed_gbit_per_s": speed, "link_up": True,
                    "utilization": share if speed else None,
                    "errors": {"symbol_error": errors} if errors and i == 0 else {}, "congestion": {},
                },
                {"t_s": i + 1.0, "dt_s": 1.0, "kind": "tcp", "out_segs": 1000, "retrans_segs": 0},
            ]
        )  # fmt: skip
    return out


def summarize(intervals: list[list[dict[str, Any]]]) -> dict[str, Any]:
    summary = Summary()
    for records in intervals:
        summary.add(records)
    return summary.to_dict()


@pytest.mark.parametrize(
    ("shares", "bound", "start"),
    [
        ([0.95, 0.93, 0.91, 0.2], "network-bound", "mlx5_0/1 (200 Gb/s) ran at 75% of line rate on average, at 80%"),
        ([0.1, 0.9, 0.1, 0.1], "network-bound at times", "mlx5_0/1 (200 Gb/s) ran at 30% of line rate on average, 90%"),
        ([0.1, 0.31, 0.05, 0.02], "not network-bound", "the network ran at 12% of line rate on average, 31% at peak"),
    ],
)
def test_bound(shares: list[float], bound: str, start: str) -> None:
    summary = summarize(rows(shares))
    assert summary["bound"] == bound
    assert summary["verdict"].startswith(start), summary["verdict"]
    assert summary["health"] == "ok" and "unhealthy" not in summary["verdict"]


def test_unknown_line_rate_and_errors() -> None:
    summary = summarize(rows([0.5, 0.5], speed=None, errors=4))
    assert summary["bound"] == "unknown" and "line rate is unknown" in summary["verdict"]
    assert summary["verdict"].endswith("; unhealthy: 4 errors on mlx5_0/1 (symbol_error)")


def test_nothing_moved() -> None:
    assert summarize([])["verdict"] == "no interface moved data: not network-bound, or nothing was sampled"
