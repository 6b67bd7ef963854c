"""What a dataload measurement means, in words and as a Result.

A read rate alone misleads: a buffered read of cached pages measures memory,
and a read asked to be direct may have gone through the cache where the file
system refused O_DIRECT.  :func:`notes` says which happened, from what the
kernel reported (page residency before each pass, the opens that fell back),
so the figure printed is the figure measured.

Result records (kind ``dataload``), one per pass: ``path``, ``pass``, ``bytes``,
``seconds``, ``bytes_per_s``, ``files``, ``complete``, ``cached_fraction_before``,
``dropped_files``.  The summary holds the totals, the notes and the verdict.
"""

from __future__ import annotations

from typing import Any

from fabricscope.dataload.reader import Measurement
from fabricscope.dataload.verdict import Need, Verdict
from fabricscope.results import Result
from fabricscope.units import format_size

__all__ = ["CACHED_THRESHOLD", "notes", "status", "to_result"]

CACHED_THRESHOLD = 0.5
"""A pass that starts with at least this share of its data cached is called a page-cache figure."""


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
    if measurement.error_count:
        out.append(
            f"{measurement.error_count} read(s) failed mid-run and were not counted; first: {measurement.errors[0]}"
        )
    if measurement.interrupted:
        out.append("interrupted: the figures cover what was read before Ctrl-C")
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
    for one in passes:
        fraction = one.cached_fraction_before
        if fraction is not None and fraction >= CACHED_THRESHOLD:
            hint = "" if config.drop_cache else " (--drop-cache or --direct measures the storage)"
            out.append(
                f"page cache: pass {one.index} began with {_pct(fraction)} of the data cached: "
                f"its rate is mostly memory's, not the storage's{hint}"
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
            "pass": one.index,
            "bytes": one.bytes,
            "seconds": one.seconds,
            "bytes_per_s": one.bytes_per_s,
            "files": one.files,
            "complete": one.complete,
            "cached_fraction_before": one.cached_fraction_before,
            "dropped_files": one.dropped_files,
        }
        for one in measurement.passes
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
