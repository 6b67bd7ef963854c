"""Predicted nccl-tests rows: the same byte counts, columns and records as ``bench``.

The op registry of ``bench`` gives every row its ``size`` and ``count``
columns and its busbw factor, so a predicted record and a measured one compare
field by field.  Time comes from :mod:`fabricscope.model.collective_cost`,
evaluated for all sizes of an op at once, or from the measured terms of a
calibrated cluster (:mod:`fabricscope.model.calibrate`) for the ops it covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fabricscope.dtypes import DTYPES
from fabricscope.errors import InvalidValue, UsageError
from fabricscope.model import collective_cost as model
from fabricscope.model.cluster import CalibratedOp
from fabricscope.model.fabric import Fabric
from fabricscope.ops import Collective
from fabricscope.results import CollectiveRecord

__all__ = ["ALGO_CHOICES", "FASTER_BY", "Faster", "OpPrediction", "predict_op"]

ALGO_CHOICES = ("auto", *model.ALGORITHMS)


FASTER_BY = 0.10
"""Name a faster algorithm/protocol than NCCL's choice when it saves more than this share of the time."""


@dataclass(frozen=True, slots=True)
class Faster:
    """A size where the model's fastest algorithm/protocol beats the one NCCL's tuner picks.

    NCCL ranks candidates with corrections of its own (tree correction, ring plateau, NVLS
    latency); the table shows what it picks, since that is what a run measures.  Where the
    plain model finds another candidate more than :data:`FASTER_BY` faster, this says which
    and how to ask NCCL for it.
    """

    dtype: str
    size_bytes: int
    nccl: str
    """NCCL's choice, "ring/LL"."""
    nccl_time_us: float
    fastest: str
    fastest_time_us: float

    @property
    def env(self) -> str:
        return model.nccl_setting(self.fastest)

    def fields(self) -> dict[str, object]:
        """What a predicted record carries about it (``--json``)."""
        return {
            "fastest_algorithm": self.fastest,
            "fastest_time_us": self.fastest_time_us,
            "fastest_env": self.env,
        }


@dataclass(frozen=True, slots=True)
class OpPrediction:
    """The predicted rows of one op, with the algorithm/protocol each row would use."""

    op: Collective
    records: list[CollectiveRecord]
    faster: list[Faster] = field(default_factory=list)
    """Sizes where the model's fastest candidate beats NCCL's choice (only when NCCL chooses)."""

    def faster_for(self, record: CollectiveRecord) -> Faster | None:
        """The :class:`Faster` of one record's row, if any."""
        return next((f for f in self.faster if f.dtype == record.dtype and f.size_bytes == record.size_bytes), None)


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
    calibrated: CalibratedOp | None = None,
) -> OpPrediction:
    """Rows for every size, datatype and reduction, out-of-place then in-place.

    With ``calibrated`` terms time comes from them, labelled ``calibrated``; a shape they
    cannot reach (a 1-node calibration asked about two nodes), or an all_reduce ``algo``
    other than auto (the catalog's price under the calibration's name), is a usage error,
    not a silent fall-back to the catalog.
    """
    nranks = gpus_per_node * nodes
    if not op.modelled:
        raise UsageError(f"predict has no cost model for {op.name}: measure it with 'fabricscope bench {op.name}'")
    if nranks < op.min_ranks:
        raise UsageError(f"{op.name} needs at least {op.min_ranks} ranks; this cluster has {nranks}")
    if op.rooted and root >= nranks:
        raise UsageError(f"-r (root) {root} is not a rank of this {nranks}-rank cluster (allowed 0 to {nranks - 1})")
    # --algo picks among all_reduce's algorithms; other ops run as NCCL runs them (ring or p2p).
    chosen = algo if (algo != "auto" and op.name == "all_reduce") else None
    if calibrated is not None and chosen is not None:
        # The fit measured NCCL's own choice; a forced algorithm would be priced from the catalog
        # under the calibration's name (and past its refusal of shapes it never measured).
        raise InvalidValue(
            f"{algo} cannot be combined with this cluster's calibrated {op.name} (measured under NCCL's own "
            "choice; a forced algorithm is priced from the catalog): use auto, or the base cluster without "
            f"[calibration.{op.name}]",
            key="algo",
        )
    if calibrated is not None:
        from fabricscope.model.calibrate import missing_hop

        gap = missing_hop(calibrated, gpus_per_node, nodes)
        if gap is not None:
            raise UsageError(
                f"the calibration of {op.name} measured no hops {gap}: calibrate with runs that have them, "
                "or predict with the catalog cluster"
            )
    records: list[CollectiveRecord] = []
    faster: list[Faster] = []
    for dtype_name in dtypes:
        eltsize = DTYPES[dtype_name].size
        layouts = [op.layout(size // eltsize, eltsize, nranks) for size in sizes]
        moved = np.array([op.algbw_elements(layout, nranks) * eltsize for layout in layouts], dtype=float)
        if calibrated is not None:
            from fabricscope.model.calibrate import predicted_seconds

            seconds = predicted_seconds(calibrated, op.name, moved, gpus_per_node, nodes)
            labels = ["calibrated"] * len(moved)
            found = []
        else:
            found = list(model.candidates(op.name, fab, moved, float(gpus_per_node), float(nodes)))
            seconds, labels = model.choose(found, chosen)
        seconds = np.broadcast_to(seconds, moved.shape)
        if not np.all(np.isfinite(seconds)):
            if chosen is None:  # NCCL's choice or the calibrated terms: no flag to blame
                raise InvalidValue(f"{op.name} has no finite predicted time on this cluster at these sizes")
            raise InvalidValue(f"{algo} cannot run on this cluster: {_why_not(algo, nodes, gpus_per_node)}", key="algo")
        if chosen is None and found:
            best, best_labels = model.choose(found, plain=True)
            best = np.broadcast_to(best, moved.shape)
            for layout, t, label, b, b_label in zip(
                layouts, seconds.tolist(), labels, best.tolist(), best_labels, strict=True
            ):
                if b < t * (1.0 - FASTER_BY):
                    size = op.size_bytes(layout, eltsize)
                    faster.append(Faster(dtype_name, size, label, t * 1e6, b_label, b * 1e6))
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
    return OpPrediction(op=op, records=records, faster=faster)


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
