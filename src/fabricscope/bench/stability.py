"""``bench --duration``: every iteration of one row, kept as a bounded time series with its statistics.

A :class:`Series` holds the per-iteration times of one row (op, datatype,
reduction, size, placement) over a whole ``--duration`` run, with the time
each was taken (seconds since the run started, on rank 0's clock).

Memory is bounded: a series keeps at most :data:`MAX_POINTS` points.  When it
is full it drops every second point and from then on keeps one iteration in
two (then four, eight...), so a run of any length holds at most that many
points per row, spread evenly over the whole run.  ``iterations``, ``mean``,
``cv`` and ``max`` cover every iteration (running sums, Welford's method);
``p50``, ``p99`` and the spikes are computed over the kept points.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from fabricscope.results import percentile

__all__ = ["MAX_POINTS", "MAX_SPIKES_LISTED", "SPIKE_FACTOR", "Series"]

MAX_POINTS = 100_000
"""Points kept per series (two 8-byte floats each: 1.6 MB at most)."""
SPIKE_FACTOR = 3.0
"""An iteration slower than this many times the median is a spike."""
MAX_SPIKES_LISTED = 100
"""Spikes listed by time in the Result (all of them are counted)."""


class Series:
    """Per-iteration times of one row over a whole run, bounded (see module)."""

    def __init__(self, *, max_points: int = MAX_POINTS) -> None:
        if max_points < 2:
            raise ValueError("a series keeps at least 2 points")
        self.max_points = max_points
        self.t_s = array("d")
        """When each kept iteration ended, in seconds since the run started."""
        self.time_us = array("d")
        self.stride = 1
        """One iteration in ``stride`` is kept."""
        self.iterations = 0
        self._mean = 0.0
        self._m2 = 0.0
        self.max_us = -math.inf

    def add(self, samples_us: list[float], end_s: float) -> None:
        """Add one row's samples; the row ended at ``end_s`` (each sample ends where the next starts)."""
        start = end_s - math.fsum(samples_us) * 1e-6
        elapsed = 0.0
        for sample in samples_us:
            elapsed += sample * 1e-6
            self.iterations += 1
            delta = sample - self._mean
            self._mean += delta / self.iterations
            self._m2 += delta * (sample - self._mean)
            self.max_us = max(self.max_us, sample)
            if (self.iterations - 1) % self.stride:
                continue
            self.t_s.append(start + elapsed)
            self.time_us.append(sample)
            if len(self.time_us) >= self.max_points:
                self.t_s = self.t_s[::2]
                self.time_us = self.time_us[::2]
                self.stride *= 2

    @property
    def mean_us(self) -> float:
        return self._mean

    @property
    def cv(self) -> float | None:
        """Sample standard deviation over the mean, over every iteration."""
        if self.iterations < 2 or self._mean == 0:
            return None
        return math.sqrt(self._m2 / (self.iterations - 1)) / self._mean

    def statistics(self) -> dict[str, Any]:
        ordered = sorted(self.time_us)
        if not ordered:
            return {"iterations": 0, "kept": 0, "stride": self.stride, "spikes": 0, "spikes_at": []}
        median = percentile(ordered, 50)
        spikes = [(t, v) for t, v in zip(self.t_s, self.time_us, strict=True) if v > SPIKE_FACTOR * median]
        return {
            "iterations": self.iterations,
            "kept": len(self.time_us),
            "stride": self.stride,
            "mean_us": self._mean,
            "p50_us": median,
            "p99_us": percentile(ordered, 99),
            "max_us": self.max_us,
            "cv": self.cv,
            "spike_threshold_us": SPIKE_FACTOR * median,
            "spikes": len(spikes),
            "spikes_at": [{"t_s": round(t, 6), "time_us": v} for t, v in spikes[:MAX_SPIKES_LISTED]],
        }

    def to_dict(self) -> dict[str, Any]:
        """Statistics and the kept points (``t_s``, ``time_us``) for plots."""
        return {**self.statistics(), "t_s": [round(t, 6) for t in self.t_s], "time_us": list(self.time_us)}
