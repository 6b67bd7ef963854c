"""The time series as records, and what they add up to: per-port figures and a one-line verdict.

Records are plain dicts (the rows of a ``monitor`` Result and of a
recording), so a summary is computed the same way from a live run and from a
recording loaded later.  Link rates are in bits per second, as NIC speeds
are quoted (``gbit_per_s`` = 1e9 bit/s); byte counts are bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fabricscope.monitor.deltas import Interval

__all__ = ["BUSY", "RETRANS_RATIO", "Summary", "interval_records", "verdict"]

BUSY = 0.8
"""Share of line rate above which a link counts as busy for the verdict."""
BUSY_TIME = 0.5
"""Share of the time a link must be busy for the job to be called network-bound."""
RETRANS_RATIO = 1e-3
"""TCP retransmission ratio above which the network is called unhealthy (as the alert rule's default)."""


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def interval_records(interval: Interval, start_s: float) -> list[dict[str, Any]]:
    """One record per port, one for TCP and one per GPU, for ``interval`` (``t_s`` counts from ``start_s``)."""
    t_s = round(interval.end_s - start_s, 6)
    stamp = datetime.fromtimestamp(interval.wall_time, UTC).isoformat(timespec="milliseconds")
    common = {"t_s": t_s, "dt_s": round(interval.dt_s, 6), "time": stamp}
    records: list[dict[str, Any]] = []
    for port, rates in interval.ports.items():
        link = rates.link
        records.append(
            {
                **common,
                "kind": port.kind,
                "device": port.device,
                "port": port.port,
                "label": port.label,
                "rx_bytes": rates.rx_bytes,
                "tx_bytes": rates.tx_bytes,
                "rx_gbit_per_s": _round(None if rates.rx_bps is None else rates.rx_bps / 1e9),
                "tx_gbit_per_s": _round(None if rates.tx_bps is None else rates.tx_bps / 1e9),
                "link_speed_gbit_per_s": _round(link.speed_bps / 1e9 if link and link.speed_bps else None),
                "link_up": link.up if link else None,
                "link_state": link.state if link else None,
                "utilization": _round(rates.utilization),
                "errors": dict(rates.errors),
                "congestion": dict(rates.congestion),
            }
        )
    if interval.tcp is not None:
        tcp = interval.tcp
        records.append(
            {
                **common,
                "kind": "tcp",
                "label": "tcp",
                "out_segs": tcp.out_segs,
                "retrans_segs": tcp.retrans_segs,
                "retrans_ratio": _round(tcp.retrans_ratio, 9),
                "timeouts": tcp.timeouts,
                "listen_drops": tcp.listen_drops,
            }
        )
    for port, values in interval.gpus.items():
        records.append({**common, "kind": "gpu", "device": port.device, "label": port.label, **values})
    return records


@dataclass(slots=True)
class _PortTotals:
    label: str
    kind: str
    time_s: float = 0.0
    rx_bytes: int = 0
    tx_bytes: int = 0
    peak_rx_bps: float = 0.0
    peak_tx_bps: float = 0.0
    speed_bps: float | None = None
    utilization_time: float = 0.0
    """Seconds weighted by utilization (its integral), for the time-weighted mean."""
    known_time_s: float = 0.0
    """Seconds in which the utilization was known."""
    peak_utilization: float | None = None
    busy_time_s: float = 0.0
    was_up: bool = False
    down_time_s: float = 0.0
    """Seconds down after having been up (a port down from the start is unused, not failing)."""
    errors: dict[str, int] = field(default_factory=dict)
    congestion: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        seconds = self.time_s or 1.0
        return {
            "label": self.label,
            "kind": self.kind,
            "seconds": round(self.time_s, 3),
            "rx_bytes": self.rx_bytes,
            "tx_bytes": self.tx_bytes,
            "rx_gbit_per_s_mean": round(self.rx_bytes * 8 / seconds / 1e9, 6),
            "tx_gbit_per_s_mean": round(self.tx_bytes * 8 / seconds / 1e9, 6),
            "rx_gbit_per_s_peak": round(self.peak_rx_bps / 1e9, 6),
            "tx_gbit_per_s_peak": round(self.peak_tx_bps / 1e9, 6),
            "link_speed_gbit_per_s": _round(self.speed_bps / 1e9 if self.speed_bps else None),
            "utilization_mean": _round(self.utilization_time / self.known_time_s if self.known_time_s else None),
            "utilization_peak": _round(self.peak_utilization),
            "busy_fraction": _round(self.busy_time_s / self.known_time_s if self.known_time_s else None),
            "down_seconds": round(self.down_time_s, 3),
            "errors": dict(sorted(self.errors.items())),
            "congestion": dict(sorted(self.congestion.items())),
        }


class Summary:
    """Adds up records as they come; :meth:`to_dict` gives the summary of a ``monitor`` Result."""

    __slots__ = ("_gpu", "_ports", "_tcp", "intervals", "seconds")

    def __init__(self) -> None:
        self._ports: dict[str, _PortTotals] = {}
        self._tcp = {"out_segs": 0, "retrans_segs": 0, "timeouts": 0, "listen_drops": 0}
        self._gpu: dict[str, list[float]] = {}
        self.intervals = 0
        self.seconds = 0.0

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Add one interval's records (:func:`interval_records`)."""
        counted = False
        for record in records:
            kind = record.get("kind")
            dt = float(record.get("dt_s") or 0.0)
            if not counted and dt > 0:
                self.intervals += 1
                self.seconds += dt
                counted = True
            if kind in ("net", "rdma"):
                self._add_port(record, dt)
            elif kind == "tcp":
                for key in self._tcp:
                    self._tcp[key] += int(record.get(key) or 0)
            elif kind == "gpu" and record.get("utilization_pct") is not None:
                self._gpu.setdefault(str(record.get("label")), []).append(float(record["utilization_pct"]))

    def _add_port(self, record: dict[str, Any], dt: float) -> None:
        label = str(record.get("label"))
        totals = self._ports.setdefault(label, _PortTotals(label=label, kind=str(record.get("kind"))))
        totals.time_s += dt
        totals.rx_bytes += int(record.get("rx_bytes") or 0)
        totals.tx_bytes += int(record.get("tx_bytes") or 0)
        totals.peak_rx_bps = max(totals.peak_rx_bps, float(record.get("rx_gbit_per_s") or 0) * 1e9)
        totals.peak_tx_bps = max(totals.peak_tx_bps, float(record.get("tx_gbit_per_s") or 0) * 1e9)
        speed = record.get("link_speed_gbit_per_s")
        if speed:
            totals.speed_bps = float(speed) * 1e9
        utilization = record.get("utilization")
        if utilization is not None:
            totals.known_time_s += dt
            totals.utilization_time += float(utilization) * dt
            totals.peak_utilization = max(totals.peak_utilization or 0.0, float(utilization))
            if utilization >= BUSY:
                totals.busy_time_s += dt
        if record.get("link_up") is True:
            totals.was_up = True
        elif record.get("link_up") is False and totals.was_up:
            totals.down_time_s += dt
        for group in ("errors", "congestion"):
            target = getattr(totals, group)
            for name, delta in (record.get(group) or {}).items():
                target[name] = target.get(name, 0) + int(delta)

    def to_dict(self) -> dict[str, Any]:
        ports = [p.to_dict() for p in sorted(self._ports.values(), key=lambda p: (p.kind != "rdma", p.label))]
        tcp: dict[str, Any] = dict(self._tcp)
        tcp["retrans_ratio"] = _round(tcp["retrans_segs"] / tcp["out_segs"] if tcp["out_segs"] else None, 9)
        gpus = {
            label: {"utilization_pct_mean": round(sum(v) / len(v), 2), "utilization_pct_peak": max(v)}
            for label, v in sorted(self._gpu.items())
        }
        summary: dict[str, Any] = {
            "intervals": self.intervals,
            "seconds": round(self.seconds, 3),
            "ports": ports,
            "tcp": tcp,
            "gpus": gpus,
        }
        summary.update(verdict(summary))
        return summary


def verdict(summary: dict[str, Any]) -> dict[str, str]:
    """``{"verdict": one line, "bound": ..., "health": ...}`` for a summary's ports and TCP figures.

    ``bound`` is ``network-bound`` (a link at :data:`BUSY` or more of line rate for
    at least :data:`BUSY_TIME` of the time), ``network-bound at times``, ``not
    network-bound``, or ``unknown`` when no link that moved data has a known speed.
    """
    ports = [p for p in summary["ports"] if p["rx_bytes"] or p["tx_bytes"]]
    known = [p for p in ports if p["utilization_mean"] is not None]
    if known:
        top = max(known, key=lambda p: (p["busy_fraction"] or 0, p["utilization_mean"]))
        mean, peak, busy = top["utilization_mean"], top["utilization_peak"] or 0.0, top["busy_fraction"] or 0.0
        where = f"{top['label']} ({top['link_speed_gbit_per_s']:g} Gb/s)"
        if busy >= BUSY_TIME:
            bound = "network-bound"
            line = (
                f"{where} ran at {mean:.0%} of line rate on average, at {BUSY:.0%} or more for {busy:.0%} "
                "of the time: this job is network-bound"
            )
        elif peak >= BUSY:
            bound = "network-bound at times"
            line = (
                f"{where} ran at {mean:.0%} of line rate on average, {peak:.0%} at peak, busy {busy:.0%} "
                "of the time: network-bound in bursts"
            )
        else:
            bound = "not network-bound"
            line = f"the network ran at {mean:.0%} of line rate on average, {peak:.0%} at peak ({where}): "
            line += "this job is not network-bound"
    elif ports:
        top = max(ports, key=lambda p: p["rx_bytes"] + p["tx_bytes"])
        bound = "unknown"
        rate = max(top["rx_gbit_per_s_mean"], top["tx_gbit_per_s_mean"])
        peak_rate = max(top["rx_gbit_per_s_peak"], top["tx_gbit_per_s_peak"])
        line = (
            f"busiest link {top['label']} moved {rate:.3g} Gb/s on average, {peak_rate:.3g} at peak, but its "
            "line rate is unknown: cannot tell whether this job is network-bound"
        )
    else:
        bound = "unknown"
        line = "no interface moved data: not network-bound, or nothing was sampled"
    problems = _problems(summary)
    health = "problems" if problems else "ok"
    if problems:
        line += "; unhealthy: " + ", ".join(problems)
    return {"verdict": line, "bound": bound, "health": health}


def _problems(summary: dict[str, Any]) -> list[str]:
    problems = []
    ratio = summary["tcp"].get("retrans_ratio")
    if ratio is not None and ratio > RETRANS_RATIO:
        problems.append(f"TCP retransmission ratio {ratio:.2%}")
    for port in summary["ports"]:
        if port["errors"]:
            total = sum(port["errors"].values())
            names = ", ".join(sorted(port["errors"]))
            problems.append(f"{total} errors on {port['label']} ({names})")
        if port["down_seconds"]:
            problems.append(f"{port['label']} down for {port['down_seconds']:g} s")
    return problems
