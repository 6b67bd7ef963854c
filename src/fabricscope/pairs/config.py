"""The typed configuration of a ``pairs`` run, validated where it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fabricscope.errors import UsageError
from fabricscope.launch.config import LaunchConfig, flat_config, nested_config
from fabricscope.launch.world import MAX_TIMEOUT_S, MIN_TIMEOUT_S
from fabricscope.outputs import OutputConfig

__all__ = [
    "BY",
    "DEFAULT_TIMEOUT_S",
    "LATENCY_BYTES",
    "MAX_ITERS",
    "MAX_SIZE",
    "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "By",
    "PairsConfig",
]

By = Literal["rank", "node"]
BY: tuple[By, ...] = ("rank", "node")
LATENCY_BYTES = 8
"""The latency test's message: 8 bytes, as nccl-tests' smallest size."""
MAX_SIZE = 16 << 30
"""``--size`` bound: one buffer of this size per rank; larger is a typo."""
MAX_ITERS = 100_000
"""``-n`` and ``-w`` bound."""
DEFAULT_TIMEOUT_S = 120.0
"""``-T``'s default: the longest one message may take before its peer is declared failed."""
_NO_SUCH_OUTPUT = ("csv_path", "nccl_json_path")
"""Outputs that pairs does not write, left out of its Result's config."""


@dataclass(kw_only=True, slots=True)
class PairsConfig:
    size_bytes: int = 64 << 20
    """``--size``: the bandwidth test's message."""
    iters: int = 20
    """``-n``: messages per direction (bandwidth) and round trips (latency) timed per link."""
    warmup_iters: int = 2
    """``-w``: untimed messages before each timed series."""
    by: By = "rank"
    """``--by``: test every pair of ranks, or every pair of nodes (one rank per node)."""
    launch: LaunchConfig = field(default_factory=lambda: LaunchConfig(timeout_s=DEFAULT_TIMEOUT_S))
    """How the ranks are started and bounded; ``-T`` bounds every exchange (default 120 s)."""
    output: OutputConfig = field(default_factory=OutputConfig)
    """``--json`` (rewritten after every round), ``--save``/``--label`` and the command line."""

    def __post_init__(self) -> None:
        if not 1 <= self.size_bytes <= MAX_SIZE:
            raise UsageError(f"the message size must be from 1 byte to {MAX_SIZE} bytes, got {self.size_bytes}")
        if not 1 <= self.iters <= MAX_ITERS or not 0 <= self.warmup_iters <= MAX_ITERS:
            raise UsageError(f"iterations must be from 1 (warmup 0) to {MAX_ITERS}")
        if self.by not in BY:
            raise UsageError(f"pairs are formed by {' or '.join(BY)}, got {self.by!r}")
        if self.output.csv_path is not None or self.output.nccl_json_path is not None:
            raise UsageError("pairs writes its Result with --json only: it has no CSV or nccl-tests JSON output")

    def to_dict(self) -> dict[str, Any]:
        """The flat dict a Result keeps as its ``config`` (and a spawned rank is handed)."""
        return flat_config(self, omit=_NO_SUCH_OUTPUT)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairsConfig:
        return cls(**nested_config({"timeout_s": DEFAULT_TIMEOUT_S, **data}))

    def check_world(self, world_size: int, hosts: int) -> None:
        """Refuse a world that has no pair to test (raises UsageError)."""
        if world_size < 2:
            raise UsageError(f"pairs needs at least 2 ranks, got {world_size}: start 2 or more")
        if self.by == "node" and hosts < 2:
            raise UsageError(
                f"pairs by node needs ranks on at least 2 hosts, but all {world_size} ranks run on one: "
                "use --by rank, or start ranks on several nodes"
            )
