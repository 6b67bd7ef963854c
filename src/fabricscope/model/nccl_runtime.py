"""What NCCL does at run time once its tuner has chosen: how many channels run a message, and how
a chunked pipeline of small steps costs more than its bandwidth.

NCCL's tuner (``src/graph/tuning.cc``) prices every message as if all of the communicator's
channels ran it at the algorithm's full bandwidth.  The kernels do not (``src/enqueue.cc``,
NVIDIA/nccl master 5067397c, function ``topoGetAlgoInfo`` and the chunk rules of
``calcCollChunking``): a ring or tree message runs on one channel per ``threads x threshold``
bytes, and NVLS all-reduce runs each of its channels as a pipeline of steps of at most 128 KiB,
fewer and smaller the smaller the message.  :mod:`~fabricscope.model.collective_cost` prices
what the tuner chooses with these two effects; docs/model.md, "Mid-size messages", derives them.
"""

from __future__ import annotations

import numpy as np

from fabricscope.model.fabric import Fabric, Num

__all__ = [
    "COMM_CHANNELS_MORE_NODES",
    "COMM_CHANNELS_ONE_NODE",
    "MAX_THREADS",
    "NVLS_CHUNK_BYTES",
    "NVLS_STAGES",
    "NVLS_TREE_MAX_CHUNK_4_NODES",
    "NVLS_TREE_STAGES",
    "THREAD_THRESHOLD",
    "channel_share",
    "comm_channels",
    "nvls_channels",
    "nvls_pipeline",
]

MAX_THREADS = (512, 640, 512)
"""Threads per channel of ring and tree, LL / LL128 / Simple (tuning.cc, ``maxThreads``)."""
THREAD_THRESHOLD = (8, 8, 64)
"""Bytes per thread below which NCCL takes a channel away (``NCCL_LL_THREAD_THRESHOLD`` 8,
``NCCL_LL128_THREAD_THRESHOLD`` 8, ``NCCL_SIMPLE_THREAD_THRESHOLD`` 64 in src/include/comm.h);
ring LL multiplies it by the number of ranks (tuning.cc)."""
COMM_CHANNELS_ONE_NODE = 24
"""Channels NCCL builds on one NVLink node, as read from src/graph/search.cc and connect.cc for 8 H100
(a ring graph of 6 channels at 60 GB/s, duplicated to 12 at 30, then doubled by connect.cc), not taken
from a log; other NVLink nodes are given the same count."""
COMM_CHANNELS_MORE_NODES = 16
"""Channels across nodes with one NIC per GPU: 8 graph channels (one per NIC), doubled (the same
reading, NCCL 2.27; 2.18 doubled again to 32)."""
COMM_CHANNELS_PCIE = 2
"""Channels on a node whose GPUs talk over PCIe: one graph channel, doubled (an assumption: only the
smallest messages on such nodes are affected)."""
NVLS_CHANNELS = np.array([0.0, 0.0, 16.0, 24.0])
"""``comm->nvlsChannels`` by NCCL architecture row (src/transport/nvls.cc: ``NVLS_NCHANNELS_SM90`` 16,
``NVLS_NCHANNELS_SM100_NVL`` 24 on one node; 32 across nodes, :data:`NVLS_CHANNELS_MORE_NODES`)."""
NVLS_CHANNELS_MORE_NODES = 32.0
NVLS_CHUNK_BYTES = 131072
"""``NCCL_NVLS_CHUNKSIZE``'s default; enqueue.cc halves it for smaller messages (:func:`nvls_pipeline`)."""
NVLS_TREE_MAX_CHUNK_4_NODES = 65536
"""An NVLS tree's chunk on 4 nodes or more (src/transport/nvls.cc: ``treeMaxChunkSize = (nNodes >= 4)
? 65536 : chunkSize``)."""
NVLS_STAGES = 3
"""Warp groups one NVLS all-reduce channel chains on one node: scatter into the multicast buffer,
reduce and multicast (``multimem.ld_reduce``, ``multimem.st``), gather out (src/device/all_reduce.h,
``RunWorkColl<..., NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>``)."""
NVLS_TREE_STAGES = 4
"""The same across nodes with NVLS trees: scatter, reduce and send up the tree, receive down and
multicast, gather (``RunWorkColl<..., NCCL_ALGO_NVLS_TREE, ...>``)."""
NVLS_STEP_US = 3.4
"""What a further pipeline step costs NVLS: a Simple step over NVLink waits for its peers' flags,
which NCCL's tuner prices at its Simple NVLink hop latency per ring step (tuning.cc, ``hwLat``)."""


def comm_channels(fab: Fabric, nodes: Num) -> Num:
    """``comm->nChannels``: the channels a ring or tree message may run on."""
    nvlink = np.where(nodes > 1, COMM_CHANNELS_MORE_NODES, COMM_CHANNELS_ONE_NODE)
    return np.where(fab.intra_pcie > 0, COMM_CHANNELS_PCIE, nvlink)


def channel_share(fab: Fabric, proto: int, nbytes: Num, ranks: Num, nodes: Num, *, ring: bool) -> Num:
    """Share of the communicator's channels a ring or tree message of ``nbytes`` (NCCL's nBytes)
    runs on: ``nc = nBytes / (threads x threshold)``, at least 1 and at most all of them
    (enqueue.cc, ``topoGetAlgoInfo``: "Ring/Tree channel tuning")."""
    threshold = THREAD_THRESHOLD[proto] * (np.maximum(ranks, 1) if ring and proto == 0 else 1)
    channels = comm_channels(fab, nodes)
    used = np.clip(np.floor(nbytes / (MAX_THREADS[proto] * threshold)), 1.0, channels)
    return used / channels


def nvls_channels(fab: Fabric, nodes: Num) -> Num:
    """``comm->nvlsChannels``."""
    arch = np.asarray(fab.arch, dtype=int)
    return np.where((nodes > 1) & (arch >= 3), NVLS_CHANNELS_MORE_NODES, NVLS_CHANNELS[arch])


def _nvls_chunk(nbytes: Num, concurrent: Num, *, tree: bool, start: Num = float(NVLS_CHUNK_BYTES)) -> Num:
    """NCCL's NVLS chunk for a message of ``nbytes`` over ``concurrent`` = channels x heads streams
    (enqueue.cc, ``calcCollChunking``): ``start``, halved while the message is small against it."""
    chunk = np.full(np.shape(nbytes * concurrent * start), 1.0) * start
    rules = ((4.0, 65536.0), (1.0, 32768.0)) if tree else ((64.0, 65536.0), (8.0, 32768.0), (2.0, 16384.0))
    for times, smaller in rules:
        chunk = np.where((nbytes < times * concurrent * chunk) & (chunk > smaller), smaller, chunk)
    return chunk


def nvls_pipeline(fab: Fabric, nbytes: Num, ppn: Num, nodes: Num, moving: Num) -> Num:
    """Seconds NVLS (one node) or NVLS trees (across nodes) take to move ``nbytes`` whose bandwidth
    time is ``moving``: each channel runs ``loops`` steps of ``heads x chunk`` bytes through a
    pipeline of ``stages`` warp groups, so the first step crosses every stage before the last one
    starts (``(loops + stages - 1) / loops`` of the bandwidth time), and every further step pays a
    Simple NVLink step (:data:`NVLS_STEP_US`)."""
    multi = nodes > 1
    concurrent = nvls_channels(fab, nodes) * np.maximum(ppn, 1)
    tree_start = np.where(nodes >= 4, NVLS_TREE_MAX_CHUNK_4_NODES, NVLS_CHUNK_BYTES)
    chunk = np.where(
        multi,
        _nvls_chunk(nbytes, concurrent, tree=True, start=tree_start),
        _nvls_chunk(nbytes, concurrent, tree=False),
    )
    loops = np.maximum(nbytes / (np.maximum(concurrent, 1.0) * chunk), 1.0)
    stages = np.where(multi, NVLS_TREE_STAGES, NVLS_STAGES)
    return moving * (loops + stages - 1) / loops + (loops - 1) * NVLS_STEP_US * 1e-6
