"""Which links stand out: robust scores against the median, the slowest link, the node most involved.

A link is an outlier when its modified z-score (Iglewicz and Hoaglin, *How to
Detect and Handle Outliers*, 1993; NIST/SEMATECH e-Handbook 1.3.5.17)::

    M = 0.6745 * (log x - median(log x)) / MAD(log x)

is beyond :data:`THRESHOLD` in the slow direction: bandwidth below the
median, latency above it.  MAD is the median absolute deviation.  Scores are
taken on the logarithm: bandwidth and time vary by factors (a link half as
fast is as far off as one twice as fast), and bandwidth cannot fall below
zero, so on a linear scale a link 50 times slower than the median would score
hardly worse than one 2 times slower when healthy links scatter widely.  The median
and MAD ignore a few bad links, where a mean and standard deviation would be
dragged towards them.  When most links are identical the MAD is zero; it is
then floored at the logarithm of 1 + :data:`MAD_FLOOR`, so a difference of a
few percent is never an outlier.  Fewer than :data:`MIN_LINKS` links per test
give no outliers (there is no "most" to compare with).

A link :data:`FACTOR` times slower than the median (a tenth of its bandwidth,
ten times its latency) is an outlier whatever the spread: when the healthy
links themselves scatter widely (ranks sharing CPU cores, a busy fabric) the
MAD grows with them, and an order of magnitude is a broken link on any fabric.

Pure functions over plain records (``src``, ``dst``, ``src_host``,
``dst_host``, ``test``, ``size_bytes``, ``time_us``, ``algbw_gbps``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from fabricscope.pair_matrix import SLOW_LINK_FACTOR

__all__ = ["FACTOR", "MAD_FLOOR", "MIN_LINKS", "THRESHOLD", "Findings", "Outlier", "analyse", "robust_scores"]

THRESHOLD = 3.5
"""Iglewicz and Hoaglin's cut-off for the modified z-score."""
MAD_FLOOR = 0.01
"""The MAD is at least this share of the median (identical links are not outliers of each other)."""
_TINY = 1e-300
"""A zero (nothing measurable) counts as this, so its logarithm exists."""
FACTOR = SLOW_LINK_FACTOR
"""A link this many times slower than the median is an outlier whatever the scores say."""
MIN_LINKS = 3
"""Fewest measured links (per test) that are judged for outliers."""


def robust_scores(values: Sequence[float]) -> list[float]:
    """The modified z-score of each (positive) value's logarithm against the median (MAD floored, see module)."""
    if not values:
        return []
    logs = [math.log(max(v, _TINY)) for v in values]
    median = statistics.median(logs)
    mad = max(statistics.median(abs(v - median) for v in logs), math.log1p(MAD_FLOOR))
    return [0.6745 * (v - median) / mad for v in logs]


@dataclass(frozen=True, slots=True)
class Outlier:
    """One direction of one link that is slower than the others."""

    test: str
    src: int
    dst: int
    src_host: str
    dst_host: str
    value: float
    """``algbw_gbps`` for the bandwidth test, ``time_us`` for the latency test."""
    median: float
    score: float
    """Modified z-score (negative: slower bandwidth; positive: longer latency)."""


@dataclass(slots=True)
class Findings:
    """What the matrix says, in a few names and numbers."""

    medians: dict[str, float] = field(default_factory=dict)
    """Per test: median ``algbw_gbps`` (bandwidth) or ``time_us`` (latency) over all directions."""
    outliers: list[Outlier] = field(default_factory=list)
    slowest: dict[str, Any] | None = None
    """The bandwidth record with the lowest ``algbw_gbps`` (the latency one when no bandwidth was measured)."""
    nodes: list[str] = field(default_factory=list)
    """The host(s) most often an end of an outlier (several when tied; empty without outliers)."""
    node_count: int = 0
    """Outliers each of ``nodes`` is an end of."""
    ranks: list[int] = field(default_factory=list)
    """The rank(s) most often an end of an outlier."""
    rank_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "medians": self.medians,
            "outliers": [asdict(o) for o in self.outliers],
            "slowest": self.slowest,
            "nodes": self.nodes,
            "node_count": self.node_count,
            "ranks": self.ranks,
            "rank_count": self.rank_count,
            "threshold": THRESHOLD,
        }


_T = TypeVar("_T", str, int)

_VALUE = {"bandwidth": ("algbw_gbps", -1.0), "latency": ("time_us", 1.0)}
"""Per test: the field judged, and the sign of a slow score."""


def analyse(records: Sequence[Mapping[str, Any]]) -> Findings:
    """Medians, outliers, the slowest link and the endpoints most often involved."""
    findings = Findings()
    for test, (key, slow_sign) in _VALUE.items():
        chosen = [r for r in records if r.get("test") == test]
        if not chosen:
            continue
        values = [float(r[key]) for r in chosen]
        median = statistics.median(values)
        findings.medians[test] = median
        if len(chosen) < MIN_LINKS:
            continue
        for record, score, value in zip(chosen, robust_scores(values), values, strict=True):
            factor = (median / max(value, _TINY)) if slow_sign < 0 else (value / max(median, _TINY))
            if score * slow_sign > THRESHOLD or factor >= FACTOR:
                findings.outliers.append(
                    Outlier(
                        test=test,
                        src=int(record["src"]),
                        dst=int(record["dst"]),
                        src_host=str(record["src_host"]),
                        dst_host=str(record["dst_host"]),
                        value=float(record[key]),
                        median=median,
                        score=round(score, 2),
                    )
                )
    bandwidth = [r for r in records if r.get("test") == "bandwidth"]
    if bandwidth:
        findings.slowest = dict(min(bandwidth, key=lambda r: float(r["algbw_gbps"])))
    elif records:
        findings.slowest = dict(max(records, key=lambda r: float(r["time_us"])))
    if findings.outliers:
        hosts = Counter(h for o in findings.outliers for h in {o.src_host, o.dst_host})
        findings.nodes, findings.node_count = _most_common(hosts)
        ranks = Counter(r for o in findings.outliers for r in {o.src, o.dst})
        findings.ranks, findings.rank_count = _most_common(ranks)
    return findings


def _most_common(counts: Counter[_T]) -> tuple[list[_T], int]:
    """The most frequent items (all of them when tied, sorted) and how often each occurs."""
    top = max(counts.values())
    return sorted(item for item, count in counts.items() if count == top), top
