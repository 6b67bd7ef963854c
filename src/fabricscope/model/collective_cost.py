"""How long a collective takes: NCCL's alpha-beta cost model, per algorithm and protocol.

Every function takes a :class:`~fabricscope.model.fabric.Fabric` and sizes that may be numpy
arrays, and yields ``(algorithm, protocol, seconds, penalty)`` per candidate; ``seconds + penalty``
is what NCCL's tuner ranks by, so :func:`fastest` and :func:`choose` pick what NCCL would run.
The constants are NCCL's (NVIDIA/nccl ``src/graph/tuning.cc``); the byte accounting of each
algorithm, the tuner terms and the choices that are fabricscope's own are in docs/model.md,
section 1, "The cost functions".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from fabricscope.model import nccl_runtime
from fabricscope.model.fabric import Fabric, Num

__all__ = [
    "ALGORITHMS",
    "NCCL_ALGORITHMS",
    "NCCL_ENV",
    "PROTOCOLS",
    "ROCE_SCALE_LOSS_NICS",
    "Candidate",
    "all_reduce",
    "candidates",
    "choose",
    "fastest",
    "intra_bw",
    "nccl_setting",
    "net_hop",
    "point_to_point",
    "ring_like",
    "roce_efficiency",
]

ALGORITHMS = ("ring", "tree", "hier", "nvls", "sharp")
"""What ``predict --algo`` can force for all_reduce (``nvls`` includes NVLS trees across nodes)."""
NCCL_ALGORITHMS = ("ring", "tree", "nvls", "nvlstree", "sharp", "pat", "p2p")
"""What NCCL's tuner chooses among; ``hier`` (Horovod-style two-level) runs only when asked for."""
PROTOCOLS = ("LL", "LL128", "Simple")
LL, LL128, SIMPLE = 0, 1, 2

Candidate = tuple[str, str, Any, Any]
"""(algorithm, protocol, seconds, tuner penalty in seconds)."""

# --- NCCL tuning.cc constants, indexed by protocol (LL, LL128, Simple) ---------------
BASE_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
HOP_NVLINK_US = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
HOP_PCI_US = {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 4.0)}
HOP_NET_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}
NET_OVERHEAD_US = 1.0
"""Posting a network send on an Intel host (x3 for Simple), the floor of an inter-node ring step."""
BW_FACTOR = {
    "ring": (0.5, 0.92, 1.0),
    "tree": (0.92 / 3.8, 0.92 * 120 / 128, 0.92),
}
PLATEAU = np.array([1.9, 1.4, 1.4, 1.4])
"""The tuner ranks Simple ring all-reduce across nodes at its latency x this (Volta, Ampere,
Hopper, Blackwell); a ranking term only, see the module docstring."""
COLLNET_HOP_INTRA_US = 3.7
COLLNET_PER_RANK_US = 0.4
COLLNET_NET_US = 31.0
COLLNET_FACTOR = 0.85
NVLS_TUNER_US = 25.0
"""The tuner's NVLink latency of NVLS and NVLS trees (the whole intra-node part); ranking only."""
NVLS_NET_US = 18.0
NVLS_TREE_NET_US = 20.9
NVLS_HOPS = 2
"""NVLS: one NVSwitch round trip to reduce, one to multicast, at NCCL's Simple NVLink hop latency."""
NVLS_PHYSICAL_US = NVLS_HOPS * HOP_NVLINK_US["ring"][SIMPLE]
PAT_BASE_US = 8.0
PAT_NET_US = 14.0
PAT_PER_RANK_US = 2.8
PAT_FACTOR = 0.75
ROCE_SCALE_LOSS = 0.705
"""RoCE keeps ``1 / (1 + k log2(nodes / 2))`` of its bandwidth: least squares over the 3-6 node rows
of NVIDIA/nccl-tests issue 169 (A100 nodes, 8x 100G RoCE: ~100, 70, 58, 58, 40 GB/s on 2-6 nodes)."""
ROCE_SCALE_LOSS_NICS = 8
"""NICs per node of the rows :data:`ROCE_SCALE_LOSS` comes from: on fewer, the loss is not measured."""
TREE_NET_BYTES = 2.0
"""Bytes a classic double binary tree moves through each node's network per byte reduced when
nodes hold several ranks.  In theory a 2-node tree moves each byte once; measured 2-node runs of
multi-GPU A100 nodes reach the wire rate, not twice it (nccl-tests issue 169: ~100 GB/s on 96 of
wire; issue 175: 86 of 96), so the model takes the 2-node case like the others.  With one rank
per node a 2-node tree is a plain exchange: each byte crosses once.  NVLS trees keep the 2-node
saving: 430 GB/s measured on 8x 400G (NVIDIA/nccl issue 1221)."""

# Per-architecture ceilings, rows Volta, Ampere, Hopper, Blackwell (GB/s of bus bandwidth).
LL_MAX_ONE_NODE = np.array([39.0, 87.7, 141.0, 282.0])
LL_MAX_TWO_NODES = 39.0
LL_MAX_MORE_NODES = 20.4
"""llMaxBws: one node by GPU; across nodes by host CPU (Intel: 39.0 on two nodes, 20.4 beyond)."""
RING_LL128_PER_CHANNEL = np.array([20.0, 20.0, 36.7, 40.0])
NVLS_TREE_PER_CHANNEL = np.array([[0.0, 0.0], [0.0, 0.0], [57.7, 45.5], [96.0, 80.0]])
"""perChMaxNVLSTreeBws on two nodes and on more."""
# fmt: off
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0],
    [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9],
])
# fmt: on
"""treeCorrectionFactor: the tuner ranks tree all-reduce at its bandwidth x this, at
log2(bytes/64) = 0..22 (1 beyond); a ranking term only, see the module docstring."""


def _arch(fab: Fabric) -> Num:
    return np.asarray(fab.arch, dtype=int)


def _gate(ok: Num, seconds: Num) -> Num:
    return np.where(ok, seconds, np.inf)


def _seconds(lat_us: Num, nbytes: Num, gbps: Num) -> Num:
    return lat_us * 1e-6 + nbytes / (np.maximum(gbps, 1e-12) * 1e9)


def _ranked(seconds: Num, tuned: Num, penalty: Num) -> tuple[Num, Num]:
    """(``seconds``, the penalty that keeps the tuner ranking the candidate at ``tuned`` + ``penalty``):
    NCCL chooses with its tuner's times and only then runs the message on fewer channels or in
    smaller steps (:mod:`~fabricscope.model.nccl_runtime`), which its choice never sees."""
    extra = np.where(np.isfinite(seconds) & np.isfinite(tuned), tuned - seconds, 0.0)
    return seconds, penalty + extra


def _done(nbytes: Num, ranks: Num, seconds: Num) -> Num:
    """Nothing to move, or nobody to move it to: NCCL returns at once."""
    return np.where((nbytes > 0) & (ranks > 1), seconds, 0.0)


def _intra_hop(fab: Fabric, algo: str, proto: int) -> Num:
    return np.where(fab.intra_pcie, HOP_PCI_US[algo][proto], HOP_NVLINK_US[algo][proto])


def net_hop(fab: Fabric, algo: str, proto: int) -> Num:
    """A network step's latency: NCCL's constant plus what the fabric adds (never below zero,
    whatever a what-if subtracts)."""
    return np.maximum(HOP_NET_US[algo][proto] + fab.net_extra_us, 0.0)


def intra_bw(fab: Fabric, ppn: Num) -> Num:
    """GB/s a group of ``ppn`` GPUs of a node gets inside it: all of each GPU's links on a
    switch, only the ``ppn - 1`` links to the other members on a full mesh; where traffic is
    staged in host memory, the host's memory shared by ``ppn`` flows instead of the whole node's
    (``fabric.staged_gbps``: ``intra_gbps`` is the whole node's figure)."""
    share = np.where(
        fab.mesh_links > 0, np.minimum(np.maximum(ppn - 1, 1), fab.mesh_links) / np.maximum(fab.mesh_links, 1), 1.0
    )
    link = 1.0 / np.maximum(fab.gpu_pcie_gbps, 1e-12) + 1e-30
    staged = (link + fab.gpus_per_node / fab.host_gbps) / (link + np.maximum(ppn, 1) / fab.host_gbps)
    return fab.intra_gbps * share * staged


def _ll128_ok(fab: Fabric) -> Num:
    """NCCL runs LL128 only where the GPUs of a node talk over NVLink."""
    return fab.intra_pcie == 0


def _cross_slowdown(fab: Fabric, nodes: Num) -> Num:
    """Share of traffic that leaves a leaf, times oversubscription (>= 1)."""
    leaving = np.where(nodes > fab.nodes_per_leaf, 1.0 - fab.nodes_per_leaf / np.maximum(nodes, 1), 0.0)
    return np.maximum(1.0, fab.oversubscription * leaving)


def roce_efficiency(fab: Fabric, nodes: Num) -> Num:
    """Share of its bandwidth a RoCE fabric keeps on ``nodes`` nodes: ``1 / (1 + k log2(nodes/2))``
    beyond two nodes (:data:`ROCE_SCALE_LOSS`), 1 on InfiniBand and TCP."""
    spread = np.log2(np.maximum(nodes, 2) / 2.0)
    return 1.0 / (1.0 + fab.hashed * ROCE_SCALE_LOSS * spread)


def _network(fab: Fabric, nodes: Num, node_net: Num | None, ppn: Num) -> tuple[Num, Num]:
    """(GB/s a group of ``ppn`` GPUs per node gets from the network per node, after what its
    GPUs' PCIe links can drive, the uplinks and RoCE's loss at scale; the NICs it uses)."""
    net = fab.node_net_gbps if node_net is None else node_net
    net = np.minimum(net, ppn * fab.gpu_pcie_gbps)
    channels = np.maximum(net / np.maximum(fab.nic_gbps, 1e-12), 1.0)
    return net * roce_efficiency(fab, nodes) / _cross_slowdown(fab, nodes), channels


def _ll_max(fab: Fabric, nodes: Num) -> Num:
    return np.where(nodes <= 1, LL_MAX_ONE_NODE[_arch(fab)], np.where(nodes <= 2, LL_MAX_TWO_NODES, LL_MAX_MORE_NODES))


def _ring_latency_us(fab: Fabric, proto: int, ppn: Num, nodes: Num, steps: Num, inter_steps: Num) -> Num:
    """NCCL's ring latency: base + intra-node steps + network steps."""
    multi = nodes > 1
    overhead = np.where(multi, NET_OVERHEAD_US * (3.0 if proto == SIMPLE else 1.0), 0.0)
    hop_intra = np.maximum(_intra_hop(fab, "ring", proto), overhead)
    # With one rank per node every step is a network step, priced at the Tree network latency.
    hop_net = np.where(ppn <= 1, net_hop(fab, "tree", proto), net_hop(fab, "ring", proto))
    return BASE_US["ring"][proto] + (steps - inter_steps) * hop_intra + inter_steps * hop_net


def _ring(
    fab: Fabric,
    moved: Num,
    ppn: Num,
    nodes: Num,
    node_net: Num | None,
    *,
    steps: Num,
    inter_steps: Num,
    nccl_bytes: Num,
    plateau_bytes: Num | None = None,
) -> Iterator[Candidate]:
    """A ring moving ``moved`` bytes per rank in ``steps`` steps, ``inter_steps`` of them between nodes,
    of a message NCCL counts as ``nccl_bytes`` (it runs on as many channels as that fills)."""
    multi = nodes > 1
    net, channels = _network(fab, nodes, node_net, ppn)
    bw = np.minimum(np.where(ppn > 1, intra_bw(fab, ppn), np.inf), np.where(multi, net, np.inf))
    caps = (
        _ll_max(fab, nodes),
        np.where(multi, channels * RING_LL128_PER_CHANNEL[_arch(fab)], np.inf),
        np.inf,
    )
    for proto, name in enumerate(PROTOCOLS):
        lat = _ring_latency_us(fab, proto, ppn, nodes, steps, inter_steps)
        penalty: Num = 0.0
        if plateau_bytes is not None and proto == SIMPLE:
            plateau = multi & (plateau_bytes >= 64.0 * ppn * nodes * channels)
            penalty = np.where(plateau, PLATEAU[_arch(fab)] - 1.0, 0.0) * lat * 1e-6
        share = nccl_runtime.channel_share(fab, proto, nccl_bytes, ppn * nodes, nodes, ring=True)
        tuned = _seconds(lat, moved, np.minimum(bw * BW_FACTOR["ring"][proto], caps[proto]))
        seconds, penalty = _ranked(
            _seconds(lat, moved, np.minimum(bw * BW_FACTOR["ring"][proto] * share, caps[proto])), tuned, penalty
        )
        yield "ring", name, _gate(_ll128_ok(fab), seconds) if proto == LL128 else seconds, penalty


def _tree_correction(nbytes: Num, proto: int) -> Num:
    """NCCL's factor at ``log2i(nBytes >> 6)``: none below 64 bytes (log2i(0) is -1) or from
    2^29 bytes on."""
    index = np.floor(np.log2(np.maximum(nbytes / 64.0, 1.0)))
    factor = TREE_CORRECTION[proto][np.minimum(index, 22).astype(int)]
    return np.where((index < 23) & (nbytes >= 64.0), factor, 1.0)


def all_reduce(
    fab: Fabric, nbytes: Num, ppn: Num, nodes: Num, node_net: Num | None = None, *, include_hier: bool = False
) -> Iterator[Candidate]:
    """All-reduce of ``nbytes`` per rank over ``ppn`` ranks per node on ``nodes`` nodes.

    ``node_net`` is the network bandwidth (GB/s) this group gets per node; by
    default all of the node's NICs.
    """
    p = ppn * nodes
    multi = nodes > 1
    net, channels = _network(fab, nodes, node_net, ppn)
    inter_steps = np.where(multi, 2 * (nodes - 1), 0)
    for algo, label, seconds, penalty in _ring(
        fab,
        2 * (p - 1) / p * nbytes,
        ppn,
        nodes,
        node_net,
        steps=2 * (p - 1),
        inter_steps=inter_steps,
        nccl_bytes=nbytes,
        plateau_bytes=nbytes,
    ):
        yield algo, label, _done(nbytes, p, seconds), penalty

    log_nodes = np.log2(np.maximum(nodes, 1))
    ll_max = _ll_max(fab, nodes)
    intra_t = np.where(ppn > 1, 2.0 * nbytes / (intra_bw(fab, ppn) * 1e9), 0.0)
    tree_bytes = nbytes * np.where((nodes == 2) & (ppn <= 1), 1.0, TREE_NET_BYTES)
    inter_t = tree_bytes / (np.maximum(net, 1e-12) * 1e9)
    nvls_inter_t = nbytes * np.where(nodes == 2, 1.0, 2.0) / (np.maximum(net, 1e-12) * 1e9)
    for proto, name in enumerate(PROTOCOLS):
        lat = BASE_US["tree"][proto] + 2 * (
            (ppn - 1) * _intra_hop(fab, "tree", proto) + log_nodes * net_hop(fab, "tree", proto)
        )
        moving = np.maximum(intra_t, inter_t) / BW_FACTOR["tree"][proto]
        if proto == LL:
            moving = np.maximum(moving, 2.0 * nbytes / (ll_max * 1e9))
        ok = multi & (_ll128_ok(fab) if proto == LL128 else True)
        penalty = moving * (1.0 / _tree_correction(nbytes, proto) - 1.0)
        share = nccl_runtime.channel_share(fab, proto, nbytes, p, nodes, ring=False)
        seconds, penalty = _ranked(lat * 1e-6 + moving / share, lat * 1e-6 + moving, penalty)
        yield "tree", name, _done(nbytes, p, _gate(ok, seconds)), penalty

    if include_hier:
        for proto, name in enumerate(PROTOCOLS):
            factor = BW_FACTOR["ring"][proto]
            hier_t = 2 * (ppn - 1) / ppn * nbytes / (intra_bw(fab, ppn) * factor * 1e9) + 2 * (nodes - 1) / nodes * (
                nbytes / (np.maximum(net * factor, 1e-12) * 1e9)
            )
            lat = _ring_latency_us(fab, proto, ppn, nodes, 2 * (p - 1), inter_steps)
            ok = multi & (ppn > 1) & (_ll128_ok(fab) if proto == LL128 else True)
            yield "hier", name, _done(nbytes, p, _gate(ok, lat * 1e-6 + hier_t)), 0.0

    # NVLS: in-switch reduce and multicast inside the node; across nodes SHARP (nvls) or a tree.
    nvls_ok = (fab.nvls_eff > 0) & (ppn > 1)
    nvls_intra = nbytes * (ppn + 1) / ppn / (np.maximum(fab.intra_gbps * fab.nvls_eff, 1e-12) * 1e9)
    penalty = (NVLS_TUNER_US - NVLS_PHYSICAL_US) * 1e-6
    sharp_net = np.where(multi, np.maximum(NVLS_NET_US + fab.net_extra_us, 0.0), 0.0)
    sharp_inter = np.where(multi, nbytes / (np.maximum(net, 1e-12) * 1e9), 0.0)
    moving = np.maximum(nvls_intra, sharp_inter)
    lat = (NVLS_PHYSICAL_US + sharp_net) * 1e-6
    seconds, nvls_penalty = _ranked(
        lat + nccl_runtime.nvls_pipeline(fab, nbytes, ppn, nodes, moving), lat + moving, penalty
    )
    yield (
        "nvls",
        "Simple",
        _done(nbytes, p, _gate(nvls_ok & ((fab.sharp > 0) | np.logical_not(multi)), seconds)),
        nvls_penalty,
    )
    heads = np.minimum(channels, ppn)
    cap: Num = heads * NVLS_TREE_PER_CHANNEL[_arch(fab), np.where(nodes <= 2, 0, 1)]
    capped = 2 * (p - 1) / p * nbytes / (np.maximum(cap, 1e-12) * 1e9)
    lat = NVLS_PHYSICAL_US + 2 * log_nodes * np.maximum(NVLS_TREE_NET_US + fab.net_extra_us, 0.0)
    moving = np.maximum(np.maximum(nvls_intra, nvls_inter_t), capped)
    seconds, tree_penalty = _ranked(
        lat * 1e-6 + nccl_runtime.nvls_pipeline(fab, nbytes, ppn, nodes, moving), lat * 1e-6 + moving, penalty
    )
    yield "nvlstree", "Simple", _done(nbytes, p, _gate(nvls_ok & multi & (cap > 0), seconds)), tree_penalty

    lat = 2 * (np.minimum(1, ppn - 1) * COLLNET_HOP_INTRA_US + (ppn - 1) * COLLNET_PER_RANK_US) + (
        np.maximum(COLLNET_NET_US + fab.net_extra_us, 0.0)
    )
    sharp_intra = 2 * (ppn - 1) / ppn * nbytes / (intra_bw(fab, ppn) * 1e9)
    sharp_inter = nbytes / (np.maximum(net * COLLNET_FACTOR, 1e-12) * 1e9)
    seconds = lat * 1e-6 + np.maximum(sharp_intra, sharp_inter)
    yield "sharp", "Simple", _done(nbytes, p, _gate((fab.sharp > 0) & multi, seconds)), 0.0


def ring_like(
    fab: Fabric, total_bytes: Num, ppn: Num, nodes: Num, *, chain: bool = False, node_net: Num | None = None
) -> Iterator[Candidate]:
    """All-gather or reduce-scatter over a ring of n ranks (each rank moves (n-1)/n of the
    total), or with ``chain`` broadcast or reduce (a pipelined chain moves all of it).

    All-gather and reduce-scatter with one rank per node may also run NCCL's PAT
    (log-depth, 0.75 of the ring's bandwidth, 2.8 us per rank).
    """
    p = ppn * nodes
    moved = total_bytes if chain else total_bytes * (p - 1) / p
    for algo, label, seconds, penalty in _ring(
        fab, moved, ppn, nodes, node_net, steps=p - 1, inter_steps=nodes - 1, nccl_bytes=total_bytes
    ):
        yield algo, label, _done(total_bytes, p, seconds), penalty
    if not chain:
        net, _ = _network(fab, nodes, node_net, ppn)
        hop = np.maximum(PAT_NET_US + fab.net_extra_us, 0.0)
        lat = PAT_BASE_US + np.log2(np.maximum(nodes, 1)) * hop / 3.5 + p * PAT_PER_RANK_US
        seconds = _seconds(lat, total_bytes, net * PAT_FACTOR)
        yield "pat", "Simple", _done(total_bytes, p, _gate((ppn <= 1) & (nodes > 1), seconds)), 0.0


def point_to_point(
    fab: Fabric,
    total_bytes: Num,
    ppn: Num,
    nodes: Num,
    *,
    pattern: str,
    node_net: Num | None = None,
    remote: Num | None = None,
) -> Iterator[Candidate]:
    """alltoall, sendrecv (to the next rank), gather and scatter (to or from one root).

    Between nodes NCCL sends to a peer through one NIC: a root or a ring
    neighbour gets one NIC, all-to-all spreads over all of them and suffers
    oversubscription like a tree.  ``node_net`` is the network bandwidth of a node the
    group gets (default: all its NICs); ``remote`` the share of a rank's all-to-all bytes that
    leave its node (default ``(p - ppn) / p``: uniform destinations; node-limited routing of
    mixture-of-experts tokens sends less).
    """
    p = ppn * nodes
    multi = nodes > 1
    for proto in (LL, SIMPLE):
        hop: Num = np.where(multi, net_hop(fab, "ring", proto), _intra_hop(fab, "ring", proto))
        lat = BASE_US["ring"][proto] + hop
        factor = BW_FACTOR["ring"][proto]
        if pattern == "alltoall":
            intra_bytes = total_bytes * (ppn - 1) / p
            leaving = (p - ppn) / p if remote is None else remote
            inter_node_bytes = total_bytes * ppn * leaving
            net, _ = _network(fab, nodes, node_net, ppn)
            seconds = np.maximum(
                intra_bytes / (intra_bw(fab, ppn) * factor * 1e9),
                inter_node_bytes / (np.maximum(net * factor, 1e-12) * 1e9),
            )
        elif pattern == "sendrecv":
            peer = intra_bw(fab, 2.0)
            bw: Num = np.where(multi, np.minimum(peer, fab.nic_gbps), peer)
            seconds = total_bytes / (bw * factor * 1e9)
        else:
            intra_bytes = total_bytes * (ppn - 1) / p
            inter_bytes = total_bytes * (p - ppn) / p
            seconds = np.maximum(
                intra_bytes / (intra_bw(fab, ppn) * factor * 1e9),
                inter_bytes / (np.maximum(fab.nic_gbps * factor, 1e-12) * 1e9),
            )
        yield "p2p", PROTOCOLS[proto], _done(total_bytes, p, lat * 1e-6 + seconds), 0.0


def candidates(op: str, fab: Fabric, size: Num, ppn: Num, nodes: Num) -> Iterator[Candidate]:
    """Candidates for one nccl-tests op; ``size`` is the byte count S of ``algbw = S/t``."""
    if op == "all_reduce":
        return all_reduce(fab, size, ppn, nodes, include_hier=True)
    if op in ("all_gather", "reduce_scatter"):
        return ring_like(fab, size, ppn, nodes)
    if op in ("broadcast", "reduce"):
        return ring_like(fab, size, ppn, nodes, chain=True)
    if op in ("alltoall", "sendrecv", "gather", "scatter"):
        return point_to_point(fab, size, ppn, nodes, pattern=op)
    raise ValueError(f"no cost model for op {op!r}")


NCCL_ENV = {
    "ring": "Ring",
    "tree": "Tree",
    "nvls": "NVLS",
    "nvlstree": "NVLSTree",
    "sharp": "CollNetDirect",
    "pat": "PAT",
}
"""``NCCL_ALGO`` value of each algorithm NCCL can be told to run (p2p has none)."""


def nccl_setting(label: str) -> str:
    """The environment that makes NCCL run ``label`` ("tree/Simple"): NCCL_ALGO and NCCL_PROTO."""
    algo, proto = label.split("/")
    return (f"NCCL_ALGO={NCCL_ENV[algo]} " if algo in NCCL_ENV else "") + f"NCCL_PROTO={proto}"


def _matches(algo: str, wanted: str | None) -> bool:
    """NCCL's candidates, or the ones of a forced algorithm (``nvls`` covers NVLS trees)."""
    if wanted is None:
        return algo in NCCL_ALGORITHMS
    return algo == wanted or (wanted == "nvls" and algo == "nvlstree")


def fastest(found: Iterator[Candidate]) -> Num:
    """Seconds of the candidate NCCL's tuner would run, elementwise."""
    best: Num = np.inf
    best_cost: Num = np.inf
    for algo, _, seconds, penalty in found:
        if algo not in NCCL_ALGORITHMS:
            continue
        if np.ndim(penalty) or penalty:
            cost = seconds + penalty
            better = cost < best_cost
            best = np.where(better, seconds, best)
            best_cost = np.where(better, cost, best_cost)
        else:
            better = seconds < best_cost
            best = np.where(better, seconds, best)
            best_cost = np.where(better, seconds, best_cost)
    return best


def choose(found: Iterable[Candidate], algo: str | None = None, *, plain: bool = False) -> tuple[Num, list[str]]:
    """(seconds, ["ring/LL128", ...]) of NCCL's choice, or of the fastest run of one algorithm.

    Without ``algo`` the choice is NCCL's tuner's (no ``hier``); with ``plain`` it is the
    candidate the model itself finds fastest (no tuner penalties), which NCCL runs when told
    to (:data:`NCCL_ENV`).  Works elementwise on arrays; the label list is flat, in C order.
    """
    items = [c for c in found if _matches(c[0], algo)]
    if not items:
        return np.inf, []
    both = np.broadcast_arrays(*[np.asarray(c[2], dtype=float) for c in items], *[np.asarray(c[3]) for c in items])
    times, costs = np.stack(both[: len(items)]), np.stack(both[len(items) :])
    costs = times if plain else costs + times
    index = np.argmin(costs, axis=0)
    best = np.take_along_axis(times, index[None, ...], axis=0)[0]
    labels = [f"{items[i][0]}/{items[i][1]}" for i in np.ravel(index)]
    return best, labels
