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


def test_loopback_and_virtual_interfaces_are_left_out_unless_asked_for(tmp_path) -> None:
    """Issue 24: lo and the software devices of containers and bridges double-count the NIC's bytes; they
    are left out by default (as node_exporter's netdev collector is commonly run), kept with
    ``--all-interfaces``, and an interface named with ``--interfaces`` is always watched."""
    from fabricscope.monitor.samplers import NetDevSampler
    from fabricscope.monitor.samples import Notes, Snapshot
    from fabricscope.sysroot import SysRoot

    (tmp_path / "proc" / "net").mkdir(parents=True)
    header = "Inter-|   Receive\n face |bytes    packets errs drop fifo frame compressed multicast|bytes\n"
    counters = " 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n"
    names = ["lo", "eth0", "ib0", "veth12ab", "docker0", "br-5f2", "cni0", "enp65s0f0np0"]
    (tmp_path / "proc" / "net" / "dev").write_text(header + "".join(f"{n:>6}:{counters}" for n in names))

    def watched(**kwargs: object) -> set[str]:
        snap = Snapshot(time_s=0.0, wall_time=0.0)
        NetDevSampler(SysRoot(str(tmp_path)), **kwargs).sample(snap, Notes())  # type: ignore[arg-type]
        return {port.device for port, _ in snap.counters}

    assert watched() == {"eth0", "ib0", "enp65s0f0np0"}
    assert watched(every=True) == set(names)
    assert watched(only=["lo", "eth0"]) == {"lo", "eth0"}
