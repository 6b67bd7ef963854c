"""``--serve HOST:PORT``: a Prometheus exporter on ``/metrics``, built on prometheus-client.

Names never clash with node_exporter's: every one starts with
``fabricscope_``, counters end in ``_total``, units are in the names
(``_bytes_total``, ``_bytes_per_second``, ``_ratio``: Prometheus' base unit is the byte, so
``promtool check metrics`` has nothing to say), and labels carry the
device and port (``device="mlx5_0", port="1"``).  Counters are the monitor's
running totals (:attr:`~fabricscope.monitor.deltas.Tracker.totals`), so a
kernel counter that wraps or resets still only grows here.  The gauges the
alert rules use (line-rate share, retransmission ratio, link up) come from the
last interval.  A scrape reads nothing from the system: it formats the last
sample, so scraping often costs little and never races the sampler.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from fabricscope.errors import InvalidValue
from fabricscope.monitor.deltas import RDMA_BYTES_PER_UNIT, Interval, Reading
from fabricscope.monitor.samplers import RDMA_SATURATING_BITS
from fabricscope.monitor.samples import Counter, CounterSource, Port
from fabricscope.outputs import atomic_write_text
from fabricscope.units import is_digits

__all__ = ["DEFAULT_HOST", "Exporter", "parse_serve"]

DEFAULT_HOST = "127.0.0.1"
"""Where ``--serve PORT`` binds: this machine only, unless an address is given."""

_NET = {
    "rx_bytes": ("net_receive_bytes", "Bytes received (/proc/net/dev)."),
    "tx_bytes": ("net_transmit_bytes", "Bytes sent (/proc/net/dev)."),
    "rx_packets": ("net_receive_packets", "Packets received."),
    "tx_packets": ("net_transmit_packets", "Packets sent."),
    "rx_errors": ("net_receive_errors", "Receive errors."),
    "tx_errors": ("net_transmit_errors", "Transmit errors."),
    "rx_dropped": ("net_receive_drops", "Received packets dropped."),
    "tx_dropped": ("net_transmit_drops", "Packets dropped on transmit."),
    "carrier_changes": ("net_carrier_changes", "Link carrier changes (flaps), /sys/class/net/<if>/carrier_changes."),
}
_TCP = {
    "OutSegs": ("tcp_sent_segments", "TCP segments sent (Tcp: OutSegs)."),
    "RetransSegs": ("tcp_retransmitted_segments", "TCP segments retransmitted (Tcp: RetransSegs)."),
    "InSegs": ("tcp_received_segments", "TCP segments received (Tcp: InSegs)."),
    "InErrs": ("tcp_receive_errors", "TCP segments received in error (Tcp: InErrs)."),
    "OutRsts": ("tcp_sent_resets", "TCP resets sent (Tcp: OutRsts)."),
    "TCPTimeouts": ("tcp_timeouts", "TCP retransmission timeouts (TcpExt: TCPTimeouts)."),
    "ListenDrops": ("tcp_listen_drops", "Connections dropped at listen (TcpExt: ListenDrops)."),
    "ListenOverflows": ("tcp_listen_overflows", "Listen queue overflows (TcpExt: ListenOverflows)."),
}
_RDMA = {
    "port_xmit_data": ("rdma_transmit_bytes", "Bytes sent by the RDMA port (port_xmit_data x 4)."),
    "port_rcv_data": ("rdma_receive_bytes", "Bytes received by the RDMA port (port_rcv_data x 4)."),
    "port_xmit_packets": ("rdma_transmit_packets", "Packets sent by the RDMA port."),
    "port_rcv_packets": ("rdma_receive_packets", "Packets received by the RDMA port."),
    "port_xmit_wait": ("rdma_transmit_wait_ticks", "Ticks with data queued but not sent (congestion)."),
}


def parse_serve(text: str) -> tuple[str, int]:
    """``PORT``, ``:PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port); the host defaults to 127.0.0.1."""
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "", value
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise InvalidValue(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:19400", key="serve")
    if not is_digits(port_text) or len(port_text) > 5 or int(port_text) > 65535:
        raise InvalidValue(
            f"{text!r}: the port must be a whole number from 0 to 65535 (e.g. 19400 or HOST:19400)", key="serve"
        )
    return host or DEFAULT_HOST, int(port_text)


class _Collector:
    """A prometheus-client custom collector: the metric families of the latest reading.

    The families are built once per sample (:meth:`set_state`), not once per
    scrape, so many scrapers cost formatting only.
    """

    def __init__(self) -> None:
        self.families: list[Any] = []

    def describe(self) -> list[Any]:
        return []  # no collect() at registration; the state is not there yet

    def collect(self) -> Iterator[Any]:
        yield from self.families  # one reference read: a sample swapping the list mid-scrape is harmless

    def set_state(self, reading: Reading, notes: int) -> None:
        self.families = _families(reading, notes)


def _families(state: Reading, notes: int) -> list[Any]:
    """Every metric family for one reading and the number of notes so far."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: dict[str, Any] = {}

    def family(kind: type, name: str, doc: str, labels: list[str]) -> Any:
        full = f"fabricscope_{name}"
        if full not in families:
            families[full] = kind(full, doc, labels=labels)
        return families[full]

    for (port, counter), total in sorted(state.totals.items()):
        _counter(family, CounterMetricFamily, port, counter, total)
    for port, link in sorted(state.links.items()):
        labels, values = _labels(port)
        if link.speed_bps:
            family(
                GaugeMetricFamily, f"{port.kind}_link_speed_bytes_per_second", "Line rate in bytes per second.", labels
            ).add_metric(values, link.speed_bps / 8)
        if link.up is not None:
            name = "rdma_port_up" if port.kind == "rdma" else "net_link_up"
            doc = "1 when the port is ACTIVE and LinkUp." if port.kind == "rdma" else "1 when the link is up."
            family(GaugeMetricFamily, name, doc, labels).add_metric(values, 1.0 if link.up else 0.0)
    if state.interval is not None:
        _interval_gauges(family, GaugeMetricFamily, state.interval)
    for (port, name), value in sorted(state.gauges.items()):
        if port.kind == "gpu" and name == "utilization_pct":
            family(GaugeMetricFamily, "gpu_utilization_ratio", "GPU busy share (NVML).", ["gpu"]).add_metric(
                [port.device], value / 100
            )
        elif port.kind == "gpu" and name in ("pcie_tx_kBps", "pcie_rx_kBps"):
            direction = "transmit" if "tx" in name else "receive"
            family(
                GaugeMetricFamily,
                f"gpu_pcie_{direction}_bytes_per_second",
                "PCIe throughput (NVML, KiB/s x 1024).",
                ["gpu"],
            ).add_metric([port.device], value * 1024)
    family(CounterMetricFamily, "monitor_notes", "Problems the monitor noted (each once).", []).add_metric([], notes)
    family(
        GaugeMetricFamily, "monitor_last_sample_timestamp_seconds", "When the last sample was taken.", []
    ).add_metric([], state.wall_time)
    return list(families.values())


def _labels(port: Port) -> tuple[list[str], list[str]]:
    if port.kind == "rdma":
        return ["device", "port"], [port.device, port.port]
    if port.kind == "gpu":
        return ["gpu"], [port.device]
    if port.kind == "net":
        return ["device"], [port.device]
    return [], []


def _counter(family: Any, kind: type, port: Port, counter: Counter, value: int) -> None:
    labels, values = _labels(port)
    name = counter.name
    kernel = counter.source is CounterSource.KERNEL
    if port.kind == "net" and kernel and name in _NET:
        metric, doc = _NET[name]
        family(kind, metric, doc, labels).add_metric(values, value)
    elif port.kind == "net" and counter.source is CounterSource.ETHTOOL:
        family(
            kind,
            "net_ethtool_stat",
            "ethtool -S counters: pause/PFC frames, discards (units as the driver's).",
            [*labels, "stat"],
        ).add_metric([*values, name], value)
    elif port.kind == "tcp" and kernel and name in _TCP:
        metric, doc = _TCP[name]
        family(kind, metric, doc, []).add_metric([], value)
    elif port.kind == "rdma" and kernel and name in _RDMA:
        metric, doc = _RDMA[name]
        scale = RDMA_BYTES_PER_UNIT if name in ("port_xmit_data", "port_rcv_data") else 1
        family(kind, metric, doc, labels).add_metric(values, value * scale)
    elif port.kind == "rdma" and kernel and name in RDMA_SATURATING_BITS:
        family(
            kind, "rdma_port_errors", "RDMA port error counters (counters/), by kernel name.", [*labels, "counter"]
        ).add_metric([*values, name], value)
    elif port.kind == "rdma" and counter.source is CounterSource.HW:
        family(
            kind,
            "rdma_hw_counter",
            "RDMA vendor counters (hw_counters/): CNPs, out-of-sequence, retransmissions.",
            [*labels, "counter"],
        ).add_metric([*values, name], value)
    elif port.kind == "gpu" and counter.source is CounterSource.NVML and name in ("nvlink_tx_kib", "nvlink_rx_kib"):
        direction = "transmit" if "tx" in name else "receive"
        family(kind, f"gpu_nvlink_{direction}_bytes", "NVLink data (NVML throughput counters).", labels).add_metric(
            values, value * 1024
        )


def _interval_gauges(family: Any, kind: type, interval: Interval) -> None:
    for port, rates in interval.ports.items():
        labels, values = _labels(port)
        for direction, bps in (("receive", rates.rx_bps), ("transmit", rates.tx_bps)):
            if bps is not None:
                family(
                    kind, f"{port.kind}_{direction}_bytes_per_second", "Rate over the last interval (bytes/s).", labels
                ).add_metric(values, bps / 8)
        if rates.utilization is not None:
            family(
                kind, f"{port.kind}_utilization_ratio", "Busier direction's share of line rate, last interval.", labels
            ).add_metric(values, rates.utilization)
    tcp = interval.tcp
    if tcp is not None and tcp.retrans_ratio is not None:
        family(kind, "tcp_retransmission_ratio", "RetransSegs/OutSegs over the last interval.", []).add_metric(
            [], tcp.retrans_ratio
        )


def _make_server(host: str, port: int, family: int, app: Any) -> Any:
    """A threading WSGI server for ``app`` on (host, port), with a listen backlog that fits many scrapers."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = family
        request_queue_size = 128
        """socketserver's default backlog of 5 drops the SYNs of 20 concurrent scrapers: 1 s retransmits."""

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """No line on stderr per scrape."""

    return make_server(host, port, app, Server, handler_class=Quiet)


TEXTFILE_NAME = "fabricscope.prom"
"""The file ``--textfile DIR`` keeps in DIR, for node_exporter's textfile collector (it reads ``*.prom``)."""


class TextfileWriter:
    """``--textfile DIR``: the metric families of each interval written to ``DIR/fabricscope.prom`` for
    node_exporter's textfile collector (``--collector.textfile.directory``), atomically (a temporary file in
    DIR renamed over it, so the collector never reads half a file): sites that run node_exporter add the
    RDMA, ethtool and TCP series without a second daemon or port."""

    __slots__ = ("_collector", "_registry", "path")

    def __init__(self, folder: str) -> None:
        from prometheus_client import CollectorRegistry

        self.path = os.path.join(folder, TEXTFILE_NAME)
        self._registry = CollectorRegistry(auto_describe=False)
        self._collector = _Collector()
        self._registry.register(self._collector)

    def update(self, reading: Reading, notes: int) -> None:
        """Write ``reading`` (raises RunError when the file cannot be written)."""
        from prometheus_client import generate_latest

        self._collector.set_state(reading, notes)
        atomic_write_text(self.path, generate_latest(self._registry).decode("utf-8"))


class Exporter:
    """A running ``/metrics`` endpoint; :meth:`update` after each interval, :meth:`close` at the end."""

    __slots__ = ("_collector", "_server", "_thread", "host", "port")

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        self._collector = _Collector()
        registry.register(self._collector)
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except (socket.gaierror, UnicodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise InvalidValue(f"{host}:{port}: cannot resolve {host!r} ({why})", key="serve") from None
        try:
            self._server = _make_server(host, port, family, make_wsgi_app(registry))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidValue(f"{host}:{port}: port {port} is in use; pick another port", key="serve") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise InvalidValue(f"{host}:{port}: {host} is not an address of this machine", key="serve") from None
            raise InvalidValue(f"{host}:{port}: cannot listen ({exc.strerror or exc})", key="serve") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="fabricscope-exporter", daemon=True)
        self._thread.start()
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def update(self, reading: Reading, notes: int) -> None:
        """Publish ``reading`` (and the count of notes so far) to the next scrapes."""
        self._collector.set_state(reading, notes)

    def close(self) -> None:
        done = threading.Event()

        def stop() -> None:
            self._server.shutdown()
            done.set()

        threading.Thread(target=stop, daemon=True).start()
        done.wait(5)
        self._server.server_close()
