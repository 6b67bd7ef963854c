"""Would this storage starve the GPUs?  The arithmetic, in one place.

Training consumes ``samples_per_s`` samples of ``sample_size`` bytes each, so
it needs ``samples_per_s * sample_size`` bytes per second from storage.  With
loading overlapped with compute (prefetching workers, as every loader does), a
step takes as long as the slower of the two: when storage delivers a fraction
``r = measured / needed < 1`` of the need, training runs at ``r`` times its
speed and the GPUs wait ``1 - r`` of the time.  When ``r >= 1`` storage keeps up
with ``r - 1`` to spare.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from fabricscope.errors import UsageError

__all__ = ["MAX_SAMPLES_PER_S", "MAX_SAMPLE_SIZE", "MIN_SAMPLES_PER_S", "Need", "Verdict", "judge"]

MIN_SAMPLES_PER_S = 0.001
MAX_SAMPLES_PER_S = 1e9
MAX_SAMPLE_SIZE = 1 << 40


@dataclass(frozen=True, kw_only=True, slots=True)
class Need:
    """What training consumes."""

    samples_per_s: float
    """Samples per second over all the GPUs this storage feeds."""
    sample_size: int
    """Bytes read from storage per sample."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.samples_per_s) and MIN_SAMPLES_PER_S <= self.samples_per_s <= MAX_SAMPLES_PER_S):
            raise UsageError(
                f"samples per second must be {MIN_SAMPLES_PER_S:g} to {MAX_SAMPLES_PER_S:g}, got {self.samples_per_s:g}"
            )
        if not 1 <= self.sample_size <= MAX_SAMPLE_SIZE:
            raise UsageError(f"sample size must be 1 B to 1 TiB, got {self.sample_size} B")

    @property
    def bytes_per_s(self) -> float:
        return self.samples_per_s * self.sample_size


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The measured rate against the need."""

    needed_bytes_per_s: float
    measured_bytes_per_s: float
    samples_per_s: float
    """Samples per second the measured rate delivers."""
    ratio: float
    """measured / needed."""
    starves: bool
    gpu_wait_fraction: float
    """Share of training time the GPUs would wait for data, 1 - ratio (0 when storage keeps up)."""
    headroom_fraction: float
    """Rate to spare, as a share of the need (0 when it starves)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(measured_bytes_per_s: float, need: Need) -> Verdict:
    """Compare a measured read rate with what training needs."""
    needed = need.bytes_per_s
    ratio = measured_bytes_per_s / needed
    starves = ratio < 1.0
    return Verdict(
        needed_bytes_per_s=needed,
        measured_bytes_per_s=measured_bytes_per_s,
        samples_per_s=measured_bytes_per_s / need.sample_size,
        ratio=ratio,
        starves=starves,
        gpu_wait_fraction=1.0 - ratio if starves else 0.0,
        headroom_fraction=0.0 if starves else ratio - 1.0,
    )
