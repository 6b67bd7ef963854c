"""What one sampling pass saw: counters by port, link speeds and states, gauges; and notes said once.

A :class:`Port` is anything traffic goes through or is counted on: a network
interface (``net``, ``eth0``), an RDMA port (``rdma``, ``mlx5_0``, ``1``), the
host's TCP stack (``tcp``) or a GPU (``gpu``, ``0``).  Counter values are kept
raw, in the kernel's units (an RDMA port's ``port_xmit_data`` counts 4-byte
words); :mod:`fabricscope.monitor.deltas` turns two snapshots into rates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["MAX_NOTES", "Counter", "CounterSource", "Link", "Notes", "Port", "Snapshot"]


@dataclass(frozen=True, slots=True, order=True)
class Port:
    """A thing counters are kept for."""

    kind: str
    """``net``, ``rdma``, ``tcp`` or ``gpu``."""
    device: str = ""
    """``eth0``, ``mlx5_0``, ``0`` (a GPU's index); empty for ``tcp``."""
    port: str = ""
    """An RDMA port number; empty for the others."""

    @property
    def label(self) -> str:
        """How people name it: ``eth0``, ``mlx5_0/1``, ``tcp``, ``gpu0``."""
        if self.kind == "rdma":
            return f"{self.device}/{self.port}"
        if self.kind == "gpu":
            return f"gpu{self.device}"
        return self.device or self.kind


class CounterSource(StrEnum):
    """Where a counter is read: its family decides its units and what it means."""

    KERNEL = "kernel"
    """``/proc/net/dev``, ``/sys/class/net/<if>/carrier_changes``, RDMA ``counters/``, ``/proc/net/snmp``."""
    HW = "hw"
    """An RDMA port's vendor ``hw_counters/`` (CNPs, out-of-sequence, retransmissions)."""
    ETHTOOL = "ethtool"
    """``ethtool -S`` (pause and PFC frames, discards), in the driver's units."""
    NVML = "nvml"
    """NVIDIA's management library (NVLink throughput)."""


@dataclass(frozen=True, slots=True, order=True)
class Counter:
    """One counter of a port: its kernel (or driver) name and where it is read."""

    name: str
    source: CounterSource = CounterSource.KERNEL

    def __str__(self) -> str:
        """How records and notes name it: ``port_rcv_errors``, ``hw:out_of_sequence``, ``ethtool:rx_prio3_pause``."""
        if self.source in (CounterSource.KERNEL, CounterSource.NVML):
            return self.name
        return f"{self.source}:{self.name}"


@dataclass(frozen=True, slots=True)
class Link:
    """The link of a port as it was at the sample: its speed and whether it is up."""

    speed_bps: float | None
    """Line rate in bits per second; None when the kernel does not say (virtual NICs, ``-1``)."""
    up: bool | None
    """None when the state could not be read."""
    state: str = ""
    """The kernel's word for it: ``up``, ``down``, ``unknown`` (``lo``), ``ACTIVE``, ``DOWN``..."""


@dataclass(slots=True)
class Snapshot:
    """Everything one pass over the samplers read, at one instant of the monotonic clock."""

    time_s: float
    """``time.monotonic()`` when the pass began: rates come from differences of it."""
    wall_time: float
    """``time.time()`` at the same moment, for timestamps people read."""
    counters: dict[tuple[Port, Counter], int] = field(default_factory=dict)
    links: dict[Port, Link] = field(default_factory=dict)
    gauges: dict[tuple[Port, str], float] = field(default_factory=dict)
    """Values that are levels, not counts (a GPU's utilization in percent, PCIe KB/s from NVML)."""


MAX_NOTES = 200
"""Notes kept in a run; past it one last note says that more were left out (interfaces that come and go
by the thousand, such as container veths, would otherwise grow the list without end)."""


class Notes:
    """Problems met while sampling, each said once however often it happens again."""

    __slots__ = ("_seen", "fresh", "said")

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self.said: list[str] = []
        """Every note so far, in order."""
        self.fresh: list[str] = []
        """Notes not yet shown; the caller empties it after showing them."""

    def once(self, key: str, message: str) -> None:
        """Note ``message`` unless a note with ``key`` was already made."""
        if key in self._seen or len(self.said) > MAX_NOTES:
            return
        self._seen.add(key)
        if len(self.said) == MAX_NOTES:
            message = f"more than {MAX_NOTES} notes: the rest are left out"
        self.said.append(message)
        self.fresh.append(message)

    def take(self) -> list[str]:
        """The notes not yet shown, and forget that they are fresh."""
        fresh, self.fresh = self.fresh, []
        return fresh
