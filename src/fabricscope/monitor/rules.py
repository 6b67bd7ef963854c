"""``monitor --alert-rules``: a Prometheus alerting-rules file for the exporter's metrics.

Conditions (thresholds from :class:`AlertThresholds`, set by flags):

- TCP retransmission ratio above ``retrans_ratio`` (default 1e-3) over ``window``;
- any increase of an RDMA port error counter, a RoCE error counter, or a NIC
  error/drop counter over ``window``; any carrier change (a flap);
- an RDMA port not ACTIVE/LinkUp, or a NIC link that was up in the last hour and is down now;
- a NIC or RDMA port above ``utilization`` of its line rate for ``for_`` (default 5 minutes).

Rules format: https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/ .
The text is YAML written directly (strings quoted as JSON, which YAML reads
unchanged), so no YAML library is needed; ``promtool check rules`` accepts it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from fabricscope.errors import UsageError

__all__ = ["RECORDING_RULES", "AlertThresholds", "alert_rules", "promql_duration", "recording_rules"]

_HW_ERRORS = "out_of_sequence|packet_seq_err|local_ack_timeout_err|rnr_nak_retry_err|out_of_buffer|roce_adp_retrans"


def promql_duration(seconds: float) -> str:
    """Seconds as a PromQL duration (``300`` -> ``5m``, ``90`` -> ``90s``, ``0.5`` -> ``500ms``)."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertThresholds:
    """The alert conditions' numbers."""

    retrans_ratio: float = 1e-3
    """TCP RetransSegs/OutSegs above which to alert."""
    utilization: float = 0.9
    """Share of line rate (0..1] above which a link is saturated."""
    for_s: float = 300.0
    """How long a saturated link must stay so before the alert fires."""
    window_s: float = 300.0
    """The range over which rates and increases are taken."""

    def __post_init__(self) -> None:
        if not (0 < self.retrans_ratio < 1) or not math.isfinite(self.retrans_ratio):
            raise UsageError(f"the retransmission ratio threshold must be between 0 and 1, got {self.retrans_ratio}")
        if not (0 < self.utilization <= 1):
            raise UsageError(f"the utilization threshold must be above 0 and at most 100%, got {self.utilization}")
        for name, value in (("for", self.for_s), ("window", self.window_s)):
            if not (0.001 <= value <= 86400 * 7) or not math.isfinite(value):
                raise UsageError(f"the alert {name} duration must be from 1 ms to 7 days, got {value} s")


def _utilization(kind: str, labels: tuple[str, ...], window: str) -> str:
    """The busier direction's rate (rx where it is above tx, else tx) over the line rate, from the byte counters."""
    rx, tx = (
        f"rate(fabricscope_{kind}_receive_bytes_total[{window}])",
        f"rate(fabricscope_{kind}_transmit_bytes_total[{window}])",
    )
    return f"({rx} > {tx} or {tx}) / on ({', '.join(labels)}) fabricscope_{kind}_link_speed_bytes_per_second"


def _rule(name: str, expr: str, for_: str | None, severity: str, summary: str, description: str) -> list[str]:
    lines = [f"      - alert: {name}", f"        expr: {json.dumps(expr)}"]
    if for_:
        lines.append(f"        for: {for_}")
    lines += [
        "        labels:",
        f"          severity: {severity}",
        "        annotations:",
        f"          summary: {json.dumps(summary)}",
        f"          description: {json.dumps(description)}",
    ]
    return lines


def alert_rules(t: AlertThresholds | None = None) -> str:
    """The rules file text."""
    t = t or AlertThresholds()
    window = promql_duration(t.window_s)
    for_ = promql_duration(t.for_s)
    pct = f"{t.utilization:.0%}"
    rules = [
        _rule(
            "FabricscopeTcpRetransmissionsHigh",
            f"rate(fabricscope_tcp_retransmitted_segments_total[{window}])"
            f" / rate(fabricscope_tcp_sent_segments_total[{window}]) > {t.retrans_ratio:g}",
            None,
            "warning",
            "TCP retransmission ratio above {} on {{{{ $labels.instance }}}}".format(f"{t.retrans_ratio:g}"),
            "{{ $value | humanizePercentage }} of TCP segments were retransmitted over the last " + window + ".",
        ),
        _rule(
            "FabricscopeRdmaPortErrors",
            f"increase(fabricscope_rdma_port_errors_total[{window}]) > 0",
            None,
            "critical",
            "RDMA {{ $labels.counter }} rising on {{ $labels.device }}/{{ $labels.port }}",
            "{{ $labels.counter }} grew by {{ $value }} over the last " + window + " on {{ $labels.instance }}.",
        ),
        _rule(
            "FabricscopeRdmaTransportErrors",
            f'increase(fabricscope_rdma_hw_counter_total{{counter=~"{_HW_ERRORS}"}}[{window}]) > 0',
            None,
            "warning",
            "RoCE {{ $labels.counter }} rising on {{ $labels.device }}/{{ $labels.port }}",
            "{{ $labels.counter }} grew by {{ $value }} over the last " + window + " on {{ $labels.instance }}.",
        ),
        _rule(
            "FabricscopeNicErrors",
            f"increase(fabricscope_net_receive_errors_total[{window}]) > 0"
            f" or increase(fabricscope_net_transmit_errors_total[{window}]) > 0"
            f" or increase(fabricscope_net_receive_drops_total[{window}]) > 0"
            f" or increase(fabricscope_net_transmit_drops_total[{window}]) > 0",
            None,
            "warning",
            "Errors or drops on {{ $labels.device }}",
            "{{ $labels.device }} on {{ $labels.instance }} counted {{ $value }} errors or drops over " + window + ".",
        ),
        _rule(
            "FabricscopeLinkFlapping",
            f"increase(fabricscope_net_carrier_changes_total[{window}]) > 0",
            None,
            "warning",
            "Link {{ $labels.device }} flapped",
            "{{ $labels.device }} on {{ $labels.instance }} changed carrier {{ $value }} times over " + window + ".",
        ),
        _rule(
            "FabricscopeRdmaPortDown",
            "fabricscope_rdma_port_up == 0",
            "1m",
            "critical",
            "RDMA port {{ $labels.device }}/{{ $labels.port }} is down",
            "{{ $labels.device }}/{{ $labels.port }} on {{ $labels.instance }} is not ACTIVE/LinkUp.",
        ),
        _rule(
            "FabricscopeLinkDown",
            "fabricscope_net_link_up == 0 and max_over_time(fabricscope_net_link_up[1h]) == 1",
            "1m",
            "critical",
            "Link {{ $labels.device }} went down",
            "{{ $labels.device }} on {{ $labels.instance }} was up in the last hour and is down now.",
        ),
        _rule(
            "FabricscopeLinkSaturated",
            # From the byte counters over the window, not the last interval's gauge: a burst between two
            # scrapes counts, as the recording rules count it.
            f"{_utilization('net', ('instance', 'device'), window)} > {t.utilization:g}"
            f" or {_utilization('rdma', ('instance', 'device', 'port'), window)} > {t.utilization:g}",
            for_,
            "info",
            "{{ $labels.device }} above " + pct + " of line rate for " + for_,
            "{{ $labels.device }} on {{ $labels.instance }} runs at {{ $value | humanizePercentage }} of its line "
            "rate: jobs on this node may be network-bound.",
        ),
    ]
    lines = [
        "# Prometheus alerting rules for fabricscope's exporter (fabricscope monitor --serve).",
        "# Load with rule_files: in prometheus.yml; check with: promtool check rules FILE",
        "groups:",
        "  - name: fabricscope",
        "    rules:",
    ]
    for rule in rules:
        lines += rule
    return "\n".join(lines) + "\n"


RECORDING_RULES: tuple[tuple[str, str], ...] = (
    # Throughput from the byte counters (rate(): every byte counts, whatever the scrape interval).
    ("fabricscope:net_receive_bytes:rate5m", "rate(fabricscope_net_receive_bytes_total[5m])"),
    ("fabricscope:net_transmit_bytes:rate5m", "rate(fabricscope_net_transmit_bytes_total[5m])"),
    ("fabricscope:rdma_receive_bytes:rate5m", "rate(fabricscope_rdma_receive_bytes_total[5m])"),
    ("fabricscope:rdma_transmit_bytes:rate5m", "rate(fabricscope_rdma_transmit_bytes_total[5m])"),
    # Per node, both directions: NICs and RDMA ports apart (RoCE's bytes may also be in its NIC's counters).
    (
        "fabricscope:node_net_bytes:rate5m",
        "sum by (instance) (rate(fabricscope_net_receive_bytes_total[5m]))"
        " + sum by (instance) (rate(fabricscope_net_transmit_bytes_total[5m]))",
    ),
    (
        "fabricscope:node_rdma_bytes:rate5m",
        "sum by (instance) (rate(fabricscope_rdma_receive_bytes_total[5m]))"
        " + sum by (instance) (rate(fabricscope_rdma_transmit_bytes_total[5m]))",
    ),
    # Utilization where the line rate is known: the busier direction (rx where it is above tx, else tx)
    # over the line rate.
    ("fabricscope:net_utilization:ratio5m", _utilization("net", ("instance", "device"), "5m")),
    ("fabricscope:rdma_utilization:ratio5m", _utilization("rdma", ("instance", "device", "port"), "5m")),
    # Errors and congestion.
    ("fabricscope:rdma_port_errors:increase5m", "increase(fabricscope_rdma_port_errors_total[5m])"),
    (
        "fabricscope:rdma_transport_events:rate5m",
        "rate(fabricscope_rdma_hw_counter_total"
        f'{{counter=~"{_HW_ERRORS}|np_cnp_sent|rp_cnp_handled|np_ecn_marked_roce_packets"}}[5m])',
    ),
    ("fabricscope:rdma_transmit_wait:rate5m", "rate(fabricscope_rdma_transmit_wait_ticks_total[5m])"),
    (
        "fabricscope:net_errors:increase5m",
        "increase(fabricscope_net_receive_errors_total[5m]) + increase(fabricscope_net_transmit_errors_total[5m])"
        " + increase(fabricscope_net_receive_drops_total[5m]) + increase(fabricscope_net_transmit_drops_total[5m])",
    ),
    (
        "fabricscope:tcp_retransmission:ratio5m",
        "rate(fabricscope_tcp_retransmitted_segments_total[5m]) / rate(fabricscope_tcp_sent_segments_total[5m])",
    ),
)
"""Recording rules ``level:metric:operations`` (Prometheus' naming practice), one home for the dashboard's queries."""


def recording_rules() -> str:
    """The recording-rules file text (``monitor --recording-rules``)."""
    lines = [
        "# Prometheus recording rules for fabricscope's exporter (fabricscope monitor --serve or --textfile).",
        "# Load with rule_files: in prometheus.yml; check with: promtool check rules FILE",
        "# The Grafana dashboard (fabricscope monitor --grafana-dashboard) plots these series.",
        "groups:",
        "  - name: fabricscope-recording",
        "    rules:",
    ]
    for name, expr in RECORDING_RULES:
        lines += [f"      - record: {name}", f"        expr: {json.dumps(expr)}"]
    return "\n".join(lines) + "\n"
