"""Predicted nccl-tests rows: the same byte counts, columns and records as ``bench``.

The op registry of ``bench`` gives every row its ``size`` and ``count``
columns and its busbw factor, so a predicted record and a measured one compare
field by field.  Time comes from :mod:`fabricscope.model.collectives`,
evaluated for all sizes of an op at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fabricscope.bench.collectives import Collective
from fabricscope.bench.dtypes import DTYPES
from fabricscope.errors import UsageError
from fabricscope.model import collectives as model
from fabricscope.model.fabric import Fabric
from fabricscope.results import CollectiveRecord

__all__ = ["ALGO_CHOICES", "OpPrediction", "predict_op"]

ALGO_CHOICES = ("auto", *model.ALGORITHMS)


@dataclass(frozen=True, slots=True)
class OpPrediction:
    """The predicted rows of one op, with the algorithm/protocol each row would use."""

    op: Collective
    records: list[CollectiveRecord]


def predict_op(
    op: Collective,
    fab: Fabric,
    *,
    sizes: Sequence[int],
    dtypes: Iterable[str],
    redops: Iterable[str],
    root: int,
    gpus_per_node: int,
    nodes: int,
    algo: str = "auto",
) -> OpPrediction:
    """Rows for every size, datatype and reduction, out-of-place then in-place."""
    nranks = gpus_per_node * nodes
    if nranks < op.min_ranks:
        raise UsageError(f"{op.name} needs at least {op.min_ranks} ranks; this cluster has {nranks}")
    if op.rooted and root >= nranks:
        raise UsageError(f"-r (root) {root} is not a rank of this {nranks}-rank cluster (allowed 0 to {nranks - 1})")
    # --algo picks among all_reduce's algorithms; other ops run as NCCL runs them (ring or p2p).
    chosen = algo if (algo != "auto" and op.name == "all_reduce") else None
    records: list[CollectiveRecord] = []
    for dtype_name in dtypes:
        eltsize = DTYPES[dtype_name].size
        layouts = [op.layout(size // eltsize, eltsize, nranks) for size in sizes]
        moved = np.array([op.algbw_elements(layout, nranks) * eltsize for layout in layouts], dtype=float)
        found = model.candidates(op.name, fab, moved, float(gpus_per_node), float(nodes))
        seconds, labels = model.choose(found, chosen)
        seconds = np.broadcast_to(seconds, moved.shape)
        if not np.all(np.isfinite(seconds)):
            raise UsageError(f"--algo {algo} cannot run on this cluster: {_why_not(algo, nodes, gpus_per_node)}")
        for redop in redops if op.reduces else ["none"]:
            for layout, t, label in zip(layouts, seconds.tolist(), labels, strict=True):
                algbw, busbw = op.bandwidths(layout, eltsize, nranks, t)
                for placement in ("out", "in") if op.in_place else ("out",):
                    records.append(
                        CollectiveRecord(
                            op=op.name,
                            size_bytes=op.size_bytes(layout, eltsize),
                            count=layout.count,
                            dtype=dtype_name,
                            redop=redop,
                            root=root if op.rooted else -1,
                            placement=placement,
                            time_us=t * 1e6,
                            algbw_gbps=algbw,
                            busbw_gbps=busbw,
                            wrong=None,
                            algorithm=label,
                        )
                    )
    return OpPrediction(op=op, records=records)


def _why_not(algo: str, nodes: int, gpus_per_node: int) -> str:
    if algo in ("tree", "hier", "sharp") and nodes < 2:
        return f"{algo} needs at least 2 nodes (use --nodes)"
    if algo == "hier" and gpus_per_node < 2:
        return "hier needs at least 2 GPUs per node"
    if algo == "nvls":
        return "nvls needs GPUs with NVLink SHARP on an NVSwitch (H100, H200, H20, B200)"
    if algo == "sharp":
        return "sharp needs network.sharp = true (InfiniBand switches with SHARP)"
    return "not applicable"
