"""Checks of the PCIe links of GPUs and compute NICs, and of the switch uplinks above them.

A device's best link is the lower of its own maximum and its upstream port's
(NCCL takes the same minimum, ``src/graph/xml.cc``).  Idle GPUs lower their
link *speed* to save power ("may be reduced when the GPU is not in use",
nvidia-smi), so a GPU below its best speed is a warning unless NVML says it is
busy; a narrower link is physical (a lane that did not train), and so is any
NIC below its best: failures.  Behind a PCIe switch, the switch's own uplink
to the root port carries everything below it, so it is checked the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fabricscope.doctor.checks.base import Check, compute_nics, compute_ports, format_link, per_run
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Node, PciDevice, PcieLink
from fabricscope.kernel_text import pcie_generation

__all__ = [
    "ACS_BITS",
    "PcieAcs",
    "PcieAer",
    "PcieLinkCheck",
    "PcieRetrain",
    "PcieSlot",
    "PcieUplink",
    "bridges_above",
    "linked_devices",
]

_FIX = "reseat the card, check the riser or retimer, and the BIOS slot settings (lspci -vv shows LnkSta)"
_SLOW = f"the link trained below what device and slot support: {_FIX}"
_NARROW = f"fewer lanes trained than device and slot support (idle GPUs lower their speed, never their width): {_FIX}"


@dataclass(frozen=True, slots=True)
class _Linked:
    label: str
    device: PciDevice
    gpu: bool
    busy: bool | None


def linked_devices(node: Node, expect: Expectations) -> list[_Linked]:
    """GPUs and the PCI functions of compute NICs and RDMA devices, each once (found once per run)."""
    return per_run("linked", node, expect, _linked_devices)


def _linked_devices(node: Node, expect: Expectations) -> list[_Linked]:
    found: dict[str, _Linked] = {}
    for gpu in node.gpus:
        device = node.pci.get(gpu.pci)
        if device is not None:
            found[gpu.pci] = _Linked(f"GPU {gpu.pci}", device, True, gpu.busy)
    labels = {p.device for p in compute_ports(node, expect)}
    for rdma in node.rdma:
        if rdma.pci and rdma.pci in node.pci and rdma.name in labels:
            found.setdefault(rdma.pci, _Linked(f"{rdma.name} ({rdma.pci})", node.pci[rdma.pci], False, None))
    for nic in compute_nics(node, expect):
        if nic.pci and nic.pci in node.pci:
            found.setdefault(nic.pci, _Linked(f"{nic.name} ({nic.pci})", node.pci[nic.pci], False, None))
    return list(found.values())


def bridges_above(node: Node, expect: Expectations) -> dict[str, str]:
    """Each bridge above a GPU or compute NIC, with the subject its findings name: ``bridge <addr> (above ...)``."""
    below: dict[str, list[str]] = {}
    for item in linked_devices(node, expect):
        for bridge in item.device.bridges:
            below.setdefault(bridge, []).append(item.label)
    return {
        bridge: f"bridge {bridge} (above {', '.join(devices[:3])}{', ...' if len(devices) > 3 else ''})"
        for bridge, devices in below.items()
    }


def _below(current: float | None, best: float | None) -> bool:
    return current is not None and best is not None and current < best


def _judge(check: Check, label: str, link: PcieLink, *, speed_may_idle: bool, why_idle: str) -> Finding:
    """A link's current speed and width against its best: fail when narrower, or slower unless it may be idle."""
    best = format_link(link.capable_gts, link.capable_width)
    seen = format_link(link.current_gts, link.current_width)
    if None in (link.current_gts, link.current_width, link.capable_gts, link.capable_width):
        return check.finding(Severity.INFO, label, seen, best)
    narrow = _below(link.current_width, link.capable_width)
    slow = _below(link.current_gts, link.capable_gts)
    if not narrow and not slow:
        return check.finding(Severity.OK, label, seen, best)
    if narrow or not speed_may_idle:
        return check.finding(Severity.FAIL, label, seen, best, _NARROW if narrow else _SLOW)
    return check.finding(
        Severity.WARN,
        label,
        f"{seen} ({why_idle})",
        best,
        "idle GPUs lower their PCIe link speed to save power: run doctor again while the GPU is busy; if it "
        "stays low under load, reseat the GPU or check the riser",
    )


class PcieLinkCheck(Check):
    id = "pcie.link"
    title = "GPU and NIC links run at their best speed and width (and the expected generation and width)"
    reads = "sys/bus/pci/devices/<addr>/{current,max}_link_{speed,width}, and the upstream port's max_*"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(linked_devices(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for item in linked_devices(node, expect):
            link = item.device.link
            if link is None:
                findings.append(self.finding(Severity.INFO, item.label, "no PCIe link files (virtual device)"))
                continue
            why = "idle" if item.busy is False else "load unknown"
            findings.append(_judge(self, item.label, link, speed_may_idle=item.gpu and not item.busy, why_idle=why))
            if expect.pcie_gen is not None or expect.pcie_width is not None:
                findings.append(self._expected(item, link, expect))
        return findings

    def _expected(self, item: _Linked, link: PcieLink, expect: Expectations) -> Finding:
        generation = pcie_generation(link.capable_gts)
        width = link.capable_width
        wanted = " ".join(
            part
            for part in (
                f"Gen{expect.pcie_gen}" if expect.pcie_gen else "",
                f"x{expect.pcie_width}" if expect.pcie_width else "",
            )
            if part
        )
        short = (expect.pcie_gen is not None and (generation is None or generation < expect.pcie_gen)) or (
            expect.pcie_width is not None and (width is None or width < expect.pcie_width)
        )
        seen = f"capable of {format_link(link.capable_gts, width)}"
        if not short:
            return self.finding(Severity.OK, item.label, seen, wanted)
        return self.finding(
            Severity.FAIL,
            item.label,
            seen,
            wanted,
            "device or slot cannot reach the expected link: move the card to a full slot, or check the "
            "BIOS bifurcation and PCIe generation settings",
        )


class PcieSlot(Check):
    id = "pcie.slot"
    title = "No GPU or NIC sits in a slot narrower or slower than the device"
    reads = "sys/bus/pci/devices/<addr>/max_link_{speed,width} and the upstream port's"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(i.device.link is not None for i in linked_devices(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for item in linked_devices(node, expect):
            link = item.device.link
            if link is None or (link.upstream_max_gts is None and link.upstream_max_width is None):
                continue
            device_best = format_link(link.max_gts, link.max_width)
            port_best = format_link(link.upstream_max_gts, link.upstream_max_width)
            if _below(link.upstream_max_gts, link.max_gts) or _below(link.upstream_max_width, link.max_width):
                findings.append(
                    self.finding(
                        Severity.WARN,
                        item.label,
                        f"device {device_best}, upstream port {port_best}",
                        f"upstream port at least {device_best}",
                        "the slot limits the device: move it to a full-speed, full-width slot or check the "
                        "BIOS bifurcation settings",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, item.label, f"slot allows {device_best}"))
        return findings


class PcieUplink(Check):
    id = "pcie.uplink"
    title = "The PCIe switch uplinks above GPUs and compute NICs run at their best speed and width"
    reads = "the switch upstream port's {current,max}_link_{speed,width} and the root port's max_*"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(self._uplinks(node, expect))

    def _uplinks(self, node: Node, expect: Expectations) -> dict[str, tuple[PcieLink, list[_Linked]]]:
        """Each switch upstream port with a link, and the GPUs and compute NICs below it."""
        below: dict[str, tuple[PcieLink, list[_Linked]]] = {}
        for item in linked_devices(node, expect):
            for address in item.device.switches:
                port = node.pci.get(address)
                if port is not None and port.link is not None:
                    below.setdefault(address, (port.link, []))[1].append(item)
        return below

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for address, (link, items) in self._uplinks(node, expect).items():
            only_gpus = all(i.gpu and not i.busy for i in items)
            label = f"switch uplink {address} (above {_names(items)})"
            findings.append(_judge(self, label, link, speed_may_idle=only_gpus, why_idle="only idle GPUs below"))
        return findings


def _names(items: Sequence[_Linked]) -> str:
    names = [i.label.split(" (")[0] for i in items]
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


class PcieAer(Check):
    """PCIe Advanced Error Reporting counts on GPUs, compute NICs and every bridge above them.

    The kernel counts each error a device reported since boot
    (``drivers/pci/pcie/aer.c``; ``Documentation/PCI/pcieaer-howto.rst``).
    Correctable errors (bad TLPs and DLLPs, replay timeouts, receiver errors)
    are retried in hardware and cost bandwidth; uncorrectable ones lose
    transactions: GPUs fall off the bus (Xid 79), NICs reset.
    """

    id = "pcie.aer"
    title = "No PCIe AER errors on GPUs, compute NICs and the bridges above them"
    reads = "sys/bus/pci/devices/<addr>/aer_dev_{correctable,nonfatal,fatal} of each and of its bridges"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.aer)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        subjects = {item.device.address: item.label for item in linked_devices(node, expect)}
        for bridge, subject in bridges_above(node, expect).items():
            subjects.setdefault(bridge, subject)
        findings = []
        clean = 0
        for address, subject in subjects.items():
            aer = node.aer.get(address)
            if aer is None:
                continue
            found = self._judge(subject, aer.correctable, aer.nonfatal, aer.fatal)
            if found is None:
                clean += 1
            else:
                findings.append(found)
        if clean:
            findings.insert(0, self.finding(Severity.OK, f"{clean} devices and bridges", "no AER errors since boot"))
        return findings

    def _judge(
        self,
        label: str,
        correctable: dict[str, int] | None,
        nonfatal: dict[str, int] | None,
        fatal: dict[str, int] | None,
    ) -> Finding | None:
        def named(counts: dict[str, int] | None) -> str:
            return ", ".join(f"{k} {v}" for k, v in (counts or {}).items() if v and k != "TOTAL")

        kinds = (("correctable", correctable), ("nonfatal", nonfatal), ("fatal", fatal))
        total = {kind: (counts or {}).get("TOTAL", 0) for kind, counts in kinds}
        # The kernel makes the three files together: one missing or unreadable beside the others is not a zero.
        unread = [f"aer_dev_{kind}" for kind, counts in kinds if counts is None]
        if not any(total.values()):
            if not unread:
                return None
            return self.finding(
                Severity.WARN,
                label,
                f"could not read {', '.join(unread)} (the others count no errors)",
                "no errors",
                "probe.read says why; lspci -vvv shows the AER status registers",
            )
        shown = "; ".join(
            f"{kind} {n}" + (f" ({named(counts)})" if named(counts) else "")
            for (kind, n), counts in zip(total.items(), (correctable, nonfatal, fatal), strict=True)
            if n
        ) + (f"; could not read {', '.join(unread)}" if unread else "")
        if total["fatal"] or total["nonfatal"]:
            return self.finding(
                Severity.FAIL,
                label,
                shown,
                "no errors",
                "uncorrectable PCIe errors lose transactions (a GPU falls off the bus, a NIC resets): drain the "
                "node, check dmesg for the AER lines and Xid 79, reseat the card and its riser or retimer",
            )
        return self.finding(
            Severity.WARN,
            label,
            shown,
            "no errors",
            "correctable errors are replayed in hardware and cost link bandwidth; a count that grows means a "
            f"marginal link: {_FIX}",
        )


ACS_BITS = {
    0x1: "SrcValid",
    0x2: "TransBlk",
    0x4: "ReqRedir",
    0x8: "CmpltRedir",
    0x10: "UpstreamFwd",
    0x20: "EgressCtrl",
}
"""ACS Control bits as ``lspci -vvv`` names them (PCIe base spec 7.7.11.3); DirectTrans (0x40) is left out."""
_REDIRECTS = 0x4 | 0x8 | 0x20
"""Request and completion redirect, egress control: what sends peer-to-peer traffic up to the root complex."""


class PcieAcs(Check):
    """PCIe Access Control Services on the bridges above GPUs and NICs.

    With request or completion redirect on, a switch sends every peer-to-peer
    transaction (GPU to GPU, GPU to NIC for GPUDirect RDMA) up to the root
    complex to be checked: bandwidth drops, and with the IOMMU translating,
    transfers fail or NCCL hangs (NCCL troubleshooting guide, "PCI Access
    Control Services (ACS)").  Virtual machines need ACS for isolation; bare
    metal training nodes should have it off.
    """

    id = "pcie.acs"
    title = "ACS does not redirect peer-to-peer traffic on the bridges above GPUs and NICs"
    reads = "sys/bus/pci/devices/<bridge>/config (the ACS extended capability; as root), fabricscope-capture/pci-config"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(config.acs_control is not None for config in node.bridge_config.values())

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for bridge, subject in bridges_above(node, expect).items():
            config = node.bridge_config.get(bridge)
            if config is None:  # others were read: this one's configuration space could not be
                findings.append(
                    self.finding(
                        Severity.INFO,
                        subject,
                        "could not read its configuration space: ACS not known (lspci -vvv, as root, shows ACSCtl)",
                    )
                )
                continue
            control = config.acs_control
            if control is None:
                continue
            names = [name for bit, name in ACS_BITS.items() if control & bit] or ["off"]
            if not control & _REDIRECTS:
                findings.append(self.finding(Severity.OK, subject, f"ACSCtl {' '.join(names)}"))
                continue
            findings.append(
                self.finding(
                    Severity.WARN,
                    subject,
                    f"ACSCtl {' '.join(names)} (0x{control:x})",
                    "no ReqRedir, CmpltRedir or EgressCtrl",
                    "peer-to-peer transfers (GPU to GPU, GPUDirect RDMA) are sent up to the root complex: on bare "
                    f"metal disable ACS on this port (setpci -s {bridge} ECAP_ACS+0x6.w=0000, or the BIOS's ACS "
                    "option); in a VM it is there on purpose, for isolation",
                )
            )
        return findings


_DOWNSTREAM_PORTS = {4: "root port", 6: "switch downstream port"}
"""Port types whose Link Status carries the bandwidth-management bits (Reserved on endpoints and upstream ports)."""
_LBMS = 0x4000
"""Link Status: Link Bandwidth Management Status (``lspci``'s BWMgmt+)."""
_LBMIE = 0x0400
"""Link Control: Link Bandwidth Management Interrupt Enable: the kernel's bandwidth controller takes the bit."""


class PcieRetrain(Check):
    """Links above GPUs and NICs that retrained (Link Status LBMS, ``lspci``'s BWMgmt+).

    A root or switch downstream port sets Link Bandwidth Management Status
    when its link retrained after software asked, or when the hardware changed
    the link's speed or width "to attempt to correct unreliable link operation"
    (PCIe base spec, Link Status register).  Firmware retraining at boot sets it
    too, and so did the kernel's own retrains until "PCI: Clear the LBMS bit
    after a link retrain" (mainline 6.12, for stable 6.5+), so the bit alone is
    a hint: info, with how to clear it and look again.  Set on a port whose link
    now runs narrower (or, for a NIC, slower) than device and slot support, it
    says how the link got there: the hardware fell back to keep a marginal slot,
    riser or retimer up, a warning.  When an interrupt handler owns the bit
    (Link Control LBMIE on: Linux's PCIe bandwidth controller clears it as it is
    set), it is not judged.
    """

    id = "pcie.retrain"
    title = "No link above a GPU or NIC retrained to a narrower or slower link"
    reads = "sys/bus/pci/devices/<bridge>/config (the PCI Express capability's LnkCtl and LnkSta; as root)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(config.link_status is not None for config in node.bridge_config.values())

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        below = {item.device.bridges[-1]: item for item in linked_devices(node, expect) if item.device.bridges}
        findings = []
        for bridge, subject in bridges_above(node, expect).items():
            config = node.bridge_config.get(bridge)
            if config is None or config.link_status is None or config.port_type not in _DOWNSTREAM_PORTS:
                continue
            port = f"{_DOWNSTREAM_PORTS[config.port_type]} {subject.removeprefix('bridge ')}"
            status = config.link_status
            shown = f"LnkSta x{(status >> 4) & 0x3F} at {_GTS.get(status & 0xF, '?')} GT/s"
            clear = f"setpci -s {bridge} CAP_EXP+0x12.w=0x4000"
            if config.link_control is not None and config.link_control & _LBMIE:
                findings.append(
                    self.finding(Severity.INFO, port, f"{shown}; LnkCtl BWInt+: an interrupt handler owns BWMgmt")
                )
            elif status & _LBMS and _fell_back(below.get(bridge)):
                findings.append(
                    self.finding(
                        Severity.WARN,
                        port,
                        f"{shown}, BWMgmt+: the link retrained and runs below what device and slot support",
                        "BWMgmt-",
                        f"the hardware lowered this link's width or speed to keep an unreliable link up: {_FIX}; "
                        f"then clear the bit ({clear}) and run doctor again after a job",
                    )
                )
            elif status & _LBMS:
                findings.append(
                    self.finding(
                        Severity.INFO,
                        port,
                        f"{shown}, BWMgmt+: retrained since the bit was cleared (a retrain at boot sets it too): "
                        f"clear it ({clear}) and look again after a job",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, port, f"{shown}, BWMgmt-"))
        return findings


def _fell_back(item: _Linked | None) -> bool:
    """Whether the device right below a port trained narrower than it and its slot can, or (not a GPU,
    which lowers its speed when idle) slower."""
    link = None if item is None else item.device.link
    if item is None or link is None:
        return False
    current, capable = link.current_width, link.capable_width
    narrower = current is not None and capable is not None and current < capable
    return narrower or (not item.gpu and _below(link.current_gts, link.capable_gts))


_GTS = {1: "2.5", 2: "5", 3: "8", 4: "16", 5: "32", 6: "64"}
"""Link speed codes of LnkSta and LnkCap (PCIe base spec: Supported Link Speeds Vector order)."""
