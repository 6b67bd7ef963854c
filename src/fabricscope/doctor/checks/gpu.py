"""Checks of GPUs, their distance to the NICs, and GPUDirect RDMA."""

from __future__ import annotations

import re

from fabricscope.doctor.checks.base import Check, compute_nic_devices, more_than_expected
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import DISTANCES, GpuHealth, Node, NvLink
from fabricscope.doctor.probes.nvml import ANSWERED
from fabricscope.doctor.probes.pci import nearest

__all__ = [
    "CLOCK_EVENTS",
    "DRIVER_FOR_CUDA",
    "XID_ACTIONS",
    "GpuClocks",
    "GpuCount",
    "GpuDirectRdma",
    "GpuDriverCuda",
    "GpuEcc",
    "GpuNicDistance",
    "GpuNvLink",
    "GpuPersistence",
    "GpuXid",
    "driver_cuda_major",
]

_SMI = "; without nvidia-ml-py: nvidia-smi -q (fabricscope-capture/nvidia-smi-q in a capture)"
GDR_DEFAULT = "PXB"
"""NCCL uses GPUDirect RDMA by default up to this distance (NCCL_NET_GDR_LEVEL's default)."""


class GpuCount(Check):
    id = "gpu.count"
    title = "The expected number of NVIDIA GPUs is on the bus and visible to the driver"
    reads = "sys/bus/pci/devices/*/{vendor,class}; NVML when installed, else nvidia-smi -q; proc/driver/nvidia/gpus"

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
        if node.nvml in ANSWERED:
            for gpu in node.gpus:
                device = node.pci.get(gpu.pci)
                bound = device is not None and device.driver == "nvidia"
                if (
                    gpu.nvml_index is None
                    and bound
                    and node.driver_gpus is not None
                    and gpu.pci not in node.driver_gpus
                ):
                    # sysfs shows every GPU of the machine, bound to the driver; a container's driver folder
                    # only those it was given. One the driver never bound is lost, in a container or not.
                    findings.append(
                        self.finding(
                            Severity.INFO,
                            f"GPU {gpu.pci}",
                            "on the PCI bus, not given to this container (not in /proc/driver/nvidia/gpus)",
                        )
                    )
                elif gpu.nvml_index is None:
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


DRIVER_FOR_CUDA = ((13, (580, 65, 6)), (12, (525, 60, 13)), (11, (450, 80, 2)))
"""The oldest Linux driver that runs each CUDA major version's libraries, any minor version of it (NVIDIA's
CUDA Compatibility guide, "Minor Version Compatibility"; CUDA 13: the 13.0 release notes' driver)."""
_WHEEL_CUDA = re.compile(r"^nvidia-nccl-cu([0-9]{2}) ")


def driver_cuda_major(driver: str | None, cuda: str | None) -> int | None:
    """The CUDA major version a driver runs: NVML's answer (``12.2``), else its version against the table."""
    if cuda and cuda.split(".")[0].isdigit() and len(cuda) < 12:
        return int(cuda.split(".")[0])
    parts = (driver or "").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and len(p) <= 6 for p in parts):
        return None
    version = tuple(int(p) for p in parts)
    return next((major for major, oldest in DRIVER_FOR_CUDA if version >= oldest), 10)


class GpuDriverCuda(Check):
    """The driver runs the CUDA libraries the node's Python loads (torch's CUDA builds and their NCCL wheel)."""

    id = "gpu.driver_cuda"
    title = "The NVIDIA driver runs the CUDA major version of the NCCL wheel (nvidia-nccl-cuXX)"
    reads = "proc/driver/nvidia/version (or sys/module/nvidia/version), NVML's CUDA version, the NCCL wheel"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus) and _WHEEL_CUDA.match(node.libraries.get("NCCL (Python wheel)", "")) is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        wheel = node.libraries.get("NCCL (Python wheel)", "")
        match = _WHEEL_CUDA.match(wheel)
        runs = driver_cuda_major(node.gpudirect.driver_version, node.cuda_driver)
        if match is None or runs is None:
            return []
        needs = int(match.group(1))
        shown = f"driver {node.gpudirect.driver_version or 'unknown'} runs CUDA {runs}; {wheel} needs CUDA {needs}"
        if runs >= needs:
            return [self.finding(Severity.OK, node.hostname, shown)]
        oldest = dict(DRIVER_FOR_CUDA).get(needs)
        wanted = f"a driver from {'.'.join(map(str, oldest))} on" if oldest else f"a driver for CUDA {needs}"
        return [
            self.finding(
                Severity.WARN,
                node.hostname,
                shown,
                wanted,
                "unless the node uses CUDA's forward-compatibility package (cuda-compat, data-center GPUs), "
                "every CUDA call of the job fails ('CUDA driver version is insufficient for CUDA runtime "
                f"version'): upgrade the driver, or install the cu{runs} builds of torch and its NCCL wheel",
            )
        ]


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
        # The driver names a GPU without its function (PCI:0000:4c:00); every other check names it in full.
        functions = {gpu.pci.rpartition(".")[0]: gpu.pci for gpu in node.gpus if gpu.pci}
        for xid in node.xids:
            device = functions.get(xid.device, f"{xid.device}.0")
            severity, name, action = XID_ACTIONS.get(
                xid.code,
                (Severity.WARN, "Xid", "look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)"),
            )
            times = f"{xid.count} times" if xid.count > 1 else "once"
            findings.append(
                self.finding(
                    severity,
                    f"GPU {device}",
                    f"Xid {xid.code} ({name}) {times}: {xid.message}",
                    "no Xid errors",
                    action,
                )
            )
        return findings


class _NvmlCheck(Check):
    """A check of what NVML says about each GPU: applies when NVML answered (live, or a capture of it)."""

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(g.health is not None for g in node.gpus)

    def health(self, node: Node) -> list[tuple[str, GpuHealth]]:
        return [(f"GPU {g.pci}", g.health) for g in node.gpus if g.health is not None]


class GpuPersistence(_NvmlCheck):
    id = "gpu.persistence"
    title = "Persistence mode is on (the driver stays loaded between jobs)"
    reads = "NVML nvmlDeviceGetPersistenceMode (fabricscope-capture/nvml.json in a capture)" + _SMI

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for subject, health in self.health(node):
            if health.persistence is None:
                continue
            if health.persistence:
                findings.append(self.finding(Severity.OK, subject, "persistence mode on"))
                continue
            findings.append(
                self.finding(
                    Severity.WARN,
                    subject,
                    "persistence mode off",
                    "on",
                    "without it the driver tears the GPU down when the last process exits and sets it up again for "
                    "the next job (seconds per GPU at start-up, clocks and ECC state reset): run nvidia-persistenced "
                    "(or nvidia-smi -pm 1)",
                )
            )
        return findings


RETIRED_PAGES_LIMIT = 63
"""Retired pages (both causes) at which DCGM's health watch fails a GPU (``DCGM_LIMIT_MAX_RETIRED_PAGES``,
"updated to match the field diag"; 60 in earlier releases): the GPU has no spare pages left to retire."""


class GpuEcc(_NvmlCheck):
    id = "gpu.ecc"
    title = "No uncorrected ECC errors, no row remapping or page retirement pending or failed"
    reads = (
        "NVML nvmlDeviceGetTotalEccErrors (volatile, aggregate), nvmlDeviceGetRemappedRows, "
        "nvmlDeviceGetRetiredPages, nvmlDeviceGetRetiredPagesPendingStatus" + _SMI
    )

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for subject, health in self.health(node):
            volatile, aggregate = health.ecc_volatile or 0, health.ecc_aggregate or 0
            seen = f"uncorrected ECC {volatile} since the driver loaded, {aggregate} in the GPU's life"
            retired = health.retired_pages or 0
            if health.retired_pages is not None:
                seen += f"; {retired} pages retired"
            if retired >= RETIRED_PAGES_LIMIT:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        subject,
                        seen,
                        f"fewer than {RETIRED_PAGES_LIMIT} retired pages",
                        "the GPU has retired as many pages as it can (DCGM's health watch fails it here): it needs "
                        "replacing (nvidia-bug-report.sh for the vendor)",
                    )
                )
            elif health.remap_failed:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        subject,
                        f"{seen}; row remapping failed",
                        "no remapping failure",
                        "the GPU ran out of spare rows: it needs replacing (nvidia-bug-report.sh for the vendor)",
                    )
                )
            elif volatile:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        subject,
                        seen,
                        "0 since the driver loaded",
                        "an uncorrected error killed or corrupted work on this GPU: drain the node and reset the GPU "
                        "(nvidia-smi -r) so the bad row is remapped; a GPU that keeps counting needs replacing",
                    )
                )
            elif health.remap_pending:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{seen}; a row remapping is pending",
                        "no pending remapping",
                        "the remapping takes effect at the next GPU reset: reset it (nvidia-smi -r) when it is idle",
                    )
                )
            elif health.retired_pending:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{seen}; a page retirement is pending",
                        "no pending retirement",
                        "the bad page is still handed out until the driver reloads (NVIDIA's Dynamic Page Retirement "
                        "guide): reset the GPU (nvidia-smi -r) or reboot when it is idle",
                    )
                )
            elif aggregate or retired:
                findings.append(
                    self.finding(
                        Severity.INFO,
                        subject,
                        seen,
                        advice="past errors, remapped or retired: watch that the count does not grow",
                    )
                )
            elif (
                health.ecc_volatile is not None or health.remap_pending is not None or health.retired_pages is not None
            ):
                findings.append(self.finding(Severity.OK, subject, seen))
        return findings


PCIE_REPLAYS_PER_MINUTE = 8
"""DCGM's limit on a GPU's PCIe replays, per minute (``DCGM_LIMIT_MAX_PCIREPLAY_RATE``, "the maximum
recommended by RM", the driver's resource manager; its PCIe health watch fails a GPU above it)."""


class GpuPcieReplays(_NvmlCheck):
    id = "gpu.pcie_replay"
    title = "No GPU's PCIe link retransmits more than DCGM's 8 replays a minute"
    reads = "NVML nvmlDeviceGetPcieReplayCounter (replays since the driver loaded), proc/uptime" + _SMI

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        uptime_s = node.uptime_s
        minutes = uptime_s / 60 if uptime_s else None
        for subject, health in self.health(node):
            count = health.pcie_replays
            if count is None:
                continue
            seen = f"{count} PCIe replays since the driver loaded"
            if count == 0:
                findings.append(self.finding(Severity.OK, subject, seen))
                continue
            # The driver loaded after boot: replays over the uptime is a floor of their rate since it loaded.
            rate = count / minutes if minutes else None
            if rate is not None and uptime_s and rate > PCIE_REPLAYS_PER_MINUTE:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{seen}: at least {rate:.3g} a minute on average ({uptime_s / 3600:.3g} h up)",
                        f"at most {PCIE_REPLAYS_PER_MINUTE} a minute (DCGM)",
                        "the GPU's PCIe link keeps retransmitting (a marginal slot, riser or retimer) and each replay "
                        "costs link bandwidth: see pcie.aer and pcie.link for the same GPU and the switch above it, "
                        "reseat it, and watch the rate with dcgmi health -s p",
                    )
                )
                continue
            floor = f": {rate:.3g} a minute on average since boot" if rate is not None else ""
            findings.append(
                self.finding(
                    Severity.INFO,
                    subject,
                    seen + floor,
                    f"at most {PCIE_REPLAYS_PER_MINUTE} a minute (DCGM)",
                    "a few replays are retried by the link; a count that keeps growing means a marginal link",
                )
            )
        return findings


CLOCK_EVENTS = {
    0x8: ("HW slowdown", Severity.FAIL),
    0x40: ("HW thermal slowdown", Severity.FAIL),
    0x80: ("HW power brake", Severity.FAIL),
    0x20: ("SW thermal slowdown", Severity.WARN),
    0x4: ("SW power cap", Severity.WARN),
}
"""``nvmlClocksEventReason*`` bits that slow an idle GPU's clocks (nvml.h); idle (0x1), application clocks (0x2),
sync boost (0x10) and display clocks (0x100) are normal."""


class GpuClocks(_NvmlCheck):
    id = "gpu.clocks"
    title = "No GPU is held below its clocks by hardware slowdown, thermal or power limits while idle"
    reads = "NVML nvmlDeviceGetCurrentClocksEventReasons (throttle reasons) and utilization" + _SMI

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        busy = {f"GPU {g.pci}": g.busy for g in node.gpus}
        for subject, health in self.health(node):
            mask = health.clock_events
            if mask is None:
                continue
            active = [(name, severity) for bit, (name, severity) in CLOCK_EVENTS.items() if mask & bit]
            if busy.get(subject):  # under load, power caps and thermal limits are the GPU doing its job
                active = [(name, severity) for name, severity in active if severity is Severity.FAIL]
            if not active:
                findings.append(self.finding(Severity.OK, subject, f"clock event reasons 0x{mask:x}"))
                continue
            worst = max(severity for _, severity in active)
            findings.append(
                self.finding(
                    worst,
                    subject,
                    f"{', '.join(name for name, _ in active)} (0x{mask:x})" + ("" if busy.get(subject) else " at idle"),
                    "no slowdown",
                    "hardware slowdown and power brake come from the board (a PSU or power cable fault, an external "
                    "brake signal) and thermal ones from cooling: check nvidia-smi -q -d PERFORMANCE,TEMPERATURE,"
                    "POWER, the fans and airflow; a GPU that slows alone slows every collective it is part of",
                )
            )
        return findings


def _link_errors(link: NvLink) -> dict[str, int]:
    counted = (("crc", link.crc), ("replay", link.replay), ("recovery", link.recovery))
    return {name: count for name, count in counted if count}


class GpuNvLink(_NvmlCheck):
    id = "gpu.nvlink"
    title = "Every NVLink is up, as many as its twins have, without CRC, replay or recovery errors"
    reads = "NVML nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter (DL replay, recovery, CRC flit)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(g.health is not None and g.health.nvlinks for g in node.gpus)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        links = {subject: health.nvlinks for subject, health in self.health(node) if health.nvlinks}
        most = max(sum(1 for link in items if link.active) for items in links.values())
        findings = []
        for subject, items in links.items():
            up = [link.link for link in items if link.active]
            down = [link.link for link in items if link.active is False]
            errors = {
                f"link {link.link}": {
                    k: v for k, v in (("crc", link.crc), ("replay", link.replay), ("recovery", link.recovery)) if v
                }
                for link in items
            }
            errors = {k: v for k, v in errors.items() if v}
            seen = f"{len(up)} of {len(items)} links up" + (f" (down: {', '.join(map(str, down))})" if down else "")
            if len(up) < most:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        subject,
                        seen,
                        f"{most} links up, like its twins",
                        "a link that is down halves (or worse) this GPU's NVLink bandwidth and NCCL routes around it: "
                        "reset the GPU; if it stays down, reseat or replace the board (nvidia-smi nvlink -s)",
                    )
                )
            elif errors:
                shown = "; ".join(f"{k}: " + ", ".join(f"{n} {c}" for n, c in v.items()) for k, v in errors.items())
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{seen}; {shown}",
                        "no link errors",
                        "CRC errors are retried (replays) and cost bandwidth; recoveries stall the link: watch "
                        "nvidia-smi nvlink -e, and reset or replace the GPU board if they grow",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, subject, seen))
        return findings
