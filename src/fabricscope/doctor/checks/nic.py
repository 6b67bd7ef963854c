"""Checks of the compute NICs as network interfaces: link, flaps, speed, MTU, count."""

from __future__ import annotations

from collections import defaultdict

from fabricscope.doctor.checks.base import (
    Check,
    compute,
    compute_nic_devices,
    compute_nics,
    format_rate,
    majority,
    more_than_expected,
    rate_finding,
)
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NetInterface, Node, PciDevice
from fabricscope.doctor.probes.net import ARPHRD_ETHER, ARPHRD_INFINIBAND

__all__ = ["LINK_ADVICE", "NicCount", "NicFlaps", "NicIrqAffinity", "NicLink", "NicMtu", "NicPresent", "NicSpeed"]

FLAP_LIMIT = 5
"""carrier_down_count at or above this warns (Azure's health checks use 5 in 24 h)."""
LINK_ADVICE = (
    "check the cable and transceiver, and the switch port's configured speed (ethtool <if>; mlxlink -d <dev> "
    "shows what the port and the cable can do)"
)
_LINK_TYPES = {ARPHRD_ETHER: "Ethernet", ARPHRD_INFINIBAND: "IPoIB"}


def _subject(nic: NetInterface) -> str:
    return f"{nic.name} ({nic.rdma})" if nic.rdma else nic.name


class NicPresent(Check):
    id = "nic.present"
    title = "Which NICs carry training traffic (the compute NICs), and what chose them"
    reads = "sys/class/net/*/{type,operstate,device}; --expect nic.devices, NCCL_IB_HCA"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        chosen = compute(node, expect)
        findings = [
            self.finding(
                Severity.FAIL,
                name,
                "not on this node",
                "a compute port or NIC (--expect nic.devices)",
                "the device is missing or was renamed: check lspci, dmesg and the driver, or fix the expectation",
            )
            for name in chosen.missing
        ]
        if not chosen.nics:
            findings.append(
                self.finding(
                    Severity.WARN if not node.ports else Severity.INFO,
                    node.hostname,
                    "no compute NIC found" if not node.ports else "no netdev behind the compute RDMA ports",
                    "a physical NIC that is up",
                    "bring a NIC up (ip link set <if> up) or check the driver; "
                    "virtual interfaces (lo, bridges, veth) are not counted",
                )
            )
            return findings
        kind = "the netdevs of the RDMA ports" if node.ports else "no RDMA: NCCL will use TCP sockets"
        seen = f"{', '.join(n.name for n in chosen.nics)} ({kind}; chosen by {chosen.chosen_by})"
        return [*findings, self.finding(Severity.OK, node.hostname, seen)]


class NicLink(Check):
    id = "nic.link"
    title = "Every compute NIC is up with carrier"
    reads = "sys/class/net/<if>/{operstate,carrier}"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(compute_nics(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for nic in compute_nics(node, expect):
            seen = f"operstate {nic.operstate or 'unreadable'}, carrier {_value(nic.carrier)}"
            if nic.operstate == "up" and nic.carrier != 0:
                findings.append(self.finding(Severity.OK, _subject(nic), seen, "up"))
            elif nic.operstate in (None, "unknown") and nic.carrier == 1:
                findings.append(self.finding(Severity.INFO, _subject(nic), seen, "up"))
            elif nic.operstate in (None, "unknown") and nic.carrier is None:  # nothing read says it is down
                findings.append(
                    self.finding(
                        Severity.WARN,
                        _subject(nic),
                        f"could not read whether it is up: {seen}",
                        "up, carrier 1",
                        "probe.read says why; ip link show says whether it is up",
                    )
                )
            else:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        _subject(nic),
                        seen,
                        "up, carrier 1",
                        f"bring it up (ip link set {nic.name} up); with no carrier check the cable, "
                        "transceiver and switch port",
                    )
                )
        return findings


def _value(value: int | None) -> str:
    return "unknown" if value is None else str(value)


class NicFlaps(Check):
    id = "nic.flaps"
    title = f"Links have not gone down {FLAP_LIMIT} or more times since boot"
    reads = "sys/class/net/<if>/carrier_down_count"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(n.carrier_down_count is not None for n in compute_nics(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for nic in compute_nics(node, expect):
            downs = nic.carrier_down_count
            if downs is None:
                continue
            if downs >= FLAP_LIMIT:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        _subject(nic),
                        f"carrier lost {downs} times since boot",
                        f"fewer than {FLAP_LIMIT}",
                        "a flapping link: reseat or replace the cable or transceiver, and look at the "
                        "switch port's error counters",
                    )
                )
            else:
                findings.append(
                    self.finding(
                        Severity.OK, _subject(nic), f"carrier lost {downs} time{'s' * (downs != 1)} since boot"
                    )
                )
        return findings


class NicSpeed(Check):
    id = "nic.speed"
    title = "NICs without RDMA run at the expected speed, else at their fastest mode and their twins', full duplex"
    reads = "sys/class/net/<if>/{speed,duplex}, device/{vendor,device}; ethtool link modes"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(n.rdma is None for n in compute_nics(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        nics = [n for n in compute_nics(node, expect) if n.rdma is None]
        twins: dict[tuple[object, ...], list[int]] = defaultdict(list)
        for nic in nics:
            if nic.speed_mbps is not None:
                twins[_model(node, nic)].append(nic.speed_mbps)
        findings = []
        for nic in nics:
            findings.append(self._one(nic, expect, twins[_model(node, nic)]))
            if nic.duplex == "half":
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        nic.name,
                        "half duplex",
                        "full duplex",
                        "a half-duplex link means failed autonegotiation: check the cable and switch port",
                    )
                )
        return findings

    def _one(self, nic: NetInterface, expect: Expectations, twins: list[int]) -> Finding:
        if nic.speed_mbps is None:
            return self.finding(
                Severity.INFO,
                nic.name,
                f"speed unknown (driver {nic.driver or 'unknown'} reports -1 or EINVAL)",
                format_rate(expect.nic_rate_gbps) if expect.nic_rate_gbps else "",
            )
        gbps = nic.speed_mbps / 1000
        return rate_finding(
            self,
            nic.name,
            format_rate(gbps),
            gbps,
            wanted=expect.nic_rate_gbps,
            twins=max(twins) / 1000 if twins else None,
            supported=nic.supported_mbps / 1000 if nic.supported_mbps else None,
            advice=LINK_ADVICE,
        )


def _model(node: Node, nic: NetInterface) -> tuple[object, ...]:
    device = node.pci.get(nic.pci or "")
    return (nic.driver, device.vendor if device else None, device.device if device else None)


class NicMtu(Check):
    id = "nic.mtu"
    title = "Compute NICs of one link type share one MTU (or the expected one)"
    reads = "sys/class/net/<if>/{mtu,type}"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(compute_nics(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        groups: dict[int | None, list[NetInterface]] = defaultdict(list)
        for nic in compute_nics(node, expect):
            groups[nic.arphrd].append(nic)
        findings = []
        for arphrd, nics in groups.items():
            kind = _LINK_TYPES.get(arphrd or -1, f"type {arphrd}")
            common = majority(n.mtu for n in nics if n.mtu is not None)
            for nic in nics:
                findings.append(self._one(nic, kind, expect.nic_mtu, common, len(nics)))
        return findings

    def _one(self, nic: NetInterface, kind: str, wanted: int | None, common: object, peers: int) -> Finding:
        if nic.mtu is None:
            return self.finding(
                Severity.WARN,
                _subject(nic),
                "MTU unreadable or invalid (probe.read says why); left out of the comparison",
                str(wanted or ""),
                f"check the NIC's driver (dmesg) and set a valid MTU: ip link set {nic.name} mtu N",
            )
        if wanted is not None:
            if nic.mtu == wanted:
                return self.finding(Severity.OK, _subject(nic), f"MTU {nic.mtu}", str(wanted))
            return self.finding(
                Severity.FAIL,
                _subject(nic),
                f"MTU {nic.mtu}",
                f"MTU {wanted}",
                f"set it (ip link set {nic.name} mtu {wanted}) and persist it in the network configuration",
            )
        if common is None and peers > 1:
            return self.finding(
                Severity.WARN,
                _subject(nic),
                f"MTU {nic.mtu}",
                f"one MTU across the {kind} compute NICs (no majority)",
                "pick one MTU for the fabric and set it on every compute NIC (--expect nic.mtu checks it)",
            )
        if common is not None and nic.mtu != common:
            return self.finding(
                Severity.WARN,
                _subject(nic),
                f"MTU {nic.mtu}",
                f"MTU {common} like the other {kind} compute NICs",
                f"mismatched MTUs fragment or drop traffic: ip link set {nic.name} mtu {common}",
            )
        return self.finding(Severity.OK, _subject(nic), f"MTU {nic.mtu}")


class NicCount(Check):
    id = "nic.count"
    title = "The node has the expected number of compute NICs (compute RDMA ports, else NICs)"
    reads = "sys/class/infiniband/*/ports/*, sys/class/net/*"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return expect.nic_count is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        chosen = compute(node, expect)
        if node.ports:
            what = "RDMA ports"
            found = [p.label for p in chosen.ports]
        else:
            what = "NICs"
            found = [n.name for n in chosen.nics]
        seen = f"{len(found)} {what} (chosen by {chosen.chosen_by})" + (f": {', '.join(found)}" if found else "")
        expected = expect.nic_count
        assert expected is not None  # applies() says so
        if len(found) == expected:
            return [self.finding(Severity.OK, node.hostname, seen, str(expected))]
        if len(found) > expected:
            advice = more_than_expected(
                len(found),
                expected,
                what,
                "nic.count",
                expect.source,
                "; if only some of them carry training traffic, name those in nic.devices or NCCL_IB_HCA",
            )
        else:
            advice = (
                "a NIC is missing or was not detected: check 'lspci | grep -i mellanox', dmesg for driver "
                "errors, and the firmware; then reboot or reseat (or fix NCCL_IB_HCA if it leaves ports out)"
            )
        return [self.finding(Severity.FAIL, node.hostname, seen, f"{expected} {what}", advice)]


class NicIrqAffinity(Check):
    """A NIC's interrupts should be served on its own NUMA node: across the socket link every packet's
    completion costs a remote wakeup and the data a remote cache miss (Mellanox/NVIDIA performance tuning
    guide, "IRQ affinity"; ``set_irq_affinity_bynode.sh``)."""

    id = "nic.irq_affinity"
    title = "Compute NICs' interrupts may run on CPUs of the NIC's own NUMA node"
    reads = (
        "sys/bus/pci/devices/<addr>/msi_irqs/*, proc/irq/<n>/smp_affinity_list, sys/devices/system/node/node*/cpulist"
    )

    def _devices(self, node: Node, expect: Expectations) -> list[tuple[str, PciDevice]]:
        named = dict(compute_nic_devices(node, expect))
        for nic in compute_nics(node, expect):
            if nic.pci and nic.pci in node.pci:
                named.setdefault(nic.rdma.split("/")[0] if nic.rdma else nic.name, node.pci[nic.pci])
        return [(name, device) for name, device in named.items() if device.irqs]

    def applies(self, node: Node, expect: Expectations) -> bool:
        return len(node.numa_cpus) > 1 and bool(self._devices(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for name, device in self._devices(node, expect):
            local = node.numa_cpus.get(device.numa_node) if device.numa_node is not None else None
            subject = f"{name} ({device.address})"
            known = {irq: cpus for irq, cpus in device.irqs.items() if cpus is not None}
            if local is None or not known:
                findings.append(self.finding(Severity.INFO, subject, f"{len(device.irqs)} IRQs, NUMA node unknown"))
                continue
            remote = sorted(irq for irq, cpus in known.items() if not cpus & local)
            seen = f"{len(known)} IRQs, NUMA node {device.numa_node}"
            if not remote:
                findings.append(self.finding(Severity.OK, subject, f"{seen}: all may run there"))
                continue
            shown = ", ".join(map(str, remote[:8])) + (" ..." if len(remote) > 8 else "")
            findings.append(
                self.finding(
                    Severity.WARN,
                    subject,
                    f"{seen}: {len(remote)} may run only on other nodes' CPUs (IRQ {shown})",
                    f"IRQs on NUMA node {device.numa_node}'s CPUs",
                    f"pin them to the NIC's node (set_irq_affinity_bynode.sh {device.numa_node} <if>, or "
                    "echo a CPU list into /proc/irq/<n>/smp_affinity_list), and keep irqbalance from moving them "
                    "back (IRQBALANCE_BANNED_CPULIST, or stop it on training nodes)",
                )
            )
        return findings
