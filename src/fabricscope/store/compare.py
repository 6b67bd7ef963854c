"""Compare a run with a reference (a baseline, another run, a prediction), row by row.

For each op, size, datatype, reduction and placement both sides share, the
change of the figure that matters at that size: the time for small messages
(latency-bound, below :data:`SMALL_BYTES`) and busbw above.  A row is

- ``regressed`` / ``improved``: worse / better by more than the tolerance and,
  when both sides kept their raw per-iteration samples, significant (a
  two-sided Mann-Whitney U test from scipy on the samples, p < ``alpha``
  after the Benjamini-Hochberg adjustment for the many rows of a sweep);
- ``not significant``: the samples cannot tell the two apart, whatever the
  change of the means;
- ``within tolerance``: the change is no larger than the tolerance.

Without samples on both sides (imported nccl-tests logs, predictions) the
values alone are held against the tolerance.  A summary per op covers the
large sizes, where a fabric shows its bandwidth.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricscope.results import Result
from fabricscope.units import format_size

__all__ = [
    "ALPHA",
    "LARGE_BYTES",
    "SMALL_BYTES",
    "VERDICTS",
    "Comparison",
    "Row",
    "compare",
    "markdown_lines",
    "text_lines",
    "worse_by",
]

SMALL_BYTES = 64 * 1024
"""Sizes up to this compare by time (latency), larger ones by busbw."""
LARGE_BYTES = 64 * 1024 * 1024
"""Sizes from this up make the summary; a sweep that stops lower uses its largest quarter."""
ALPHA = 0.05
VERDICTS = ("regressed", "improved", "not significant", "within tolerance")

_Key = tuple[str, int, str, str, str]


def worse_by(metric: str, change: float) -> float:
    """How much worse a change of ``metric`` is, as a fraction (negative when better): a longer time,
    a lower busbw."""
    return change if metric == "time_us" else -change


@dataclass(frozen=True, slots=True)
class Row:
    """One op, size and placement compared."""

    op: str
    size_bytes: int
    dtype: str
    redop: str
    placement: str
    metric: str
    """``time_us`` (lower is better) or ``busbw_gbps`` (higher is better)."""
    reference: float
    current: float
    change: float
    """Relative change of the metric, current/reference - 1."""
    p_value: float | None
    """Mann-Whitney U p-value, adjusted for the rows tested together (None without samples)."""
    verdict: str

    @property
    def worse_by(self) -> float:
        """How much worse, as a fraction (negative when better)."""
        return worse_by(self.metric, self.change)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class Comparison:
    current: str
    reference: str
    tolerance: float
    rows: list[Row] = field(default_factory=list)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per op: the large sizes' median busbw change and its verdict."""
    only_current: int = 0
    only_reference: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regressed"]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressed else 0

    def to_result(self) -> Result:
        counts = {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}
        return Result(
            kind="compare",
            config={
                "current": self.current,
                "reference": self.reference,
                "tolerance": self.tolerance,
                "small_bytes": SMALL_BYTES,
                "large_bytes": LARGE_BYTES,
                "alpha": ALPHA,
                "test": "scipy.stats.mannwhitneyu (two-sided) on raw samples, Benjamini-Hochberg adjusted",
            },
            records=[r.to_dict() for r in self.rows],
            summary={
                "ops": self.summary,
                "verdicts": counts,
                "verdict": "regressed" if self.regressed else "ok",
                "only_current": self.only_current,
                "only_reference": self.only_reference,
                "notes": self.notes,
            },
        )


def _key(record: Mapping[str, Any]) -> _Key | None:
    try:
        return (
            str(record["op"]),
            int(record["size_bytes"]),
            str(record.get("dtype", "")),
            str(record.get("redop", "")),
            str(record.get("placement", "out")),
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(slots=True)
class _Pooled:
    time_us: list[float] = field(default_factory=list)
    busbw_gbps: list[float] = field(default_factory=list)
    samples_us: list[float] = field(default_factory=list)
    all_have_samples: bool = True


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _pool(records: Iterable[Any]) -> dict[_Key, _Pooled]:
    """Rows by key; a row measured several times (``-N``) pools its cycles."""
    pooled: dict[_Key, _Pooled] = {}
    for record in records:
        if not isinstance(record, Mapping):
            continue
        key = _key(record)
        time_us, busbw = _finite(record.get("time_us")), _finite(record.get("busbw_gbps"))
        if key is None or time_us is None or busbw is None:
            continue
        entry = pooled.setdefault(key, _Pooled())
        entry.time_us.append(time_us)
        entry.busbw_gbps.append(busbw)
        samples = record.get("samples_us")
        values = [s for s in (_finite(v) for v in samples) if s is not None] if isinstance(samples, list) else []
        if len(values) >= 2:
            entry.samples_us.extend(values)
        else:
            entry.all_have_samples = False
    return pooled


def _p_value(a: Sequence[float], b: Sequence[float]) -> float:
    if len(set(a)) == 1 and set(a) == set(b):
        return 1.0
    from scipy import stats

    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _row(key: _Key, cur: _Pooled, ref: _Pooled) -> Row | None:
    """The row with its raw p-value; the verdict is given once every p-value is adjusted."""
    op, size, dtype, redop, placement = key
    metric = "time_us" if size <= SMALL_BYTES else "busbw_gbps"
    current = statistics.fmean(getattr(cur, metric))
    reference = statistics.fmean(getattr(ref, metric))
    if reference <= 0 or current < 0:
        return None  # nothing measurable (a 0 B row, a 0.00 busbw of a tiny message)
    p_value = None
    if cur.all_have_samples and ref.all_have_samples and cur.samples_us and ref.samples_us:
        p_value = _p_value(cur.samples_us, ref.samples_us)
    return Row(
        op=op,
        size_bytes=size,
        dtype=dtype,
        redop=redop,
        placement=placement,
        metric=metric,
        reference=reference,
        current=current,
        change=current / reference - 1.0,
        p_value=p_value,
        verdict="",
    )


def _adjusted(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values: a sweep tests dozens of rows at once."""
    if len(p_values) < 2:
        return list(p_values)
    from scipy import stats

    return [float(p) for p in stats.false_discovery_control(p_values, method="bh")]


_ROUNDING = 1e-9
"""What floating point adds to a change of exactly the tolerance (95 / 100 - 1 is -0.050000000000000044)."""


def _judged(rows: Sequence[Row], tolerance: float, alpha: float) -> list[Row]:
    tested = [i for i, r in enumerate(rows) if r.p_value is not None]
    adjusted = dict(zip(tested, _adjusted([rows[i].p_value or 0.0 for i in tested]), strict=True))
    judged = []
    for index, row in enumerate(rows):
        p_value = adjusted.get(index)
        if abs(row.worse_by) <= tolerance + _ROUNDING:
            verdict = "within tolerance"
        elif p_value is not None and p_value >= alpha:
            verdict = "not significant"
        else:
            verdict = "regressed" if row.worse_by > 0 else "improved"
        judged.append(dataclasses.replace(row, p_value=p_value, verdict=verdict))
    return judged


def _large_summary(rows: Sequence[Row], tolerance: float) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for op in dict.fromkeys(r.op for r in rows):
        bw_rows = [r for r in rows if r.op == op and r.metric == "busbw_gbps"]
        if not bw_rows:
            continue
        sizes = sorted({r.size_bytes for r in bw_rows})
        large = [s for s in sizes if s >= LARGE_BYTES] or sizes[len(sizes) - max(1, len(sizes) // 4) :]
        chosen = [r for r in bw_rows if r.size_bytes in large]
        median = statistics.median(r.change for r in chosen)
        regressed = [r for r in chosen if r.verdict == "regressed"]
        improved = [r for r in chosen if r.verdict == "improved"]
        if regressed:
            verdict = "regressed"
        elif improved:
            verdict = "improved"
        else:
            verdict = "no change beyond tolerance or noise"
        summary[op] = {
            "from_bytes": large[0],
            "rows": len(chosen),
            "median_busbw_change": median,
            "regressed_rows": len(regressed),
            "improved_rows": len(improved),
            "verdict": verdict,
        }
    return summary


def compare(
    current: Result,
    reference: Result,
    *,
    tolerance: float = 0.05,
    alpha: float = ALPHA,
    current_name: str = "current",
    reference_name: str = "reference",
) -> Comparison:
    """Compare every row both Results have; ``tolerance`` is a fraction (0.05 = 5%)."""
    if not 0 <= tolerance <= 10:
        raise ValueError(f"tolerance must be a fraction between 0 and 10, got {tolerance}")
    cur, ref = _pool(current.records), _pool(reference.records)
    comparison = Comparison(current=current_name, reference=reference_name, tolerance=tolerance)
    keys = sorted(cur.keys() & ref.keys(), key=lambda k: (k[0], k[2], k[3], k[1], k[4] != "out"))
    rows = [row for row in (_row(key, cur[key], ref[key]) for key in keys) if row is not None]
    comparison.rows = _judged(rows, tolerance, alpha)
    comparison.only_current = len(cur.keys() - ref.keys())
    comparison.only_reference = len(ref.keys() - cur.keys())
    comparison.summary = _large_summary(comparison.rows, tolerance)
    for name, result in ((current_name, current), (reference_name, reference)):
        if result.status != "complete":
            comparison.notes.append(f"{name} is {result.status}: only the rows it has are compared")
    ranks = [_ranks(current), _ranks(reference)]
    if None not in ranks and ranks[0] != ranks[1]:
        comparison.notes.append(f"the runs have different rank counts ({ranks[0]} and {ranks[1]})")
    if not comparison.rows:
        comparison.notes.append("no op, size, datatype and placement is in both runs: nothing to compare")
    return comparison


def _ranks(result: Result) -> int | None:
    ranks = result.host.get("ranks") if isinstance(result.host, dict) else None
    if isinstance(ranks, list) and ranks:
        return len(ranks)
    config = result.config
    gpus = config.get("nodes"), config.get("gpus_per_node")
    if all(isinstance(v, int) for v in gpus):
        return int(gpus[0]) * int(gpus[1])  # type: ignore[arg-type]
    return None


def _value(metric: str, value: float) -> str:
    return f"{value:.2f}" if metric == "busbw_gbps" else f"{value:.1f}"


def _cells(row: Row) -> list[str]:
    return [
        row.op,
        format_size(row.size_bytes),
        row.dtype,
        row.placement,
        "busbw GB/s" if row.metric == "busbw_gbps" else "time us",
        _value(row.metric, row.reference),
        _value(row.metric, row.current),
        f"{row.change * 100:+.1f}%",
        "-" if row.p_value is None else f"{row.p_value:.3g}",
        row.verdict,
    ]


_HEADER = ["op", "size", "type", "place", "metric", "reference", "current", "change", "p", "verdict"]


def _p_note(comparison: Comparison) -> str:
    """What the p column holds: a test's p-values, or nothing where no row had raw samples on both sides."""
    if any(r.p_value is not None for r in comparison.rows):
        return "p: two-sided Mann-Whitney U on raw samples, Benjamini-Hochberg adjusted (- when a side has none)"
    return "p: - (no row has raw samples on both sides: the tolerance alone decides)"


def _summary_lines(comparison: Comparison) -> list[str]:
    lines = []
    for op, s in comparison.summary.items():
        verdict = s["verdict"]
        if verdict in ("regressed", "improved"):  # one large row decides, whatever the median: say how many
            verdict = f"{verdict} ({s[verdict + '_rows']} of {s['rows']} rows)"
        lines.append(
            f"{op} at {format_size(s['from_bytes'])} and above ({s['rows']} rows): busbw "
            f"{s['median_busbw_change'] * 100:+.1f}% (median), {verdict}"
        )
    regressed = len(comparison.regressed)
    lines.append(
        f"{regressed} of {len(comparison.rows)} rows regressed beyond {comparison.tolerance * 100:g}%"
        if regressed
        else f"no row regressed beyond {comparison.tolerance * 100:g}% ({len(comparison.rows)} rows compared)"
    )
    return lines + comparison.notes


def text_lines(comparison: Comparison) -> list[str]:
    """The comparison as a table for the terminal; comment lines start with '#'."""
    lines = [
        f"# {comparison.current} against {comparison.reference}; tolerance {comparison.tolerance * 100:g}%; "
        f"time up to {format_size(SMALL_BYTES)}, busbw above; {_p_note(comparison)}"
    ]
    table = [_HEADER, *(_cells(r) for r in comparison.rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADER))]
    for index, line in enumerate(table):
        text = "  ".join(
            cell.ljust(w) if i in (0, 2, 3, 4, 9) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        lines.append(("# " if index == 0 else "  ") + text.rstrip())
    lines.extend(f"# {line}" for line in _summary_lines(comparison))
    return lines


def markdown_lines(comparison: Comparison) -> list[str]:
    """The comparison as a Markdown section for a ticket."""
    lines = [
        f"### {comparison.current} against {comparison.reference}",
        "",
        f"Tolerance {comparison.tolerance * 100:g}%; time up to {format_size(SMALL_BYTES)}, busbw above; "
        f"{_p_note(comparison)}.",
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|" + "|".join("---:" if i in (1, 5, 6, 7, 8) else "---" for i in range(len(_HEADER))) + "|",
    ]
    for row in comparison.rows:
        cells = _cells(row)
        if row.verdict in ("regressed", "improved"):
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.extend(f"- {line}" for line in _summary_lines(comparison))
    return lines
