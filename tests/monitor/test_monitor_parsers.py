"""The counter parsers on files captured from a real machine, and on garbage."""

from __future__ import annotations

import pytest
from monitor_helpers import FIXTURES

from fabricscope.kernel_text import (
    NET_DEV_FIELDS,
    parse_counter,
    parse_ethtool_stats,
    parse_ib_rate,
    parse_ib_state,
    parse_net_dev,
    parse_net_speed,
    parse_proc_table,
)

CAPTURED = FIXTURES / "captured"


def test_proc_net_dev_as_captured() -> None:
    interfaces, bad = parse_net_dev((CAPTURED / "proc-net-dev").read_text())
    assert bad == []
    assert {"lo", "eth0"} <= set(interfaces)
    assert set(interfaces["lo"]) == set(NET_DEV_FIELDS)
    assert interfaces["lo"]["rx_bytes"] == interfaces["lo"]["tx_bytes"] > 0  # loopback: what goes out comes in


def test_proc_net_dev_skips_and_names_bad_lines() -> None:
    text = (CAPTURED / "proc-net-dev").read_text() + "  bad0: 1 2 3\nnocolon 1 2\n  big0: " + " ".join(["1" * 30] * 16)
    interfaces, bad = parse_net_dev(text)
    assert "bad0" not in interfaces and "big0" not in interfaces and "lo" in interfaces
    assert len(bad) == 3


def test_snmp_and_netstat_as_captured() -> None:
    snmp, bad = parse_proc_table((CAPTURED / "proc-net-snmp").read_text())
    assert bad == []
    assert snmp["Tcp"]["MaxConn"] == -1  # a signed field, as the kernel prints it
    assert snmp["Tcp"]["OutSegs"] > 0 and "RetransSegs" in snmp["Tcp"]
    netstat, bad = parse_proc_table((CAPTURED / "proc-net-netstat").read_text())
    assert bad == []
    assert {"TCPTimeouts", "ListenDrops", "TCPLostRetransmit"} <= set(netstat["TcpExt"])


def test_a_table_with_a_missing_value_line_or_other_lengths_is_reported() -> None:
    tables, bad = parse_proc_table("Tcp: A B C\nTcp: 1 2\nUdp: X\nIp: Y\nIp: 5\n")
    assert tables == {"Ip": {"Y": 5}}
    assert bad == ["Tcp: A B C", "Udp: X"]


def test_ethtool_mlx5_format() -> None:
    stats = parse_ethtool_stats((CAPTURED / "ethtool-S-mlx5").read_text())
    assert stats["rx_prio3_pause"] >= 0 and stats["link_down_events_phy"] == 1
    assert "NIC statistics" not in stats
    assert parse_ethtool_stats("NIC statistics:\n  weird: -1\n  ok: 7\n  : 3\n") == {"ok": 7}


@pytest.mark.parametrize(
    ("text", "value"),
    [("12\n", 12), ("18446744073709551615", (1 << 64) - 1), ("18446744073709551616", None), ("-1", None), ("", None)],
)
def test_counter_files(text: str, value: int | None) -> None:
    assert parse_counter(text) == value


def test_rdma_port_attributes() -> None:
    assert parse_ib_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_ib_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_ib_rate("garbage") is None
    assert parse_ib_state("4: ACTIVE\n") == (4, "ACTIVE")
    assert parse_ib_state("5: LinkUp") == (5, "LinkUp")
    assert parse_ib_state("ACTIVE") is None


def test_net_speed() -> None:
    assert parse_net_speed("200000\n") == 200000
    assert parse_net_speed("-1") is None  # unknown, as virtio says
    assert parse_net_speed("0") is None
    assert parse_net_speed("9" * 30) is None
