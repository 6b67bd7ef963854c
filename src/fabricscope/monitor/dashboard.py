"""``monitor --grafana-dashboard``: a Grafana dashboard (JSON model) of the exporter's series.

Its panels plot the recording rules of :data:`fabricscope.monitor.rules.RECORDING_RULES` (throughput per
node and per port from ``rate()`` of the byte counters, utilization where the line rate is known, RDMA
errors and congestion, the TCP retransmission ratio) and list the firing alerts of ``--alert-rules``.
Every query is one of those rules' names, so the rules file and the dashboard cannot disagree; a test
has a real Prometheus evaluate each of them against a real exporter.
"""

from __future__ import annotations

from typing import Any

from fabricscope.monitor.rules import RECORDING_RULES

__all__ = ["PANELS", "grafana_dashboard"]

PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (title, unit, recorded series plotted)
    (
        "Throughput per node (NICs, RDMA ports)",
        "Bps",
        ("fabricscope:node_net_bytes:rate5m", "fabricscope:node_rdma_bytes:rate5m"),
    ),
    (
        "NIC throughput per port",
        "Bps",
        ("fabricscope:net_receive_bytes:rate5m", "fabricscope:net_transmit_bytes:rate5m"),
    ),
    (
        "RDMA throughput per port",
        "Bps",
        ("fabricscope:rdma_receive_bytes:rate5m", "fabricscope:rdma_transmit_bytes:rate5m"),
    ),
    (
        "Utilization of line rate (busier direction)",
        "percentunit",
        ("fabricscope:net_utilization:ratio5m", "fabricscope:rdma_utilization:ratio5m"),
    ),
    ("RDMA port errors (5m increase)", "short", ("fabricscope:rdma_port_errors:increase5m",)),
    (
        "RoCE congestion and transport events",
        "short",
        ("fabricscope:rdma_transport_events:rate5m", "fabricscope:rdma_transmit_wait:rate5m"),
    ),
    ("NIC errors and drops (5m increase)", "short", ("fabricscope:net_errors:increase5m",)),
    ("TCP retransmission ratio", "percentunit", ("fabricscope:tcp_retransmission:ratio5m",)),
)
"""The time-series panels: title, Grafana unit, and the recorded series each plots."""

_RECORDED = {name for name, _ in RECORDING_RULES}


def grafana_dashboard() -> dict[str, Any]:
    """The dashboard's JSON model (import it in Grafana: Dashboards -> New -> Import)."""
    panels: list[dict[str, Any]] = []
    for index, (title, unit, series) in enumerate(PANELS):
        missing = [s for s in series if s not in _RECORDED]
        if missing:  # a dashboard query that no rule records would plot nothing
            raise ValueError(f"panel {title!r} plots series no recording rule makes: {missing}")
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + k), "expr": f'{name}{{instance=~"$instance"}}', "legendFormat": ""}
                    for k, name in enumerate(series)
                ],
            }
        )
    panels.append(
        {
            "id": len(PANELS) + 1,
            "type": "alertlist",
            "title": "fabricscope alerts (monitor --alert-rules)",
            "gridPos": {"h": 8, "w": 24, "x": 0, "y": 8 * ((len(PANELS) + 1) // 2)},
            "options": {"alertName": "Fabricscope", "showOptions": "current", "maxItems": 50},
        }
    )
    return {
        "title": "fabricscope: cluster network",
        "uid": "fabricscope-network",
        "tags": ["fabricscope", "network", "rdma"],
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {
                    "name": "instance",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(fabricscope_monitor_last_sample_timestamp_seconds, instance)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": panels,
    }
