"""The numbers the cost models run on: bandwidth and latency of every hop, as arrays.

A :class:`Fabric` holds effective per-hop figures (GB/s, microseconds), floats or numpy arrays
that broadcast: one Fabric stands for one cluster (:func:`fabric_of`) or a million candidate
networks (:func:`fabric_columns`, one row each).  Both read the catalog through
:func:`fabric_inputs` and apply the slowest-hop rules of :func:`make_fabric` once (NICs, PCIe,
GPUDirect, host-staged GPUs, RoCE, switch tiers): docs/model.md, section 1, "The cost functions"
and "What the weak, shared and Ethernet fabrics add", says what each rule is and where it
comes from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricscope.model import hardware
from fabricscope.model.cluster import CalibratedOp, Cluster
from fabricscope.model.hardware import PCIe, Transport

__all__ = [
    "HASHED_TRANSPORTS",
    "NCCL_ARCH",
    "Fabric",
    "fabric_columns",
    "fabric_inputs",
    "fabric_of",
    "inside_node",
    "link_peak_gbps",
    "make_fabric",
    "nodes_per_leaf",
    "staged_gbps",
    "take",
    "transport_extra_us",
]

Num = Any
"""A float or a numpy array of floats (broadcastable): the model prices one configuration or millions
with the same code.  ``Any`` on purpose: numpy's stubs cannot type arithmetic that mixes Python floats,
float arrays and boolean masks (``np.where`` over both), and a union here only moves the casts into
every formula.  Defined once; the cost modules import it."""

REFERENCE_TRANSPORT = "rdma-gdr"
"""NCCL's network latency constants were measured on InfiniBand with GPUDirect RDMA."""
HASHED_TRANSPORTS = ("rdma", "rdma-gdr")
"""Transports whose flows an Ethernet fabric hashes onto one path each (RoCE, ECMP): they lose bandwidth
with scale (:func:`~fabricscope.model.collective_cost.roce_efficiency`).  TCP is not RoCE; AWS's SRD
(``efa``) sprays each flow over many paths."""

NCCL_ARCH = {"pascal": 0, "volta": 0, "turing": 0, "ampere": 1, "ada": 1, "cdna3": 1, "hopper": 2, "blackwell": 3}
"""Row of NCCL's per-architecture tuning tables (Volta, Ampere, Hopper, Blackwell) for each GPU
architecture: Ada (sm89) counts as Ampere, as NCCL's ``minCompCap >= 80`` test does, and Turing
(sm75) as Volta, below it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fabric:
    gpus_per_node: Num
    nodes: Num
    arch: Num
    """Row of NCCL's per-architecture tables (:data:`NCCL_ARCH`)."""
    intra_gbps: Num
    """Per GPU, one direction, GB/s, as ring traffic inside a node sees it."""
    intra_pcie: Num
    """1 where GPUs talk over PCIe (NCCL's PCI latencies, no LL128), else 0."""
    nvls_eff: Num
    """NVLink SHARP efficiency; 0 where the node has no NVLS."""
    nic_gbps: Num
    """Per NIC, one direction, GB/s, after transport, host and PCIe limits."""
    nics_per_node: Num
    net_extra_us: Num
    """Added to NCCL's network hop latency: transport above RDMA, switches, cables."""
    sharp: Num
    """1 where the switches reduce in the network (SHARP), else 0."""
    oversubscription: Num
    nodes_per_leaf: Num
    gpu_pcie_gbps: Num = np.inf
    """What one GPU's own PCIe link moves to or from a NIC, one direction, GB/s."""
    hashed: Num = 0.0
    """1 where the network is Ethernet RDMA (RoCE): flows hashed, no adaptive routing."""
    mesh_links: Num = 0.0
    """Links per GPU where the node is a full mesh with one link per peer (MI300X: 7); 0 otherwise."""
    host_gbps: Num = np.inf
    """Host memory bandwidth the GPUs of a node share where NCCL stages their traffic in it (PCIe
    without peer-to-peer), GB/s; infinite where GPUs talk directly."""
    a2a: CalibratedOp | None = None
    """Calibrated all-to-all (``fabricscope calibrate`` on ``bench alltoall`` runs): the cluster's
    ``[calibration.alltoall]`` terms (a bandwidth of 0: that hop not measured, the catalog prices it)."""

    @property
    def node_net_gbps(self) -> Num:
        """All NICs of a node together, GB/s."""
        return self.nic_gbps * self.nics_per_node


def inside_node(fab: Fabric) -> Fabric:
    """What a collective inside one node sees: the same node without its network (so a
    sweep over networks prices tensor parallelism once, not once per network)."""
    return Fabric(
        gpus_per_node=fab.gpus_per_node,
        nodes=1.0,
        arch=fab.arch,
        intra_gbps=fab.intra_gbps,
        intra_pcie=fab.intra_pcie,
        nvls_eff=fab.nvls_eff,
        nic_gbps=0.0,
        nics_per_node=0.0,
        net_extra_us=0.0,
        sharp=0.0,
        oversubscription=1.0,
        nodes_per_leaf=1.0,
        gpu_pcie_gbps=fab.gpu_pcie_gbps,
        hashed=0.0,
        mesh_links=fab.mesh_links,
        host_gbps=fab.host_gbps,
    )


def take(fab: Fabric, rows: slice | int) -> Fabric:
    """Some rows of a Fabric whose fields are column arrays (one row per network); an int
    row gives plain floats, the Fabric of one network."""
    values: dict[str, Any] = {}
    for name in Fabric.__slots__:
        value = getattr(fab, name)
        if isinstance(value, np.ndarray) and value.ndim == 2:
            value = float(value[rows, 0]) if isinstance(rows, int) else value[rows]
        values[name] = value
    return Fabric(**values)


def nodes_per_leaf(*, radix: Num, nics_per_node: Num, nodes: Num, rail: Num, oversubscription: Num) -> Num:
    """Nodes whose traffic meets in one leaf switch (one rail switch when rail-optimized)."""
    k = np.maximum(nics_per_node, 1)
    ports_per_node = np.where(rail, 1, k)
    single = nodes * ports_per_node <= radix
    down = np.floor(radix * oversubscription / (1.0 + oversubscription))
    return np.maximum(np.where(single, radix, down) // ports_per_node, 1)


def make_fabric(
    *,
    gpus_per_node: Num,
    nodes: Num,
    arch: Num,
    intra_gbps: Num,
    intra_pcie: Num,
    nvls_eff: Num,
    nic_line_gbps: Num,
    nic_pcie_gbps: Num,
    gdr: Num,
    transport_eff: Num,
    host_ceiling_gbps: Num,
    transport_extra_us: Num,
    nics_per_node: Num,
    switch_latency_us: Num,
    switch_radix: Num,
    rail: Num,
    oversubscription: Num,
    sharp: Num,
    extra_latency_us: Num = 0.0,
    gpu_pcie_gbps: Num = np.inf,
    hashed: Num = 0.0,
    mesh_links: Num = 0.0,
    host_gbps: Num = np.inf,
) -> Fabric:
    """Apply the slowest-hop rules to raw catalog numbers (all arguments broadcast)."""
    ceiling = np.where(np.asarray(host_ceiling_gbps) > 0, host_ceiling_gbps, np.inf)
    staged = np.where(gdr, 1.0, 0.5) * nic_pcie_gbps
    nic = np.minimum(np.minimum(nic_line_gbps * transport_eff, ceiling), staged)
    leaf = nodes_per_leaf(
        radix=switch_radix,
        nics_per_node=nics_per_node,
        nodes=nodes,
        rail=rail,
        oversubscription=oversubscription,
    )
    tiers = np.where(nodes <= leaf, 1, np.where(nodes <= leaf * switch_radix / 2, 2, 3))
    return Fabric(
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        arch=arch,
        intra_gbps=intra_gbps,
        intra_pcie=intra_pcie,
        nvls_eff=nvls_eff,
        nic_gbps=nic,
        nics_per_node=nics_per_node,
        net_extra_us=transport_extra_us + (2 * tiers - 1) * switch_latency_us + extra_latency_us,
        sharp=sharp,
        oversubscription=oversubscription,
        nodes_per_leaf=leaf,
        gpu_pcie_gbps=gpu_pcie_gbps,
        hashed=hashed,
        mesh_links=mesh_links,
        host_gbps=host_gbps,
    )


def transport_extra_us(transport: Transport) -> float:
    """Per-message latency of ``transport`` above the reference (RDMA with GPUDirect)."""
    reference = hardware.lookup("transport", REFERENCE_TRANSPORT, Transport)
    return transport.latency_us - reference.latency_us


def staged_gbps(link_gbps: Num, gpus: Num, host_gbps: Num) -> Num:
    """Per-GPU bandwidth of ``gpus`` GPUs without peer-to-peer, whose traffic NCCL stages in host
    memory (its SHM transport): a byte's time is its crossing of the GPU's PCIe link plus its turn at
    the host memory that all ``gpus`` flows share, ``1 / (1/link + gpus/host)``.  The two add rather
    than overlap: NCCL's kernels load host memory over PCIe with a bounded number of bytes in flight,
    so a busier memory lengthens every transfer.  Host memory bandwidth comes from the PCIe
    generation's typical host (pcie.toml).  8 and 4 RTX 5090 on two Xeon 8480+ reach 28 and 35 GB/s
    busbw (https://github.com/NVIDIA/nccl/issues/1639; the maintainer: 'the performance you get is
    usually determined by the bandwidth your CPU and memory can deliver'); this gives 29.5 and 36.5
    from the catalog alone."""
    return 1.0 / (1.0 / np.maximum(link_gbps, 1e-12) + gpus / host_gbps)


def _intra_gbps(cluster: Cluster) -> float:
    """Per-GPU bandwidth inside a node, one direction, GB/s (every GPU of the node taking part)."""
    gpu = cluster.gpu
    if cluster.intra in ("nvswitch", "nvlink-mesh") and cluster.gpulink is not None:
        return gpu.nvlink_links * cluster.gpulink.nccl_gbps
    if cluster.intra == "xgmi" and cluster.gpulink is not None:
        return gpu.xgmi_links * cluster.gpulink.nccl_gbps
    gpu_pcie = hardware.lookup("pcie", gpu.pcie, PCIe)
    slot = min(cluster.pcie.effective_gbps, gpu_pcie.effective_gbps)
    if gpu.p2p:
        return slot
    host = _host_gbps(cluster)
    return float(staged_gbps(slot, cluster.gpus_per_node, host)) if np.isfinite(host) else slot / 2


def _transport_efficiency(cluster: Cluster) -> float:
    """Share of the NIC's line rate the transport delivers: the bare-metal figure, or the virtual
    NIC's where the cluster file says ``virtualized`` (cloud VMs: NCCL's sockets run at the slowest
    socket's pace, docs/model.md, "TCP sockets"), and no more than ``flows`` connections held to a
    cloud's per-flow cap (``flow_gbps``) carry."""
    transport, net = cluster.transport, cluster.spec.network
    share = transport.virtualized_efficiency if net.virtualized else transport.efficiency
    if net.flow_gbps > 0 and transport.name == "tcp-socket":
        # Each connection is held to the provider's per-flow rate, of which TCP carries its payload share.
        share = min(share, net.flows * net.flow_gbps * transport.efficiency / cluster.nic.speed_gbps)
    return share


def _host_gbps(cluster: Cluster) -> float:
    """Host memory bandwidth the node's GPUs share when staged through it (infinite when they talk
    directly); a host of unknown memory bandwidth falls back on half the slot, each byte crossing it
    twice."""
    staged = cluster.intra == "pcie" and not cluster.gpu.p2p and cluster.pcie.host_memory_gbps > 0
    return cluster.pcie.host_memory_gbps if staged else float("inf")


def fabric_inputs(cluster: Cluster) -> dict[str, float]:
    """The catalog numbers of one cluster that :func:`make_fabric` turns into a Fabric."""
    net = cluster.spec.network
    nic_pcie = hardware.lookup("pcie", cluster.nic.pcie, PCIe)
    gpu_pcie = hardware.lookup("pcie", cluster.gpu.pcie, PCIe)
    nvls = (
        cluster.gpulink.nvls_efficiency
        if (cluster.intra == "nvswitch" and cluster.gpu.nvls and cluster.gpulink)
        else 0.0
    )
    return {
        "gpus_per_node": float(cluster.gpus_per_node),
        "nodes": float(cluster.nodes),
        "arch": float(NCCL_ARCH[cluster.gpu.arch]),
        "intra_gbps": _intra_gbps(cluster),
        "intra_pcie": 1.0 if cluster.intra == "pcie" else 0.0,
        "nvls_eff": nvls,
        "nic_line_gbps": cluster.nic.speed_gbps / 8.0,
        "nic_pcie_gbps": min(cluster.pcie.effective_gbps, nic_pcie.effective_gbps),
        "gdr": 1.0 if cluster.transport.gdr else 0.0,
        "transport_eff": _transport_efficiency(cluster),
        "host_ceiling_gbps": cluster.transport.host_ceiling_gbps,
        "transport_extra_us": transport_extra_us(cluster.transport),
        "nics_per_node": float(net.nics_per_node),
        "switch_latency_us": cluster.nic.switch_latency_ns / 1000.0,
        "switch_radix": float(cluster.nic.switch_radix),
        "rail": 1.0 if net.topology == "rail-optimized" else 0.0,
        "oversubscription": net.oversubscription,
        "sharp": 1.0 if net.sharp else 0.0,
        "extra_latency_us": net.extra_latency_us,
        "gpu_pcie_gbps": min(cluster.pcie.effective_gbps, gpu_pcie.effective_gbps),
        "hashed": 1.0 if (cluster.nic.link == "ethernet" and cluster.transport.name in HASHED_TRANSPORTS) else 0.0,
        "mesh_links": float(cluster.gpu.xgmi_links) if cluster.intra == "xgmi" else 0.0,
        "host_gbps": _host_gbps(cluster),
    }


def fabric_of(cluster: Cluster) -> Fabric:
    """The Fabric of one described cluster (scalars), with its calibrated all-to-all when the
    cluster file has one (``[calibration.alltoall]``)."""
    fab = make_fabric(**fabric_inputs(cluster))
    terms = cluster.spec.calibration.get("alltoall")
    if terms is None:
        return fab
    return dataclasses.replace(fab, a2a=terms)


def link_peak_gbps(cluster: Cluster) -> float:
    """The bandwidth one GPU's collective traffic can reach (GB/s): its link inside the node on one node,
    else the lesser of that and its share of the node's network."""
    fab = fabric_of(cluster)
    inside = float(fab.intra_gbps)
    return inside if cluster.nodes == 1 else min(inside, float(fab.node_net_gbps) / cluster.gpus_per_node)


def fabric_columns(clusters: Sequence[Cluster]) -> Fabric:
    """One Fabric for many clusters: every field a column array, one row per cluster
    (fields that are the same in every row stay scalars)."""
    rows = [fabric_inputs(c) for c in clusters]
    columns: dict[str, Any] = {}
    for key in rows[0]:
        values = [row[key] for row in rows]
        same = all(v == values[0] for v in values)
        columns[key] = values[0] if same else np.array(values, dtype=float)[:, None]
    return make_fabric(**columns)
