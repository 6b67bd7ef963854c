"""Fitting a cluster's collective terms to its own measurements: ``fabricscope calibrate``.

For every op the alpha-beta line ``t(S) = a + b S`` (S: the bytes of algbw) is fitted to
``bench`` results (or nccl-tests logs in the same record fields) by least squares on relative
residuals with Huber weights, then read as the per-hop terms of a ring:
``a = base + steps(op, n) * hop`` and ``b = busbw_factor(n) / busbw``, intra-node from runs
inside a node, inter-node from runs across nodes.  S of each row comes from its ``size``
column through :meth:`fabricscope.ops.Collective.algbw_bytes`, the conversion ``predict`` uses,
and the fit error is computed with predict's own :func:`fabricscope.model.predict.op_seconds`,
so the error printed is the one a prediction of the measured shape shows.
:mod:`fabricscope.model.calibrated_cost` evaluates the fitted ring at another rank or node
count; what it cannot extrapolate predict refuses.  docs/model.md, section 7, gives the method.
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
from fabricscope.model.calibrated_cost import inter_steps, steps
from fabricscope.model.cluster import MAX_BUSBW_GBPS, MIN_BUSBW_GBPS, CalibratedOp, Cluster
from fabricscope.model.predict import op_seconds
from fabricscope.results import Result
from fabricscope.shown import quoted
from fabricscope.userfiles import file_key

__all__ = [
    "HUBER_K",
    "MIN_SIZES",
    "MeasuredOp",
    "calibrate",
    "cluster_toml",
    "fit_line",
    "fit_seconds",
    "load_runs",
    "priced_runs",
    "runs_of",
]

HUBER_K = 1.345
"""Huber's tuning constant: 95% efficiency on normal noise, bounded pull of outliers."""
MIN_SIZES = 3
"""Distinct message sizes a run needs before its line is fitted (two points fit any line)."""
RESULT_KINDS = ("bench", "nccl-tests")


@dataclass(frozen=True, slots=True)
class MeasuredOp:
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


def fit_line(moved: Any, seconds: Any) -> tuple[float, float]:
    """(a, b) of ``t = a + b S`` with a, b >= 0: Huber-weighted least squares on relative error."""
    x = np.asarray(moved, dtype=float)
    y = np.asarray(seconds, dtype=float)
    # Start where most sizes agree (Theil-Sen), not where plain least squares lands: a run whose small
    # sizes ride a burst or another protocol (a token bucket, NCCL's LL) would otherwise pull the
    # reweighting into their basin and fit the few instead of the many.
    a, b = _theil_sen(x, y)
    weights = _huber_weights((a + b * x - y) / y)
    for _ in range(50):
        w = weights / y  # relative residuals
        design = np.stack([w, w * x], axis=1)
        (a_new, b_new), *_ = np.linalg.lstsq(design, w * y, rcond=None)
        if a_new < 0:  # no negative latency: refit through the origin
            a_new, b_new = 0.0, float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        if b_new < 0:  # no negative bandwidth: a flat line
            a_new, b_new = float(np.sum(w * w * y) / np.sum(w * w)), 0.0
        weights = _huber_weights((a_new + b_new * x - y) / y)
        done = abs(a_new - a) <= 1e-12 + 1e-9 * abs(a) and abs(b_new - b) <= 1e-18 + 1e-9 * abs(b)
        a, b = float(a_new), float(b_new)
        if done:
            break
    return a, b


def _huber_weights(residual: Any) -> Any:
    """Huber's weights for relative residuals, their scale from the median absolute deviation."""
    scale = 1.4826 * float(np.median(np.abs(residual - np.median(residual)))) or 1e-12
    ratio = np.abs(residual) / (HUBER_K * scale)
    return np.where(ratio <= 1.0, 1.0, 1.0 / np.maximum(ratio, 1e-12))


THEIL_SEN_SIZES = 400
"""Most distinct sizes the starting slope looks at (pairs grow as their square)."""


def _theil_sen(x: Any, y: Any) -> tuple[float, float]:
    """(a, b) >= 0: the median slope over pairs of distinct sizes (each size's median time), and
    the median intercept under it."""
    sizes, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    # Each size's median time in one sort (a 300,000-row log of thousands of sizes stays linear).
    grouped = y[np.lexsort((y, inverse))]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    times = (grouped[starts + (counts - 1) // 2] + grouped[starts + counts // 2]) / 2
    if len(sizes) > THEIL_SEN_SIZES:
        keep = np.linspace(0, len(sizes) - 1, THEIL_SEN_SIZES).round().astype(int)
        sizes, times = sizes[keep], times[keep]
    if len(sizes) < 2:
        return 0.0, float(np.median(y / np.maximum(x, 1.0)))
    i, j = np.triu_indices(len(sizes), k=1)
    b = max(float(np.median((times[j] - times[i]) / (sizes[j] - sizes[i]))), 0.0)
    return max(float(np.median(y - b * x)), 0.0), b


def _moved_bytes(op: ops.Collective, record: dict[str, Any], ranks: int, mean_us: float) -> float:
    """The bytes the op's algbw counts (S of algbw = S/t), from the ``size`` column and datatype.

    The ``size`` column is the whole array in every nccl-tests version and in bench's records,
    while ``count`` is per rank for all_gather, reduce_scatter and alltoall, so S comes from
    ``size`` through the conversion predict uses (:meth:`~fabricscope.ops.Collective.algbw_bytes`).
    nccl-tests prints algbw with two decimals, so small sizes read 0.00 GB/s: algbw x time is
    only the fallback for records without a size.
    """
    size = record.get("size_bytes")
    dtype = DTYPES.get(str(record.get("dtype")), DTYPES["int8"])
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return float(op.algbw_bytes(size, dtype.size, ranks))
    return _number(record.get("algbw_gbps"), "algbw_gbps") * 1e9 * mean_us * 1e-6


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} = {str(value)[:40]!r} is not a positive number")
    return float(value)


MAX_RESIDUAL_PCT = 1e6
"""Largest median error a fit may have and still be written (the cluster file's bound)."""
TIME_US_RANGE = (1e-3, 1e12)
"""Times calibrate fits, microseconds: from a nanosecond to about 12 days; outside, a time is not a
collective's (and a line through it would overflow)."""


def _time_us(value: object, what: str) -> float:
    number = _number(value, what)
    low, high = TIME_US_RANGE
    if not low <= number <= high:
        raise ValueError(f"{what} = {number:.3g} us is not a collective's time (calibrate fits {low:g} to {high:g} us)")
    return number


def _shape(result: Result, source: str) -> tuple[int, int]:
    """(ranks, nodes) of a measured result (:meth:`Result.world`), or why it cannot be read."""
    found = result.world() if result.kind in RESULT_KINDS else None
    if found is None:
        raise ResultFormatError(
            f"{source}: cannot tell how many ranks and nodes ran: expected host.ranks (a bench result) "
            "or config.nranks and config.nodes (an imported log)"
        )
    return found


def runs_of(result: Result, source: str) -> list[MeasuredOp]:
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
            mean_us = _time_us(record.get("time_us"), "time_us")
            median = record.get("p50_us")
            time_us = _time_us(median, "p50_us") if median is not None else mean_us
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
        runs.append(MeasuredOp(source, name, ranks, nodes, sizes, seconds))
    return runs


def priced_runs(runs: Sequence[MeasuredOp]) -> tuple[list[MeasuredOp], list[str]]:
    """(the runs whose terms predict reads, a note on each kind left out): ``ps`` has no cost model, and
    one rank moves nothing between ranks (predict prices it as a local copy), so terms fitted to either
    would never be read, and a one-rank run's times would pull the fit of the others."""
    kept = [r for r in runs if ops.get(r.op).modelled and r.ranks > 1]
    unpriced = list(dict.fromkeys(r.op for r in runs if not ops.get(r.op).modelled))
    alone = list(dict.fromkeys(r.source for r in runs if r.ranks < 2))
    notes = [f"{name} left out: predict has no cost model for it (measure it with bench)" for name in unpriced]
    notes += [
        f"{quoted(source)} left out: it ran on 1 rank, where a collective moves nothing between ranks"
        for source in alone
    ]
    if not kept:
        if alone:
            raise UsageError(
                f"calibrate fits the links between ranks; {quoted(alone[0])} ran on 1 rank, where a collective "
                "moves nothing between them: calibrate a run of 2 or more ranks"
            )
        raise UsageError(
            f"calibrate fits the ops predict prices; {', '.join(unpriced)} has no cost model in predict: "
            "calibrate a run of " + ", ".join(n for n, c in ops.COLLECTIVES.items() if c.modelled)
        )
    return kept, notes


def load_runs(paths: Iterable[str]) -> list[MeasuredOp]:
    """Every run of every RUN: a result file (read through :func:`fabricscope.results.load`) or a history id."""
    from fabricscope.store.runs import resolve

    found: list[MeasuredOp] = []
    seen: dict[object, str] = {}
    for path in paths:
        run = resolve(path, kinds=RESULT_KINDS)
        key = ("run", run.run_id) if run.run_id is not None else file_key(path)
        if key in seen:  # its points would weigh twice in every fit
            also = "" if seen[key] == path else f" (as {quoted(seen[key])} and {quoted(path)})"
            raise UsageError(f"{quoted(path)} is given twice{also}: give each run once, so that it counts once")
        seen[key] = path
        found.extend(runs_of(run.result, run.source))
    if not found:
        raise UsageError("calibrate needs at least one result file with measurements")
    return found


def _hops(op: str, runs: Sequence[MeasuredOp]) -> tuple[float, float]:
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


def _bounded(busbw: float) -> float:
    """A fitted bus bandwidth within what a cluster file holds (a flat line is the largest)."""
    return min(max(busbw, MIN_BUSBW_GBPS), MAX_BUSBW_GBPS)


def _busbw(op: str, run: MeasuredOp) -> float:
    """Bus bandwidth of a run's hops, GB/s (inf where its line is flat)."""
    _, b = fit_line(run.moved, run.seconds)
    return math.inf if b <= 0 else ops.get(op).busbw_factor(run.ranks) / b / 1e9


def calibrate(runs: Sequence[MeasuredOp]) -> dict[str, CalibratedOp]:
    """Per op, the fitted terms of its intra-node and inter-node hops."""
    found: dict[str, CalibratedOp] = {}
    for op in dict.fromkeys(r.op for r in runs):
        mine = [r for r in runs if r.op == op]
        try:
            found[op] = _calibrated(op, mine)
        except np.linalg.LinAlgError:
            raise UsageError(f"{op}: no line t = latency + bytes / bandwidth fits these measurements") from None
    return found


def _calibrated(op: str, mine: Sequence[MeasuredOp]) -> CalibratedOp:
    """One op's terms from its runs at every shape measured."""
    inside = [r for r in mine if r.nodes == 1]
    across = [r for r in mine if r.nodes > 1]
    base, intra_hop, intra_bw = 0.0, 0.0, 0.0
    if inside:
        base, intra_hop = _hops(op, inside)
        intra_bw = _bounded(float(statistics.median(_busbw(op, r) for r in inside)))
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
        inter_bw = _bounded(float(statistics.median(rates)))
    terms = CalibratedOp(
        base_us=base,
        intra_hop_us=intra_hop,
        intra_busbw_gbps=intra_bw,
        inter_hop_us=inter_hop,
        inter_busbw_gbps=inter_bw,
        points=sum(len(r.moved) for r in mine),
    )
    errors = [
        abs(float(p) / t - 1.0) for r in mine for p, t in zip(fit_seconds(terms, r), r.seconds.tolist(), strict=True)
    ]
    residual = 100.0 * statistics.median(errors)
    if not residual <= MAX_RESIDUAL_PCT:
        raise UsageError(
            f"{op}: no line t = latency + bytes / bandwidth fits these measurements (its median error would be "
            f"{residual:.3g}%): check the runs' sizes and times"
        )
    return dataclasses.replace(terms, residual_pct=residual)


def fit_seconds(terms: CalibratedOp, run: MeasuredOp) -> Any:
    """What predict prints for ``run``'s rows from ``terms``: its own pricing function, the same bytes."""
    seconds, _, _ = op_seconds(ops.get(run.op), None, run.moved, run.ranks_per_node, run.nodes, calibrated=terms)
    return seconds


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        # nine significant digits: rounding to six decimals wrote a 1e-07 GB/s fit as 0.0, "not measured"
        return repr(float(f"{value:.9g}") if isinstance(value, float) else value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text) + '"'


def cluster_toml(base: Cluster, calibration: dict[str, CalibratedOp], runs: Sequence[MeasuredOp]) -> str:
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
