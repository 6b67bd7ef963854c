"""Checks of RDMA devices and ports: presence, verbs, state, rate, layer, firmware, errors, RoCE.

Physical faults (a port down, a rate below its twins, error counters) are
judged on every port.  RoCE configuration (GIDs, PFC) matters for training
traffic only on compute ports: on the others a problem is ``info``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from fabricscope.doctor.checks.base import (
    Check,
    compute,
    compute_ports,
    format_rate,
    is_active,
    majority,
    rate_finding,
)
from fabricscope.doctor.checks.nic import LINK_ADVICE
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NetInterface, Node, Qos, RdmaPort
from fabricscope.kernel_text import gid_is_link_local
from fabricscope.units import is_digits

__all__ = [
    "RdmaCm",
    "RdmaDevNodes",
    "RdmaEcn",
    "RdmaErrors",
    "RdmaFirmware",
    "RdmaGid",
    "RdmaLinkLayer",
    "RdmaPfc",
    "RdmaPortState",
    "RdmaPresent",
    "RdmaRate",
    "RdmaRoceMtu",
    "RdmaSubnetManager",
    "RdmaTrafficClass",
    "RdmaUverbs",
    "enabled_pfc",
    "nccl_priority",
    "pfc_priorities",
    "roce_mtu",
]

_LINK_UP = 5
_RETRIES = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err")


def _model(node: Node, device_name: str) -> tuple[object, ...]:
    device = next((d for d in node.rdma if d.name == device_name), None)
    if device is None:
        return (None, None)
    pci = node.pci.get(device.pci or "")
    return (device.hca_type, pci.device if pci else None)


def _counts(values: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


class _PortCheck(Check):
    """A check over RDMA ports: applies when the node has one (``active_only``: an ACTIVE one)."""

    active_only = False

    def ports(self, node: Node) -> list[RdmaPort]:
        return [p for p in node.ports if is_active(p) or not self.active_only]

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(self.ports(node))


class _RoceCheck(_PortCheck):
    """A check of RoCE configuration: on a port that is not a compute port, a warning is only ``info``."""

    def ports(self, node: Node) -> list[RdmaPort]:
        return [p for p in node.ports if p.link_layer == "Ethernet"]

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        compute_labels = {p.label for p in compute_ports(node, expect)}
        findings = []
        for port in self.ports(node):
            for item in self.judge(node, port):
                if port.label not in compute_labels and item.severity is Severity.WARN:
                    item = self.finding(
                        Severity.INFO, item.subject, f"{item.observed} (not a compute port)", item.expected
                    )
                findings.append(item)
        return findings

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        raise NotImplementedError


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


class RdmaCm(Check):
    """The RDMA connection manager for user space (``rdma_ucm``, ``/dev/infiniband/rdma_cm``).

    NCCL does not use it: its InfiniBand and RoCE transports connect queue
    pairs over their own sockets.  Tools that connect through RDMA CM do
    (librdmacm: ``ib_write_bw -R``, ``rping``, NVMe and iSER over RDMA, UCX's
    address-based connections), so a missing module is a note, not a fault.
    """

    id = "rdma.cm"
    title = "User space can reach the RDMA connection manager (rdma_ucm), for the tools that connect through it"
    reads = "sys/class/misc/rdma_cm"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return node.rdma_cm is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        if node.rdma_cm:
            return [self.finding(Severity.OK, node.hostname, "rdma_cm device present (rdma_ucm loaded)")]
        return [
            self.finding(
                Severity.INFO,
                node.hostname,
                "no rdma_cm device (rdma_ucm not loaded): NCCL does not need it; librdmacm's users do "
                "(ib_write_bw -R, rping, NVMe or iSER over RDMA, UCX's address-based connections): "
                "modprobe rdma_ucm for them",
            )
        ]


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
            elif device.uverbs is None:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        device.name,
                        "could not read which verbs device is its (an ibdev file is unreadable)",
                        "a /dev/infiniband/uverbsN for it",
                        "probe.read says which file and why; ibv_devices lists the devices user space can open",
                    )
                )
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


class RdmaPortState(_PortCheck):
    id = "rdma.port_state"
    title = "Every RDMA port is ACTIVE and LinkUp"
    reads = "sys/class/infiniband/<dev>/ports/<n>/{state,phys_state}"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in node.ports:
            state = port.state[1] if port.state else "unreadable"
            phys = port.phys_state[1] if port.phys_state else "unreadable"
            seen = f"{state}, {phys}"
            if is_active(port) and port.phys_state is not None and port.phys_state[0] == _LINK_UP:
                findings.append(self.finding(Severity.OK, port.label, seen, "ACTIVE, LinkUp"))
                continue
            bad_state = port.state is not None and not is_active(port)
            bad_phys = port.phys_state is not None and port.phys_state[0] != _LINK_UP
            if not bad_state and not bad_phys:  # what could be read is fine: the rest is not known
                unread = [name for name, value in (("state", port.state), ("phys_state", port.phys_state)) if not value]
                findings.append(
                    self.finding(
                        Severity.WARN,
                        port.label,
                        f"could not read or understand {' and '.join(unread)} ({seen})",
                        "ACTIVE, LinkUp",
                        "probe.read says why the file could not be read; ibstat shows the port's state",
                    )
                )
                continue
            advice = _PHYS_ADVICE.get(phys) or _STATE_ADVICE.get(state)
            if advice is None:
                advice = "the port is not in a state NCCL uses: check the driver (dmesg | grep mlx5) and ibstat"
            findings.append(self.finding(Severity.FAIL, port.label, seen, "ACTIVE, LinkUp", advice))
        return findings


class RdmaRate(_PortCheck):
    id = "rdma.rate"
    title = "Active ports run at the expected rate, else at their NIC's fastest mode and their twins'"
    reads = "sys/class/infiniband/<dev>/ports/<n>/rate, <dev>/hca_type; ethtool link modes of RoCE netdevs"
    active_only = True

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        ports = self.ports(node)
        twins: dict[tuple[object, ...], list[float]] = defaultdict(list)
        for port in ports:
            if port.rate_gbps is not None:
                twins[(*_model(node, port.device), port.link_layer)].append(port.rate_gbps)
        compute_labels = {p.label for p in compute_ports(node, expect)}
        findings = []
        for port in ports:
            wanted = expect.nic_rate_gbps if port.label in compute_labels else None
            if port.rate_gbps is None:
                seen = port.rate_text or "unreadable"
                findings.append(self.finding(Severity.WARN, port.label, seen, format_rate(wanted), "read ibstat"))
                continue
            nic = node.nic(port.netdev or "")
            supported = nic.supported_mbps / 1000 if nic is not None and nic.supported_mbps else None
            best = max(twins[(*_model(node, port.device), port.link_layer)], default=None)
            findings.append(
                rate_finding(
                    self,
                    port.label,
                    port.rate_text or format_rate(port.rate_gbps),
                    port.rate_gbps,
                    wanted=wanted,
                    twins=best,
                    supported=supported,
                    advice=LINK_ADVICE,
                )
            )
        return findings


class RdmaLinkLayer(Check):
    id = "rdma.link_layer"
    title = "Compute ports have the expected link layer (InfiniBand or Ethernet/RoCE)"
    reads = "sys/class/infiniband/<dev>/ports/<n>/link_layer"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return expect.link_layer is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        chosen = compute(node, expect)
        advice = (
            "switch the port type (mlxconfig -d <dev> set LINK_TYPE_P1=1 for IB, 2 for Ethernet), "
            "fix the expectation, or the list that chose the compute ports"
        )
        if not chosen.ports:
            seen = ", ".join(sorted({f"{p.label} {p.link_layer}" for p in node.ports})) or "no RDMA ports"
            return [self.finding(Severity.FAIL, node.hostname, seen, f"{expect.link_layer} ports", advice)]
        findings = []
        for port in chosen.ports:
            if port.link_layer == expect.link_layer:
                findings.append(self.finding(Severity.OK, port.label, port.link_layer or "", expect.link_layer or ""))
            else:
                seen = f"{port.link_layer or 'unknown'} (a compute port, chosen by {chosen.chosen_by})"
                findings.append(self.finding(Severity.FAIL, port.label, seen, expect.link_layer or "", advice))
        findings.extend(
            self.finding(Severity.INFO, p.label, f"{p.link_layer}: not counted as a compute port")
            for p in node.ports
            if p not in chosen.ports
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


class RdmaErrors(_PortCheck):
    id = "rdma.errors"
    title = "Port error counters are zero; transport retries are reported"
    reads = "sys/class/infiniband/<dev>/ports/<n>/counters/*, hw_counters/*"
    active_only = True

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in self.ports(node):
            errors = {k: v for k, v in port.counters.items() if v > 0}
            retries = {k: v for k, v in port.hw_counters.items() if v > 0 and k in _RETRIES}
            if errors:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        port.label,
                        _counts(errors),
                        "all zero",
                        "counters count since the last reset: clear them (perfquery -x -R) and watch; if "
                        "symbol_error or link_downed grow, replace the cable or transceiver",
                    )
                )
            elif port.counters:
                findings.append(self.finding(Severity.OK, port.label, f"{len(port.counters)} error counters at 0"))
            if retries:
                findings.append(self.finding(Severity.INFO, port.label, f"transport retries: {_counts(retries)}"))
        return findings


class RdmaGid(_RoceCheck):
    id = "rdma.gid"
    title = "RoCE compute ports have a routable RoCE v2 GID"
    reads = "sys/class/infiniband/<dev>/ports/<n>/{gids,gid_attrs/types,gid_attrs/ndevs}/*"

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        good = [g for g in port.gids if g.type == "RoCE v2" and not gid_is_link_local(g.gid)]
        if good:
            yield self.finding(Severity.OK, port.label, f"RoCE v2 GID at index {', '.join(str(g.index) for g in good)}")
            return
        yield self.finding(
            Severity.WARN,
            port.label,
            ", ".join(f"{g.index}: {g.type} {g.gid}" for g in port.gids) or "no GIDs",
            "a RoCE v2 GID with an IP address",
            f"give {port.netdev or 'the netdev'} an IP address (RoCE v2 GIDs are derived from it) and check "
            "that RoCE v2 is enabled (cma_roce_mode)",
        )


def pfc_priorities(stats: dict[str, int]) -> tuple[list[int], bool]:
    """The priorities PFC is on, and whether global pause (802.3x) is, from ``ethtool -S`` counters.

    mlx5 lists a priority's ``rx_prio<p>_pause*`` counters only where PFC is on,
    and ``rx_global_pause*`` only while global pause is on; a driver that lists
    every priority tells nothing by listing, so then only pause frames counted
    on a priority show it.  ``rx_pause_ctrl_phy``/``tx_pause_ctrl_phy`` are in
    mlx5's 802.3 counter group whether pause is on or not: only a non-zero
    count says pause frames flowed.
    """
    listed = {p for p in range(8) if f"rx_prio{p}_pause" in stats or f"rx_prio{p}_pause_transition" in stats}
    flowed = {p for p in range(8) if stats.get(f"rx_prio{p}_pause", 0) or stats.get(f"tx_prio{p}_pause", 0)}
    enabled = sorted((listed if len(listed) < 8 else set()) | flowed)
    global_pause = any(k in stats for k in ("rx_global_pause", "tx_global_pause")) or any(
        stats.get(k, 0) > 0 for k in ("rx_pause_ctrl_phy", "tx_pause_ctrl_phy")
    )
    return enabled, global_pause


class RdmaPfc(_RoceCheck):
    id = "rdma.pfc"
    title = "RoCE compute NICs have PFC on some priority, no pause storms and no buffer discards"
    reads = "ethtool -S <netdev> (ioctl on the live node; fabricscope-capture/ethtool-S/<netdev>)"

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        nic = node.nic(port.netdev or "")
        subject = f"{port.netdev or '?'} ({port.label})"
        if nic is None or nic.ethtool is None:
            yield self.finding(Severity.INFO, subject, "ethtool statistics unavailable")
            return
        stats = nic.ethtool
        enabled, global_pause = pfc_priorities(stats)
        if enabled:
            pauses = sum(stats.get(f"rx_prio{p}_pause", 0) + stats.get(f"tx_prio{p}_pause", 0) for p in enabled)
            yield self.finding(
                Severity.OK, subject, f"PFC on priority {','.join(map(str, enabled))}, {pauses} pause frames"
            )
        elif global_pause:
            yield self.finding(Severity.INFO, subject, "global pause (802.3x), no PFC priority")
        else:
            yield self.finding(
                Severity.WARN,
                subject,
                "PFC is off on every priority (no per-priority pause counters, no pause frames)",
                "PFC on the RoCE priority (often 3)",
                f"RoCE runs lossy without PFC unless the fabric is built for it: enable PFC on the RoCE priority "
                f"(mlnx_qos -i {nic.name} --pfc 0,0,0,1,0,0,0,0) to match the switches",
            )
        storms = {k: stats[k] for k in ("tx_pause_storm_warning_events", "tx_pause_storm_error_events") if stats.get(k)}
        if storms:
            yield self.finding(
                Severity.FAIL if "tx_pause_storm_error_events" in storms else Severity.WARN,
                subject,
                _counts(storms),
                "no pause storms",
                "the NIC sent pause frames for too long (a stuck receiver): check the host for hangs and the "
                "NIC's receive path; the storm guard disables PFC while it lasts",
            )
        discards = {
            k: v
            for k, v in stats.items()
            if v > 0 and (k in ("rx_discards_phy", "rx_out_of_buffer") or k.endswith(("_buf_discard", "_cong_discard")))
        }
        if discards:
            yield self.finding(
                Severity.WARN,
                subject,
                _counts(discards),
                "no discards",
                "the NIC dropped packets for lack of buffers since the driver loaded: check PFC on the RoCE "
                "priority end to end, and the receive ring sizes (ethtool -G)",
            )


class RdmaDevNodes(Check):
    """The verbs device nodes user space opens: a container started without them sees HCAs it cannot use."""

    id = "rdma.dev_nodes"
    title = "Every verbs device has its /dev/infiniband node (containers: the devices were passed in)"
    reads = "dev/infiniband/* (a capture lists them in fabricscope-capture/dev-infiniband)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(d.dev_node is not None for d in node.rdma)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for device in node.rdma:
            if device.dev_node is None:
                continue
            path = f"/dev/infiniband/{device.uverbs_name}"
            if device.dev_node:
                findings.append(self.finding(Severity.OK, device.name, f"{path} present"))
                continue
            findings.append(
                self.finding(
                    Severity.FAIL,
                    device.name,
                    f"{path} missing",
                    f"{path}",
                    "sysfs shows the HCA but its device node is not here, so NCCL cannot open it and falls back to "
                    "sockets: run the container with --device=/dev/infiniband (and --cap-add=IPC_LOCK), or give "
                    "the pod the RDMA device plugin's resource (rdma/hca) in Kubernetes",
                )
            )
        return findings


class RdmaSubnetManager(_PortCheck):
    """An InfiniBand port is usable only after a subnet manager gave it a LID (IBA 14.4)."""

    id = "rdma.subnet_manager"
    title = "InfiniBand ports have a LID from a subnet manager"
    reads = "ports/<n>/{lid,sm_lid} (InfiniBand ports)"

    def ports(self, node: Node) -> list[RdmaPort]:
        return [p for p in node.ports if p.link_layer == "InfiniBand" and (p.lid is not None or p.sm_lid is not None)]

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for port in self.ports(node):
            shown = f"LID {_lid(port.lid)}, SM at LID {_lid(port.sm_lid)}"
            if port.lid != 0 and port.sm_lid != 0:
                findings.append(self.finding(Severity.OK, port.label, shown))
                continue
            physical = port.phys_state is not None and port.phys_state[0] == _LINK_UP
            findings.append(
                self.finding(
                    Severity.FAIL if physical else Severity.INFO,
                    port.label,
                    shown + ("" if physical else " (the link is not up)"),
                    "a non-zero LID and SM LID",
                    "no subnet manager has configured this port: start opensm on a node of the fabric or enable "
                    "the switches' SM (sminfo and ibstat show which one answers); a port without a LID stays INIT "
                    "and NCCL cannot use it",
                )
            )
        return findings


def _lid(value: int | None) -> str:
    return "unknown" if value is None else f"0x{value:x}"


def _traffic_class(node: Node) -> int | None:
    """NCCL_IB_TC: 0 (NCCL's default) when unset, None when it is not a number from 0 to 255."""
    setting = node.nccl.get("NCCL_IB_TC")
    if setting is None:
        return 0
    value = setting.value.strip()
    return int(value) if is_digits(value) and int(value) <= 255 else None


def nccl_priority(node: Node, qos: Qos | None = None) -> tuple[int, str] | None:
    """The priority NCCL's RoCE traffic is sent on, and why; None when the setting it comes from is unreadable.

    Under DSCP trust (assumed where ``mlnx_qos`` does not say) it is the DSCP
    of NCCL_IB_TC, the IP traffic-class byte (NCCL's default is 0), through
    the port's DSCP map, mlx5's default being DSCP ``d`` on priority ``d >> 3``
    (so ``NCCL_IB_TC=106``: DSCP 26, priority 3).  Under PCP trust it is the
    QP's service level, NCCL_IB_SL (default 0), carried as the VLAN tag's PCP.
    """
    if qos is not None and qos.trust == "pcp":
        level = node.nccl.get("NCCL_IB_SL")
        if level is None:
            return 0, "PCP trust (mlnx_qos): NCCL_IB_SL unset, service level 0"
        value = level.value.strip()
        if not is_digits(value) or int(value) > 7:
            return None
        return int(value), f"PCP trust (mlnx_qos): NCCL_IB_SL={value} ({level.source})"
    setting, tc = node.nccl.get("NCCL_IB_TC"), _traffic_class(node)
    if tc is None:
        return None
    why = (
        "NCCL_IB_TC unset: traffic class 0"
        if setting is None
        else f"NCCL_IB_TC={tc} ({setting.source}): DSCP {tc >> 2}"
    )
    dscp = tc >> 2
    if qos is not None and qos.trust == "dscp" and qos.dscp_priority:
        # A DSCP the printed map leaves out is on priority 0 (mlx5 puts a deleted entry back there).
        return qos.dscp_priority.get(dscp, 0), f"{why}, DSCP trust and the port's DSCP map (mlnx_qos)"
    if qos is None or qos.trust is None:
        return dscp >> 3, why + (", DSCP trust assumed" if setting is not None or qos is not None else "")
    return dscp >> 3, f"{why}, DSCP trust (mlnx_qos)"


def enabled_pfc(nic: NetInterface) -> list[int]:
    """The priorities PFC is on: as ``mlnx_qos`` prints them, else as ``ethtool -S`` counters show them."""
    if nic.qos is not None and nic.qos.pfc is not None:
        return list(nic.qos.pfc)
    return pfc_priorities(nic.ethtool)[0] if nic.ethtool is not None else []


class RdmaTrafficClass(_RoceCheck):
    id = "rdma.traffic_class"
    title = "NCCL's RoCE traffic class lands on a priority PFC protects"
    reads = "NCCL_IB_TC, NCCL_IB_SL; mlnx_qos -i <netdev> (trust, DSCP map, PFC) where installed; ethtool -S <netdev>"

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        nic = node.nic(port.netdev or "")
        subject = f"{port.netdev or '?'} ({port.label})"
        if nic is None or (nic.ethtool is None and nic.qos is None):
            return
        enabled = enabled_pfc(nic)
        chosen = nccl_priority(node, nic.qos)
        if not enabled or chosen is None:
            return
        priority, why = chosen
        seen = f"{why} -> priority {priority}; PFC on {','.join(map(str, enabled))}"
        if priority in enabled:
            yield self.finding(Severity.OK, subject, seen)
            return
        target = enabled[0]
        if nic.qos is not None and nic.qos.trust == "pcp":
            fix = (
                f"set NCCL_IB_SL={target} (priority {target}), or trust DSCP on the port "
                f"(mlnx_qos -i {nic.name} --trust dscp) and the switches"
            )
        else:
            dscp = 8 * target + 2  # AF<target>1, on priority <target> in mlx5's default map
            mapped = nic.qos.dscp_priority if nic.qos else {}
            if mapped and mapped.get(dscp) != target:  # the port's own map: a DSCP it puts there
                dscp = next((d for d, p in sorted(mapped.items()) if p == target), -1)
            if dscp < 0:  # the port maps no DSCP to the PFC priority: the map is what to change
                used = (_traffic_class(node) or 0) >> 2
                fix = (
                    f"map NCCL's DSCP {used} to priority {target} on the port (mlnx_qos -i {nic.name} --dscp2prio "
                    f"set,{used},{target}) and on the switches"
                )
            else:
                fix = (
                    f"set NCCL_IB_TC={dscp * 4 + 2} (DSCP {dscp}, priority {target}), or check that the NIC "
                    f"rewrites the class (cma_roce_tos, /sys/class/infiniband/{port.device}/tc/{port.port}/"
                    "traffic_class)"
                )
        yield self.finding(
            Severity.WARN,
            subject,
            seen,
            f"NCCL's priority among the PFC ones ({','.join(map(str, enabled))})",
            f"NCCL's packets go out on a lossy priority and drops turn into retransmission timeouts: {fix}",
        )


class RdmaEcn(_RoceCheck):
    """DCQCN, RoCE's congestion control, needs ECN on the NIC as notification and as reaction point."""

    id = "rdma.ecn"
    title = "ECN (DCQCN) is on for the RoCE priorities, as notification and reaction point"
    reads = "sys/class/net/<netdev>/ecn/{roce_np,roce_rp}/enable/<priority> (mlx5)"

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        nic = node.nic(port.netdev or "")
        if nic is None or nic.ecn is None:
            return
        subject = f"{port.netdev} ({port.label})"
        wanted = set(enabled_pfc(nic))
        chosen = nccl_priority(node, nic.qos)
        if chosen is not None and (node.nccl.get("NCCL_IB_TC") is not None or nic.qos is not None):
            wanted.add(chosen[0])
        roles = {role: sorted(nic.ecn.get(role, frozenset())) for role in ("roce_np", "roce_rp")}
        seen = "; ".join(f"{role} on {','.join(map(str, p)) or 'none'}" for role, p in roles.items())
        missing = {role: sorted(wanted - set(p)) if wanted else ([] if p else ["any"]) for role, p in roles.items()}
        if not any(missing.values()):
            yield self.finding(Severity.OK, subject, seen)
            return
        where = ",".join(map(str, sorted(wanted))) if wanted else "the RoCE priority"
        yield self.finding(
            Severity.WARN,
            subject,
            seen,
            f"roce_np and roce_rp on priority {where}",
            "without ECN the NIC neither turns switch marks into CNPs nor slows down on them, so congestion is "
            "handled by PFC alone (pause storms, head-of-line blocking across flows): "
            f"echo 1 > /sys/class/net/{nic.name}/ecn/roce_np/enable/<priority> and the same for roce_rp, "
            "matching the switches' ECN marking",
        )


ROCE_MTUS = (4096, 2048, 1024, 512, 256)
"""The InfiniBand MTUs RoCE packets carry."""
ROCE_HEADROOM = 104
"""Bytes of a RoCE v2 packet the netdev MTU holds beyond the payload: IP, UDP, the InfiniBand base
transport and extended headers and the ICRC. mlx5 takes the largest IB MTU that fits under the netdev
MTU less these, so an Ethernet MTU of 1500 gives RoCE 1024, and 4200 or more gives 4096."""


def roce_mtu(netdev_mtu: int) -> int | None:
    """The RoCE MTU (``active_mtu`` in ``ibv_devinfo``) a port runs at under a netdev MTU."""
    return next((m for m in ROCE_MTUS if m + ROCE_HEADROOM <= netdev_mtu), None)


class RdmaRoceMtu(_RoceCheck):
    """NCCL's RoCE traffic runs in packets of the port's RoCE MTU, taken from its netdev's MTU."""

    id = "rdma.roce_mtu"
    title = "RoCE ports run 4096-byte packets (netdev MTU 4200 or 9000)"
    reads = "sys/class/net/<netdev>/mtu of each RoCE port"

    def judge(self, node: Node, port: RdmaPort) -> Iterator[Finding]:
        nic = node.nic(port.netdev or "")
        if nic is None or nic.mtu is None:
            return
        subject = f"{port.netdev} ({port.label})"
        active = roce_mtu(nic.mtu)
        shown = f"netdev MTU {nic.mtu}: RoCE MTU {active or 'none'}"
        if active == ROCE_MTUS[0]:
            yield self.finding(Severity.OK, subject, shown, "RoCE MTU 4096")
            return
        yield self.finding(
            Severity.WARN,
            subject,
            shown,
            "RoCE MTU 4096 (netdev MTU 4200 or 9000)",
            "each RDMA packet then carries at most "
            f"{active or 0} bytes: more packets, headers and completions per message than at 4096, and a lower "
            f"ceiling on large transfers. Set the MTU on the NIC and on every switch port of the path "
            f"(ip link set {nic.name} mtu 4200, or 9000 where the fabric uses jumbo frames)",
        )
