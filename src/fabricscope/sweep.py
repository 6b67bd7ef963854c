"""The sweep of collectives a measurement or a prediction covers: ops, sizes, datatypes, reductions.

``bench`` measures a :class:`SweepConfig` (its :class:`~fabricscope.bench.config.BenchConfig`
adds how to measure) and ``predict`` prices the same one, so both read nccl-tests' flags
(``-b -e -i -f -d -o -r``) the same way, step sizes exactly as nccl-tests does, and fit
``all`` to the world the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fabricscope import ops as ops_registry
from fabricscope.dtypes import DTYPES, REDOPS
from fabricscope.errors import UsageError

__all__ = ["MAX_SWEEP_ROWS", "MAX_TABLE_ROWS", "SweepConfig"]

MAX_SWEEP_ROWS = 100_000
"""Most sizes in one sweep (``-b 0 -e 1T -i 1`` would be a trillion rows)."""
MAX_TABLE_ROWS = 400_000
"""Most rows in all: sizes x datatypes x (the reductions for a reducing op, one row for another), summed over
the ops; bench's ``all -d all -o all`` over nccl-tests' default sizes has about 5,000, and a million rows took
minutes and gigabytes to price and print."""


@dataclass(kw_only=True, slots=True)
class SweepConfig:
    ops: list[str] = field(default_factory=lambda: ["all_reduce"])
    """Collectives to run, in order."""
    min_bytes: int = 8
    """``-b``: first size. nccl-tests defaults to 32M; fabricscope sweeps from 8 B."""
    max_bytes: int = 32 << 20
    """``-e``: last size (inclusive)."""
    step_bytes: int = 1 << 20
    """``-i``: increment, used when ``step_factor`` is 1."""
    step_factor: int = 2
    """``-f``: multiplier between sizes; 1 means add ``step_bytes`` instead."""
    dtypes: list[str] = field(default_factory=lambda: ["float"])
    redops: list[str] = field(default_factory=lambda: ["sum"])
    root: int = 0
    """``-r``: root rank of broadcast, reduce, gather and scatter."""
    optional_ops: list[str] = field(default_factory=list)
    """Ops that came from ``all``: skipped, not refused, when the world is too small."""

    def __post_init__(self) -> None:
        self.ops = [ops_registry.get(name).name for name in self.ops]
        if not self.ops:
            raise UsageError("no op to run: name one or more of " + ", ".join(ops_registry.COLLECTIVES))
        for name in self.dtypes:
            if name not in DTYPES:
                raise UsageError(f"unknown datatype {name!r}: allowed are {', '.join(DTYPES)}")
        for name in self.redops:
            if name not in REDOPS:
                raise UsageError(f"unknown reduction op {name!r}: allowed are {', '.join(REDOPS)}")
        if self.min_bytes < 0 or self.max_bytes < 0:
            raise UsageError("sizes must not be negative")
        if self.min_bytes > self.max_bytes:
            raise UsageError(
                f"-b (minbytes, {self.min_bytes} B) is larger than -e (maxbytes, {self.max_bytes} B): "
                "the sweep runs from -b up to -e"
            )
        if self.step_factor < 1:
            raise UsageError(f"-f (stepfactor) must be 1 or more, got {self.step_factor}")
        if self.step_factor == 1 and self.step_bytes <= 0 and self.min_bytes != self.max_bytes:
            raise UsageError(
                "-i 0 (a fixed increment: -f 1, or -i given without -f) never advances from -b to -e: "
                "give -i a positive increment or -f a factor above 1"
            )
        if self.step_factor > 1 and self.min_bytes == 0 and self.max_bytes > 0:
            raise UsageError("-b 0 with a step factor never grows: start the sweep at 1 byte or more")
        if self.root < 0:
            raise UsageError(f"-r (root) must be 0 or more, got {self.root}")
        rows = self.sweep_rows()
        if rows > MAX_SWEEP_ROWS:
            raise UsageError(
                f"the sweep from -b {self.min_bytes} to -e {self.max_bytes} has {rows} sizes, more than "
                f"{MAX_SWEEP_ROWS}: use a larger -i or a step factor (-f 2)"
            )
        per_size = sum(len(self.redops) if ops_registry.get(op).reduces else 1 for op in self.ops)
        table = rows * len(self.dtypes) * per_size
        if table > MAX_TABLE_ROWS:  # reductions multiply the reducing ops only, as bench and predict loop
            raise UsageError(
                f"the sweep has {table} rows ({rows} sizes x {len(self.dtypes)} datatypes x {per_size} op and "
                f"reduction pairs), more than {MAX_TABLE_ROWS}: sweep fewer sizes, ops, -d or -o"
            )

    def sweep_rows(self) -> int:
        """How many sizes one sweep has, computed without listing them."""
        if self.step_factor > 1:
            rows, size = 0, self.min_bytes
            while size <= self.max_bytes and rows <= MAX_SWEEP_ROWS:
                rows += 1
                if size == 0:
                    break
                size *= self.step_factor
            return rows
        if self.step_bytes <= 0:
            return 1
        return (self.max_bytes - self.min_bytes) // self.step_bytes + 1

    def sizes(self) -> Iterator[int]:
        """Sizes of one sweep, exactly as nccl-tests steps them."""
        size = self.min_bytes
        while size <= self.max_bytes:
            yield size
            following = size * self.step_factor if self.step_factor > 1 else size + self.step_bytes
            if following <= size:  # -b 0 -e 0, or -b = -e with -i 0: one row
                return
            size = following

    def warmup_sizes(self) -> Iterator[int]:
        """nccl-tests warms up over every size from -b to -e with a factor of 2."""
        size = self.min_bytes
        while size <= self.max_bytes:
            yield size
            size = size * 2 if size else 1

    def fit_to_world(self, world_size: int) -> list[str]:
        """Check the config against the world; drop ``all``'s ops that need more ranks.

        Returns one note per op dropped.  An op named explicitly that needs
        more ranks, or a root outside the world, is a usage error.
        """
        notes = []
        for op in list(self.ops):
            need = ops_registry.get(op).min_ranks
            if ops_registry.get(op).power_of_two and world_size & (world_size - 1):
                if op not in self.optional_ops:
                    raise UsageError(f"{op} runs on a power-of-two number of ranks; this world has {world_size}")
                self.ops.remove(op)
                notes.append(f"# {op} skipped: it runs on a power-of-two number of ranks; this world has {world_size}")
                continue
            if world_size >= need:
                continue
            if op not in self.optional_ops:
                raise UsageError(f"{op} needs at least {need} ranks; this world has {world_size}")
            self.ops.remove(op)
            notes.append(f"# {op} skipped: it needs at least {need} ranks and this world has {world_size}")
        rooted = [op for op in self.ops if ops_registry.get(op).rooted]
        if rooted and self.root >= world_size:
            raise UsageError(
                f"-r (root) {self.root} is not a rank of this {world_size}-rank world (allowed 0 to {world_size - 1})"
            )
        return notes
