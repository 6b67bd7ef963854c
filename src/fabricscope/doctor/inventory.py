"""What the probes saw on one node: plain typed records, no logic.

A field is None when the node did not say (a missing file, ``-1``, EINVAL);
the checks turn None into "unknown", never into a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricscope.sysroot import Anomaly

__all__ = [
    "DISTANCES",
    "Aer",
    "Anomaly",
    "BridgeConfig",
    "Gid",
    "Gpu",
    "GpuDirect",
    "GpuHealth",
    "HostTuning",
    "NcclSetting",
    "NetInterface",
    "Node",
    "NvLink",
    "PciDevice",
    "PcieLink",
    "RdmaDevice",
    "RdmaPort",
    "TcpTuning",
    "Xid",
]

DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""GPU-to-NIC PCIe distances as ``nvidia-smi topo -m`` names them, nearest first."""


@dataclass(kw_only=True, slots=True)
class PcieLink:
    """Speed (GT/s per lane) and width (lanes) of one device's PCIe link."""

    current_gts: float | None
    max_gts: float | None
    current_width: int | None
    max_width: int | None
    upstream_max_gts: float | None = None
    """What the port above the device (root port or switch port) can do."""
    upstream_max_width: int | None = None

    @property
    def capable_gts(self) -> float | None:
        """The best speed the device can reach in this slot: min(device, upstream port)."""
        return _min(self.max_gts, self.upstream_max_gts)

    @property
    def capable_width(self) -> int | None:
        values = [v for v in (self.max_width, self.upstream_max_width) if v is not None]
        return min(values) if values else None


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """The registers the doctor reads from a bridge's PCI configuration space (as ``lspci -vvv`` decodes them)."""

    acs_control: int | None
    """The ACS Control register (ACSCtl); None when the bridge has no ACS capability."""
    port_type: int | None = None
    """The PCI Express Capabilities register's Device/Port Type: 4 root port, 5 switch upstream port, 6 switch
    downstream port; None without a PCI Express capability."""
    link_control: int | None = None
    """Link Control (LnkCtl)."""
    link_status: int | None = None
    """Link Status (LnkSta): current speed and width, and the bandwidth-management bits."""


def _min(a: float | None, b: float | None) -> float | None:
    values = [v for v in (a, b) if v is not None]
    return min(values) if values else None


@dataclass(kw_only=True, slots=True)
class PciDevice:
    """One PCI function: where it sits in the tree, what it is, how it is linked."""

    address: str
    """``0000:17:00.0``."""
    root: str
    """The host bridge it hangs from, ``pci0000:15``; devices under one root share a root complex."""
    bridges: tuple[str, ...]
    """Addresses of the bridges between the root and the device, top first."""
    vendor: int | None = None
    device: int | None = None
    class_code: int | None = None
    numa_node: int | None = None
    """None when the kernel says -1 (unknown) or nothing."""
    driver: str | None = None
    link: PcieLink | None = None
    """None when the device has no link files (virtio, integrated devices)."""
    switches: tuple[str, ...] = ()
    """The upstream ports of the PCIe switches above the device, nearest first (their links are the uplinks)."""
    iommu: str | None = None
    """Its IOMMU group's domain type: ``identity`` (passthrough), ``DMA``/``DMA-FQ`` (translated); None if none."""
    irqs: dict[int, frozenset[int] | None] = field(default_factory=dict)
    """Its MSI/MSI-X interrupts (``msi_irqs/``) and the CPUs each may run on (``/proc/irq/<n>/smp_affinity_list``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Aer:
    """A PCI function's Advanced Error Reporting counts since boot, by error name, with ``TOTAL``.

    From ``aer_dev_correctable``, ``aer_dev_nonfatal`` and ``aer_dev_fatal``;
    None where the file is absent (no AER capability, or a kernel before 5.5).
    """

    correctable: dict[str, int] | None
    nonfatal: dict[str, int] | None
    fatal: dict[str, int] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Qos:
    """A RoCE NIC's QoS state as MLNX_OFED's ``mlnx_qos -i <if>`` prints it."""

    trust: str | None
    """``pcp`` (the priority is the VLAN tag's, for RoCE the QP's service level) or ``dscp`` (the IP header's)."""
    dscp_priority: dict[int, int]
    """Its DSCP-to-priority map (used under DSCP trust); empty when not printed."""
    pfc: tuple[int, ...] | None
    """The priorities PFC is enabled on; None when not printed."""


@dataclass(kw_only=True, slots=True)
class NetInterface:
    """One network interface under ``/sys/class/net``."""

    name: str
    virtual: bool
    """No PCI device behind it (lo, bridges, veth, ifb)."""
    arphrd: int | None
    """Link type: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback."""
    mtu: int | None
    speed_mbps: int | None
    duplex: str | None
    operstate: str | None
    carrier: int | None
    carrier_down_count: int | None
    driver: str | None
    pci: str | None
    """PCI address of the device behind it, when there is one."""
    rdma: str | None = None
    """``mlx5_0/1`` when this netdev carries an RDMA port (RoCE, IPoIB)."""
    ethtool: dict[str, int] | None = None
    """``ethtool -S`` counters, read for RoCE netdevs (PFC, discards)."""
    supported_mbps: int | None = None
    """The fastest link mode the NIC supports (``ethtool`` link modes), Mb/s; Ethernet NICs only."""
    ecn: dict[str, frozenset[int]] | None = None
    """mlx5's ``ecn/roce_np`` and ``ecn/roce_rp``: the priorities with ECN on; None without an ``ecn`` folder."""
    qos: Qos | None = None
    """Trust state, DSCP map and PFC from ``mlnx_qos`` (MLNX_OFED); None where it is not installed."""


@dataclass(kw_only=True, slots=True)
class Gid:
    index: int
    gid: str
    type: str | None
    """``IB/RoCE v1`` or ``RoCE v2``."""
    ndev: str | None


@dataclass(kw_only=True, slots=True)
class RdmaPort:
    device: str
    port: int
    state: tuple[int, str] | None
    phys_state: tuple[int, str] | None
    rate_gbps: float | None
    rate_text: str | None
    link_layer: str | None
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""
    netdev: str | None = None
    gids: list[Gid] = field(default_factory=list)
    gids_unread: list[int] = field(default_factory=list)
    """GID table entries whose file could not be read (neither empty nor a GID: not known)."""
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    lid: int | None = None
    """The port's LID; 0 on an InfiniBand port means no subnet manager has configured it."""
    sm_lid: int | None = None
    """The LID of the subnet manager the port knows; 0 when it knows none."""

    @property
    def label(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(kw_only=True, slots=True)
class RdmaDevice:
    name: str
    pci: str | None
    fw_ver: str | None
    hca_type: str | None
    uverbs: bool | None
    """A user-space verbs device exists for it (ib_uverbs loaded); None when unknown."""
    dev_node: bool | None = None
    """Its ``/dev/infiniband/uverbsN`` node exists (a container was given it); None when unknown."""
    uverbs_name: str | None = None
    """``uverbs0``: the verbs device sysfs names for it."""
    ports: list[RdmaPort] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class Gpu:
    """An NVIDIA GPU, from sysfs (PCI class 0x0302/0x0300, vendor 0x10de) and NVML when present."""

    pci: str
    device_id: int | None
    busy: bool | None = None
    """From NVML utilization; None without NVML (then an idle link is not a failure)."""
    nvml_index: int | None = None
    health: GpuHealth | None = None
    """What NVML says of its health; None without NVML."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NvLink:
    """One NVLink of a GPU: NVML's state and data-link error counters (None: NVML cannot say)."""

    link: int
    active: bool | None
    replay: int | None
    recovery: int | None
    crc: int | None


@dataclass(kw_only=True, slots=True)
class GpuHealth:
    """NVML's answers about one GPU's health (see :mod:`fabricscope.doctor.probes.nvml`)."""

    persistence: bool | None = None
    ecc_volatile: int | None = None
    """Uncorrected ECC errors since the driver loaded."""
    ecc_aggregate: int | None = None
    """Uncorrected ECC errors over the GPU's life."""
    remap_pending: bool | None = None
    """A row remapping waits for a GPU reset."""
    remap_failed: bool | None = None
    retired_pages: int | None = None
    """Pages retired for ECC errors, both causes (GPUs before Ampere retire pages; later ones remap rows)."""
    retired_pending: bool | None = None
    """A page retirement waits for the driver to reload."""
    clock_events: int | None = None
    """The clock event (throttle) reason mask, ``nvmlClocksEventReason*`` bits."""
    pcie_replays: int | None = None
    """Replays (link-level retransmissions) on the GPU's PCIe link since the driver loaded."""
    nvlinks: list[NvLink] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class GpuDirect:
    """GPUDirect RDMA: the peer-memory module, or what DMA-BUF needs."""

    peermem: str | None
    """The file that proves a peer-memory module is loaded, or None."""
    driver_version: str | None
    open_kernel_module: bool | None
    kernel: tuple[int, int] | None

    @property
    def dmabuf_possible(self) -> bool:
        """DMA-BUF needs the open GPU kernel module and Linux 5.12 or newer."""
        return bool(self.open_kernel_module) and self.kernel is not None and self.kernel >= (5, 12)


@dataclass(kw_only=True, slots=True)
class TcpTuning:
    rmem_max: int | None
    wmem_max: int | None
    tcp_rmem: tuple[int, ...] | None
    tcp_wmem: tuple[int, ...] | None
    congestion: str | None
    available_congestion: tuple[str, ...] | None
    window_scaling: int | None
    sack: int | None


@dataclass(kw_only=True, slots=True)
class HostTuning:
    """Node-wide kernel settings that slow RDMA and NCCL's transports, or make them fail."""

    numa_balancing: int | None = None
    """``kernel.numa_balancing``: 1 moves pages under registered (pinned) buffers' neighbours and costs jitter."""
    governors: dict[str, int] = field(default_factory=dict)
    """CPU frequency governor -> how many CPUs use it; empty when the node has no cpufreq (VMs)."""
    cmdline: str | None = None
    """The kernel command line (``iommu=pt``, ``intel_iommu=on``)."""
    iommu_units: int | None = None
    """Entries of ``/sys/class/iommu`` (hardware IOMMUs the kernel drives); None when the folder is absent."""
    memlock: tuple[int | None, int | None] | None = None
    """The locked-memory limit (soft, hard) in bytes, None for unlimited; the outer None when unreadable."""
    memlock_source: str = ""
    shm_bytes: int | None = None
    """Size of the ``/dev/shm`` mount NCCL's shared-memory transport uses; None when unknown."""
    shm_source: str = ""
    shm_device: str | None = None
    """``major:minor`` of the file system under ``/dev/shm`` (``proc/self/mountinfo``): NCCL's ``shmDev``.
    NCCL uses peer-to-peer and shared memory only between ranks of one machine that share it."""
    mem_total: int | None = None
    huge_pages: list[tuple[int, int | None, int | None, int | None]] | None = None
    """Persistent huge page pools, one per page size: (page size in bytes, pages, free, reserved for mappings
    made; None where its file could not be read), from ``sys/kernel/mm/hugepages/hugepages-<size>kB`` (else
    ``proc/meminfo``, which counts the default size only); None when neither says."""
    thp: str | None = None
    """Transparent huge pages: ``always``, ``madvise`` or ``never``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Xid:
    """NVIDIA driver errors (``NVRM: Xid``) of one GPU and code in the kernel log."""

    device: str
    """The GPU's PCI address as the driver prints it (``0000:17:00``)."""
    code: int
    count: int
    message: str
    """The text after the code, of the last one (``GPU has fallen off the bus.``)."""


@dataclass(kw_only=True, slots=True)
class NcclSetting:
    name: str
    value: str
    source: str
    """``environment``, or the file and line it came from (``/etc/nccl.conf:3``)."""


@dataclass(kw_only=True, slots=True)
class Node:
    """Everything the probes saw on one node."""

    hostname: str
    kernel: str | None
    root: str
    live: bool
    nics: list[NetInterface]
    rdma: list[RdmaDevice]
    pci: dict[str, PciDevice]
    """Every PCI device the probes looked at, by address."""
    gpus: list[Gpu]
    gpudirect: GpuDirect
    tcp: TcpTuning
    nccl: dict[str, NcclSetting]
    nccl_conf_problems: list[str]
    """Lines of the NCCL config files that NCCL misreads or ignores, as ``file:line: what``."""
    nvml: str
    """``used``, ``absent`` (no nvidia-ml-py), ``failed: ...``, or ``not live`` for a captured tree."""
    topo_file_readable: bool | None = None
    """Whether the file NCCL_TOPO_FILE names can be read; None when it is not set."""
    nccl_conf_unreadable: str | None = None
    """Why the file NCCL_CONF_FILE names cannot be read (``Permission denied``); None when read or not set."""
    nccl_conf_too_large: bool = False
    """NCCL_CONF_FILE was left unread for its size (over 1 MiB): NCCL reads it, the doctor did not."""
    anomalies: list[Anomaly] = field(default_factory=list)
    """Files that could not be read or parsed."""
    files_read: int = 0
    modules: dict[str, str] = field(default_factory=dict)
    """Versions of the kernel modules behind NICs and GPUs (``/sys/module/<m>/version``)."""
    boot_id: str | None = None
    """``/proc/sys/kernel/random/boot_id``: with the hostname, tells one machine from another."""
    uptime_s: float | None = None
    """``/proc/uptime``'s first field: seconds since boot (the driver loaded later, never earlier)."""
    env_source: str = "environment"
    """Which environment supplied the NCCL variables (this process's, or the one a capture recorded)."""
    env_ignored: list[str] = field(default_factory=list)
    """NCCL variables of this process that were not used (a capture's recorded environment was)."""
    host: HostTuning = field(default_factory=HostTuning)
    aer: dict[str, Aer] = field(default_factory=dict)
    """AER counts of GPUs, NICs and every bridge above them, by PCI address."""
    xids: list[Xid] | None = None
    """NVIDIA Xid errors in the kernel log; None when no kernel log could be read."""
    kernel_log: str = ""
    """Where the kernel log came from (``/dev/kmsg``, a capture's ``dmesg``), or why it could not be read."""
    bridge_config: dict[str, BridgeConfig] = field(default_factory=dict)
    """What the configuration space of each bridge above GPUs and NICs holds, by address; a bridge whose space
    cannot be read (not root: the space past 64 bytes is root's) is left out."""
    numa_cpus: dict[int, frozenset[int]] = field(default_factory=dict)
    """The CPUs of each NUMA node (``/sys/devices/system/node/node<N>/cpulist``)."""
    cuda_driver: str | None = None
    """The CUDA version the driver supports (NVML), ``12.4``; None without NVML."""
    libraries: dict[str, str] = field(default_factory=dict)
    """Versions of the libraries a job loads (``NCCL``, ``libibverbs``, ``NCCL (Python wheel)``) and where."""
    driver_gpus: frozenset[str] | None = None
    """The GPUs the NVIDIA driver shows this process (``proc/driver/nvidia/gpus``: in a container, only the
    ones it was given); None where the folder is not there."""
    rdma_cm: bool | None = None
    """User space can reach the RDMA connection manager (``sys/class/misc/rdma_cm``: rdma_ucm loaded);
    None without RDMA devices."""

    @property
    def ports(self) -> list[RdmaPort]:
        return [p for d in self.rdma for p in d.ports]

    def nic(self, name: str) -> NetInterface | None:
        return next((n for n in self.nics if n.name == name), None)
