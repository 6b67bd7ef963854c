"""How sure a prediction is: the validation error of the closest group of published rows.

``predict``, ``estimate`` and ``plan`` name the group of shipped validation rows
(``data/validation/*.csv``) that measured the same kind of system as the
cluster asked about (an NVLink node, InfiniBand or RoCE between nodes, NCCL
over TCP, PCIe-only GPUs, GPUs sharing a NIC) and report that group's median
and worst |error| as the prediction's uncertainty, all rows counted, the ones
the model is known to miss included.  They also warn when the cluster lies
outside what any row covers: more nodes than the group's largest measurement
(RoCE's scale loss is fitted on 2-6 nodes), a GPU no row measured.  A cluster
whose ops were calibrated (``fabricscope calibrate``) reports the fit's own
error for the ops it covers at the calibrated shape, the catalog's for the others,
and calls another shape an extrapolation.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from fabricscope.model.cluster import Cluster
from fabricscope.model.collective_cost import ROCE_SCALE_LOSS_NICS
from fabricscope.model.fabric import fabric_of
from fabricscope.units import is_digits

__all__ = ["LONG_CONTEXT_TOKENS", "Uncertainty", "collective_group", "for_collectives", "for_training"]


@dataclass(frozen=True, slots=True)
class Uncertainty:
    """The error a prediction can be expected to carry, and where it comes from."""

    basis: str
    """``validation`` (published rows) or ``calibration`` (this cluster's own measurements)."""
    group: str
    rows: int
    median_abs_error_pct: float
    worst_abs_error_pct: float
    warnings: tuple[str, ...] = field(default_factory=tuple)
    extrapolated_from: str = ""
    """The calibrated shape ("8 nodes x 4 GPUs") a prediction at another shape extrapolates from."""

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self, what: str, prefix: str = "# ") -> list[str]:
        """What to print: ``prefix`` is "# " under an nccl-tests table, "" elsewhere."""
        if self.basis == "calibration" and self.extrapolated_from:
            head = (
                f"{prefix}uncertainty of {what}: not measured: extrapolated from the calibrated shape, "
                f"{self.extrapolated_from} (the fit's error there, median {self.median_abs_error_pct:.1f}%, "
                f"worst op {self.worst_abs_error_pct:.1f}% over {self.rows} points, does not bound it)"
            )
        elif self.basis == "calibration":
            head = (
                f"{prefix}uncertainty of {what}: fit to this cluster's measurements ({self.rows} points): "
                f"median |error| {self.median_abs_error_pct:.1f}%, worst op {self.worst_abs_error_pct:.1f}%"
            )
        elif not self.rows:
            head = f"{prefix}uncertainty of {what}: not known (no published row measured a {self.group} system)"
        else:
            head = (
                f"{prefix}uncertainty of {what}: +-{self.median_abs_error_pct:.0f}% typical, "
                f"{self.worst_abs_error_pct:.0f}% worst "
                f"(validation group {self.group}: {self.rows} published rows)"
            )
        return [head, *(f"{prefix}warning: {w}" for w in self.warnings)]


@dataclass(frozen=True, slots=True)
class _Row:
    id: str
    group: str
    gpu: str
    nodes: int
    error: float
    system: str = ""
    """The row's description of what it measured (the collectives' ``system`` column)."""


@functools.cache
def _rows(kind: str) -> tuple[_Row, ...]:
    """The shipped rows of one file kind (``collectives`` or ``training``) with their errors."""
    from fabricscope.model.validation import default_files, validate_file

    found: list[_Row] = []
    for path in default_files():
        if not path.name.startswith(kind):
            continue
        for check in validate_file(path):
            if check.metric == "memory_gib":
                continue  # an error in memory, not in time
            detail = check.detail
            nodes, gpu = 1, ""
            if " on " in detail:  # "... on 2x8 h100-sxm: ring/Simple"
                shape, _, rest = detail.split(" on ", 1)[1].partition(" ")
                nodes = int(shape.split("x")[0]) if is_digits(shape.split("x")[0]) else 1
                gpu = rest.split(":")[0]
            elif "x " in detail:  # "64x a100-sxm-80gb tp8 ..."
                gpu = detail.split("x ", 1)[1].split(" ")[0]
            found.append(_Row(check.id, check.group, gpu, nodes, abs(check.error_pct), check.description))
    return tuple(found)


UNMEASURED_GPU = "no published row measured a"
"""How the warning about a GPU no row measured begins (training estimates drop it where theirs did)."""
TRANSPORT_SYSTEM = {"efa": "EFA", "gpudirect-tcpx": "GPUDirect-TCPX", "gpudirect-tcpxo": "GPUDirect-TCPXO"}
"""The word the ``system`` of a collectives row measured on a cloud's own transport holds: a cluster
on that transport is priced with those rows' errors, not the whole group's."""


def _measured_on(row: _Row, transport: str) -> bool:
    """Whether ``row`` measured ``transport`` (a whole word of its system: TCPX is not TCPXO)."""
    return re.search(rf"(?<![\w-]){re.escape(TRANSPORT_SYSTEM[transport])}(?![\w-])", row.system) is not None


BOARD_GPUS = 8
"""The most GPUs one board's NVSwitch joins (HGX): nodes of a multi-node NVLink link that hold no more (a
rack described by its trays) take the errors of such nodes joined by the network, as which they are priced."""


def _domain_link(cluster: Cluster) -> bool:
    """Whether the cluster's nodes are multi-node NVLink domains (GB200 NVL72)."""
    return cluster.gpulink is not None and cluster.gpulink.multi_node and cluster.intra == "nvswitch"


def collective_group(cluster: Cluster) -> str:
    """The validation group whose rows measured this kind of system."""
    net = cluster.spec.network
    if _domain_link(cluster) and (cluster.nodes <= 1 or cluster.gpus_per_node > BOARD_GPUS):
        return "nvlink-domain"  # GB200 NVL72 racks, one or many
    if cluster.nodes <= 1:
        return "pcie-node" if cluster.intra == "pcie" else "nvlink-node"
    if net.transport == "tcp-socket":
        return "tcp"
    if net.transport == "efa":
        return "mid-size"  # AWS's published EFA runs (2 x p4de, 2 x p5) are rows of this group
    if net.transport in ("gpudirect-tcpx", "gpudirect-tcpxo"):
        return "gpudirect-tcp"
    if cluster.nic.link == "ethernet":
        return "roce-multinode"
    if net.nics_per_node < cluster.gpus_per_node:
        return "shared-nic"
    return "ib-multinode"


def _stats(rows: list[_Row]) -> tuple[float, float]:
    errors = [r.error for r in rows]
    return statistics.median(errors), max(errors)


def _coverage(cluster: Cluster, group: str, rows: list[_Row], every: tuple[_Row, ...]) -> list[str]:
    warnings = []
    largest = max((r.nodes for r in rows), default=0)
    if rows and cluster.nodes > largest:
        warnings.append(
            f"{cluster.nodes} nodes is beyond the largest {group} measurement validated ({largest} nodes): "
            "the model extrapolates"
            + (" RoCE's loss with scale" if group == "roce-multinode" else " its network terms")
        )
    nics = cluster.spec.network.nics_per_node
    if group == "roce-multinode" and cluster.nodes > 2 and nics < ROCE_SCALE_LOSS_NICS:
        warnings.append(
            f"RoCE's loss with scale was measured on nodes with {ROCE_SCALE_LOSS_NICS} NICs; with {nics} per node "
            "it is unmeasured, and the predicted loss may be pessimistic"
        )
    across = cluster.nodes > 1  # a transport between nodes is what a one-node cluster never uses
    if across and cluster.spec.network.transport == "efa":
        warnings.append(
            f"on EFA the model prices AWS's {cluster.transport.latency_us:g} us per network step, not the plugin's "
            "rendezvous above 8 KiB nor its flushes; the figures above are the group's rows measured on EFA (AWS's "
            "2-node p4de and p5 runs), slower than predicted below 64 MiB"
        )
    if across and cluster.spec.network.transport == "gpudirect-tcpx":
        per_nic = float(fabric_of(cluster).nic_gbps) / (cluster.nic.speed_gbps / 8.0)
        warnings.append(
            f"on GPUDirect-TCPX the model prices {per_nic:.1%} of each NIC's line rate (Device Memory TCP's share, "
            "within the NIC's PCIe slot) and lacks the host's ceiling: every packet's header still runs through the "
            "host's TCP stack, and the published 2-node runs on A3 High reached about half to two thirds of line rate; "
            "measure yours (fabricscope bench or nccl-tests) and price from it with fabricscope calibrate"
        )
    if across and cluster.spec.network.transport == "gpudirect-tcpxo":
        warnings.append(
            "on GPUDirect-TCPXO the model prices each network step at a TCP transport's "
            f"{cluster.transport.latency_us:g} us (no published figure for the offload's own); the two published "
            "2-node runs on A3 Mega are slower than predicted at 16 MiB and below"
        )
    link = cluster.gpulink
    if (
        _domain_link(cluster)
        and link is not None
        and cluster.nodes > 1
        and cluster.gpus_per_node < link.max_gpus_nvswitch
    ):
        warnings.append(
            f"a node of {link.name} is its whole NVLink domain (up to {link.max_gpus_nvswitch} GPUs): {cluster.nodes} "
            f"nodes of {cluster.gpus_per_node} are priced as {cluster.nodes} domains joined by the network; a rack is "
            f"one node (gpus_per_node = {link.max_gpus_nvswitch}, nodes = racks), not its compute trays"
        )
    if cluster.gpu.name not in {r.gpu for r in every}:
        warnings.append(f"{UNMEASURED_GPU} {cluster.gpu.name}: its numbers are the catalog's alone")
    return warnings


def _catalog(cluster: Cluster) -> Uncertainty:
    """The validation group's uncertainty: what a prediction priced from the catalog carries."""
    every = _rows("collectives")
    group = collective_group(cluster)
    rows = [r for r in every if r.group == group] or list(every)
    transport = cluster.spec.network.transport
    if transport in TRANSPORT_SYSTEM:
        rows = [r for r in rows if _measured_on(r, transport)] or rows  # the group's rows measured on it
    median, worst = _stats(rows)
    return Uncertainty("validation", group, len(rows), median, worst, tuple(_coverage(cluster, group, rows, every)))


ONE_RANK = (
    "one rank runs no collective: NCCL copies the send buffer into the receive buffer (in place nothing, but "
    "for alltoall, gather, scatter and a floating-point avg), priced as a copy through the GPU's memory with "
    "no launch latency"
)


def _shape(nodes: int, gpus_per_node: int) -> str:
    return f"{nodes} node{'s' if nodes != 1 else ''} x {gpus_per_node} GPU{'s' if gpus_per_node != 1 else ''}"


def for_collectives(cluster: Cluster, ops: Iterable[str] | None = None) -> Uncertainty:
    """The uncertainty of predictions of ``ops`` (default: every op the cluster's calibration
    covers, else all_reduce) on ``cluster``.

    Ops with a ``[calibration.<op>]`` table are priced from it and carry the fit's error;
    the others are priced from the catalog and carry the validation group's, with a warning
    that says so.  At another shape than the file's (``--nodes``, ``--gpus-per-node``) the fit's
    residual is not the error: the prediction is an extrapolation, and says from where.
    """
    if cluster.nodes * cluster.gpus_per_node == 1:  # calibrated or not, no collective runs
        return Uncertainty("validation", "one-rank", 0, 0.0, 0.0, (ONE_RANK,))
    calibration = cluster.spec.calibration
    asked = list(dict.fromkeys(ops if ops is not None else (calibration or ["all_reduce"])))
    used = [op for op in asked if op in calibration]
    priced = ", ".join(op for op in asked if op not in calibration)
    catalog = _catalog(cluster)
    if not used:
        if not calibration:
            return catalog
        note = (
            f"{priced}: not calibrated (this cluster's calibration covers {', '.join(calibration)}): "
            "priced from the catalog, with its validation error"
        )
        return dataclasses.replace(catalog, warnings=(note, *catalog.warnings))
    from fabricscope.model.calibrated_cost import unmeasured_intra

    terms = [calibration[op] for op in used]
    errors = [t.residual_pct for t in terms]
    shape = (cluster.gpus_per_node, cluster.nodes)
    warnings = [
        f"{op}: no run measured the hops inside a node (runs across nodes only): "
        "they are taken as no slower than the network"
        for op in used
        if unmeasured_intra(calibration[op], *shape)
    ]
    if priced:
        warnings.append(
            f"{priced}: not calibrated (no [calibration.<op>] table): priced from the catalog, whose error is "
            f"+-{catalog.median_abs_error_pct:.0f}% typical, {catalog.worst_abs_error_pct:.0f}% worst "
            f"(validation group {catalog.group}: {catalog.rows} published rows)"
        )
    return Uncertainty(
        basis="calibration",
        group="calibrated",
        rows=sum(t.points for t in terms),
        median_abs_error_pct=statistics.median(errors),
        worst_abs_error_pct=max(errors),
        warnings=tuple(warnings),
        extrapolated_from="" if cluster.shape_is_the_files else _shape(*cluster.file_shape),
    )


LONG_CONTEXT_TOKENS = 16384
"""Sequences from this length on take the uncertainty of the long-context validation rows."""


def for_training(cluster: Cluster, model: Any = None) -> Uncertainty:
    """The uncertainty of a training-step estimate on ``cluster``: the training rows of the
    closest group (``moe`` for a mixture-of-experts model, ``long-context`` for sequences of 16K
    tokens and more, else the collectives group's name where training rows use it, else all of
    them), with the network's coverage warnings."""
    every = _rows("training")
    group = collective_group(cluster)
    if model is not None and getattr(model, "is_moe", False):
        group = "moe"
    elif model is not None and getattr(model, "is_transformer", False) and model.seq >= LONG_CONTEXT_TOKENS:
        group = "long-context"
    rows = [r for r in every if r.group == group]
    name = group if rows else "training, all groups"
    rows = rows or list(every)
    median, worst = _stats(rows) if rows else (0.0, 0.0)
    # A training step prices its collectives from the catalog (only the MoE all-to-all reads a
    # [calibration.alltoall] table, and says so itself): the catalog's error, not a fit's.
    network = _catalog(cluster)
    measured = {r.gpu for r in every}  # a GPU the training rows measured is not unmeasured
    warnings = [w for w in network.warnings if not (w.startswith(UNMEASURED_GPU) and cluster.gpu.name in measured)]
    unused = [op for op in cluster.spec.calibration if op != "alltoall"]
    if unused:
        warnings.insert(
            0,
            f"the calibration of {', '.join(unused)} is not used here: the step's communication is priced from "
            "the catalog",
        )
    if network.basis == "validation" and cluster.nodes > 1:
        warnings.append(
            f"its communication carries the collectives' uncertainty: +-{network.median_abs_error_pct:.0f}% typical, "
            f"{network.worst_abs_error_pct:.0f}% worst ({network.group})"
        )
    if every and cluster.gpu.name not in {r.gpu for r in every}:
        warnings.append(f"no published training run used a {cluster.gpu.name}")
    return Uncertainty("validation", name, len(rows), median, worst, tuple(dict.fromkeys(warnings)))
