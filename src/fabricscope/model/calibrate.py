"""Fitting a cluster's collective terms to its own measurements: ``fabricscope calibrate``.

For every op the alpha-beta line ``t(S) = a + b S`` (S: the bytes of algbw) is fitted to
``bench`` results (or nccl-tests logs in the same record fields) by least squares on relative
residuals with Huber weights, then read as the per-hop terms of a ring:
``a = base + steps(op, n) * hop`` and ``b = busbw_factor(n) / busbw``, intra-node from runs
inside a node, inter-node from runs across nodes.  :func:`predicted_seconds` evaluates the
fitted ring at another rank or node count; what it cannot extrapolate it refuses
(:func:`missing_hop`).  docs/model.md, section 7, gives the method in full.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricscope import ops
from fabricscope.dtypes import DTYPES
from fabricscope.errors import ResultFormatError, UsageError
from fabricscope.model.cluster import MAX_BUSBW_GBPS, CalibratedOp, Cluster
from fabricscope.results import Result

__all__ = [
    "HUBER_K",
    "MIN_SIZES",
    "Run",
    "calibrate",
    "cluster_toml",
    "fit_line",
    "inter_steps",
    "load_runs",
    "missing_hop",
    "predicted_seconds",
    "runs_of",
    "steps",
    "unmeasured_intra",
]

HUBER_K = 1.345
"""Huber's tuning constant: 95% efficiency on normal noise, bounded pull of outliers."""
MIN_SIZES = 3
"""Distinct message sizes a run needs before its line is fitted (two points fit any line)."""
RESULT_KINDS = ("bench", "nccl-tests")


@dataclass(frozen=True, slots=True)
class Run:
    """One op measured at one shape: the points of its time-against-bytes line."""

    source: str
    op: str
    ranks: int
    nodes: int
    moved: Any
    """S of algbw = S / t, bytes (numpy array)."""
    seconds: Any
    """Median (p50) time of each row where the result has it, else the mean (numpy array)."""

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes


def steps(op: str, members: Any) -> Any:
    """Latency steps of the ring form of ``op`` through ``members`` ranks; given the node count
    instead, the steps that cross between nodes (the ring enters and leaves each node once)."""
    if op == "all_reduce":
        return 2 * (members - 1)
    if op == "sendrecv":
        return np.minimum(members - 1, 1)
    return members - 1


inter_steps = steps
"""Steps between nodes: :func:`steps` of the node count."""


def fit_line(moved: Any, seconds: Any) -> tuple[float, float]:
    """(a, b) of ``t = a + b S`` with a, b >= 0: Huber-weighted least squares on relative error."""
    x = np.asarray(moved, dtype=float)
    y = np.asarray(seconds, dtype=float)
    weights = np.ones_like(y)
    a, b = 0.0, float(np.median(y / np.maximum(x, 1.0)))
    for _ in range(50):
        w = weights / y  # relative residuals
        design = np.stack([w, w * x], axis=1)
        (a_new, b_new), *_ = np.linalg.lstsq(design, w * y, rcond=None)
        if a_new < 0:  # no negative latency: refit through the origin
            a_new, b_new = 0.0, float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        if b_new < 0:  # no negative bandwidth: a flat line
            a_new, b_new = float(np.sum(w * w * y) / np.sum(w * w)), 0.0
        residual = (a_new + b_new * x - y) / y
        scale = 1.4826 * float(np.median(np.abs(residual - np.median(residual)))) or 1e-12
        ratio = np.abs(residual) / (HUBER_K * scale)
        weights = np.where(ratio <= 1.0, 1.0, 1.0 / np.maximum(ratio, 1e-12))
        done = abs(a_new - a) <= 1e-12 + 1e-9 * abs(a) and abs(b_new - b) <= 1e-18 + 1e-9 * abs(b)
        a, b = float(a_new), float(b_new)
        if done:
            break
    return a, b


def _moved_bytes(op: ops.Collective, record: dict[str, Any], ranks: int, mean_us: float) -> float:
    """The bytes the op's algbw counts (S of algbw = S/t), from the element count and datatype.

    nccl-tests prints algbw with two decimals, so small sizes read 0.00 GB/s: the count
    and datatype give S exactly; algbw x time is the fallback for records without them.
    """
    count, dtype = record.get("count"), DTYPES.get(str(record.get("dtype")))
    if isinstance(count, int) and not isinstance(count, bool) and count > 0 and dtype is not None:
        return float(op.algbw_elements(op.layout(count, dtype.size, ranks), ranks) * dtype.size)
    return _number(record.get("algbw_gbps"), "algbw_gbps") * 1e9 * mean_us * 1e-6


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} = {str(value)[:40]!r} is not a positive number")
    return float(value)


def _shape(result: Result, source: str) -> tuple[int, int]:
    """(ranks, nodes) of a result: its ``host.ranks`` list (bench), else ``config.nranks`` and
    ``config.nodes`` (imported logs)."""
    ranks = result.host.get("ranks") if isinstance(result.host, dict) else None
    if isinstance(ranks, list) and ranks and all(isinstance(r, dict) for r in ranks):
        hosts = {str(r.get("host", "")) for r in ranks}
        return len(ranks), max(len(hosts), 1)
    nranks, nodes = result.config.get("nranks"), result.config.get("nodes", 1)
    if isinstance(nranks, int) and not isinstance(nranks, bool) and isinstance(nodes, int) and 1 <= nodes <= nranks:
        return nranks, nodes
    raise ResultFormatError(
        f"{source}: cannot tell how many ranks and nodes ran: expected host.ranks (a bench result) "
        "or config.nranks and config.nodes (an imported log)"
    )


def runs_of(result: Result, source: str) -> list[Run]:
    """The runs of one result, one per op (all datatypes, reductions and placements together)."""
    if result.kind not in RESULT_KINDS:
        raise ResultFormatError(
            f"{source}: a {result.kind!r} result holds no measurements: "
            "calibrate reads bench results and imported nccl-tests logs"
        )
    ranks, nodes = _shape(result, source)
    if ranks % nodes:
        raise ResultFormatError(f"{source}: {ranks} ranks do not fill {nodes} nodes evenly")
    points: dict[str, list[tuple[float, float]]] = {}
    for index, record in enumerate(result.records):
        try:
            if not isinstance(record, dict):
                raise ValueError("not an object")
            name = record.get("op")
            if not isinstance(name, str) or name not in ops.COLLECTIVES:
                raise ValueError(f"op = {str(name)[:40]!r} is not a collective")
            mean_us = _number(record.get("time_us"), "time_us")
            median = record.get("p50_us")
            time_us = _number(median, "p50_us") if median is not None else mean_us
            moved = _moved_bytes(ops.get(name), record, ranks, mean_us)
        except ValueError as exc:
            raise ResultFormatError(f"{source}: record {index}: {exc}") from None
        points.setdefault(name, []).append((moved, time_us * 1e-6))
    runs = []
    for name, found in points.items():
        if len({round(m) for m, _ in found}) < MIN_SIZES:
            raise ResultFormatError(
                f"{source}: {name} has fewer than {MIN_SIZES} message sizes: measure a range (bench -b 64K -e 16M)"
            )
        sizes, seconds = (np.array(column) for column in zip(*found, strict=True))
        runs.append(Run(source, name, ranks, nodes, sizes, seconds))
    return runs


def load_runs(paths: Iterable[str]) -> list[Run]:
    """Every run of every RUN: a result file (read through :func:`fabricscope.results.load`) or a history id."""
    from fabricscope.store.runs import resolve

    found: list[Run] = []
    for path in paths:
        run = resolve(path, kinds=RESULT_KINDS)
        found.extend(runs_of(run.result, run.source))
    if not found:
        raise UsageError("calibrate needs at least one result file with measurements")
    return found


def _hops(op: str, runs: Sequence[Run]) -> tuple[float, float]:
    """(base_us, hop_us) from runs' intercepts: least squares over step counts when there are
    two or more, else the whole intercept per step."""
    counts = [float(steps(op, r.ranks)) for r in runs]
    intercepts = [fit_line(r.moved, r.seconds)[0] * 1e6 for r in runs]
    if len(set(counts)) >= 2:
        design = np.stack([np.ones(len(counts)), np.array(counts)], axis=1)
        (base, hop), *_ = np.linalg.lstsq(design, np.array(intercepts), rcond=None)
        if base >= 0 and hop >= 0:
            return float(base), float(hop)
    per_step = [i / max(c, 1.0) for i, c in zip(intercepts, counts, strict=True)]
    return 0.0, float(statistics.median(per_step))


def _busbw(op: str, run: Run) -> float:
    """Bus bandwidth of a run's hops, GB/s (inf where its line is flat)."""
    _, b = fit_line(run.moved, run.seconds)
    return math.inf if b <= 0 else ops.get(op).busbw_factor(run.ranks) / b / 1e9


def calibrate(runs: Sequence[Run]) -> dict[str, CalibratedOp]:
    """Per op, the fitted terms of its intra-node and inter-node hops."""
    found: dict[str, CalibratedOp] = {}
    for op in dict.fromkeys(r.op for r in runs):
        mine = [r for r in runs if r.op == op]
        inside = [r for r in mine if r.nodes == 1]
        across = [r for r in mine if r.nodes > 1]
        base, intra_hop, intra_bw = 0.0, 0.0, 0.0
        if inside:
            base, intra_hop = _hops(op, inside)
            intra_bw = min(float(statistics.median(_busbw(op, r) for r in inside)), MAX_BUSBW_GBPS)
        inter_hop, inter_bw = 0.0, 0.0
        if across:
            hops, rates = [], []
            for run in across:
                a = fit_line(run.moved, run.seconds)[0] * 1e6
                crossing = float(inter_steps(op, run.nodes))
                a -= base + (float(steps(op, run.ranks)) - crossing) * intra_hop
                hops.append(max(a, 0.0) / max(crossing, 1.0))
                rates.append(_busbw(op, run))
            inter_hop = float(statistics.median(hops))
            inter_bw = min(float(statistics.median(rates)), MAX_BUSBW_GBPS)
        terms = CalibratedOp(
            base_us=base,
            intra_hop_us=intra_hop,
            intra_busbw_gbps=intra_bw,
            inter_hop_us=inter_hop,
            inter_busbw_gbps=inter_bw,
            points=sum(len(r.moved) for r in mine),
        )
        errors = [
            abs(float(p) / t - 1.0)
            for r in mine
            for p, t in zip(
                predicted_seconds(terms, op, r.moved, r.ranks_per_node, r.nodes), r.seconds.tolist(), strict=True
            )
        ]
        found[op] = dataclasses.replace(terms, residual_pct=100.0 * statistics.median(errors))
    return found


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


def predicted_seconds(terms: CalibratedOp, op: str, moved: Any, ranks_per_node: int, nodes: int) -> Any:
    """Seconds of ``op`` moving ``moved`` bytes (S of algbw) at this shape, from fitted terms."""
    ranks = ranks_per_node * nodes
    sizes = np.asarray(moved, dtype=float)
    if ranks <= 1:
        return np.zeros_like(sizes)
    crossing = float(inter_steps(op, nodes))
    latency_us = (
        terms.base_us + (float(steps(op, ranks)) - crossing) * terms.intra_hop_us + crossing * terms.inter_hop_us
    )
    rates = []
    if ranks_per_node > 1 and terms.intra_busbw_gbps > 0:
        rates.append(terms.intra_busbw_gbps)
    if nodes > 1:
        rates.append(terms.inter_busbw_gbps)
    busbw = min(rates, default=0.0)
    return latency_us * 1e-6 + sizes * ops.get(op).busbw_factor(ranks) / (max(busbw, 1e-12) * 1e9)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(round(value, 6) if isinstance(value, float) else value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text) + '"'


def cluster_toml(base: Cluster, calibration: dict[str, CalibratedOp], runs: Sequence[Run]) -> str:
    """A cluster file: the base cluster's parts at the measured shape, with the fitted terms."""
    biggest = max(runs, key=lambda r: (r.nodes, r.ranks))
    spec = base.spec
    sources = ", ".join(dict.fromkeys(r.source for r in runs))
    lines = [
        "# Written by 'fabricscope calibrate': the [calibration] terms are fitted to measurements,",
        f"# everything else is the base cluster {base.name!r} (what the measurements do not cover).",
        f"# Measurements: {sources[:400]}",
        f"description = {_toml_value(f'calibrated from {len(runs)} run(s); base {base.name}')}",
        f"nodes = {biggest.nodes}",
        f"gpus_per_node = {biggest.ranks_per_node}",
        f"gpu = {_toml_value(spec.gpu)}",
        f"intra = {_toml_value(base.intra)}",
        f"pcie = {_toml_value(base.pcie.name)}",
        "",
        "[network]",
    ]
    net = spec.network
    for key in (
        "nic",
        "nics_per_node",
        "transport",
        "sharp",
        "topology",
        "oversubscription",
        "extra_latency_us",
        "virtualized",
        "flow_gbps",
        "flows",
    ):
        lines.append(f"{key} = {_toml_value(getattr(net, key))}")
    lines += ["", "[storage]"]
    for key in ("kind", "devices", "cached_fraction"):
        lines.append(f"{key} = {_toml_value(getattr(spec.storage, key))}")
    for op, terms in calibration.items():
        lines += ["", f"[calibration.{op}]"]
        for key in (
            "base_us",
            "intra_hop_us",
            "intra_busbw_gbps",
            "inter_hop_us",
            "inter_busbw_gbps",
            "points",
            "residual_pct",
        ):
            lines.append(f"{key} = {_toml_value(getattr(terms, key))}")
    return "\n".join(lines) + "\n"
