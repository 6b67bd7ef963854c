"""How fast storage feeds a node: media, the storage server's link, the node's own link.

Random reads of ``S`` bytes from a device that serves ``q`` reads at once,
each starting after ``access`` seconds, deliver ``min(seq, q*S/(access +
S/seq))``.  Local disks serve their own node.  A remote server (NFS) or a set
of them (parallel file system) is shared by every node, through its link(s);
each node also reads through its own NICs.  The slowest of these decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricscope.model.cluster import Cluster
from fabricscope.model.hardware import NIC, Transport

__all__ = ["DataPath", "data_path", "link_bps", "random_read_bps"]

TRANSFORMER_READ_BYTES = 4 << 20
"""Language-model data is read from pre-tokenized shards in large sequential chunks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DataPath:
    """Bytes per second one node can read, and which part limits it."""

    bps_per_node: float
    limit: str
    """"storage media", "storage server link" or "node link"."""
    media_bps: float
    server_link_bps: float
    node_link_bps: float


def random_read_bps(*, seq_mbps: float, access_ms: float, parallel: int, read_bytes: float) -> float:
    """Throughput of one device for random reads of ``read_bytes``."""
    seq = seq_mbps * 1e6
    per_read = access_ms * 1e-3 + read_bytes / seq
    return min(seq, parallel * read_bytes / per_read)


def link_bps(nic: NIC, transport: Transport, count: int = 1) -> float:
    """What ``count`` NICs deliver over ``transport``, bytes/s."""
    one = nic.speed_gbps / 8.0 * transport.efficiency
    if transport.host_ceiling_gbps > 0:
        one = min(one, transport.host_ceiling_gbps)
    return count * one * 1e9


def data_path(cluster: Cluster, read_bytes: float, *, link_factor: float = 1.0) -> DataPath:
    """Storage throughput available to each node of ``cluster`` for reads of ``read_bytes``;
    ``link_factor`` scales the network links (a what-if)."""
    storage = cluster.storage
    devices = cluster.spec.storage.devices
    media = devices * random_read_bps(
        seq_mbps=storage.seq_mbps,
        access_ms=storage.access_ms,
        parallel=storage.parallel,
        read_bytes=read_bytes,
    )
    inf = float("inf")
    if cluster.storage_link is None:
        return DataPath(
            bps_per_node=media, limit="storage media", media_bps=media, server_link_bps=inf, node_link_bps=inf
        )
    server = link_factor * link_bps(
        cluster.storage_link, cluster.storage_transport, devices if storage.link_per_device else 1
    )
    node = link_factor * link_bps(cluster.nic, cluster.storage_transport, max(cluster.spec.network.nics_per_node, 1))
    shared = min(media, server) / cluster.nodes
    per_node = min(shared, node)
    if per_node == node and node < shared:
        limit = "node link"
    else:
        limit = "storage media" if media <= server else "storage server link"
    return DataPath(bps_per_node=per_node, limit=limit, media_bps=media, server_link_bps=server, node_link_bps=node)
