"""Checks of the PCIe links of GPUs and compute NICs.

A device's best link is the lower of its own maximum and its upstream port's
(NCCL takes the same minimum, ``src/graph/xml.cc``).  GPUs lower their link
when idle ("may be reduced when the GPU is not in use", nvidia-smi), so a GPU
below its best is a warning unless NVML says it is busy; a NIC below its best
is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricscope.doctor.checks.base import Check, compute_nics, compute_ports, format_link
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Node, PciDevice, PcieLink
from fabricscope.doctor.parsers import pcie_generation

__all__ = ["PcieLinkCheck", "PcieSlot", "linked_devices"]


@dataclass(frozen=True, slots=True)
class _Linked:
    label: str
    device: PciDevice
    gpu: bool
    busy: bool | None


def linked_devices(node: Node, expect: Expectations) -> list[_Linked]:
    """GPUs and the PCI functions of compute NICs and RDMA devices, each once."""
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


def _below(current: float | None, best: float | None) -> bool:
    return current is not None and best is not None and current < best


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
            findings.append(self._current(item, link))
            if expect.pcie_gen is not None or expect.pcie_width is not None:
                findings.append(self._expected(item, link, expect))
        return findings

    def _current(self, item: _Linked, link: PcieLink) -> Finding:
        best = format_link(link.capable_gts, link.capable_width)
        seen = format_link(link.current_gts, link.current_width)
        if None in (link.current_gts, link.current_width, link.capable_gts, link.capable_width):
            return self.finding(Severity.INFO, item.label, seen, best)
        slow = _below(link.current_gts, link.capable_gts) or _below(link.current_width, link.capable_width)
        if not slow:
            return self.finding(Severity.OK, item.label, seen, best)
        if item.gpu and not item.busy:
            return self.finding(
                Severity.WARN,
                item.label,
                f"{seen} ({'idle' if item.busy is False else 'load unknown'})",
                best,
                "idle GPUs lower their PCIe link to save power: run doctor again while the GPU is busy; "
                "if it stays low under load, reseat the GPU or check the riser",
            )
        return self.finding(
            Severity.FAIL,
            item.label,
            seen,
            best,
            "the link trained below what device and slot support: reseat the card, check the riser or "
            "retimer, and the BIOS slot settings (lspci -vv shows LnkSta)",
        )

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
