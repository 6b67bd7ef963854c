"""The typed configuration of a ``bench`` run, validated where it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from fabricscope.bench.streams import MAX_STREAMS
from fabricscope.errors import InvalidValue, UsageError
from fabricscope.launch.config import BACKENDS, Backend, LaunchConfig, flat_config, nested_config
from fabricscope.launch.world import MAX_LOCAL_RANKS, MAX_TIMEOUT_S, MIN_TIMEOUT_S
from fabricscope.outputs import OutputConfig
from fabricscope.sweep import MAX_SWEEP_ROWS, SweepConfig

__all__ = [
    "AVERAGE_MODES",
    "BACKENDS",
    "MAX_AGG_ITERS",
    "MAX_CHECK_ITERS",
    "MAX_DURATION_S",
    "MAX_ITERS",
    "MAX_LOCAL_RANKS",
    "MAX_RANKS",
    "MAX_SWEEP_ROWS",
    "MAX_TIMEOUT_S",
    "MIN_DURATION_S",
    "MIN_TIMEOUT_S",
    "Average",
    "Backend",
    "BenchConfig",
]


class Average(IntEnum):
    """nccl-tests ``-a``: how each row's time is combined across ranks."""

    RANK0 = 0
    AVG = 1
    MIN = 2
    MAX = 3


AVERAGE_MODES = {mode.value: mode.name.lower() for mode in Average}
"""``-a`` value -> the name printed in the header (``rank0``, ``avg``, ``min``, ``max``)."""
MAX_ITERS = 1_000_000
"""``-n``, ``-w`` and ``-N`` bound: every timed iteration keeps a sample, so a million is plenty."""
MAX_CHECK_ITERS = 1000
"""``-c`` bound: each check iteration re-runs the collective and checks every element."""
MAX_AGG_ITERS = 1024
"""``-m`` bound: collectives per timed iteration (each iteration is one sample; this bounds its work)."""
MAX_RANKS = 1 << 24
"""Largest rank number a flag may name (``-r``)."""
MIN_DURATION_S = 1.0
MAX_DURATION_S = 7 * 86400.0
"""``--duration`` bounds (each row's series is bounded in memory, whatever the duration)."""


@dataclass(kw_only=True, slots=True)
class BenchConfig(SweepConfig):
    """A measured sweep: the :class:`~fabricscope.sweep.SweepConfig` and how to measure it."""

    iters: int = 20
    """``-n``: timed iterations per size and placement."""
    warmup_iters: int = 1
    """``-w``: warmup iterations per size, run over the sweep before timing (as nccl-tests)."""
    check: int = 1
    """``-c``: correctness-check iterations after timing each row (0 = off)."""
    blocking: bool = False
    """``-z 1``: wait for each collective to finish before the next is launched (its time then holds
    the launch and the wait, as nccl-tests' blocking mode); else back-to-back calls (``-z 0``)."""
    agg_iters: int = 1
    """``-m``: collectives launched per timed iteration, back to back; a row's time is the
    iteration's over this count, as nccl-tests divides by its ``agg_iters``."""
    unalign: int = 0
    """``-u``: start the send and receive buffers this many elements past the allocation's (aligned)
    start, as nccl-tests misaligns its buffers by ``unalign x element size`` bytes."""
    average: Average = Average.AVG
    """``-a``: 0 rank 0's time, 1 the mean over ranks, 2 the minimum, 3 the maximum."""
    run_cycles: int = 1
    """``-N``: repeat the sweep; 0 repeats until interrupted."""
    servers: int = 1
    """``--servers``: the ``ps`` op's server ranks (0 to servers-1, each owning a shard)."""
    streams: int = 1
    """``--streams``: collectives run at once, each on its own process group (see :mod:`~fabricscope.bench.streams`)."""
    duration_s: float | None = None
    """``--duration``: repeat the sweep of each op for this long, keeping every iteration
    (:mod:`fabricscope.bench.stability`); ``run_cycles`` is then 0."""
    min_busbw_gbps: float | None = None
    """nccl-tests' ``NCCL_TESTS_MIN_BW``: an op whose average busbw is below 0.9 x this fails."""
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    """How the ranks are started and bounded (``--nproc``, ``--backend``, ``-T``, the rendezvous)."""
    output: OutputConfig = field(default_factory=OutputConfig)
    """Where rank 0 keeps the run (``--json``, ``--csv``, ``-J``, ``--save``/``--label``) and the command line."""

    def __post_init__(self) -> None:
        SweepConfig.__post_init__(self)  # (no zero-argument super() in a slotted dataclass)
        _at_least(self.iters, 1, "iters")
        _at_least(self.warmup_iters, 0, "warmup_iters")
        _at_least(self.check, 0, "check")
        _at_least(self.agg_iters, 1, "agg_iters")
        _at_least(self.run_cycles, 0, "run_cycles")
        _at_least(self.servers, 1, "servers")
        if not 1 <= self.streams <= MAX_STREAMS:
            raise InvalidValue(f"must be from 1 to {MAX_STREAMS}, got {self.streams}", key="streams")
        if self.duration_s is not None:
            if not MIN_DURATION_S <= self.duration_s <= MAX_DURATION_S:
                raise InvalidValue(
                    f"must be from {MIN_DURATION_S:g} s to {MAX_DURATION_S / 86400:g} days, got {self.duration_s:g} s",
                    key="duration",
                )
            self.run_cycles = 0
        if (
            self.run_cycles == 0
            and self.duration_s is None
            and (len(self.ops) > 1 or len(self.dtypes) > 1 or len(self.redops) > 1)
        ):
            raise UsageError(
                "-N 0 repeats one sweep until interrupted, so it takes one op, one datatype (-d) and one "
                f"reduction (-o); got {len(self.ops)} op(s), {len(self.dtypes)} datatype(s), "
                f"{len(self.redops)} reduction(s): give -N a count to cycle through several"
            )
        if self.average not in AVERAGE_MODES:
            raise UsageError(f"-a (average) must be one of 0 (rank 0), 1 (avg), 2 (min), 3 (max); got {self.average}")
        self.average = Average(self.average)
        _at_most(self.iters, MAX_ITERS, "-n (iters)")
        _at_most(self.warmup_iters, MAX_ITERS, "-w (warmup_iters)")
        _at_most(self.run_cycles, MAX_ITERS, "-N (run_cycles)")
        _at_most(self.check, MAX_CHECK_ITERS, "-c (check)")
        _at_most(self.agg_iters, MAX_AGG_ITERS, "-m (agg_iters)")
        if self.min_busbw_gbps is not None and not self.min_busbw_gbps >= 0:
            raise UsageError(f"NCCL_TESTS_MIN_BW must be a bandwidth in GB/s, got {self.min_busbw_gbps}")

    def fit_to_world(self, world_size: int) -> list[str]:
        """As :meth:`SweepConfig.fit_to_world`, and the ``ps`` op's servers must be ranks of the world."""
        notes = SweepConfig.fit_to_world(self, world_size)
        if "ps" in self.ops and self.servers > world_size:
            raise UsageError(  # raised in each rank too, where no parser maps a key: said as the flag
                f"--servers {self.servers} asks for more parameter servers than this {world_size}-rank world has "
                f"(allowed 1 to {world_size})"
            )
        return notes

    def to_dict(self) -> dict[str, Any]:
        """The flat dict a Result keeps as its ``config`` (and a spawned rank is handed)."""
        return flat_config(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        return cls(**nested_config(data))


def _at_most(value: int, maximum: int, name: str) -> None:
    if value > maximum:
        raise UsageError(f"{name} must be at most {maximum}, got {value}")


def _at_least(value: int, minimum: int, name: str) -> None:
    if value < minimum:
        raise InvalidValue(f"must be {minimum} or more, got {value}", key=name)
