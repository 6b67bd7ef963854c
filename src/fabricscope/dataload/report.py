"""What a dataload measurement means, in words and as a Result.

A read rate alone misleads: a buffered read of cached pages measures memory,
and a read asked to be direct may have gone through the cache where the file
system refused O_DIRECT.  :func:`notes` says which happened, from what the
kernel reported (page residency before each pass, the opens that fell back),
so the figure printed is the figure measured.

Result records (kind ``dataload``), one per pass: ``path``, ``pass`` (its index),
``passes`` (1; a record covers several consecutive passes after the first
:data:`RECORDS_KEPT`), ``bytes``, ``seconds``, ``bytes_per_s``, ``files``,
``complete``, ``cached_fraction_before``, ``dropped_files``.  The summary holds the totals, the notes and the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fabricscope.dataload.reader import Measurement, Pass
from fabricscope.dataload.verdict import Need, Verdict
from fabricscope.results import Result
from fabricscope.units import format_size

__all__ = ["CACHED_THRESHOLD", "RECORDS_KEPT", "PassGroup", "group_passes", "notes", "status", "to_result"]

CACHED_THRESHOLD = 0.5
"""A pass that starts with at least this share of its data cached is called a page-cache figure."""
RECORDS_KEPT = 100
"""Passes recorded one by one; later ones (a small file read for a long --duration) share one record."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PassGroup:
    """One pass, or several consecutive passes added together."""

    first: int
    """Index of the first pass (1-based)."""
    count: int
    bytes: int
    seconds: float
    files: int
    complete: bool
    """Every pass of the group read every file."""
    stopped: bool
    """Its last pass was stopped before it read every file (the earlier ones never are)."""
    failed_reads: int
    """Reads that failed, over the group's passes."""
    cached_fraction_before: float | None
    """Mean over the passes that know it."""
    dropped_files: int

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


def group_passes(passes: Sequence[Pass], keep: int) -> list[PassGroup]:
    """The first passes one by one; when there are more than ``keep``, the rest as one group."""
    if not passes:
        return []
    singles = passes if len(passes) <= keep else passes[: max(1, keep - 1)]
    groups = [_group([p]) for p in singles]
    if len(singles) < len(passes):
        groups.append(_group(passes[len(singles) :]))
    return groups


def _group(passes: Sequence[Pass]) -> PassGroup:
    known = [p.cached_fraction_before for p in passes if p.cached_fraction_before is not None]
    return PassGroup(
        first=passes[0].index,
        count=len(passes),
        bytes=sum(p.bytes for p in passes),
        seconds=sum(p.seconds for p in passes),
        files=sum(p.files for p in passes),
        complete=all(p.complete for p in passes),
        stopped=passes[-1].stopped,
        failed_reads=sum(p.failed_reads for p in passes),
        cached_fraction_before=sum(known) / len(known) if known else None,
        dropped_files=min(p.dropped_files for p in passes),
    )


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def notes(measurement: Measurement, *, memory_available: int | None = None) -> list[str]:
    """One line per thing a reader of the rate must know: O_DIRECT fallback, page cache, failures."""
    config = measurement.config
    out: list[str] = []
    if config.direct:
        if measurement.fallback_files:
            out.append(
                f"O_DIRECT was refused for {measurement.fallback_files} file open(s) "
                f"({measurement.fallback_reason}): those were read through the page cache"
            )
        else:
            out.append("O_DIRECT: every read bypassed the page cache; this is the storage's rate")
    buffered = not config.direct or measurement.fallback_files > 0
    if buffered:
        out.extend(_cache_notes(measurement, memory_available))
    holes, data = measurement.dataset.hole_bytes, measurement.dataset.total_bytes
    if holes > 0.01 * data:
        out.append(
            f"sparse: {_pct(holes / data)} of the data set's bytes have no blocks of their own on the file "
            "system (holes of sparse files, which read as zeros from memory, or data the file system "
            "compresses): this rate is not the storage's raw rate"
        )
    if measurement.error_count:
        out.append(
            f"{measurement.error_count} read(s) failed mid-run and were not counted; first: {measurement.errors[0]}"
        )
    if measurement.interrupted:
        out.append("interrupted: the figures cover what was read before the stop (Ctrl-C or SIGTERM)")
    return out


def _cache_notes(measurement: Measurement, memory_available: int | None) -> list[str]:
    out: list[str] = []
    config = measurement.config
    passes = measurement.passes
    data = measurement.dataset.total_bytes
    if config.drop_cache:
        files = len(measurement.dataset.files)
        dropped = min((p.dropped_files for p in passes), default=0)
        after = [p.cached_fraction_before for p in passes if p.cached_fraction_before is not None]
        still = f"; {_pct(max(after))} was still cached after" if after else ""
        out.append(
            f"page cache: dropped before each pass with posix_fadvise(DONTNEED) "
            f"({dropped} of {files} file(s) accepted){still}"
        )
    cached = [
        (p.index, p.cached_fraction_before)
        for p in passes
        if p.cached_fraction_before is not None and p.cached_fraction_before >= CACHED_THRESHOLD
    ]
    hint = "" if config.drop_cache or config.direct else " (--drop-cache or --direct measures the storage)"
    if len(cached) == 1:
        out.append(
            f"page cache: pass {cached[0][0]} began with {_pct(cached[0][1])} of the data cached: "
            f"its rate is mostly memory's, not the storage's{hint}"
        )
    elif cached:
        low, high = min(f for _, f in cached), max(f for _, f in cached)
        spread = _pct(low) if low == high else f"{_pct(low)} to {_pct(high)}"
        out.append(
            f"page cache: {len(cached)} of {len(passes)} passes (the first: pass {cached[0][0]}) began with "
            f"{spread} of the data cached: their rate is mostly memory's, not the storage's{hint}"
        )
    first = passes[0].cached_fraction_before if passes else None
    if first is None and len(passes) > 1 and memory_available is not None and data < memory_available:
        out.append(
            f"page cache: the data ({format_size(data)}) fits in available memory "
            f"({format_size(memory_available)}): passes after the first were likely read from the cache"
        )
    if (
        first is not None
        and first < CACHED_THRESHOLD
        and len(passes) == 1
        and memory_available is not None
        and data < memory_available
        and not config.drop_cache
    ):
        out.append(
            f"page cache: {_pct(first)} of the data was cached before the read; it fits in available memory "
            f"({format_size(data)} of {format_size(memory_available)}), so a second read would come from the "
            "cache (--drop-cache drops it first)"
        )
    return out


def status(measurement: Measurement) -> str:
    """The Result status: ``interrupted``, ``partial`` (reads failed), or ``complete``."""
    if measurement.interrupted:
        return "interrupted"
    if measurement.error_count:
        return "partial"
    return "complete"


def to_result(
    measurement: Measurement,
    *,
    need: Need | None = None,
    verdict: Verdict | None = None,
    lines: list[str] | None = None,
) -> Result:
    """The Result of a measurement (kind ``dataload``)."""
    config = measurement.config
    dataset = measurement.dataset
    records: list[dict[str, Any]] = [
        {
            "path": dataset.path,
            "pass": one.first,
            "passes": one.count,
            "bytes": one.bytes,
            "seconds": one.seconds,
            "bytes_per_s": one.bytes_per_s,
            "files": one.files,
            "complete": one.complete,
            "stopped": one.stopped,
            "failed_reads": one.failed_reads,
            "cached_fraction_before": one.cached_fraction_before,
            "dropped_files": one.dropped_files,
        }
        for one in group_passes(measurement.passes, RECORDS_KEPT)
    ]
    seconds = measurement.seconds
    summary: dict[str, Any] = {
        "path": dataset.path,
        "bytes": measurement.bytes,
        "seconds": seconds,
        "bytes_per_s": measurement.bytes_per_s,
        "files": measurement.files,
        "files_per_s": measurement.files / seconds if seconds > 0 else 0.0,
        "passes": len(measurement.passes),
        "dataset_bytes": dataset.total_bytes,
        "dataset_files": len(dataset.files),
        "skipped": dict(dataset.skipped),
        "direct_files": measurement.direct_files,
        "fallback_files": measurement.fallback_files,
        "fallback_reason": measurement.fallback_reason,
        "error_count": measurement.error_count,
        "errors": list(measurement.errors),
        "notes": list(lines if lines is not None else notes(measurement)),
        "verdict": verdict.to_dict() if verdict is not None else None,
    }
    return Result(
        kind="dataload",
        config={
            "path": dataset.path,
            "workers": config.workers,
            "block_size": config.block_size,
            "random": config.random,
            "direct": config.direct,
            "duration_s": config.duration_s,
            "drop_cache": config.drop_cache,
            "seed": config.seed,
            "need_samples_per_s": need.samples_per_s if need else None,
            "sample_size": need.sample_size if need else None,
        },
        records=records,
        summary=summary,
        status=status(measurement),
    )
