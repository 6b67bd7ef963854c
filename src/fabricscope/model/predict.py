"""Predicted nccl-tests rows: the one path from a cluster and a sweep to predicted records.

:func:`predict` is what every command that shows a predicted collective calls
(``predict``, ``report --predict``, ``validate``), and :func:`op_seconds` is
what it prices with, the function ``calibrate``'s fit error uses too.  The op
registry of ``bench`` gives every row its ``size`` and ``count`` columns, the
bytes its algbw counts (:meth:`fabricscope.ops.Collective.algbw_bytes`) and its
busbw factor, so a predicted record and a measured one compare field by field.
Time comes from :mod:`fabricscope.model.collective_cost`, evaluated for all
sizes of an op at once, or from the measured terms of a calibrated cluster
(:mod:`fabricscope.model.calibrated_cost`) for the ops its ``[calibration]`` covers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fabricscope import ops
from fabricscope.dtypes import DTYPES
from fabricscope.errors import InvalidValue, UsageError
from fabricscope.model import collective_cost as model
from fabricscope.model.calibrated_cost import missing_hop, predicted_seconds
from fabricscope.model.cluster import CalibratedOp, Cluster
from fabricscope.model.fabric import Fabric, fabric_of
from fabricscope.ops import Collective
from fabricscope.results import CollectiveRecord, Result
from fabricscope.sweep import SweepConfig
from fabricscope.table import op_summary

__all__ = [
    "ALGO_CHOICES",
    "FASTER_BY",
    "ChosenOps",
    "Faster",
    "OpPrediction",
    "Prediction",
    "choose_ops",
    "op_seconds",
    "predict",
    "predict_like",
    "predict_op",
    "predict_sweep",
]

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

    def faster_by_row(self) -> dict[tuple[str, int], Faster]:
        """The :class:`Faster` of each (dtype, size) row that has one (the first, where a row has several): looked
        up per record, not searched, since a sweep has up to 100,000 rows."""
        found: dict[tuple[str, int], Faster] = {}
        for entry in self.faster:
            found.setdefault((entry.dtype, entry.size_bytes), entry)
        return found


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
    memory_gbps: float = 0.0,
) -> OpPrediction:
    """Rows for every size, datatype and reduction, out-of-place then in-place.

    One rank alone runs no algorithm: priced as NCCL runs it (:func:`one_rank_copies`), a copy
    through the GPU's memory (``memory_gbps``, GB/s).

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
    if nranks == 1 and chosen is not None:
        raise InvalidValue(
            f"{algo} cannot run on one rank: NCCL runs no algorithm there (a copy); use auto", key="algo"
        )
    if calibrated is not None and chosen is not None:
        # The fit measured NCCL's own choice; a forced algorithm would be priced from the catalog
        # under the calibration's name (and past its refusal of shapes it never measured).
        raise InvalidValue(
            f"{algo} cannot be combined with this cluster's calibrated {op.name} (measured under NCCL's own "
            "choice; a forced algorithm is priced from the catalog): use auto, or the base cluster without "
            f"[calibration.{op.name}]",
            key="algo",
        )
    if calibrated is not None and nranks > 1:  # one rank has no hops to price
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
        moved = np.array([op.algbw_bytes(size, eltsize, nranks) for size in sizes], dtype=float)
        if nranks == 1:  # no collective runs, calibrated or not: what NCCL does instead
            for redop in redops if op.reduces else ["none"]:
                for placement in ("out", "in") if op.in_place else ("out",):
                    copies = one_rank_copies(op, in_place=placement == "in", redop=redop,
                                             floating=DTYPES[dtype_name].is_float)  # fmt: skip
                    label = "local copy" if copies else "nothing (one rank, in place)"
                    t_one = 2.0 * moved / (memory_gbps * 1e9) if copies and memory_gbps > 0 else np.zeros_like(moved)
                    for layout, t in zip(layouts, t_one.tolist(), strict=True):
                        records.append(
                            _record(op, layout, eltsize, dtype_name, redop, root, placement, t, nranks, label)
                        )
            continue
        seconds, labels, found = op_seconds(op, fab, moved, gpus_per_node, nodes, chosen, calibrated)
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
                for placement in ("out", "in") if op.in_place else ("out",):
                    records.append(_record(op, layout, eltsize, dtype_name, redop, root, placement, t, nranks, label))
    return OpPrediction(op=op, records=records, faster=faster)


ONE_RANK_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})
"""Collectives that NCCL runs on a one-rank communicator without an algorithm (``ncclLaunchOneRank``)."""


def one_rank_copies(op: Collective, *, in_place: bool, redop: str, floating: bool) -> bool:
    """Whether ``op`` on one rank moves its bytes, as NCCL runs it there (src/device/onerank.cu).

    Its collectives copy the send buffer into the receive buffer (``cudaMemcpyAsync``, device to
    device) and do nothing in place, except an average of floating-point values, a multiply by 1/1
    that runs as a kernel reading and writing every element (``ncclDevPreMulSum``, src/enqueue.cc).
    NCCL's tuner prices a one-rank call at 0 (``updateCollCostTable``): no launch latency is added.
    alltoall, gather and scatter send to self: a copy, in place too.  A copy reads and writes each
    byte once: ``predict_op`` prices it at ``2 * moved`` over the GPU's memory bandwidth.
    """
    return not (op.name in ONE_RANK_OPS and in_place and not (redop == "avg" and floating))


def _record(
    op: Collective,
    layout: Any,
    eltsize: int,
    dtype: str,
    redop: str,
    root: int,
    placement: str,
    seconds: float,
    nranks: int,
    label: str,
) -> CollectiveRecord:
    """One predicted row, ``label`` the algorithm/protocol or what one rank does."""
    algbw, busbw = op.bandwidths(layout, eltsize, nranks, seconds)
    return CollectiveRecord(
        op=op.name,
        size_bytes=op.size_bytes(layout, eltsize),
        count=layout.count,
        dtype=dtype,
        redop=redop,
        root=root if op.rooted else -1,
        placement=placement,
        time_us=seconds * 1e6,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        wrong=None,
        algorithm=label,
    )


def op_seconds(
    op: Collective,
    fab: Fabric | None,
    moved: Any,
    gpus_per_node: int,
    nodes: int,
    chosen: str | None = None,
    calibrated: CalibratedOp | None = None,
) -> tuple[Any, list[str], list[Any]]:
    """(seconds, algorithm labels, the catalog's candidates) of ``op`` moving ``moved`` bytes (S of algbw).

    The calibrated terms where given (labelled ``calibrated``, no candidates), else the catalog
    model's choice (``chosen``, or NCCL's when None) on ``fab``.  ``calibrate`` computes its fit
    error with this function on the bytes of the measured rows.
    """
    moved = np.asarray(moved, dtype=float)
    if calibrated is not None:
        seconds = predicted_seconds(calibrated, op.name, moved, gpus_per_node, nodes)
        return np.broadcast_to(seconds, moved.shape), ["calibrated"] * len(moved), []
    if fab is None:
        raise ValueError("an uncalibrated op is priced on a fabric")
    found = list(model.candidates(op.name, fab, moved, float(gpus_per_node), float(nodes)))
    seconds, labels = model.choose(found, chosen)
    return np.broadcast_to(seconds, moved.shape), labels, found


@dataclass(frozen=True, slots=True)
class Prediction:
    """Every predicted op of one request on one cluster."""

    cluster: Cluster
    ops: list[OpPrediction]
    algo: str

    def records(self) -> list[dict[str, Any]]:
        """The records as a Result holds them, each with its faster candidate where there is one."""
        found = []
        for one in self.ops:
            by_row = one.faster_by_row()
            for record in one.records:
                faster = by_row.get((record.dtype, record.size_bytes))
                found.append({**record.to_dict(), **(faster.fields() if faster else {})})
        return found

    def summary(self) -> dict[str, Any]:
        """Per op, the nccl-tests footer figures and how many sizes beat NCCL's choice."""
        return {
            one.op.name: {
                **op_summary([r.to_dict() for r in one.records]),
                "sizes_faster_than_nccl_choice": len(one.faster),
            }
            for one in self.ops
        }

    def sweep_result(self, config: SweepConfig, *, uncertainty: Mapping[str, Any] | None = None) -> Result:
        """The Result of ``predict --json``: the sweep asked for and the cluster it was priced on."""
        return self.result(
            {
                "ops": config.ops,
                "min_bytes": config.min_bytes,
                "max_bytes": config.max_bytes,
                "step_factor": config.step_factor,
                "step_bytes": config.step_bytes,
                "dtypes": config.dtypes,
                "redops": config.redops,
                "root": config.root,
                "cluster_spec": dataclasses.asdict(self.cluster.spec),
            },
            {"uncertainty": uncertainty},
        )

    def result(self, config: Mapping[str, Any] | None = None, summary: Mapping[str, Any] | None = None) -> Result:
        """A Result of kind ``predict``: the cluster's name and shape, then ``config``."""
        return Result(
            kind="predict",
            config={
                "cluster": self.cluster.name,
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.gpus_per_node,
                "algo": self.algo,
                **(config or {}),
            },
            records=self.records(),
            summary={**self.summary(), **(summary or {})},
        )


def predict(
    cluster: Cluster,
    sizes: Mapping[str, Sequence[int]],
    *,
    dtypes: Iterable[str] = ("float",),
    redops: Iterable[str] = ("sum",),
    root: int = 0,
    algo: str = "auto",
) -> Prediction:
    """The predicted rows of each op in ``sizes`` (op name -> requested sizes, in order) on ``cluster``.

    Each op is priced from the cluster's ``[calibration.<op>]`` terms where it has them, else
    from the catalog model on the cluster's fabric: the one way a command turns a cluster into
    predicted records.
    """
    fab = fabric_of(cluster)
    dtypes, redops = list(dtypes), list(redops)
    found = [
        predict_op(
            ops.get(name),
            fab,
            sizes=op_sizes,
            dtypes=dtypes,
            redops=redops,
            root=root,
            gpus_per_node=cluster.gpus_per_node,
            nodes=cluster.nodes,
            algo=algo,
            calibrated=cluster.spec.calibration.get(ops.get(name).name),
            memory_gbps=cluster.gpu.hbm_tbps * 1000.0,
        )
        for name, op_sizes in sizes.items()
    ]
    return Prediction(cluster=cluster, ops=found, algo=algo)


@dataclass(frozen=True, slots=True)
class ChosenOps:
    """The ops a ``predict`` command line names, as the model can price them."""

    names: list[str]
    """The ops to price, in order."""
    optional: list[str]
    """Those that ``all`` added (skipped with a note where the world cannot run them)."""
    left_out: list[str]
    """Ops ``all`` named that the model has no cost for (``ps``, ``hypercube``)."""


def choose_ops(requested: Sequence[str]) -> ChosenOps:
    """The ops of ``requested`` (names, aliases, ``all``; none means all_reduce) that the model prices.

    An op named outright that the model cannot price is a :class:`UsageError`; ``all`` leaves
    such ops out and says which (:attr:`ChosenOps.left_out`).
    """
    names = [c.name for c in ops.parse_ops(list(requested))] if requested else ["all_reduce"]
    named = [c.name for c in ops.parse_ops([o for o in requested if o.strip().lower() != "all"])]
    left_out = [n for n in names if not ops.get(n).modelled]
    for name in left_out:
        if name in named:
            raise UsageError(f"predict has no cost model for {name}: measure it with 'fabricscope bench {name}'")
    priced = [n for n in names if n not in left_out]
    return ChosenOps(names=priced, optional=[n for n in priced if n not in named], left_out=left_out)


def predict_sweep(cluster: Cluster, config: SweepConfig, *, algo: str = "auto") -> Prediction:
    """:func:`predict` over every size of ``config``'s sweep, for each of its ops."""
    sizes = list(config.sizes())
    return predict(
        cluster,
        {name: sizes for name in config.ops},
        dtypes=config.dtypes,
        redops=config.redops,
        root=config.root,
        algo=algo,
    )


def predict_like(cluster: Cluster, like: Result) -> Prediction:
    """:func:`predict` of ``like``'s ops and sizes (those the model prices), at ``like``'s own shape
    (its nodes and ranks per node) where the run says it and its ranks fill its nodes evenly.

    One sweep's datatype, reduction and root, as the run's first rows of each kind say.  A
    datatype the model has no size for (nccl-tests' uint32, f8e4m3...) is priced as float: the
    prediction depends on the bytes, and a report matches rows by size.
    """
    world = like.world()
    if world is not None and world[0] % world[1] == 0:
        cluster = cluster.with_nodes(world[1]).with_gpus_per_node(world[0] // world[1])
    rows = [r for r in like.records if isinstance(r, dict) and "op" in r and "size_bytes" in r]
    sizes = {
        name: sorted({int(r["size_bytes"]) for r in rows if r["op"] == name})
        for name in dict.fromkeys(str(r["op"]) for r in rows)
        if name in ops.COLLECTIVES and ops.get(name).modelled
    }
    dtype = next((str(r["dtype"]) for r in rows if r.get("dtype")), "float")
    dtype = dtype if dtype in DTYPES else "float"
    redop = next((str(r["redop"]) for r in rows if r.get("redop") not in (None, "none")), "sum")
    root = next((int(r["root"]) for r in rows if isinstance(r.get("root"), int) and r["root"] >= 0), 0)
    return predict(cluster, sizes, dtypes=[dtype], redops=[redop], root=root)


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
