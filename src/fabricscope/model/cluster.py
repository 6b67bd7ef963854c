"""Cluster descriptions: the TOML a user writes (or a preset), checked against the catalog.

A description names catalog entries (GPU, NIC, transport, storage) and says how
many of each there are and how they are wired.  ``load_cluster`` accepts a
preset name (``catalog/clusters/*.toml``) or a path; ``Cluster`` is the result
with every name resolved to its catalog entry.  Presets are ordinary cluster
files, so each is also an example of the format::

    nodes = 4
    gpus_per_node = 8
    gpu = "a100-sxm-80gb"
    intra = "nvswitch"            # nvswitch | nvlink-mesh | xgmi | pcie

    [network]
    nic = "ib-hdr"
    nics_per_node = 8
    transport = "rdma-gdr"        # tcp-socket | rdma | rdma-gdr | efa | gpudirect-tcpx | gpudirect-tcpxo
    sharp = false                 # in-network reduction on the switches
    topology = "rail-optimized"   # rail-optimized | fat-tree
    oversubscription = 1.0        # leaf downlinks : uplinks
    extra_latency_us = 0.0
    virtualized = false           # true: a cloud VM's virtual NICs (TCP sockets reach less)
    flow_gbps = 0.0               # a cloud's cap on one TCP connection (AWS: 5, 10 in a placement group); 0: none
    flows = 1                     # TCP connections a NIC's traffic is spread over under that cap

    [storage]
    kind = "parallel-fs"          # hdd | sata-ssd | nvme | nfs-1g | nfs-10g | parallel-fs
    devices = 2
    cached_fraction = 0.0         # share of samples served from local RAM

    [calibration.all_reduce]      # written by 'fabricscope calibrate': measured, not catalog
    base_us = 12.0                # per call
    intra_hop_us = 3.1            # per ring step inside a node
    intra_busbw_gbps = 221.0      # bus bandwidth of the hops inside a node (0 = not measured)
    inter_hop_us = 0.0            # per ring step between nodes
    inter_busbw_gbps = 0.0
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from fabricscope.errors import ConfigError, InvalidValue, UsageError, closest
from fabricscope.model import hardware
from fabricscope.model.hardware import GPU, NIC, GPULink, PCIe, Storage, Transport
from fabricscope.schema import FORBID_EXTRA, build, require
from fabricscope.shown import cut
from fabricscope.userfiles import is_path, read_toml

__all__ = [
    "MAX_BUSBW_GBPS",
    "MAX_LATENCY_US",
    "MIN_BUSBW_GBPS",
    "CalibratedOp",
    "Cluster",
    "ClusterSpec",
    "NetworkSpec",
    "StorageSpec",
    "load_cluster",
    "presets",
    "resolve",
]

IntraFabric = Literal["nvswitch", "nvlink-mesh", "xgmi", "pcie"]
TransportName = Literal["tcp-socket", "rdma", "rdma-gdr", "efa", "gpudirect-tcpx", "gpudirect-tcpxo"]
Topology = Literal["fat-tree", "rail-optimized"]
TRANSPORTS: tuple[TransportName, ...] = ("tcp-socket", "rdma", "rdma-gdr", "efa", "gpudirect-tcpx", "gpudirect-tcpxo")
CLOUD_ETHERNET: dict[str, tuple[str, tuple[str, ...]]] = {
    "efa": ("AWS's Elastic Fabric Adapter", ()),
    "gpudirect-tcpx": ("Google's GPUDirect-TCPX (A3 High and Edge)", ("eth-200g",)),
    "gpudirect-tcpxo": ("Google's GPUDirect-TCPXO (A3 Mega)", ("eth-200g",)),
}
"""Transports that are one cloud's own Ethernet NICs and their NCCL plugin: what each is, and the catalog
NICs of its speed where it has one (A3's GPU NICs: 'each supporting up to 200 Gbps bandwidth for GPU data
transfer', GKE docs, 'Maximize GPU network bandwidth'); none: any Ethernet NIC (EFA's rails vary)."""

MAX_LATENCY_US = 1e6
"""Largest calibrated latency (call or hop) a cluster file may give, microseconds."""
MAX_BUSBW_GBPS = 1e4
"""Largest calibrated bus bandwidth, GB/s; ``calibrate`` writes it for a line that comes out flat."""
MIN_BUSBW_GBPS = 1e-9
"""Smallest calibrated bus bandwidth but 0 (not measured): a byte a second; less is a typo, not a link."""


@dataclass(kw_only=True, slots=True)
class NetworkSpec:
    """The network between nodes."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    nic: str = "eth-100g"
    """NIC (nics.toml): its speed, link type and the switch tier it plugs into."""
    nics_per_node: int = 1
    transport: TransportName = "rdma-gdr"
    sharp: bool = False
    """In-network reduction (SHARP) on the switches; needs InfiniBand and RDMA."""
    topology: Topology = "rail-optimized"
    """rail-optimized: NIC i of every node on switch i; fat-tree: a node's NICs on one leaf."""
    oversubscription: float = 1.0
    """Leaf downlink to uplink bandwidth ratio (1 = non-blocking)."""
    extra_latency_us: float = 0.0
    """Added to every message between nodes (long cables, extra hops)."""
    virtualized: bool = False
    """The NICs are a cloud VM's virtual NICs (AWS ENA, Azure, GCP gVNIC), not the host's own: the
    transport reaches its ``virtualized_efficiency`` of line rate (transports.toml)."""
    flow_gbps: float = 0.0
    """A cloud provider's cap on one TCP connection, Gb/s (AWS: 'Bandwidth for single-flow traffic is
    limited to 5 Gbps when instances are not in the same cluster placement group', up to 10 Gb/s
    inside one); 0: no cap.  Applies to the tcp-socket transport."""
    flows: int = 1
    """TCP connections one NIC's traffic is spread over, each held to ``flow_gbps``: NCCL 2.3 opens one
    per ring and builds one ring per NIC; NCCL 2.4.8 and later NCCL_SOCKET_NTHREADS x
    NCCL_NSOCKS_PERTHREAD per channel."""

    def __post_init__(self) -> None:
        require("nics_per_node", self.nics_per_node, "from 0 to 1024", lambda v: 0 <= v <= 1024)
        require("oversubscription", self.oversubscription, "from 1 (non-blocking) to 1000", lambda v: 1 <= v <= 1e3)
        require("extra_latency_us", self.extra_latency_us, "from 0 to 1e6 (microseconds)", lambda v: 0 <= v <= 1e6)
        require(
            "flow_gbps", self.flow_gbps, "0 (no cap) or from 0.001 to 1e5 (Gb/s)", lambda v: v == 0 or 1e-3 <= v <= 1e5
        )
        require("flows", self.flows, "from 1 to 1024", lambda v: 1 <= v <= 1024)


@dataclass(kw_only=True, slots=True)
class StorageSpec:
    """Where the training data comes from."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    kind: str = "nvme"
    """Storage kind (storage.toml)."""
    devices: int = 1
    """Disks (or storage servers for a parallel file system)."""
    cached_fraction: float = 0.0
    """Share of samples read from the page cache instead of storage (0 to 1)."""

    def __post_init__(self) -> None:
        require("devices", self.devices, "from 1 to 100000", lambda v: 1 <= v <= 1e5)
        require("cached_fraction", self.cached_fraction, "between 0 and 1", lambda v: 0 <= v <= 1)


@dataclass(kw_only=True, slots=True)
class CalibratedOp:
    """One collective's latency and bandwidth per hop, fitted from measurements by
    ``fabricscope calibrate`` (``model/calibrate.py``); a bandwidth of 0 means not measured."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    base_us: float = 0.0
    """Latency of a call, whatever the rank count."""
    intra_hop_us: float = 0.0
    """Latency of each step between two ranks of one node."""
    intra_busbw_gbps: float = 0.0
    """Bus bandwidth (nccl-tests busbw) of the hops inside a node, GB/s."""
    inter_hop_us: float = 0.0
    """Latency of each step between nodes."""
    inter_busbw_gbps: float = 0.0
    """Bus bandwidth of the hops between nodes, GB/s."""
    points: int = 0
    """Measured rows the fit used."""
    residual_pct: float = 0.0
    """Median |relative error| of the fit on those rows."""

    def __post_init__(self) -> None:
        # Bounds far beyond any fabric (a second per hop, 10 TB/s of bus bandwidth), so that a
        # typo such as 1e308 is refused here, not carried into an overflow of the prediction.
        for key in ("base_us", "intra_hop_us", "inter_hop_us"):
            require(key, getattr(self, key), f"from 0 to {MAX_LATENCY_US:,.0f} (microseconds)", _within(MAX_LATENCY_US))
        for key in ("intra_busbw_gbps", "inter_busbw_gbps"):
            allowed = f"0 (not measured) or from {MIN_BUSBW_GBPS:g} to {MAX_BUSBW_GBPS:,.0f} (GB/s)"
            require(key, getattr(self, key), allowed, lambda v: v == 0 or MIN_BUSBW_GBPS <= v <= MAX_BUSBW_GBPS)
        require("points", self.points, "from 0 to 1e9", _within(1e9))
        require("residual_pct", self.residual_pct, "from 0 to 1e6 (percent)", _within(1e6))


def _within(limit: float) -> Callable[[float], bool]:
    return lambda v: 0 <= v <= limit


@dataclass(kw_only=True, slots=True)
class ClusterSpec:
    """A cluster as written in its TOML file: catalog names and counts."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    description: str = ""
    nodes: int = 1
    gpus_per_node: int = 8
    gpu: str
    """GPU (gpus.toml)."""
    intra: IntraFabric | None = None
    """How a node's GPUs connect; default: the GPU's usual fabric."""
    pcie: str | None = None
    """Host PCIe generation of GPU and NIC slots; default: the GPU's."""
    network: NetworkSpec = field(default_factory=NetworkSpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    calibration: dict[str, CalibratedOp] = field(default_factory=dict)
    """Measured terms per collective (``fabricscope calibrate``): they replace the catalog's."""

    def __post_init__(self) -> None:
        # Bounds far beyond any cluster, so that absurd values are refused, not carried into float overflow.
        require("nodes", self.nodes, "from 1 to 1048576", lambda v: 1 <= v <= 1 << 20)
        require("gpus_per_node", self.gpus_per_node, "from 1 to 1024", lambda v: 1 <= v <= 1024)
        from fabricscope.ops import COLLECTIVES

        for name in self.calibration:
            if name not in COLLECTIVES:
                raise InvalidValue(
                    f"calibration.{name[:40]} is not a collective{closest(name, COLLECTIVES)}: "
                    f"use {', '.join(COLLECTIVES)}"
                )


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """A cluster with every catalog name resolved."""

    name: str
    spec: ClusterSpec
    gpu: GPU
    intra: IntraFabric
    gpulink: GPULink | None
    pcie: PCIe
    nic: NIC
    transport: Transport
    storage: Storage
    storage_link: NIC | None
    storage_transport: Transport
    file_shape: tuple[int, int] = (1, 1)
    """(nodes, gpus_per_node) as the file gives them, before another shape is asked for: where
    ``calibrate`` measured, for a cluster it wrote."""

    @property
    def nodes(self) -> int:
        return self.spec.nodes

    @property
    def gpus_per_node(self) -> int:
        return self.spec.gpus_per_node

    @property
    def gpus(self) -> int:
        return self.spec.nodes * self.spec.gpus_per_node

    def with_nodes(self, nodes: int) -> Cluster:
        """The same cluster with another node count."""
        if nodes < 1:
            raise InvalidValue(f"must be at least 1, got {nodes}", key="nodes")
        other = resolve(dataclasses.replace(self.spec, nodes=nodes), name=self.name, source=self.name)
        return dataclasses.replace(other, file_shape=self.file_shape)

    def with_gpus_per_node(self, gpus_per_node: int) -> Cluster:
        """The same cluster with another number of GPUs (ranks) per node."""
        if gpus_per_node < 1:
            raise InvalidValue(f"must be at least 1, got {gpus_per_node}", key="gpus_per_node")
        spec = dataclasses.replace(self.spec, gpus_per_node=gpus_per_node)
        return dataclasses.replace(resolve(spec, name=self.name, source=self.name), file_shape=self.file_shape)

    @property
    def shape_is_the_files(self) -> bool:
        """True at the file's own node count and GPUs per node."""
        return (self.nodes, self.gpus_per_node) == self.file_shape


def _entry(kind: str, name: str, cls: type[Any], source: str, key: str) -> Any:
    try:
        return hardware.lookup(kind, name, cls)
    except UsageError as exc:
        raise ConfigError(f"{source}: {key}: {exc}") from None


def resolve(spec: ClusterSpec, *, name: str, source: str) -> Cluster:
    """Look up every catalog name of ``spec`` and check that the parts fit together."""
    gpu = _entry("gpu", spec.gpu, GPU, source, "gpu")
    intra: IntraFabric = spec.intra or gpu.fabric
    gpulink = None
    if intra in ("nvswitch", "nvlink-mesh"):
        if not gpu.nvlink:
            raise ConfigError(f"{source}: intra = '{intra}' needs NVLink, and {gpu.name} has none: use intra = 'pcie'")
        gpulink = _entry("gpulink", gpu.nvlink, GPULink, source, "gpu")
    elif intra == "xgmi":
        if not gpu.xgmi_links:
            raise ConfigError(f"{source}: intra = 'xgmi' needs Infinity Fabric links, and {gpu.name} has none")
        gpulink = _entry("gpulink", "xgmi", GPULink, source, "gpu")
    pcie = _entry("pcie", gpu.pcie if spec.pcie is None else spec.pcie, PCIe, source, "pcie")
    _check_node_size(spec.gpus_per_node, intra, gpu, gpulink, pcie, source)
    net = spec.network
    nic = _entry("nic", net.nic, NIC, source, "network.nic")
    transport = _entry("transport", net.transport, Transport, source, "network.transport")
    if net.transport in ("rdma", "rdma-gdr", "efa") and not nic.rdma:
        raise ConfigError(
            f"{source}: network.transport = '{net.transport}' needs an RDMA-capable NIC and {nic.name} "
            "is not: use transport = 'tcp-socket' or another NIC"
        )
    if net.transport in CLOUD_ETHERNET:
        what, nics = CLOUD_ETHERNET[net.transport]
        if nic.link != "ethernet" and not nics:
            raise ConfigError(
                f"{source}: network.transport = '{net.transport}' is {what}, an Ethernet NIC, and {nic.name} is "
                f"{nic.link}: use an Ethernet NIC of its speed (eth-100g, eth-200g, eth-400g) or another transport"
            )
        if nics and net.nic not in nics:
            raise ConfigError(
                f"{source}: network.transport = '{net.transport}' is {what}, whose GPU NICs are "
                f"{' or '.join(repr(n) for n in nics)}, and the cluster's is {nic.name} ({nic.speed_gbps:g} Gb/s "
                f"{nic.link}): use nic = {' or '.join(repr(n) for n in nics)} or another transport"
            )
    if net.sharp and (nic.link != "infiniband" or net.transport not in ("rdma", "rdma-gdr")):
        raise ConfigError(
            f"{source}: network.sharp = true needs an InfiniBand NIC and an RDMA transport (rdma, rdma-gdr)"
        )
    if spec.nodes > 1 and net.nics_per_node < 1:
        raise ConfigError(f"{source}: {spec.nodes} nodes need network.nics_per_node of at least 1")
    storage = _entry("storage", spec.storage.kind, Storage, source, "storage.kind")
    storage_link = _entry("nic", storage.link, NIC, source, "storage.kind") if storage.link else None
    storage_transport = _entry("transport", storage.transport, Transport, source, "storage.kind")
    return Cluster(
        name=name,
        spec=spec,
        gpu=gpu,
        intra=intra,
        gpulink=gpulink,
        pcie=pcie,
        nic=nic,
        transport=transport,
        storage=storage,
        storage_link=storage_link,
        storage_transport=storage_transport,
        file_shape=(spec.nodes, spec.gpus_per_node),
    )


def _check_node_size(count: int, intra: str, gpu: GPU, link: GPULink | None, pcie: PCIe, source: str) -> None:
    """Refuse more GPUs per node than the intra-node fabric is built for (catalog ``max_gpus*``)."""
    if link is None:
        limit, what, entry = pcie.max_gpus, "a PCIe server holds", pcie.name
    else:
        kind = "an NVSwitch board" if intra == "nvswitch" else "a full mesh"
        limit, what, entry = link.max_gpus(intra), f"{kind} of {link.name} connects", link.name
    see = f"see 'fabricscope hw show {entry}'"
    if limit == 0:
        raise ConfigError(f"{source}: intra = '{intra}': no {gpu.name} server is built that way ({see})")
    if count > limit:
        raise ConfigError(
            f"{source}: gpus_per_node = {count} is more than {what} ({limit}, {see}): "
            f"use gpus_per_node = {limit} or fewer"
        )


def _presets_dir() -> Any:
    return hardware.catalog_dir() / "clusters"


@functools.cache
def presets() -> dict[str, str]:
    """Preset name -> description, in name order."""
    found: dict[str, str] = {}
    for item in sorted(_presets_dir().iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            data = read_toml(str(item))
            found[item.name[: -len(".toml")]] = str(data.get("description", ""))
    return found


def load_cluster(text: str) -> Cluster:
    """A preset name or a TOML file path; unknown names suggest the closest preset."""
    path = Path(text)
    if is_path(text):
        source = str(path)
        data = read_toml(path, presets=presets(), what="cluster file")
        name = path.stem
    else:
        name = text.strip().lower()
        if name not in presets():
            raise UsageError(
                f"unknown cluster {cut(text)!r}{hardware.suggest(text, presets())}: use a preset "
                f"({', '.join(presets())}) or the path of a cluster TOML file"
            )
        source = f"{name}.toml"
        data = read_toml(str(_presets_dir() / source))
    spec = build(ClusterSpec, data, source=source)
    return resolve(spec, name=name, source=source)
