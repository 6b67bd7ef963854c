"""One monitoring run: sample on a monotonic schedule, turn samples into records, hand them to the outputs.

``Monitor`` is the library entry point::

    from fabricscope.monitor.session import Monitor, MonitorConfig
    from fabricscope.sysroot import SysRoot
    monitor = Monitor(SysRoot("/"), MonitorConfig(interval_s=1.0))
    monitor.sample()                 # the first sample only sets the baseline
    records = monitor.sample()       # one record per port, TCP and GPU
    monitor.summary.to_dict()["verdict"]
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricscope.errors import UsageError
from fabricscope.monitor.command import WatchedCommand
from fabricscope.monitor.deltas import Interval, Tracker
from fabricscope.monitor.samplers import Sampler, default_samplers, take_snapshot
from fabricscope.monitor.samples import Notes, Snapshot
from fabricscope.monitor.summary import Summary, interval_records
from fabricscope.sysroot import SysRoot

__all__ = ["MAX_INTERVAL_S", "MIN_INTERVAL_S", "Monitor", "MonitorConfig", "run_loop"]

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
_POLL_S = 0.05
"""How often a running command is polled between samples, so its end is sampled at once."""


@dataclass(kw_only=True, slots=True)
class MonitorConfig:
    """How to sample."""

    interval_s: float = 1.0
    """Seconds between samples, from 0.05 to 3600."""
    duration_s: float | None = None
    """Stop after this many seconds; None: until stopped (or until the command ends)."""
    interfaces: tuple[str, ...] | None = None
    """Network interfaces to watch; None: all but loopback and virtual ones (``all_interfaces``: all)."""
    all_interfaces: bool = False
    """Also watch loopback and the software devices of containers, bridges and tunnels."""
    link_speeds: dict[str, float] = field(default_factory=dict)
    """``--link-speed``: interface -> line rate in bits/s, for utilization where the kernel reports none."""
    gpus: bool = True
    """Sample GPUs through NVML where it is installed."""
    keep_records: bool = True
    """Keep every record in memory (for a Result at the end); a long exporter-only run need not."""

    def __post_init__(self) -> None:
        if not (MIN_INTERVAL_S <= self.interval_s <= MAX_INTERVAL_S) or math.isnan(self.interval_s):
            raise UsageError(f"the sampling interval must be from 0.05 s to 1 hour, got {self.interval_s:g} s")
        if self.duration_s is not None and not (0 < self.duration_s < math.inf):
            raise UsageError(f"the duration must be a positive number of seconds, got {self.duration_s}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "duration_s": self.duration_s,
            "interfaces": list(self.interfaces) if self.interfaces else None,
            "all_interfaces": self.all_interfaces,
            "link_speeds": dict(self.link_speeds),
            "gpus": self.gpus,
        }


class Monitor:
    """Samplers, the tracker of deltas, and the summary of one run."""

    __slots__ = ("config", "last_interval", "notes", "records", "samplers", "start_s", "summary", "tracker")

    def __init__(self, root: SysRoot, config: MonitorConfig, samplers: Sequence[Sampler] | None = None) -> None:
        self.config = config
        self.notes = Notes()
        self.tracker = Tracker(self.notes)
        self.summary = Summary()
        self.records: list[dict[str, Any]] = []
        self.samplers = (
            list(samplers)
            if samplers is not None
            else default_samplers(
                root,
                config.interfaces,
                gpus=config.gpus,
                every_interface=config.all_interfaces,
                link_speeds=config.link_speeds,
            )
        )
        self.start_s: float | None = None
        self.last_interval: Interval | None = None

    def _note_missing_interfaces(self, snap: Snapshot) -> None:
        """``--interfaces`` or ``--link-speed`` naming one that is not watched is said (once), with the ones
        that are."""
        seen = _seen_devices(snap)
        present = ", ".join(sorted(d for d in seen if d)) or "none"
        for name in self.config.interfaces or ():
            if name not in seen:
                self.notes.once(f"missing:{name}", f"interface {name} was not found (watched: {present})")
        for name in self.config.link_speeds:
            if name not in seen:
                self.notes.once(
                    f"speed:{name}", f"--link-speed {name}: no such interface is watched (watched: {present})"
                )

    def sample(self) -> list[dict[str, Any]]:
        """Take one sample; the records of the interval it closes ([] for the first)."""
        snap = take_snapshot(self.samplers, self.notes)
        if self.start_s is None:
            self.start_s = snap.time_s
            self._note_missing_interfaces(snap)
        interval = self.tracker.update(snap)
        self.last_interval = interval
        if interval is None:
            return []
        records = interval_records(interval, self.start_s)
        self.summary.add(records)
        if self.config.keep_records:
            self.records.extend(records)
        return records


def _seen_devices(snap: Snapshot) -> set[str]:
    return {port.device for port, _ in snap.counters} | {port.device for port in snap.links}


def run_loop(
    monitor: Monitor,
    on_sample: Callable[[list[dict[str, Any]]], bool],
    *,
    stop: threading.Event,
    command: WatchedCommand | None = None,
    sample_first: bool = True,
) -> None:
    """Sample every ``interval_s`` until the duration is up, ``stop`` is set, ``on_sample`` returns False,
    or the command ends (then once more at once, so its last moments count).

    Samples are due at fixed points of the monotonic clock (start + k x interval),
    so a slow pass does not shift the ones after it; a pass that overruns whole
    intervals skips them rather than sampling twice in a row.  ``sample_first=False``
    when the baseline was just taken: the first sample is then one interval away.
    """
    interval = monitor.config.interval_s
    start = time.monotonic()
    deadline = start + monitor.config.duration_s if monitor.config.duration_s else math.inf
    due = start
    first = sample_first
    while True:
        keep_going = on_sample(monitor.sample()) if first else True
        first = True
        now = time.monotonic()
        if not keep_going or stop.is_set() or now >= deadline:
            return
        if command is not None and command.poll() is not None:
            return
        due += interval
        if due <= now:
            due += math.ceil((now - due) / interval) * interval
        due = min(due, deadline)
        while (left := due - time.monotonic()) > 0:
            if command is not None:
                if command.poll() is not None:
                    break  # sample at once: the command's end
                time.sleep(min(left, _POLL_S))  # signals go to the command; only its end stops the loop
            else:
                stop.wait(left)
            if stop.is_set() and command is None:
                break
