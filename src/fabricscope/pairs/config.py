"""The typed configuration of a ``pairs`` run, validated where it is built."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fabricscope.errors import UsageError
from fabricscope.launch.world import MAX_TIMEOUT_S, MIN_TIMEOUT_S

__all__ = [
    "BY",
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
    nproc: int = 2
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    timeout_s: float = 120.0
    """Bound on every exchange; a dead or hung rank ends the run after this."""
    json_path: str | None = None
    save: bool = False
    """``--save``/``--label``: rank 0 adds the Result to the history when the run ends."""
    label: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    argv: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.size_bytes <= MAX_SIZE:
            raise UsageError(f"the message size must be from 1 byte to {MAX_SIZE} bytes, got {self.size_bytes}")
        if not 1 <= self.iters <= MAX_ITERS or not 0 <= self.warmup_iters <= MAX_ITERS:
            raise UsageError(f"iterations must be from 1 (warmup 0) to {MAX_ITERS}")
        if self.by not in BY:
            raise UsageError(f"pairs are formed by {' or '.join(BY)}, got {self.by!r}")
        if not MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S:
            raise UsageError(f"the timeout must be from {MIN_TIMEOUT_S:g} s to {MAX_TIMEOUT_S:g} s")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairsConfig:
        return cls(**data)

    def check_world(self, world_size: int, hosts: int) -> None:
        """Refuse a world that has no pair to test (raises UsageError)."""
        if world_size < 2:
            raise UsageError(f"pairs needs at least 2 ranks, got {world_size}: start 2 or more")
        if self.by == "node" and hosts < 2:
            raise UsageError(
                f"pairs by node needs ranks on at least 2 hosts, but all {world_size} ranks run on one: "
                "use --by rank, or start ranks on several nodes"
            )
