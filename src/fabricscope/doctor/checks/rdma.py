"""Checks of RDMA devices and ports: presence, verbs, state, rate, layer, firmware, errors, RoCE."""

from __future__ import annotations

from collections import defaultdict

from fabricscope.doctor.checks.base import Check, compute_ports, format_rate, majority
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Node, RdmaPort
from fabricscope.doctor.parsers import gid_is_link_local

__all__ = [
    "RdmaErrors",
    "RdmaFirmware",
    "RdmaGid",
    "RdmaLinkLayer",
    "RdmaPfc",
    "RdmaPortState",
    "RdmaPresent",
    "RdmaRate",
    "RdmaUverbs",
]

_ACTIVE, _LINK_UP = 4, 5


def _active(port: RdmaPort) -> bool:
    return port.state is not None and port.state[0] == _ACTIVE


def _roce(node: Node) -> list[RdmaPort]:
    """Ports whose link layer is Ethernet: RoCE."""
    return [p for p in node.ports if p.link_layer == "Ethernet"]


def _model(node: Node, device_name: str) -> tuple[object, ...]:
    device = next((d for d in node.rdma if d.name == device_name), None)
    if device is None:
        return (None, None)
    pci = node.pci.get(device.pci or "")
    return (device.hca_type, pci.device if pci else None)


class RdmaPresent(Check):
    id = "rdma.present"
    title = "RDMA devices (InfiniBand or RoCE) are present"
    reads = "sys/class/infiniband/*"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        if not node.rdma:
            return [
                self.finding(
                    Severity.INFO,
                    node.hostname,
                    "no RDMA devices: inter-node traffic goes over TCP sockets",
                )
            ]
        layers = sorted({p.link_layer or "unknown" for p in node.ports})
        seen = f"{len(node.rdma)} devices, {len(node.ports)} ports ({', '.join(layers)})"
        return [self.finding(Severity.OK, node.hostname, seen)]


class RdmaUverbs(Check):
    id = "rdma.uverbs"
    title = "Every RDMA device has a user-space verbs device (ib_uverbs)"
    reads = "sys/class/infiniband_verbs/uverbs*/ibdev"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.rdma)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for device in node.rdma:
            if device.uverbs:
                findings.append(self.finding(Severity.OK, device.name, "uverbs device present"))
            else:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        device.name,
                        "no uverbs device",
                        "a /dev/infiniband/uverbsN for it",
                        "load ib_uverbs (modprobe ib_uverbs): without it user space, and so NCCL, "
                        "cannot open the HCA and falls back to sockets",
                    )
                )
        return findings


_STATE_ADVICE = {
    "DOWN": "the port is down: check the cable, transceiver and switch port (ibstat, ibportstate)",
    "INIT": "the link is up but no subnet manager configured the port: check that opensm or the "
    "fabric's SM runs and sees this port",
    "ARMED": "the subnet manager has not finished activating the port: wait, then check the SM logs",
}
_PHYS_ADVICE = {
    "Disabled": "the port is administratively disabled: enable it (ibportstate <lid> <port> enable, "
    "or ip link set <netdev> up for RoCE)",
    "Polling": "no link partner answers: check the cable, the transceiver and that the switch port is up",
    "LinkErrorRecovery": "the link keeps retraining: replace the cable or transceiver",
}


class RdmaPortState(Check):
    id = "rdma.port_state"
    title = "Every RDMA port is ACTIVE and LinkUp"
    reads = "sys/class/infiniband/<dev>/ports/<n>/{state,phys_state}"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.ports)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in node.ports:
            state = port.state[1] if port.state else "unreadable"
            phys = port.phys_state[1] if port.phys_state else "unreadable"
            seen = f"{state}, {phys}"
            if _active(port) and port.phys_state is not None and port.phys_state[0] == _LINK_UP:
                findings.append(self.finding(Severity.OK, port.label, seen, "ACTIVE, LinkUp"))
                continue
            advice = _PHYS_ADVICE.get(phys) or _STATE_ADVICE.get(state)
            if advice is None:
                advice = "the port state cannot be read: check the driver (dmesg | grep mlx5) and ibstat"
            findings.append(self.finding(Severity.FAIL, port.label, seen, "ACTIVE, LinkUp", advice))
        return findings


class RdmaRate(Check):
    id = "rdma.rate"
    title = "Active ports run at the expected rate, and no slower than their twins"
    reads = "sys/class/infiniband/<dev>/ports/<n>/rate, <dev>/hca_type"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(_active(p) for p in node.ports)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        ports = [p for p in node.ports if _active(p)]
        twins: dict[tuple[object, ...], list[float]] = defaultdict(list)
        for port in ports:
            if port.rate_gbps is not None:
                twins[(*_model(node, port.device), port.link_layer)].append(port.rate_gbps)
        compute = {p.label for p in compute_ports(node, expect)}
        findings = []
        for port in ports:
            best = max(twins[(*_model(node, port.device), port.link_layer)], default=None)
            wanted = expect.nic_rate_gbps if port.label in compute else None
            findings.append(self._one(port, wanted, best))
        return findings

    def _one(self, port: RdmaPort, wanted: float | None, best: float | None) -> Finding:
        seen = port.rate_text or "unreadable"
        if port.rate_gbps is None:
            return self.finding(Severity.WARN, port.label, seen, format_rate(wanted), "read ibstat for the rate")
        if wanted is not None and port.rate_gbps < wanted:
            return self.finding(
                Severity.FAIL,
                port.label,
                seen,
                format_rate(wanted),
                "the port trained below the expected rate: reseat or replace the cable/transceiver, and "
                "check the switch port's speed and the HCA's link configuration (mlxlink -d <dev>)",
            )
        if best is not None and port.rate_gbps < best:
            return self.finding(
                Severity.WARN,
                port.label,
                seen,
                f"{format_rate(best)} like its twins (same HCA model)",
                "the port trained below its twins: check the cable/transceiver and switch port "
                "(mlxlink -d <dev> shows the negotiated speed and the cable)",
            )
        return self.finding(Severity.OK, port.label, seen, format_rate(wanted) if wanted else "")


class RdmaLinkLayer(Check):
    id = "rdma.link_layer"
    title = "Compute ports have the expected link layer (InfiniBand or Ethernet/RoCE)"
    reads = "sys/class/infiniband/<dev>/ports/<n>/link_layer"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return expect.link_layer is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        matching = compute_ports(node, expect)
        if not matching:
            seen = ", ".join(sorted({f"{p.label} {p.link_layer}" for p in node.ports})) or "no RDMA ports"
            return [
                self.finding(
                    Severity.FAIL,
                    node.hostname,
                    seen,
                    f"{expect.link_layer} ports",
                    "switch the port type (mlxconfig -d <dev> set LINK_TYPE_P1=1 for IB, 2 for Ethernet) "
                    "or fix the expectation",
                )
            ]
        findings = [self.finding(Severity.OK, p.label, p.link_layer or "", expect.link_layer or "") for p in matching]
        others = [p for p in node.ports if p not in matching]
        findings.extend(
            self.finding(Severity.INFO, p.label, f"{p.link_layer}: not counted as a compute port") for p in others
        )
        return findings


class RdmaFirmware(Check):
    id = "rdma.firmware"
    title = "HCAs of one model run one firmware version"
    reads = "sys/class/infiniband/<dev>/{fw_ver,hca_type}"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.rdma)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        groups: dict[tuple[object, ...], list[str]] = defaultdict(list)
        for device in node.rdma:
            if device.fw_ver:
                groups[_model(node, device.name)].append(device.fw_ver)
        findings = []
        for device in node.rdma:
            fw = device.fw_ver
            if not fw:
                findings.append(self.finding(Severity.INFO, device.name, "firmware version unreadable"))
                continue
            versions = groups[_model(node, device.name)]
            common = majority(versions)
            if len(set(versions)) == 1:
                findings.append(self.finding(Severity.OK, device.name, f"firmware {fw}"))
            elif fw != common:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        device.name,
                        f"firmware {fw}",
                        f"firmware {common} like its twins" if common else "one firmware across its twins",
                        "update the HCA firmware (mlxfwmanager) so every HCA of a model runs one version",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, device.name, f"firmware {fw} (majority)"))
        return findings


class RdmaErrors(Check):
    id = "rdma.errors"
    title = "Port error counters are zero; transport retries are reported"
    reads = "sys/class/infiniband/<dev>/ports/<n>/counters/*, hw_counters/*"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(_active(p) for p in node.ports)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in node.ports:
            if not _active(port):
                continue
            errors = {k: v for k, v in port.counters.items() if v > 0}
            retries = {
                k: v
                for k, v in port.hw_counters.items()
                if v > 0 and k in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err")
            }
            if errors:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        port.label,
                        ", ".join(f"{k}={v}" for k, v in sorted(errors.items())),
                        "all zero",
                        "counters count since the last reset: clear them (perfquery -x -R) and watch; if "
                        "symbol_error or link_downed grow, replace the cable or transceiver",
                    )
                )
            elif port.counters:
                findings.append(self.finding(Severity.OK, port.label, f"{len(port.counters)} error counters at 0"))
            if retries:
                findings.append(
                    self.finding(
                        Severity.INFO,
                        port.label,
                        "transport retries: " + ", ".join(f"{k}={v}" for k, v in sorted(retries.items())),
                    )
                )
        return findings


class RdmaGid(Check):
    id = "rdma.gid"
    title = "RoCE ports have a routable RoCE v2 GID"
    reads = "sys/class/infiniband/<dev>/ports/<n>/{gids,gid_attrs/types,gid_attrs/ndevs}/*"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(_roce(node))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in _roce(node):
            good = [g for g in port.gids if g.type == "RoCE v2" and not gid_is_link_local(g.gid)]
            if good:
                indexes = ", ".join(str(g.index) for g in good)
                findings.append(self.finding(Severity.OK, port.label, f"RoCE v2 GID at index {indexes}"))
            else:
                kinds = ", ".join(f"{g.index}: {g.type} {g.gid}" for g in port.gids) or "no GIDs"
                findings.append(
                    self.finding(
                        Severity.WARN,
                        port.label,
                        kinds,
                        "a RoCE v2 GID with an IP address",
                        f"give {port.netdev or 'the netdev'} an IP address (RoCE v2 GIDs are derived from "
                        "it) and check that RoCE v2 is enabled (cma_roce_mode)",
                    )
                )
        return findings


class RdmaPfc(Check):
    id = "rdma.pfc"
    title = "RoCE NICs have PFC on some priority, no pause storms and no buffer discards"
    reads = "ethtool -S <netdev> (ioctl on the live node; fabricscope-capture/ethtool-S/<netdev>)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(_roce(node))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in _roce(node):
            nic = node.nic(port.netdev or "")
            subject = f"{port.netdev or '?'} ({port.label})"
            if nic is None or nic.ethtool is None:
                findings.append(self.finding(Severity.INFO, subject, "ethtool statistics unavailable"))
                continue
            findings.extend(self._one(subject, nic.name, nic.ethtool))
        return findings

    def _one(self, subject: str, ifname: str, stats: dict[str, int]) -> list[Finding]:
        enabled = sorted(p for p in range(8) if f"rx_prio{p}_pause_transition" in stats or f"rx_prio{p}_pause" in stats)
        findings = []
        if enabled:
            pauses = sum(stats.get(f"rx_prio{p}_pause", 0) + stats.get(f"tx_prio{p}_pause", 0) for p in enabled)
            seen = f"PFC on priority {','.join(map(str, enabled))}, {pauses} pause frames"
            findings.append(self.finding(Severity.OK, subject, seen))
        elif "rx_global_pause" in stats or "rx_pause_ctrl_phy" in stats:
            findings.append(self.finding(Severity.INFO, subject, "global pause (802.3x), no PFC priority"))
        else:
            findings.append(
                self.finding(
                    Severity.WARN,
                    subject,
                    "PFC counters absent: PFC is off on every priority",
                    "PFC on the RoCE priority (often 3)",
                    f"RoCE runs lossy without PFC unless the fabric is built for it: enable PFC on the "
                    f"RoCE priority (mlnx_qos -i {ifname} --pfc 0,0,0,1,0,0,0,0) to match the switches",
                )
            )
        storms = {k: stats[k] for k in ("tx_pause_storm_warning_events", "tx_pause_storm_error_events") if stats.get(k)}
        if storms:
            findings.append(
                self.finding(
                    Severity.FAIL if "tx_pause_storm_error_events" in storms else Severity.WARN,
                    subject,
                    ", ".join(f"{k}={v}" for k, v in storms.items()),
                    "no pause storms",
                    "the NIC sent pause frames for too long (a stuck receiver): check the host for hangs "
                    "and the NIC's receive path; the storm guard disables PFC while it lasts",
                )
            )
        discards = {
            k: v
            for k, v in stats.items()
            if v > 0 and (k in ("rx_discards_phy", "rx_out_of_buffer") or k.endswith(("_buf_discard", "_cong_discard")))
        }
        if discards:
            findings.append(
                self.finding(
                    Severity.WARN,
                    subject,
                    ", ".join(f"{k}={v}" for k, v in sorted(discards.items())),
                    "no discards",
                    "the NIC dropped packets for lack of buffers since the driver loaded: check PFC on the "
                    "RoCE priority end to end, and the receive ring sizes (ethtool -G)",
                )
            )
        return findings
