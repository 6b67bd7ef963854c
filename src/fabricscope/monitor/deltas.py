"""From two snapshots to rates: deltas on the monotonic clock, counter wraps and resets, ports that come and go.

A counter that went down either wrapped (it was in the top quarter of a 32-
or 64-bit range and is now in the bottom quarter: the delta goes through the
top) or was reset (a driver reload, a device re-created: the new value is the
delta, as Prometheus' ``rate`` assumes).  The IB error counters never wrap:
they stop at their maximum (:data:`~fabricscope.monitor.samplers.RDMA_SATURATING_BITS`),
after which they count nothing.  Each of these, and each port that appears or
vanishes, is said once in :class:`~fabricscope.monitor.samples.Notes`.

:class:`Tracker` also keeps running totals that only grow (wraps and resets
folded in), which is what the Prometheus exporter publishes as ``_total``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricscope.monitor.samplers import RDMA_SATURATING_BITS
from fabricscope.monitor.samples import Counter, CounterSource, Link, Notes, Port, Snapshot

__all__ = [
    "RDMA_BYTES_PER_UNIT",
    "Interval",
    "PortRates",
    "Reading",
    "TcpRates",
    "Tracker",
    "classify",
    "counter_delta",
]

RDMA_BYTES_PER_UNIT = 4
"""``port_xmit_data``/``port_rcv_data`` count 4-byte words ("octets divided by 4", sysfs-class-infiniband)."""

_NET_ERRORS = frozenset(
    (
        "rx_errors",
        "rx_dropped",
        "rx_fifo_errors",
        "rx_frame_errors",
        "tx_errors",
        "tx_dropped",
        "tx_fifo_errors",
        "tx_carrier_errors",
        "carrier_changes",
    )
)
_RDMA_HW_ERRORS = frozenset(
    (
        "out_of_sequence",
        "packet_seq_err",
        "local_ack_timeout_err",
        "rnr_nak_retry_err",
        "out_of_buffer",
        "roce_adp_retrans",
        "roce_adp_retrans_to",
        "req_cqe_error",
        "resp_cqe_error",
        "req_remote_access_errors",
        "resp_remote_access_errors",
        "req_remote_invalid_request",
        "resp_local_length_error",
        "implied_nak_seq_err",
        "duplicate_request",
    )
)
_RDMA_HW_CONGESTION = frozenset(("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "rp_cnp_ignored"))
_BYTES = {
    "net": ("rx_bytes", "tx_bytes", 1),
    "rdma": ("port_rcv_data", "port_xmit_data", RDMA_BYTES_PER_UNIT),
}
"""Per port kind: the received and transmitted data counters and the bytes one unit of them is."""


def classify(kind: str, counter: Counter) -> str:
    """What a counter of a ``kind`` port measures: ``data``, ``error``, ``congestion`` or ``other``."""
    name = counter.name
    if counter.source is CounterSource.ETHTOOL:
        return "congestion" if "pause" in name or "marked" in name else "error"
    if counter.source is CounterSource.HW:
        if kind != "rdma":
            return "other"
        return "congestion" if name in _RDMA_HW_CONGESTION else "error" if name in _RDMA_HW_ERRORS else "other"
    if counter.source is not CounterSource.KERNEL:
        return "other"
    if kind in _BYTES and name in _BYTES[kind][:2]:
        return "data"
    if kind == "rdma" and name == "port_xmit_wait":
        return "congestion"
    if (kind == "net" and name in _NET_ERRORS) or (kind == "rdma" and name in RDMA_SATURATING_BITS):
        return "error"
    return "other"


def counter_delta(previous: int, current: int) -> tuple[int, str | None]:
    """The increase from ``previous`` to ``current``, and ``"wrap"`` or ``"reset"`` when it went down."""
    if current >= previous:
        return current - previous, None
    for bits in (32, 64):
        top = 1 << bits
        if top * 3 // 4 <= previous < top and current < top // 4:
            return current + top - previous, "wrap"
    return current, "reset"


@dataclass(slots=True)
class PortRates:
    """One network interface or RDMA port over one interval."""

    port: Port
    link: Link | None
    rx_bytes: int | None
    tx_bytes: int | None
    dt_s: float
    errors: dict[str, int] = field(default_factory=dict)
    """Error counters that increased, by kernel name, with their increase."""
    congestion: dict[str, int] = field(default_factory=dict)
    """Congestion signals that increased (pause/PFC frames, ``port_xmit_wait`` ticks, CNPs)."""

    @property
    def rx_bps(self) -> float | None:
        """Received bits per second."""
        return None if self.rx_bytes is None else self.rx_bytes * 8 / self.dt_s

    @property
    def tx_bps(self) -> float | None:
        return None if self.tx_bytes is None else self.tx_bytes * 8 / self.dt_s

    @property
    def utilization(self) -> float | None:
        """The busier direction's share of the line rate (0..1, more if the speed file lies); None if unknown."""
        speed = self.link.speed_bps if self.link else None
        rates = [r for r in (self.rx_bps, self.tx_bps) if r is not None]
        if not speed or not rates:
            return None
        return max(rates) / speed


@dataclass(slots=True)
class TcpRates:
    """The host's TCP over one interval."""

    out_segs: int
    retrans_segs: int
    timeouts: int | None
    listen_drops: int | None

    @property
    def retrans_ratio(self) -> float | None:
        """Retransmitted over sent segments (``RetransSegs/OutSegs``), None when nothing was sent."""
        return self.retrans_segs / self.out_segs if self.out_segs > 0 else None


@dataclass(slots=True)
class Interval:
    """What happened between two snapshots."""

    start_s: float
    end_s: float
    wall_time: float
    """``time.time()`` at the end of the interval."""
    ports: dict[Port, PortRates]
    tcp: TcpRates | None
    gpus: dict[Port, dict[str, float]]
    """Per GPU: ``utilization_pct``, ``pcie_tx_kBps``..., and ``nvlink_tx_kib_per_s`` from counter deltas."""

    @property
    def dt_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class Reading:
    """What the monitor knows after a sample: what the Prometheus exporter publishes."""

    totals: dict[tuple[Port, Counter], int]
    """Running totals that only grow (wraps and resets folded in)."""
    links: dict[Port, Link]
    gauges: dict[tuple[Port, str], float]
    interval: Interval | None
    """The interval the sample closed; None for the first."""
    wall_time: float
    """``time.time()`` of the sample."""


class Tracker:
    """Feeds on snapshots; gives an :class:`Interval` for each one after the first."""

    __slots__ = ("_gone", "_previous", "latest", "notes", "totals")

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self._previous: Snapshot | None = None
        self._gone: set[Port] = set()
        self.totals: dict[tuple[Port, Counter], int] = {}
        """Running totals that only grow, by counter: the first value seen plus every increase since."""
        self.latest: Snapshot | None = None

    def update(self, snap: Snapshot) -> Interval | None:
        previous, self._previous, self.latest = self._previous, snap, snap
        self._presence(previous, snap)
        deltas = self._deltas(previous, snap)
        if previous is None:
            return None
        dt = snap.time_s - previous.time_s
        if dt <= 0:  # the monotonic clock cannot go back; two passes at one instant: nothing to rate
            return None
        return Interval(
            start_s=previous.time_s,
            end_s=snap.time_s,
            wall_time=snap.wall_time,
            ports=_port_rates(snap, deltas, dt),
            tcp=_tcp_rates(deltas),
            gpus=_gpu_rates(snap, deltas, dt),
        )

    def reading(self, interval: Interval | None) -> Reading | None:
        """The state after the latest snapshot and the ``interval`` it closed; None before any snapshot."""
        latest = self.latest
        if latest is None:
            return None
        return Reading(
            totals=dict(self.totals),
            links=dict(latest.links),
            gauges=dict(latest.gauges),
            interval=interval,
            wall_time=latest.wall_time,
        )

    def _presence(self, previous: Snapshot | None, snap: Snapshot) -> None:
        now = {port for port, _ in snap.counters} | set(snap.links)
        if previous is None:
            return
        before = {port for port, _ in previous.counters} | set(previous.links)
        gone = before - now
        for port in sorted(gone):
            self._gone.add(port)
            self.notes.once(f"vanished:{port}", f"{port.label} vanished; its rates stop here")
        if gone:  # the exporter stops publishing it; back again, it starts from its new values
            self.totals = {key: value for key, value in self.totals.items() if key[0] not in gone}
        for port in sorted(now - before):
            again = " again" if port in self._gone else ""
            self.notes.once(f"appeared:{port}:{again}", f"{port.label} appeared{again}; its rates start here")

    def _deltas(self, previous: Snapshot | None, snap: Snapshot) -> dict[tuple[Port, Counter], int]:
        deltas: dict[tuple[Port, Counter], int] = {}
        for key, value in snap.counters.items():
            port, counter = key
            name = str(counter)
            kernel = counter.source is CounterSource.KERNEL
            bits = RDMA_SATURATING_BITS.get(counter.name) if port.kind == "rdma" and kernel else None
            if bits is not None and value >= (1 << bits) - 1:
                self.notes.once(
                    f"saturated:{key}",
                    f"{port.label} {name} is at its {bits}-bit maximum and counts no more: "
                    "reset it (perfquery -x -R) to see new errors",
                )
            before = previous.counters.get(key) if previous is not None else None
            if before is None:
                self.totals.setdefault(key, value)
                continue
            delta, event = counter_delta(before, value)
            if event == "wrap":
                self.notes.once(f"wrap:{key}", f"{port.label} {name} wrapped around; its increase counts the wrap")
            elif event == "reset":
                self.notes.once(f"reset:{key}", f"{port.label} {name} went back (a reset); counted again from zero")
            deltas[key] = delta
            self.totals[key] = self.totals.get(key, before) + delta
        return deltas


def _port_rates(snap: Snapshot, deltas: dict[tuple[Port, Counter], int], dt: float) -> dict[Port, PortRates]:
    rates: dict[Port, PortRates] = {}
    for port in sorted({p for p, _ in snap.counters if p.kind in _BYTES} | {p for p in snap.links if p.kind in _BYTES}):
        rx_name, tx_name, unit = _BYTES[port.kind]
        rx = deltas.get((port, Counter(rx_name)))
        tx = deltas.get((port, Counter(tx_name)))
        rates[port] = PortRates(
            port=port,
            link=snap.links.get(port),
            rx_bytes=None if rx is None else rx * unit,
            tx_bytes=None if tx is None else tx * unit,
            dt_s=dt,
        )
    for (port, counter), delta in sorted(deltas.items()):
        if delta <= 0 or port not in rates:
            continue
        kind = classify(port.kind, counter)
        if kind == "error":
            rates[port].errors[str(counter)] = delta
        elif kind == "congestion":
            rates[port].congestion[str(counter)] = delta
    return rates


def _tcp_rates(deltas: dict[tuple[Port, Counter], int]) -> TcpRates | None:
    tcp = Port("tcp")
    out = deltas.get((tcp, Counter("OutSegs")))
    retrans = deltas.get((tcp, Counter("RetransSegs")))
    if out is None or retrans is None:
        return None
    return TcpRates(
        out_segs=out,
        retrans_segs=retrans,
        timeouts=deltas.get((tcp, Counter("TCPTimeouts"))),
        listen_drops=deltas.get((tcp, Counter("ListenDrops"))),
    )


def _gpu_rates(snap: Snapshot, deltas: dict[tuple[Port, Counter], int], dt: float) -> dict[Port, dict[str, float]]:
    gpus: dict[Port, dict[str, float]] = {}
    for (port, name), value in snap.gauges.items():
        if port.kind == "gpu":
            gpus.setdefault(port, {})[name] = value
    for (port, counter), delta in deltas.items():
        if port.kind == "gpu":
            gpus.setdefault(port, {})[f"{counter.name}_per_s"] = delta / dt
    return gpus
