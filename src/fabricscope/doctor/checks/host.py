"""Checks of node-wide kernel settings that slow RDMA and NCCL's transports, or make them fail.

Sources: NCCL's troubleshooting guide (docs.nvidia.com/deeplearning/nccl,
"Troubleshooting": shared memory in containers, locked memory, IOMMU and PCI
ACS for GPUDirect), NVIDIA's GPUDirect RDMA guide (IOMMU passthrough), AMD's
Instinct system-tuning guide and the Mellanox/NVIDIA performance tuning notes
(NUMA balancing off, the ``performance`` CPU governor).
"""

from __future__ import annotations

from fabricscope.doctor.checks.base import Check, compute_nic_devices
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Node
from fabricscope.units import format_size

__all__ = [
    "HUGE_PAGES_UNUSED",
    "SHM_NEEDED",
    "HostGovernor",
    "HostHugePages",
    "HostIommu",
    "HostMemlock",
    "HostNumaBalancing",
    "HostShm",
]

SHM_NEEDED = 1 << 30
"""``/dev/shm`` NCCL's shared-memory transport wants: the guide's ``--shm-size=1g`` (Docker's default is 64 MiB)."""
DOCKER_SHM = 64 << 20


class HostMemlock(Check):
    id = "host.memlock"
    title = "The locked-memory limit lets RDMA register NCCL's buffers (unlimited)"
    reads = "proc/self/limits (the limit this process, and a job started the same way, runs with)"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.ports)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        subject = "max locked memory"
        limit = node.host.memlock
        if limit is None:
            return [self.finding(Severity.INFO, subject, "unreadable", "unlimited")]
        soft, hard = limit
        shown = f"soft {_limit(soft)}, hard {_limit(hard)} ({node.host.memlock_source})"
        if soft is None:
            return [self.finding(Severity.OK, subject, shown, "unlimited")]
        raise_it = "ulimit -l unlimited in the job" if hard is None else "raise the hard limit, then ulimit -l"
        return [
            self.finding(
                Severity.FAIL,
                subject,
                shown,
                "unlimited",
                f"RDMA pins every buffer it registers, and NCCL registers its buffers (and user buffers) with "
                f"the HCA: a capped limit fails with 'ibv_reg_mr failed' or 'Cannot allocate memory'. {raise_it}; "
                "persist 'memlock unlimited' in /etc/security/limits.d/, LimitMEMLOCK=infinity for slurmd "
                "(with PropagateResourceLimits), or docker run --ulimit memlock=-1",
            )
        ]


def _limit(value: int | None) -> str:
    return "unlimited" if value is None else format_size(value)


class HostShm(Check):
    id = "host.shm"
    title = "/dev/shm is large enough for NCCL's shared-memory transport (1 GiB or more)"
    reads = "proc/self/mounts (the size= of /dev/shm), proc/meminfo"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        size = node.host.shm_bytes
        wanted = f">= {format_size(SHM_NEEDED)}"
        if size is None:
            return [self.finding(Severity.INFO, "/dev/shm", node.host.shm_source or "size unknown", wanted)]
        shown = f"{format_size(size)} ({node.host.shm_source})"
        if size >= SHM_NEEDED:
            return [self.finding(Severity.OK, "/dev/shm", shown, wanted)]
        docker = " (Docker's default)" if size == DOCKER_SHM else ""
        return [
            self.finding(
                Severity.FAIL,
                "/dev/shm",
                shown + docker,
                wanted,
                "NCCL keeps its intra-node (SHM) buffers and proxy state in /dev/shm: too small, ranks fail with "
                "'Bus error' or 'unhandled system error' when it fills. Run the container with --shm-size=1g "
                "(or --ipc=host), in Kubernetes mount an emptyDir with medium: Memory at /dev/shm",
            )
        ]


HUGE_PAGES_UNUSED = 0.10
"""Share of RAM held in unused persistent huge pages above which the node is warned about (this tool's line:
a tenth of RAM is more than NCCL's and a data loader's pinned buffers take on most nodes)."""


class HostHugePages(Check):
    """Persistent huge pages reserved and left unused.

    Pages in the huge page pool (``vm.nr_hugepages``, the ``hugepages=`` boot
    parameter) are taken out of the memory everything else allocates from and
    stay out, used or not (the kernel's ``Documentation/admin-guide/mm/hugetlbpage.rst``).
    NCCL, PyTorch's pinned buffers and data loaders use ordinary pages: a pool
    nothing on a training node uses is RAM they cannot have (pinned allocations
    fail, the page cache shrinks, loaders are OOM-killed).
    """

    id = "host.hugepages"
    title = "No large pool of persistent huge pages sits unused"
    reads = (
        "sys/kernel/mm/hugepages/hugepages-*/{nr,free,resv}_hugepages (every page size), else proc/meminfo "
        "(HugePages_Total, _Free, _Rsvd, Hugepagesize); MemTotal"
    )

    def applies(self, node: Node, expect: Expectations) -> bool:
        return node.host.huge_pages is not None and bool(node.host.mem_total)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        pools, memory = node.host.huge_pages, node.host.mem_total
        if pools is None or not memory:
            return []
        subject = "vm.nr_hugepages"
        reserved = sum(size * (pages or 0) for size, pages, _, _ in pools)
        unread = [
            size for size, pages, free, promised in pools if pages is None or (pages and None in (free, promised))
        ]
        if reserved == 0 and not unread:
            return [self.finding(Severity.OK, subject, "no persistent huge pages reserved")]
        sizes = ", ".join(f"{pages} pages of {format_size(size)}" for size, pages, _, _ in pools if pages)
        # Free pages promised to mappings already made (reserved) are used; the rest nothing has. A pool
        # whose counts could not be read adds nothing here: an unread count is not a zero.
        unused = sum(
            size * max(free - promised, 0)
            for size, pages, free, promised in pools
            if size not in unread and free is not None and promised is not None
        )
        shown = (
            f"{sizes or 'no pages read'}: {format_size(reserved)} reserved ({100 * reserved / memory:.0f}% of RAM), "
            f"{format_size(unused)} of it unused"
        )
        if unread:
            shown += (
                f"; could not read the {', '.join(format_size(size) for size in unread)} pool (probe.read says why)"
            )
        wanted = f"unused pool under {HUGE_PAGES_UNUSED:.0%} of RAM"
        if unused < HUGE_PAGES_UNUSED * memory:
            return [self.finding(Severity.INFO if unread else Severity.OK, subject, shown, wanted)]
        return [
            self.finding(
                Severity.WARN,
                subject,
                shown,
                wanted,
                "the huge page pool is taken out of the memory NCCL, pinned buffers and data loaders allocate "
                "from, used or not: unless a job on this node uses huge pages (DPDK, a database), shrink it "
                "(sysctl -w vm.nr_hugepages=0, and the hugepages= boot parameter or /etc/sysctl.d/ that set it)",
            )
        ]


class HostNumaBalancing(Check):
    id = "host.numa_balancing"
    title = "Automatic NUMA balancing is off"
    reads = "proc/sys/kernel/numa_balancing"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return node.host.numa_balancing is not None

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        value = node.host.numa_balancing
        subject = "kernel.numa_balancing"
        if not value:
            return [self.finding(Severity.OK, subject, str(value), "0")]
        return [
            self.finding(
                Severity.WARN,
                subject,
                str(value),
                "0",
                "the kernel unmaps pages to sample which node touches them and migrates them: page faults and "
                "migrations stall the CPU threads that feed GPUs and NICs (NCCL's proxy, data loaders). "
                "sysctl -w kernel.numa_balancing=0 and persist it in /etc/sysctl.d/",
            )
        ]


class HostGovernor(Check):
    id = "host.cpu_governor"
    title = "Every CPU runs the performance frequency governor"
    reads = "sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.host.governors)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        governors = node.host.governors
        shown = ", ".join(f"{n} CPUs {name}" for name, n in sorted(governors.items(), key=lambda item: -item[1]))
        if set(governors) == {"performance"}:
            return [self.finding(Severity.OK, "cpufreq", shown, "performance")]
        return [
            self.finding(
                Severity.WARN,
                "cpufreq",
                shown,
                "performance",
                "a power-saving governor lets cores clock down between bursts, which adds latency to NCCL's "
                "proxy thread and to the interrupts of the NICs: cpupower frequency-set -g performance "
                "(persist it with tuned's network-latency or throughput-performance profile)",
            )
        ]


_PASSTHROUGH = ("identity",)
_TRANSLATED = ("DMA", "DMA-FQ")


class HostIommu(Check):
    id = "host.iommu"
    title = "GPUs and compute NICs are not behind IOMMU translation (passthrough for GPUDirect RDMA)"
    reads = "sys/bus/pci/devices/<addr>/iommu_group/type, sys/class/iommu, proc/cmdline"

    def applies(self, node: Node, expect: Expectations) -> bool:
        return bool(node.gpus) and bool(compute_nic_devices(node, expect))

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        devices = [(f"GPU {g.pci}", node.pci.get(g.pci)) for g in node.gpus]
        devices += [(f"{name} ({d.address})", d) for name, d in compute_nic_devices(node, expect)]
        translated = [(label, d.iommu) for label, d in devices if d is not None and d.iommu in _TRANSLATED]
        if not translated:
            kinds = sorted({d.iommu or "no IOMMU group" for _, d in devices if d is not None})
            return [self.finding(Severity.OK, "IOMMU", ", ".join(kinds) or "no IOMMU group", "passthrough or off")]
        cmdline = node.host.cmdline or ""
        passthrough = "iommu=pt" in cmdline.split() or "iommu.passthrough=1" in cmdline.split()
        fix = (
            "iommu=pt is on the kernel command line, so this group was switched to translation at run time: "
            "set it back (echo identity > /sys/kernel/iommu_groups/<n>/type with the driver unbound)"
            if passthrough
            else "add iommu=pt to the kernel command line"
        )
        return [
            self.finding(
                Severity.WARN,
                label,
                f"IOMMU domain {kind}",
                "identity (passthrough)",
                "with IOMMU translation, GPUDirect RDMA and PCIe peer-to-peer transfers are remapped or blocked: "
                f"NCCL hangs or falls back to slower paths (NCCL troubleshooting, 'IOMMU'). {fix}, or disable "
                "the IOMMU in the BIOS for bare-metal training nodes",
            )
            for label, kind in translated
        ]
