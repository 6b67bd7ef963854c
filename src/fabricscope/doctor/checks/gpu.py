"""Checks of GPUs, their distance to the NICs, and GPUDirect RDMA."""

from __future__ import annotations

from fabricscope.doctor.checks.base import Check, compute_nic_devices, more_than_expected
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import DISTANCES, Node
from fabricscope.doctor.probes.pci import nearest

__all__ = ["XID_ACTIONS", "GpuCount", "GpuDirectRdma", "GpuNicDistance", "GpuXid"]

GDR_DEFAULT = "PXB"
"""NCCL uses GPUDirect RDMA by default up to this distance (NCCL_NET_GDR_LEVEL's default)."""


class GpuCount(Check):
    id = "gpu.count"
    title = "The expected number of NVIDIA GPUs is on the bus and visible to the driver"
    reads = "sys/bus/pci/devices/*/{vendor,class}; NVML when installed"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        count = len(node.gpus)
        models = sorted({f"10de:{g.device_id:04x}" for g in node.gpus if g.device_id is not None})
        seen = f"{count} GPUs" + (f" ({', '.join(models)})" if models else "") + f", NVML {node.nvml}"
        findings = []
        if expect.gpu_count is not None and count != expect.gpu_count:
            advice = (
                more_than_expected(count, expect.gpu_count, "GPUs", "gpu.count", expect.source)
                if count > expect.gpu_count
                else "a GPU fell off the bus or was never enumerated: check dmesg for Xid/AER errors, "
                "reseat, and check the BIOS; nvidia-smi -q shows what the driver sees"
            )
            findings.append(self.finding(Severity.FAIL, node.hostname, seen, f"{expect.gpu_count} GPUs", advice))
        elif count:
            expected = "" if expect.gpu_count is None else str(expect.gpu_count)
            findings.append(self.finding(Severity.OK, node.hostname, seen, expected))
        else:
            findings.append(self.finding(Severity.INFO, node.hostname, "no NVIDIA GPUs"))
        if node.nvml == "used":
            for gpu in node.gpus:
                if gpu.nvml_index is None:
                    findings.append(
                        self.finding(
                            Severity.FAIL,
                            f"GPU {gpu.pci}",
                            "on the PCI bus but not visible to the NVIDIA driver",
                            "visible to NVML",
                            "check dmesg for NVRM errors for this bus id; reset or reseat the GPU",
                        )
                    )
        return findings


class GpuNicDistance(Check):
    id = "topology.gpu_nic"
    title = f"Every GPU has a compute NIC at {GDR_DEFAULT} or closer (or the expected distance)"
    reads = "sys/bus/pci/devices/<addr> paths (the PCIe tree), numa_node"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus) and bool(compute_nic_devices(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        limit = expect.gpu_nic_distance or GDR_DEFAULT
        nics = compute_nic_devices(node, expect)
        findings = []
        for gpu in node.gpus:
            device = node.pci.get(gpu.pci)
            closest = nearest(device, nics) if device is not None else None
            if device is None or closest is None:
                continue
            how_far, nic = closest
            seen = f"nearest NIC {nic} at {how_far}" + (" (NUMA unknown)" if device.numa_node is None else "")
            if DISTANCES.index(how_far) <= DISTANCES.index(limit):
                findings.append(self.finding(Severity.OK, f"GPU {gpu.pci}", seen, f"{limit} or closer"))
                continue
            findings.append(
                self.finding(
                    Severity.FAIL if expect.gpu_nic_distance else Severity.WARN,
                    f"GPU {gpu.pci}",
                    seen,
                    f"{limit} or closer",
                    "traffic from this GPU crosses the CPU"
                    + (" and the socket interconnect" if how_far == "SYS" else "")
                    + " and NCCL will not use GPUDirect RDMA for it by default: put a NIC under the same "
                    "PCIe switch, or bind this GPU's ranks to the NIC on its own socket (NCCL_IB_HCA)",
                )
            )
        return findings


class GpuDirectRdma(Check):
    id = "gpudirect.rdma"
    title = "GPUDirect RDMA is possible: nvidia-peermem loaded, or DMA-BUF (open kernel module, Linux 5.12+)"
    reads = (
        "sys/kernel/mm/memory_peers/nv_mem{,_nc}/version, sys/module/nvidia_peermem/version, "
        "proc/driver/nvidia/version, proc/sys/kernel/osrelease"
    )

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus) and bool(node.ports)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        gdr = node.gpudirect
        kernel = f"Linux {gdr.kernel[0]}.{gdr.kernel[1]}" if gdr.kernel else "kernel unknown"
        if gdr.peermem is not None:
            return [self.finding(Severity.OK, node.hostname, f"peer-memory module ({gdr.peermem})")]
        if gdr.dmabuf_possible:
            seen = f"DMA-BUF: open kernel module {gdr.driver_version}, {kernel}"
            return [self.finding(Severity.OK, node.hostname, seen)]
        flavour = {True: "open", False: "proprietary", None: "unknown"}[gdr.open_kernel_module]
        return [
            self.finding(
                Severity.FAIL,
                node.hostname,
                f"no peer-memory module; driver {gdr.driver_version or 'unknown'} ({flavour}), {kernel}",
                "nvidia-peermem loaded, or DMA-BUF",
                "load nvidia-peermem (modprobe nvidia-peermem; persist it in /etc/modules-load.d), or use "
                "the open GPU kernel module on Linux 5.12+ for DMA-BUF; without either NCCL stages every "
                "inter-node transfer through host memory",
            )
        ]


_RESET = "drain the node and reset the GPU (nvidia-smi -r) or reboot"
_RMA = "if it comes back after a reset, the GPU needs replacing (nvidia-bug-report.sh for the vendor)"
XID_ACTIONS: dict[int, tuple[Severity, str, str]] = {
    13: (Severity.INFO, "graphics engine exception", "usually the application (out-of-range access)"),
    31: (Severity.INFO, "GPU memory page fault", "usually the application (an illegal address)"),
    43: (Severity.INFO, "GPU stopped processing", "the application faulted; the GPU is fine"),
    45: (Severity.INFO, "preemptive cleanup", "follows another error or a killed process"),
    48: (Severity.FAIL, "double-bit ECC error", f"{_RESET}; {_RMA}"),
    61: (Severity.FAIL, "internal micro-controller breakpoint", _RESET),
    62: (Severity.FAIL, "internal micro-controller halt", _RESET),
    63: (Severity.WARN, "ECC page retirement or row remapping recorded", "reset the GPU when idle to apply it"),
    64: (Severity.FAIL, "ECC page retirement or row remapping failed", f"{_RESET}; {_RMA}"),
    74: (Severity.FAIL, "NVLink error", f"{_RESET}; nvidia-smi nvlink -e shows the failing link; {_RMA}"),
    79: (Severity.FAIL, "GPU has fallen off the bus", "drain and reboot; check PCIe (pcie.aer), power and cooling"),
    92: (Severity.WARN, "high single-bit ECC error rate", "watch it; a GPU that keeps counting needs replacing"),
    94: (Severity.WARN, "contained ECC error", "the affected process was stopped; reset the GPU when idle"),
    95: (Severity.FAIL, "uncontained ECC error", f"{_RESET}; {_RMA}"),
    109: (Severity.WARN, "context switch timeout", "a stuck kernel or a hardware fault: reset if it repeats"),
    119: (Severity.FAIL, "GSP RPC timeout", f"{_RESET}; update the driver if it repeats"),
    120: (Severity.FAIL, "GSP error", f"{_RESET}; update the driver if it repeats"),
    121: (Severity.FAIL, "C2C link error", _RESET),
    140: (Severity.FAIL, "unrecovered ECC error", f"{_RESET}; {_RMA}"),
    154: (Severity.FAIL, "GPU recovery action changed (reset or reboot required)", _RESET),
}
"""Xid codes: severity, name and action, from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)."""


class GpuXid(Check):
    """NVIDIA driver errors since boot, one finding per GPU and Xid code."""

    id = "gpu.xid"
    title = "No GPU hardware errors (NVIDIA Xid) in the kernel log since boot"
    reads = "the kernel log: /dev/kmsg (live, as root), fabricscope-capture/dmesg (a capture, or a dmesg put there)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        if node.xids is None:
            return [self.finding(Severity.INFO, "kernel log", f"not read: {node.kernel_log}")]
        if not node.xids:
            return [self.finding(Severity.OK, "kernel log", f"no Xid errors ({node.kernel_log})")]
        findings = []
        for xid in node.xids:
            severity, name, action = XID_ACTIONS.get(
                xid.code,
                (Severity.WARN, "Xid", "look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)"),
            )
            times = f"{xid.count} times" if xid.count > 1 else "once"
            findings.append(
                self.finding(
                    severity,
                    f"GPU {xid.device}",
                    f"Xid {xid.code} ({name}) {times}: {xid.message}",
                    "no Xid errors",
                    action,
                )
            )
        return findings
