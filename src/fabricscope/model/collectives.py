"""How long a collective takes: NCCL's alpha-beta cost model, per algorithm and protocol.

Every function takes a :class:`~fabricscope.model.fabric.Fabric` and sizes that
may be numpy arrays, and yields ``(algorithm, protocol, seconds)`` for each
candidate that applies (inapplicable ones are ``inf``); :func:`fastest` keeps
the minimum, as NCCL's tuner picks the algorithm and protocol with the lowest
predicted time.  The same code prices one row of ``predict`` and a million
configurations of ``plan``.

Constants are NCCL's (``src/graph/tuning.cc`` at master 5067397c, see
shared/reference/modeling.md): base and per-hop latencies per algorithm and
protocol, protocol bandwidth factors (LL carries 4 payload bytes per 8, LL128
120 per 128), tree and CollNet derating.  Two choices are fabricscope's own:

* NVLS latency is two NVLink hops at NCCL's Simple per-hop latency (one switch
  round trip for the in-switch reduce, one for the multicast), not the 25 us
  that NCCL's table charges to keep NVLS off small messages;
* the hierarchical algorithm is the classic two-level one (intra-node
  reduce-scatter, inter-node ring all-reduce of 1/g of the data over each GPU's
  share of the NICs, intra-node all-gather) with phases run one after another.

n ranks in a group, g of them per node (``ppn``) on N nodes.  Bandwidth of a
ring is its slowest hop: min(intra-node, the node's NICs).  A double binary
tree moves each byte across the network once on exactly two nodes and twice on
more (so its busbw can exceed the wire on two nodes); inside the node its chain
sends every byte up and every byte back down through each GPU (2n each way).  In-network reduction
(SHARP, NVLS) sends and receives each byte once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from fabricscope.model.fabric import Fabric

__all__ = [
    "ALGORITHMS",
    "NCCL_ALGORITHMS",
    "PROTOCOLS",
    "Candidate",
    "candidates",
    "choose",
    "fastest",
]

ALGORITHMS = ("ring", "tree", "hier", "nvls", "sharp")
NCCL_ALGORITHMS = ("ring", "tree", "nvls", "sharp", "p2p")
"""What NCCL's tuner chooses among; ``hier`` (Horovod-style two-level) runs only when asked for."""
PROTOCOLS = ("LL", "LL128", "Simple")

Num = Any
Candidate = tuple[str, str, Any]
"""(algorithm, protocol, seconds)."""

# --- NCCL tuning.cc constants, indexed by protocol (LL, LL128, Simple) ---------------
BASE_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
HOP_NVLINK_US = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
HOP_PCI_US = {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 4.0)}
HOP_NET_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}
BW_FACTOR = {
    "ring": (0.5, 0.92, 1.0),
    "tree": (0.92 / 3.8, 0.92 * 120 / 128, 0.92),
}
COLLNET_HOP_INTRA_US = 3.7
COLLNET_PER_RANK_US = 0.4
COLLNET_NET_US = 31.0
COLLNET_FACTOR = 0.85
NVLS_TREE_NET_US = 20.9
NVLS_HOPS = 2
"""NVLS: one NVSwitch round trip to reduce, one to multicast, at NCCL's Simple NVLink hop latency."""


def _select(condition: Num, if_true: Num, if_false: Num) -> Num:
    return np.where(condition, if_true, if_false)


def _hops(fab: Fabric, algo: str, proto: int) -> tuple[Num, Num]:
    """(intra-node hop, network hop) latency in us for one step."""
    intra = np.where(fab.intra_pcie, HOP_PCI_US[algo][proto], HOP_NVLINK_US[algo][proto])
    return intra, HOP_NET_US[algo][proto] + fab.net_extra_us


def _protocols(fab: Fabric) -> Iterator[tuple[int, str, Num]]:
    """(index, name, availability) of each protocol: NCCL runs LL128 only over NVLink."""
    for index, name in enumerate(PROTOCOLS):
        yield index, name, (1 - fab.intra_pcie) if name == "LL128" else 1.0


def _seconds(lat_us: Num, nbytes: Num, gbps: Num) -> Num:
    return lat_us * 1e-6 + nbytes / (np.maximum(gbps, 1e-12) * 1e9)


def _gate(ok: Num, seconds: Num) -> Num:
    return np.where(ok, seconds, np.inf)


def _ring_lat(fab: Fabric, proto: int, steps: Num, inter_steps: Num) -> Num:
    hop_intra, hop_net = _hops(fab, "ring", proto)
    return BASE_US["ring"][proto] + (steps - inter_steps) * hop_intra + inter_steps * hop_net


def _ring_bw(fab: Fabric, ppn: Num, nodes: Num, node_net: Num) -> Num:
    intra = np.where(ppn > 1, fab.intra_gbps, np.inf)
    return np.minimum(intra, np.where(nodes > 1, node_net, np.inf))


def _cross_slowdown(fab: Fabric, nodes: Num) -> Num:
    """Share of traffic that leaves a leaf, times oversubscription (>= 1): trees, all-to-all."""
    leaving = np.where(nodes > fab.nodes_per_leaf, 1.0 - fab.nodes_per_leaf / np.maximum(nodes, 1), 0.0)
    return np.maximum(1.0, fab.oversubscription * leaving)


def _all_reduce_in_node(fab: Fabric, nbytes: Num, ppn: Num) -> Iterator[Candidate]:
    """All-reduce inside one node: ring and NVLS only, no network term (the fast path of TP)."""
    for proto, name, available in _protocols(fab):
        hop_intra, _ = _hops(fab, "ring", proto)
        lat = BASE_US["ring"][proto] + 2 * (ppn - 1) * hop_intra
        seconds = _seconds(lat, 2 * (ppn - 1) / ppn * nbytes, fab.intra_gbps * BW_FACTOR["ring"][proto])
        yield "ring", name, np.where(ppn > 1, _gate(available > 0, seconds), 0.0)
    simple = PROTOCOLS.index("Simple")
    lat = NVLS_HOPS * HOP_NVLINK_US["ring"][simple]
    seconds = _seconds(lat, nbytes * (ppn + 1) / ppn, fab.intra_gbps * fab.nvls_eff)
    yield "nvls", "Simple", _gate((fab.nvls_eff > 0) & (ppn > 1), seconds)


def all_reduce(
    fab: Fabric, nbytes: Num, ppn: Num, nodes: Num, node_net: Num | None = None, *, include_hier: bool = False
) -> Iterator[Candidate]:
    """All-reduce of ``nbytes`` per rank over ``ppn`` ranks per node on ``nodes`` nodes.

    ``node_net`` is the network bandwidth (GB/s) this group gets per node; by
    default all of the node's NICs.
    """
    if np.ndim(nodes) == 0 and nodes <= 1:
        yield from _all_reduce_in_node(fab, nbytes, ppn)
        return
    net = fab.node_net_gbps if node_net is None else node_net
    p = ppn * nodes
    multi = nodes > 1
    tree_bytes = nbytes * np.where(nodes == 2, 1.0, 2.0)
    tree_net = net / _cross_slowdown(fab, nodes)
    log_nodes = np.log2(np.maximum(nodes, 1))
    ring_bw = _ring_bw(fab, ppn, nodes, net)
    for proto, name, available in _protocols(fab):
        ok = (p > 1) & (available > 0)
        lat = _ring_lat(fab, proto, 2 * (p - 1), np.where(multi, 2 * (nodes - 1), 0))
        factor = BW_FACTOR["ring"][proto]
        yield (
            "ring",
            name,
            np.where(p > 1, _gate(ok, _seconds(lat, 2 * (p - 1) / p * nbytes, ring_bw * factor)), 0.0),
        )

        hop_intra, hop_net = _hops(fab, "tree", proto)
        lat = BASE_US["tree"][proto] + 2 * ((ppn - 1) * hop_intra + log_nodes * hop_net)
        per_gbps = BW_FACTOR["tree"][proto]
        intra_t = np.where(ppn > 1, 2.0 * nbytes / (fab.intra_gbps * 1e9), 0.0)
        inter_t = tree_bytes / (np.maximum(tree_net, 1e-12) * 1e9)
        yield "tree", name, _gate(ok & multi, lat * 1e-6 + np.maximum(intra_t, inter_t) / per_gbps)

        if include_hier:
            intra_bw = fab.intra_gbps * factor
            hier_t = 2 * (ppn - 1) / ppn * nbytes / (intra_bw * 1e9) + 2 * (nodes - 1) / nodes * nbytes / (
                np.maximum(net * factor, 1e-12) * 1e9
            )
            lat = _ring_lat(fab, proto, 2 * (p - 1), 2 * (nodes - 1))
            yield "hier", name, _gate(ok & multi & (ppn > 1), lat * 1e-6 + hier_t)

    simple = PROTOCOLS.index("Simple")
    nvls_ok = (fab.nvls_eff > 0) & (ppn > 1)
    nvls_intra = nbytes * (ppn + 1) / ppn / (np.maximum(fab.intra_gbps * fab.nvls_eff, 1e-12) * 1e9)
    nvls_inter = np.where(multi, tree_bytes / (np.maximum(tree_net, 1e-12) * 1e9), 0.0)
    lat = NVLS_HOPS * HOP_NVLINK_US["ring"][simple] + np.where(
        multi, 2 * log_nodes * (NVLS_TREE_NET_US + fab.net_extra_us), 0
    )
    yield "nvls", "Simple", _gate(nvls_ok, lat * 1e-6 + np.maximum(nvls_intra, nvls_inter))

    sharp_ok = (fab.sharp > 0) & multi
    lat = 2 * (np.minimum(1, ppn - 1) * COLLNET_HOP_INTRA_US + (ppn - 1) * COLLNET_PER_RANK_US) + (
        COLLNET_NET_US + fab.net_extra_us
    )
    sharp_intra = 2 * (ppn - 1) / ppn * nbytes / (fab.intra_gbps * 1e9)
    sharp_inter = nbytes / (np.maximum(net * COLLNET_FACTOR, 1e-12) * 1e9)
    yield "sharp", "Simple", _gate(sharp_ok, lat * 1e-6 + np.maximum(sharp_intra, sharp_inter))


def ring_like(
    fab: Fabric, total_bytes: Num, ppn: Num, nodes: Num, *, chain: bool = False, node_net: Num | None = None
) -> Iterator[Candidate]:
    """All-gather or reduce-scatter over a ring of n ranks (each rank moves (n-1)/n of the
    total), or with ``chain`` broadcast or reduce (a pipelined chain moves all of it)."""
    net = fab.node_net_gbps if node_net is None else node_net
    p = ppn * nodes
    bw = _ring_bw(fab, ppn, nodes, net)
    moved = total_bytes if chain else total_bytes * (p - 1) / p
    for proto, name, available in _protocols(fab):
        lat = _ring_lat(fab, proto, p - 1, nodes - 1)
        seconds = _seconds(lat, moved, bw * BW_FACTOR["ring"][proto])
        yield "ring", name, np.where(p > 1, _gate(available > 0, seconds), 0.0)


def point_to_point(fab: Fabric, total_bytes: Num, ppn: Num, nodes: Num, *, pattern: str) -> Iterator[Candidate]:
    """alltoall, sendrecv (to the next rank), gather and scatter (to or from one root).

    Between nodes NCCL sends to a peer through one NIC: a root or a ring
    neighbour gets one NIC, all-to-all spreads over all of them and suffers
    oversubscription like a tree.
    """
    p = ppn * nodes
    multi = nodes > 1
    for proto, name in ((0, "LL"), (2, "Simple")):
        hop_intra, hop_net = _hops(fab, "ring", proto)
        lat = BASE_US["ring"][proto] + _select(multi, hop_net, hop_intra)
        factor = BW_FACTOR["ring"][proto]
        if pattern == "alltoall":
            intra_bytes = total_bytes * (ppn - 1) / p
            inter_node_bytes = total_bytes * ppn * (p - ppn) / p
            net = fab.node_net_gbps / _cross_slowdown(fab, nodes)
            seconds = np.maximum(
                intra_bytes / (fab.intra_gbps * factor * 1e9),
                inter_node_bytes / (np.maximum(net * factor, 1e-12) * 1e9),
            )
        elif pattern == "sendrecv":
            bw = _select(multi, np.minimum(fab.intra_gbps, fab.nic_gbps), fab.intra_gbps)
            seconds = total_bytes / (bw * factor * 1e9)
        else:
            intra_bytes = total_bytes * (ppn - 1) / p
            inter_bytes = total_bytes * (p - ppn) / p
            seconds = np.maximum(
                intra_bytes / (fab.intra_gbps * factor * 1e9),
                inter_bytes / (np.maximum(fab.nic_gbps * factor, 1e-12) * 1e9),
            )
        yield "p2p", name, np.where(p > 1, lat * 1e-6 + seconds, 0.0)


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


def fastest(found: Iterator[Candidate]) -> Num:
    """The lowest time over NCCL's candidates, elementwise (what NCCL's tuner would run)."""
    best: Num = np.inf
    for algo, _, seconds in found:
        if algo in NCCL_ALGORITHMS:
            best = np.minimum(best, seconds)
    return best


def choose(found: Iterator[Candidate], algo: str | None = None) -> tuple[Num, list[str]]:
    """(seconds, ["ring/LL128", ...]) of the fastest candidate, optionally of one algorithm only.

    Without ``algo`` the choice is NCCL's (no ``hier``).  Works elementwise on arrays; the
    label list is flat, in C order.
    """
    items = [c for c in found if (c[0] in NCCL_ALGORITHMS if algo is None else c[0] == algo)]
    if not items:
        return np.inf, []
    times = np.stack(np.broadcast_arrays(*[np.asarray(c[2], dtype=float) for c in items]))
    index = np.argmin(times, axis=0)
    best = np.take_along_axis(times, index[None, ...], axis=0)[0]
    labels = [f"{items[i][0]}/{items[i][1]}" for i in np.ravel(index)]
    return best, labels
