"""Checks of the node as a whole: unreadable files, and TCP tuning."""

from __future__ import annotations

import math

from fabricscope.doctor.checks.base import Check, compute, format_rate
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Node
from fabricscope.units import format_size

__all__ = ["ProbeRead", "TcpBuffers", "TcpCongestion", "TcpOptions", "tcp_buffer_needed"]

RTT_S = 0.5e-3
"""Round trip the TCP buffers must cover at line rate: a loaded data-centre fabric (a few switch hops and queues)."""
BUFFER_FLOOR = 4 << 20
"""Never ask for less: Linux's own default tcp_wmem maximum (4 MiB covers 64 Gb/s at :data:`RTT_S`)."""

GOOD_CONGESTION = ("cubic", "bbr", "bbr2", "dctcp", "htcp")
"""Congestion controls fit for high bandwidth-delay paths; reno and friends recover slowly."""
MAX_ANOMALIES = 40


class ProbeRead(Check):
    """Reports what the probes could not read or parse: a finding, never a crash."""

    id = "probe.read"
    title = "Every file the probes need is readable and holds what the kernel writes there"
    reads = "every file below"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        if not node.anomalies:
            return [self.finding(Severity.OK, node.root, f"{node.files_read} files read, all understood")]
        findings = [
            self.finding(
                Severity.WARN,
                anomaly.path,
                anomaly.problem,
                "readable, in the kernel's format",
                "run doctor as root, check the driver of this device (dmesg), or recapture the tree",
            )
            for anomaly in node.anomalies[:MAX_ANOMALIES]
        ]
        if len(node.anomalies) > MAX_ANOMALIES:
            findings.append(
                self.finding(Severity.INFO, node.root, f"{len(node.anomalies) - MAX_ANOMALIES} more files unreadable")
            )
        return findings


class TcpBuffers(Check):
    id = "tcp.buffers"
    title = "TCP autotuning maxima (tcp_rmem/tcp_wmem) allow fast sockets; core rmem/wmem_max reported"
    reads = "proc/sys/net/core/{rmem,wmem}_max, proc/sys/net/ipv4/tcp_{rmem,wmem}"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        floor, why = tcp_buffer_needed(node, expect)
        wanted = f">= {format_size(floor)} ({why})"
        tcp = node.tcp
        values = {
            "net.core.rmem_max": tcp.rmem_max,
            "net.core.wmem_max": tcp.wmem_max,
            "net.ipv4.tcp_rmem (max)": tcp.tcp_rmem[2] if tcp.tcp_rmem else None,
            "net.ipv4.tcp_wmem (max)": tcp.tcp_wmem[2] if tcp.tcp_wmem else None,
        }
        triples = {"net.ipv4.tcp_rmem": tcp.tcp_rmem, "net.ipv4.tcp_wmem": tcp.tcp_wmem}
        findings = []
        for name, value in values.items():
            # tcp_rmem/tcp_wmem bound autotuning, which every socket uses; the core maxima only bound
            # SO_RCVBUF/SO_SNDBUF requests.  With RDMA, TCP carries only bootstrap and gloo traffic.
            autotune = "tcp_" in name
            low = Severity.WARN if autotune and not node.ports else Severity.INFO
            if value is None:
                findings.append(self.finding(Severity.INFO, name, "unreadable", wanted))
            elif value < floor:
                sysctl = name.split(" ")[0]
                triple = triples.get(sysctl)
                fix = f"sysctl -w {sysctl}=" + (f"'{triple[0]} {triple[1]} {floor}'" if triple else str(floor))
                findings.append(
                    self.finding(
                        low,
                        name,
                        format_size(value),
                        wanted,
                        f"a TCP window this small caps each socket below line rate at fabric round trips: {fix}, "
                        "and persist it in /etc/sysctl.d/",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, name, format_size(value), wanted))
        return findings


def tcp_buffer_needed(node: Node, expect: Expectations) -> tuple[int, str]:
    """The TCP buffer maximum the node needs, and why: ``--expect tcp.buffer_max``, else the bandwidth-delay product.

    The product of the fastest compute NIC (or ``nic.rate``) and :data:`RTT_S`,
    rounded up to a MiB, never below :data:`BUFFER_FLOOR`.
    """
    if expect.tcp_buffer_bytes is not None:
        return expect.tcp_buffer_bytes, "--expect tcp.buffer_max"
    chosen = compute(node, expect)
    rates = [(n.speed_mbps / 1000, n.name) for n in chosen.nics if n.speed_mbps]
    rates += [(p.rate_gbps, p.label) for p in chosen.ports if p.rate_gbps]
    if expect.nic_rate_gbps:
        rates.append((expect.nic_rate_gbps, "--expect nic.rate"))
    if not rates:
        return BUFFER_FLOOR, "no compute NIC speed known: Linux's default"
    gbps, fastest = max(rates)
    need = max(BUFFER_FLOOR, math.ceil(gbps * 1e9 / 8 * RTT_S / (1 << 20)) << 20)
    return need, f"{format_rate(gbps)} ({fastest}) x {RTT_S * 1e3:g} ms"


class TcpCongestion(Check):
    id = "tcp.congestion"
    title = "TCP congestion control suits fast links (cubic, bbr, dctcp, htcp)"
    reads = "proc/sys/net/ipv4/tcp_{congestion_control,available_congestion_control}"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        name = node.tcp.congestion
        if name is None:
            return [self.finding(Severity.INFO, "net.ipv4.tcp_congestion_control", "unreadable")]
        if name in GOOD_CONGESTION:
            return [self.finding(Severity.OK, "net.ipv4.tcp_congestion_control", name)]
        available = [a for a in (node.tcp.available_congestion or ()) if a in GOOD_CONGESTION]
        pick = available[0] if available else "cubic"
        return [
            self.finding(
                Severity.WARN,
                "net.ipv4.tcp_congestion_control",
                name,
                " or ".join(GOOD_CONGESTION[:2]),
                f"{name} recovers slowly from loss on fast links: sysctl -w net.ipv4.tcp_congestion_control={pick}",
            )
        ]


class TcpOptions(Check):
    id = "tcp.options"
    title = "TCP window scaling and SACK are on"
    reads = "proc/sys/net/ipv4/tcp_{window_scaling,sack}"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for name, value, severity, why in (
            (
                "net.ipv4.tcp_window_scaling",
                node.tcp.window_scaling,
                Severity.FAIL,
                "caps every window at 64 KiB",
            ),
            ("net.ipv4.tcp_sack", node.tcp.sack, Severity.WARN, "makes every loss cost a full window"),
        ):
            if value is None:
                continue
            if value == 0:
                findings.append(self.finding(severity, name, "0", "1", f"turning it off {why}: sysctl -w {name}=1"))
            else:
                findings.append(self.finding(Severity.OK, name, str(value), "1"))
        return findings
