"""The cost of a collective from a cluster's own fitted terms (``[calibration.<op>]``).

``fabricscope calibrate`` fits these terms (:mod:`fabricscope.model.calibrate`);
:mod:`fabricscope.model.predict` evaluates them here at any rank and node count,
and so does calibrate's own fit error, so the error it prints is the one a
prediction of the measured shape shows.  The terms are read as a ring:
``t = base + intra_steps * intra_hop + inter_steps * inter_hop + S * busbw_factor(n) / busbw``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricscope import ops
from fabricscope.model.cluster import CalibratedOp

__all__ = ["described", "inter_steps", "missing_hop", "predicted_seconds", "steps", "unmeasured_intra"]


def steps(op: str, members: Any) -> Any:
    """Latency steps of the ring form of ``op`` through ``members`` ranks; given the node count
    instead, the steps that cross between nodes (the ring enters and leaves each node once).

    An all-to-all is no ring: every rank posts its sends and receives to all peers before it waits
    (bench's grouped sends and receives on gloo; NCCL groups them), so its peers' latencies overlap: one step, as the
    catalog model prices it (:func:`fabricscope.model.collective_cost.point_to_point`), as sendrecv.
    """
    if op == "all_reduce":
        return 2 * (members - 1)
    if op in ("sendrecv", "alltoall"):
        return np.minimum(members - 1, 1)
    return members - 1


inter_steps = steps
"""Steps between nodes: :func:`steps` of the node count."""


def missing_hop(terms: CalibratedOp, ranks_per_node: int, nodes: int) -> str | None:
    """Which hop a prediction at this shape needs and the calibration did not measure.

    Across nodes, hops inside a node that were not measured are taken as no slower than the
    network (runs across nodes only: their fitted line already holds them); :func:`unmeasured_intra`
    says when a prediction leans on that."""
    if nodes > 1 and terms.inter_busbw_gbps <= 0:
        return "between nodes"
    if nodes == 1 and ranks_per_node > 1 and terms.intra_busbw_gbps <= 0:
        return "inside a node"
    return None


def unmeasured_intra(terms: CalibratedOp, ranks_per_node: int, nodes: int) -> bool:
    """True where a prediction at this shape has hops inside a node that no run measured."""
    return nodes > 1 and ranks_per_node > 1 and terms.intra_busbw_gbps <= 0


def predicted_seconds(
    terms: CalibratedOp, op: str, moved: Any, ranks_per_node: Any, nodes: Any, net_share: Any = 1.0
) -> Any:
    """Seconds of ``op`` moving ``moved`` bytes (S of algbw) at this shape, from fitted terms.

    Vectorised over ``moved``, ``ranks_per_node`` and ``nodes`` (the training model prices many
    splits at once).  ``net_share`` scales the bytes across nodes where a pattern sends another
    share of them off the node than the measured one did (an MoE dispatch with node-limited routing).
    """
    per_node = np.asarray(ranks_per_node, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    sizes = np.asarray(moved, dtype=float)
    ranks = per_node * nodes
    crossing = inter_steps(op, nodes)
    with np.errstate(over="ignore", invalid="ignore"):  # terms a library caller set past the file's bounds
        latency_us = terms.base_us + (steps(op, ranks) - crossing) * terms.intra_hop_us + crossing * terms.inter_hop_us
    inside = terms.intra_busbw_gbps if terms.intra_busbw_gbps > 0 else np.inf
    busbw = np.where(nodes > 1, np.minimum(np.where(per_node > 1, inside, np.inf), terms.inter_busbw_gbps), inside)
    busbw = np.where(np.isfinite(busbw), busbw, 0.0)
    factor = ops.get(op).busbw_factor(np.maximum(ranks, 1.0))
    scale = np.where(nodes > 1, net_share, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        seconds = latency_us * 1e-6 + sizes * scale * factor / (np.maximum(busbw, 1e-12) * 1e9)
    return np.where(ranks > 1, seconds, 0.0)


def described(terms: CalibratedOp) -> str:
    """The fitted terms in words: latency per call, and per hop that was measured its step latency and
    bus bandwidth."""
    hops = []
    if terms.intra_busbw_gbps > 0:
        hops.append(f"inside a node {terms.intra_hop_us:.2f} us per step, {terms.intra_busbw_gbps:.4g} GB/s busbw")
    if terms.inter_busbw_gbps > 0:
        hops.append(f"between nodes {terms.inter_hop_us:.2f} us per step, {terms.inter_busbw_gbps:.4g} GB/s busbw")
    return f"{terms.base_us:.2f} us per call; " + "; ".join(hops or ["no hop"])
